//! `xds-file-server status`: the console's table in a terminal, one line per connected proxy and
//! one column per resource type (like `istioctl proxy-status`), or one node's streams with
//! `--node`; `-o json` prints what the admin port answered.
//!
//! It reads the admin port's console API (`/ui/api/proxies`, `/ui/api/proxy`) over HTTP, or
//! HTTPS for an admin port off loopback (checked against `--admin-ca`, with a client certificate
//! for one that asks for it), with the bearer token when the port requires one.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use xds_server::transport::rustls::pki_types::ServerName;
use xds_server::transport::{TlsConnector, client_tls_config};

use crate::cli::OutputFormat;

/// The most bytes read of one answer: a console page is at most about 1 MiB.
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// The most pages read for one table (500 rows each): 100,000 streams.
const MAX_PAGES: usize = 200;

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The rows asked per page.
const PAGE_ROWS: usize = 500;

/// Why `status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The `--admin` URL is not `http[s]://HOST:PORT[/PREFIX]`.
    #[error("--admin {0}: expected http://HOST:PORT or https://HOST:PORT")]
    Url(String),
    /// The TLS flags do not fit the URL, or their files are unusable.
    #[error("{0}")]
    Tls(String),
    /// The token file could not be read or is empty.
    #[error("--admin-token-file {0}")]
    Token(String),
    /// The admin port could not be reached or answered something that is not HTTP.
    #[error("{0}")]
    Io(String),
    /// The admin port answered with an error.
    #[error("the admin port answered {status}: {reason}")]
    Refused {
        /// The HTTP status code.
        status: u16,
        /// The error it gave.
        reason: String,
    },
}

/// How `status` proves itself to the admin port, and checks that it is talking to it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Credentials<'a> {
    /// `--admin-token-file`: the bearer token the port requires.
    pub token_file: Option<&'a Path>,
    /// `--admin-ca`: the CA that signed an `https://` admin port's certificate.
    pub ca: Option<&'a Path>,
    /// `--admin-cert` and `--admin-key`: this client's certificate, for an admin port that
    /// asks for one (its `--admin-client-ca`).
    pub identity: Option<(&'a Path, &'a Path)>,
}

/// Where the admin port is and how to ask it.
pub struct AdminClient {
    host: String,
    prefix: String,
    token: Option<String>,
    /// For an `https://` port: the connector and the name its certificate must carry.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl AdminClient {
    /// A client of the admin port at `url` (`http://HOST:PORT` or `https://HOST:PORT`,
    /// optionally with a path prefix the console is mounted under). `https` needs the CA
    /// (`credentials.ca`); a certificate or CA with plain `http` is refused rather than
    /// ignored, as is a token sent in the clear off loopback.
    pub fn new(url: &str, credentials: Credentials<'_>) -> Result<Self, StatusError> {
        let (https, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => return Err(StatusError::Url(url.into())),
        };
        let (host, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if host.is_empty() || host.contains(['@', ' ', '?', '#']) {
            return Err(StatusError::Url(url.into()));
        }
        let tls = match (https, credentials.ca) {
            (true, Some(ca)) => {
                let config = client_tls_config(ca, credentials.identity)
                    .map_err(|e| StatusError::Tls(e.to_string()))?;
                Some((TlsConnector::from(config), server_name(host, url)?))
            }
            (true, None) => {
                return Err(StatusError::Tls(format!(
                    "--admin {url}: https needs --admin-ca FILE (the CA that signed the admin port's certificate)"
                )));
            }
            (false, Some(_)) => {
                return Err(StatusError::Tls(format!(
                    "--admin-ca is for an https:// admin port, not {url}"
                )));
            }
            (false, None) if credentials.identity.is_some() => {
                return Err(StatusError::Tls(format!(
                    "--admin-cert is for an https:// admin port, not {url}"
                )));
            }
            (false, None) => None,
        };
        let token = match credentials.token_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| StatusError::Token(format!("{}: {e}", path.display())))?;
                let token = text.trim();
                if token.is_empty() || token.contains(['\r', '\n']) {
                    return Err(StatusError::Token(format!(
                        "{}: holds no single-line token",
                        path.display()
                    )));
                }
                Some(token.to_owned())
            }
        };
        // The admin port asks for a token in the clear only on loopback (admin_access): a
        // token for a plain port elsewhere would cross the network readable.
        if token.is_some() && tls.is_none() && !is_loopback(host) {
            return Err(StatusError::Tls(format!(
                "--admin {url}: a token goes to a port off loopback over https only"
            )));
        }
        Ok(AdminClient { host: host.to_owned(), prefix: prefix.to_owned(), token, tls })
    }

    /// `GET path` as JSON: the body of a 200, or the error of any other answer.
    pub async fn get_json(&self, path: &str) -> Result<Value, StatusError> {
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, self.get(path))
            .await
            .map_err(|_| StatusError::Io(format!("{}: no answer within 10 s", self.host)))??;
        let (status, body) = answer;
        let value: Option<Value> = serde_json::from_slice(&body).ok();
        if status != 200 {
            let reason = value
                .as_ref()
                .and_then(|v| v.get("error"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| {
                    String::from_utf8_lossy(&body).trim().chars().take(200).collect()
                });
            return Err(StatusError::Refused { status, reason });
        }
        value.ok_or_else(|| StatusError::Io(format!("{path}: the answer is not JSON")))
    }

    async fn get(&self, path: &str) -> Result<(u16, Vec<u8>), StatusError> {
        let io = |e: std::io::Error| StatusError::Io(format!("{}: {e}", self.host));
        let tcp = TcpStream::connect(&self.host).await.map_err(io)?;
        let mut head = format!(
            "GET {}{path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n",
            self.prefix, self.host
        );
        if let Some(token) = &self.token {
            let _ = write!(head, "Authorization: Bearer {token}\r\n");
        }
        head.push_str("\r\n");
        let raw = match &self.tls {
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| StatusError::Io(format!("{}: TLS handshake: {e}", self.host)))?;
                exchange(tls, &head).await
            }
            None => exchange(tcp, &head).await,
        }
        .map_err(io)?;
        if raw.len() > MAX_ANSWER_BYTES {
            return Err(StatusError::Io(format!(
                "{path}: the answer is over {MAX_ANSWER_BYTES} bytes"
            )));
        }
        parse_answer(&raw).ok_or_else(|| StatusError::Io(format!("{path}: not an HTTP answer")))
    }
}

