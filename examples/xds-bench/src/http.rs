//! A minimal HTTP/1.1 GET over a `TcpStream`: enough for the update trigger and `/bench/stats`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An `http://host:port/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `host:port`.
    pub authority: String,
    /// The path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// Parses `http://host:port/path?query`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest =
            url.strip_prefix("http://").ok_or_else(|| format!("not an http:// URL: {url}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("the URL has no host: {url}"));
        }
        Ok(Url { authority: authority.to_owned(), path: path.to_owned() })
    }

    /// GETs `path` (instead of the URL's own) on the URL's host; returns the body of a 200 answer.
    /// The whole exchange is bounded by `timeout` and the answer by 64 KiB.
    pub async fn get(&self, path: &str, timeout: Duration) -> Result<String, String> {
        match tokio::time::timeout(timeout, self.exchange(path)).await {
            Ok(result) => result,
            Err(_) => Err(format!("{} did not answer within {timeout:?}", self.authority)),
        }
    }

    async fn exchange(&self, path: &str) -> Result<String, String> {
        let mut stream = TcpStream::connect(&self.authority)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.authority))?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: xds-load\r\n\r\n",
            self.authority
        );
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut response = Vec::with_capacity(512);
        // `Connection: close`: the answer ends where the stream does.
        (&mut stream).take(64 << 10).read_to_end(&mut response).await.map_err(|e| e.to_string())?;
        body_of(&response)
    }
}

/// The body of a 200 answer (de-chunked).
fn body_of(response: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("incomplete HTTP answer")?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(format!("HTTP {status}: {}", body.trim()));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok(body.to_owned());
    }
    // Chunks: a hexadecimal size line, the data, CRLF; a size of 0 ends the body.
    let (mut rest, mut out) = (body, String::new());
    loop {
        let (size, after) = rest.split_once("\r\n").ok_or("truncated chunk")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let data = after.get(..size).ok_or("truncated chunk")?;
        out.push_str(data);
        rest = after.get(size..).unwrap_or("").trim_start_matches("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_and_answers() {
        let u = Url::parse("http://127.0.0.1:18001/bench/update?i={k}").unwrap();
        assert_eq!(u.authority, "127.0.0.1:18001");
        assert_eq!(u.path, "/bench/update?i={k}");
        assert_eq!(Url::parse("http://h:1").unwrap().path, "/");
        assert!(Url::parse("https://x/").is_err());
        assert!(Url::parse("http:///x").is_err());
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n10042\n";
        assert_eq!(body_of(ok).unwrap(), "10042\n");
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\n10042\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(body_of(chunked).unwrap(), "10042\nabc");
        assert!(body_of(b"HTTP/1.1 404 Not Found\r\n\r\nno such cluster").is_err());
        assert!(body_of(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n").is_err());
    }
}
