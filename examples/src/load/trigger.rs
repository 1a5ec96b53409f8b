//! The update trigger: a minimal HTTP/1.1 GET over a `TcpStream`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An `http://host:port/path` URL template with `{k}` where the cluster index goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    authority: String,
    path: String,
}

impl Trigger {
    /// Parses a template such as `http://127.0.0.1:18001/bench/update?i={k}`.
    pub fn parse(template: &str) -> Result<Self, String> {
        let rest = template
            .strip_prefix("http://")
            .ok_or_else(|| format!("the trigger must be an http:// URL: {template}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("the trigger has no host: {template}"));
        }
        Ok(Trigger { authority: authority.to_owned(), path: path.to_owned() })
    }

    /// Triggers an update of cluster `k`; returns the port in the answer's body once the server
    /// answered 200.
    pub async fn fire(&self, k: u32, timeout: Duration) -> Result<u32, String> {
        match tokio::time::timeout(timeout, self.get(k)).await {
            Ok(result) => result,
            Err(_) => Err(format!("the trigger did not answer within {timeout:?}")),
        }
    }

    async fn get(&self, k: u32) -> Result<u32, String> {
        let path = self.path.replace("{k}", &k.to_string());
        let mut stream = TcpStream::connect(&self.authority)
            .await
            .map_err(|e| format!("trigger: cannot connect to {}: {e}", self.authority))?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: xds-load\r\n\r\n",
            self.authority
        );
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("trigger: {e}"))?;
        let mut response = Vec::with_capacity(512);
        // `Connection: close`: the answer ends where the stream does. Bounded to 64 KiB.
        (&mut stream)
            .take(64 << 10)
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("trigger: {e}"))?;
        parse_response(&response)
    }
}

/// The port in the body of a 200 answer.
fn parse_response(response: &[u8]) -> Result<u32, String> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("trigger: incomplete HTTP answer")?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(format!("trigger: HTTP {status}: {}", body.trim()));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    // A chunked body starts with the chunk size line: take the first line that is a number.
    let mut lines = body.lines().map(str::trim).filter(|l| !l.is_empty());
    if chunked {
        lines.next();
    }
    lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| format!("trigger: the answer carries no port: {:?}", body.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_templates_and_answers() {
        let t = Trigger::parse("http://127.0.0.1:18001/bench/update?i={k}").unwrap();
        assert_eq!(t.authority, "127.0.0.1:18001");
        assert_eq!(t.path, "/bench/update?i={k}");
        assert!(Trigger::parse("https://x/").is_err());
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n10042\n";
        assert_eq!(parse_response(ok), Ok(10042));
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\n10042\n\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Ok(10042));
        assert!(parse_response(b"HTTP/1.1 404 Not Found\r\n\r\nno such cluster").is_err());
    }
}