/// Writes the request and reads the answer to its end (at most one byte past
/// [`MAX_ANSWER_BYTES`]). A TLS peer that closes without `close_notify` ends the answer as a
/// plain close does: the answer is checked whole by `parse_answer` (its chunks, its headers).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    head: &str,
) -> std::io::Result<Vec<u8>> {
    stream.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    match (&mut stream).take(MAX_ANSWER_BYTES as u64 + 1).read_to_end(&mut raw).await {
        Ok(_) => Ok(raw),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e),
    }
}

/// The name an `https://` admin port's certificate must carry: the URL's host (a name or an
/// IP address, without the port).
fn server_name(host: &str, url: &str) -> Result<ServerName<'static>, StatusError> {
    let name = host_name(host);
    ServerName::try_from(name.to_owned())
        .map_err(|e| StatusError::Tls(format!("--admin {url}: {name:?} is not a host name: {e}")))
}

/// Whether the URL's host is a loopback address or `localhost`.
fn is_loopback(host: &str) -> bool {
    let name = host_name(host);
    name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `HOST` of `HOST:PORT` (`[::1]:PORT` gives `::1`).
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    }
}

/// The status and body of an HTTP/1.1 answer read to its end (`Connection: close`), its body
/// de-chunked if it was sent in chunks.
fn parse_answer(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let body = &raw[end + 4..];
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Some((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line + 2..];
        if size == 0 {
            return Some((status, out));
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// What `status` shows: the table, or one node with `node`.
pub struct StatusRequest<'a> {
    /// `--node`: one node's streams.
    pub node: Option<&'a str>,
    /// Table filters passed through to the console API (`group`, `type`, `state`).
    pub filters: Vec<(&'static str, String)>,
    /// `-o`.
    pub output: OutputFormat,
}

/// Reads the admin port and writes the table (or the node) to `out`.
pub async fn status(
    client: &AdminClient,
    request: &StatusRequest<'_>,
    out: &mut impl Write,
) -> Result<(), StatusError> {
    let io = |e: std::io::Error| StatusError::Io(format!("writing the answer: {e}"));
    if let Some(node) = request.node {
        let body = client.get_json(&format!("/ui/api/proxy?node={}", encode(node))).await?;
        let text = match request.output {
            OutputFormat::Json => pretty(&body),
            OutputFormat::Table => render_node(node, &body),
        };
        return out.write_all(text.as_bytes()).map_err(io);
    }
    let mut rows = Vec::new();
    let mut types: Vec<Value> = Vec::new();
    let mut offset = 0;
    let mut total = 0;
    let mut control_plane = Value::Null;
    for _ in 0..MAX_PAGES {
        let mut path = format!("/ui/api/proxies?limit={PAGE_ROWS}&offset={offset}");
        for (key, value) in &request.filters {
            let _ = write!(path, "&{key}={}", encode(value));
        }
        let page = client.get_json(&path).await?;
        for t in page["types"].as_array().into_iter().flatten() {
            if !types.contains(t) {
                types.push(t.clone());
            }
        }
        rows.extend(page["rows"].as_array().into_iter().flatten().cloned());
        total = page["total"].as_u64().unwrap_or(0);
        control_plane = page["control_plane_id"].clone();
        match page.get("next_offset").and_then(Value::as_u64) {
            Some(next) => offset = next,
            None => break,
        }
    }
    let mut body = json!({ "total": total, "types": types, "rows": rows });
    if !control_plane.is_null() {
        body["control_plane_id"] = control_plane;
    }
    let text = match request.output {
        OutputFormat::Json => pretty(&body),
        OutputFormat::Table => render_table(&body, crate::status_cli::now_ms()),
    };
    out.write_all(text.as_bytes()).map_err(io)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A client's text as one terminal line: control characters (escape sequences, newlines) are
/// written as `\u{..}` escapes, so a node id cannot move the cursor or recolour the screen.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// A stream's group: `-` before its first request, `(default)` for the default (unnamed) group.
fn group_text(group: &Value) -> String {
    match group.as_str() {
        None => "-".into(),
        Some("") => "(default)".into(),
        Some(group) => printable(group),
    }
}

fn age(since_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(since_ms) / 1000;
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn cell_text(cell: Option<&Value>, now_ms: u64) -> String {
    let Some(cell) = cell else { return "-".into() };
    let text = |key: &str| cell.get(key).and_then(Value::as_str).map(printable);
    match cell["state"].as_str() {
        Some("synced") => "SYNCED".into(),
        Some("pending") => match cell["since_ms"].as_u64() {
            Some(since) => format!("PENDING {}", age(since, now_ms)),
            None => "PENDING".into(),
        },
        Some("nacked") => format!("NACKED {}", text("rejected_version").unwrap_or_default()),
        Some("not_sent") => "NOT SENT".into(),
        _ => "?".into(),
    }
}

/// Columns padded to their widest cell (in characters).
fn columns(lines: &[Vec<String>]) -> String {
    let mut widths = Vec::new();
    for line in lines {
        for (i, cell) in line.iter().enumerate() {
            let n = cell.chars().count();
            if widths.len() <= i {
                widths.push(n);
            } else {
                widths[i] = widths[i].max(n);
            }
        }
    }
    let mut out = String::new();
    for line in lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                let _ = write!(text, "{cell}{}   ", " ".repeat(pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// The proxy x type table, then each NACK's text under it.
fn render_table(body: &Value, now_ms: u64) -> String {
    let types: Vec<&str> =
        body["types"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut header: Vec<String> =
        ["NODE", "GROUP", "VARIANT", "CONNECTED"].map(String::from).to_vec();
    header.extend(types.iter().map(|t| t.to_uppercase()));
    let mut lines = vec![header];
    let mut nacks = Vec::new();
    for row in body["rows"].as_array().into_iter().flatten() {
        let node = printable(row["node_id"].as_str().unwrap_or_default());
        let mut line = vec![
            if node.is_empty() { "(anonymous)".into() } else { node.clone() },
            group_text(&row["group"]),
            match row["streams_total"].as_u64() {
                // A proxy without ADS: a stream per type, shown as one row.
                Some(n) if n > 1 => {
                    format!(
                        "{} ({n} streams)",
                        printable(row["variant"].as_str().unwrap_or_default())
                    )
                }
                _ => printable(row["variant"].as_str().unwrap_or_default()),
            },
            age(row["connected_ms"].as_u64().unwrap_or(now_ms), now_ms),
        ];
        for t in &types {
            let cell = row["cells"].get(*t);
            line.push(cell_text(cell, now_ms));
            if let Some(error) =
                cell.filter(|c| c["state"] == "nacked").and_then(|c| c["error"].as_str())
            {
                nacks.push(format!("{node} {t}: {}", printable(error)));
            }
        }
        lines.push(line);
    }
    let mut out = columns(&lines);
    let shown = lines.len() - 1;
    let total = body["total"].as_u64().unwrap_or(0);
    if shown as u64 != total {
        let _ = writeln!(out, "({shown} of {total} proxies shown)");
    }
    if let Some(id) = body["control_plane_id"].as_str() {
        let _ = writeln!(out, "(connected to control plane {})", printable(id));
    }
    if !nacks.is_empty() {
        out.push_str("\nNACKs:\n");
        for nack in nacks {
            let _ = writeln!(out, "  {nack}");
        }
    }
    out
}

/// One node's streams: per stream its facts, then per type its state and versions.
fn render_node(node: &str, body: &Value) -> String {
    let now_ms = body["now_ms"].as_u64().unwrap_or(0);
    let streams = body["streams"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = String::new();
    if streams.is_empty() {
        let _ = writeln!(out, "node {}: no open stream", printable(node));
        return out;
    }
    for s in streams {
        let _ = writeln!(
            out,
            "node {}  stream {}  {}  group {}  connected {} ago",
            printable(node),
            s["stream"],
            printable(s["variant"].as_str().unwrap_or_default()),
            group_text(&s["group"]),
            age(s["opened_ms"].as_u64().unwrap_or(now_ms), now_ms),
        );
        let mut lines = vec![["TYPE", "STATE", "SENT", "ACKED", "HELD"].map(String::from).to_vec()];
        let mut nacks = Vec::new();
        for t in s["types"].as_array().into_iter().flatten() {
            let text = |key: &str| t[key].as_str().map(printable).unwrap_or_else(|| "-".into());
            let held = t["resources_total"]
                .as_u64()
                .or_else(|| t["resources"].as_object().map(|r| r.len() as u64))
                .unwrap_or(0);
            lines.push(vec![
                text("type"),
                cell_text(Some(&json!({"state": t["state"], "rejected_version": t["nack"]["rejected_version"]})), now_ms),
                text("sent_version"),
                text("acked_version"),
                held.to_string(),
            ]);
            if t["state"] == "nacked" {
                nacks.push(format!(
                    "{}: rejected {} (kept {}): {}",
                    text("type"),
                    printable(t["nack"]["rejected_version"].as_str().unwrap_or_default()),
                    printable(t["nack"]["version"].as_str().unwrap_or_default()),
                    printable(t["nack"]["error"].as_str().unwrap_or_default()),
                ));
            }
        }
        for line in columns(&lines).lines() {
            let _ = writeln!(out, "  {line}");
        }
        for nack in nacks {
            let _ = writeln!(out, "  NACK {nack}");
        }
        let events = s["events"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !events.is_empty() {
            let mut lines = vec![["AGO", "TYPE", "EVENT"].map(String::from).to_vec()];
            for e in events {
                lines.push(vec![
                    age(e["at_ms"].as_u64().unwrap_or(now_ms), now_ms),
                    printable(e["type"].as_str().unwrap_or("-")),
                    event_text(e),
                ]);
            }
            out.push_str("  latest events, oldest first:\n");
            for line in columns(&lines).lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        out.push('\n');
    }
    out
}

/// One event of a stream's history as text (the console's words).
fn event_text(e: &Value) -> String {
    let text = |key: &str| printable(e[key].as_str().unwrap_or_default());
    let number = |key: &str| e[key].as_u64().unwrap_or(0);
    match e["event"].as_str().unwrap_or_default() {
        "subscribed" => {
            let names: Vec<String> = e["names"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(printable)
                .collect();
            let mut line = format!("subscribed to {} more", number("added"));
            if number("removed") > 0 {
                let _ = write!(line, ", unsubscribed from {}", number("removed"));
            }
            if !names.is_empty() {
                let more = if number("added") > names.len() as u64 { ", ..." } else { "" };
                let _ = write!(line, ": {}{more}", names.join(", "));
            }
            line
        }
        "sent" => {
            let answer = match (e["acked"] == true, e["latency_ms"].as_u64()) {
                (false, _) => String::new(),
                (true, Some(ms)) => format!(", ACKed after {ms} ms"),
                (true, None) => ", ACKed".into(),
            };
            format!("sent {} ({} resources){answer}", text("version"), number("resources"))
        }
        "nacked" => format!("NACKed {}: {}", text("rejected_version"), text("error")),
        "stale" => "answered an older response (stale nonce)".into(),
        "regrouped" => {
            format!("moved from group {} to {}", group_text(&e["from"]), group_text(&e["to"]))
        }
        "unserved" if e["unserved"] == true => {
            "served nothing: its group has no configuration".into()
        }
        "unserved" => "served again".into(),
        other => printable(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_id_cannot_drive_the_terminal() {
        assert_eq!(printable("a\u{1b}[31mred\nb"), "a\\u{1b}[31mred\\u{a}b");
        assert_eq!(printable("<script>é"), "<script>é");
    }

    #[test]
    fn an_answer_is_read_plain_or_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_answer(plain), Some((200, b"{}".to_vec())));
        let chunked = b"HTTP/1.1 400 Bad\r\ntransfer-encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked), Some((400, b"{\"a\":1}".to_vec())));
        assert_eq!(parse_answer(b"garbage"), None);
    }

    #[test]
    fn the_url_is_plain_http_with_an_optional_prefix() {
        let c = AdminClient::new("http://127.0.0.1:18002/admin/", Credentials::default()).unwrap();
        assert_eq!((c.host.as_str(), c.prefix.as_str()), ("127.0.0.1:18002", "/admin"));
        let none = Credentials::default();
        assert!(AdminClient::new("https://127.0.0.1:18002", none).is_err(), "https needs a CA");
        assert!(AdminClient::new("http://user@h:1", none).is_err());
        assert!(AdminClient::new("ftp://h:1", none).is_err());
        let ca = Credentials { ca: Some(Path::new("ca.pem")), ..none };
        assert!(AdminClient::new("http://127.0.0.1:1", ca).is_err(), "a CA for plain HTTP");
        assert_eq!(host_name("[::1]:18002"), "::1");
        assert_eq!(host_name("admin.example:18002"), "admin.example");
        assert!(is_loopback("localhost:1") && is_loopback("[::1]:1") && is_loopback("127.0.0.2:1"));
        assert!(!is_loopback("10.0.0.1:1") && !is_loopback("admin.example:1"));
        // A token goes in the clear to loopback only.
        let token = std::env::temp_dir().join(format!("status-cli-token-{}", std::process::id()));
        std::fs::write(&token, "t0ken\n").unwrap();
        let with_token = Credentials { token_file: Some(&token), ..none };
        assert!(AdminClient::new("http://127.0.0.1:18002", with_token).is_ok());
        let Err(StatusError::Tls(why)) = AdminClient::new("http://10.0.0.1:18002", with_token)
        else {
            panic!("a token in the clear off loopback")
        };
        assert!(why.contains("over https only"), "{why}");
        let _ = std::fs::remove_file(&token);
        assert_eq!(encode("a b/<&>"), "a%20b%2F%3C%26%3E");
    }

    #[test]
    fn a_node_shows_its_latest_events() {
        let body = json!({"now_ms": 60_000, "streams": [{"stream": 3, "variant": "delta",
        "group": "", "opened_ms": 0, "types": [], "events": [
            {"at_ms": 1_000, "type": "cluster", "event": "subscribed", "added": 5,
             "removed": 0, "names": ["a", "b\u{1b}[2J", "c"]},
            {"at_ms": 2_000, "type": "cluster", "event": "sent", "version": "v0", "resources": 5,
             "acked": true, "latency_ms": 12},
            {"at_ms": 2_000, "type": "cluster", "event": "sent", "version": "v1", "resources": 5},
            {"at_ms": 3_000, "type": "cluster", "event": "nacked", "rejected_version": "v1",
             "error": "no"},
            {"at_ms": 4_000, "event": "regrouped", "from": null, "to": "blue"},
        ]}]});
        let text = render_node("n", &body);
        let expected = "\
node n  stream 3  delta  group (default)  connected 60s ago
  TYPE   STATE   SENT   ACKED   HELD
  latest events, oldest first:
  AGO   TYPE      EVENT
  59s   cluster   subscribed to 5 more: a, b\\u{1b}[2J, c, ...
  58s   cluster   sent v0 (5 resources), ACKed after 12 ms
  58s   cluster   sent v1 (5 resources)
  57s   cluster   NACKed v1: no
  56s   -         moved from group - to blue

";
        assert_eq!(text, expected);
    }

    #[test]
    fn the_table_has_a_column_per_type_and_the_nack_texts_below() {
        let body = json!({"total": 3, "types": ["cluster", "listener"], "rows": [
            {"node_id": "envoy-1", "group": "blue", "variant": "sotw", "connected_ms": 0,
             "streams_total": 2,
             "cells": {"cluster": {"state": "synced"}, "listener": {"state": "pending", "since_ms": 57_000}}},
            {"node_id": "envoy-2\u{1b}[2J", "variant": "delta", "connected_ms": 0,
             "cells": {"cluster": {"state": "nacked", "rejected_version": "v9", "error": "no\nMAGLEV"}}},
        ]});
        let text = render_table(&body, 60_000);
        let expected = "\
NODE               GROUP   VARIANT            CONNECTED   CLUSTER     LISTENER
envoy-1            blue    sotw (2 streams)   60s         SYNCED      PENDING 3s
envoy-2\\u{1b}[2J   -       delta              60s         NACKED v9   -
(2 of 3 proxies shown)

NACKs:
  envoy-2\\u{1b}[2J cluster: no\\u{a}MAGLEV
";
        assert_eq!(text, expected);
    }
}
