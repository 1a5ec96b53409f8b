//! `xds-file-server status`: the console's table in a terminal, one line per connected proxy and
//! one column per resource type (like `istioctl proxy-status`), or one node's streams with
//! `--node`; `-o json` prints what the admin port answered.
//!
//! It reads the admin port's console API (`/ui/api/proxies`, `/ui/api/proxy`) over plain HTTP
//! with an optional bearer token: the admin port is on loopback unless it asks for credentials.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    /// The `--admin` URL is not `http://HOST:PORT[/PREFIX]`.
    #[error(
        "--admin {0}: expected http://HOST:PORT (https is not supported here: reach a TLS admin port through a tunnel to its loopback address)"
    )]
    Url(String),
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

/// Where the admin port is and how to ask it.
pub struct AdminClient {
    host: String,
    prefix: String,
    token: Option<String>,
}

impl AdminClient {
    /// A client of the admin port at `url` (`http://HOST:PORT`, optionally with a path prefix
    /// the console is mounted under), with the bearer token in `token_file`, if any.
    pub fn new(url: &str, token_file: Option<&Path>) -> Result<Self, StatusError> {
        let rest = url.strip_prefix("http://").ok_or_else(|| StatusError::Url(url.into()))?;
        let (host, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if host.is_empty() || host.contains(['@', ' ', '?', '#']) {
            return Err(StatusError::Url(url.into()));
        }
        let token = match token_file {
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
        Ok(AdminClient { host: host.to_owned(), prefix: prefix.to_owned(), token })
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
        let mut stream = TcpStream::connect(&self.host).await.map_err(io)?;
        let mut head = format!(
            "GET {}{path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n",
            self.prefix, self.host
        );
        if let Some(token) = &self.token {
            let _ = write!(head, "Authorization: Bearer {token}\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.map_err(io)?;
        let mut raw = Vec::new();
        (&mut stream).take(MAX_ANSWER_BYTES as u64 + 1).read_to_end(&mut raw).await.map_err(io)?;
        if raw.len() > MAX_ANSWER_BYTES {
            return Err(StatusError::Io(format!(
                "{path}: the answer is over {MAX_ANSWER_BYTES} bytes"
            )));
        }
        parse_answer(&raw).ok_or_else(|| StatusError::Io(format!("{path}: not an HTTP answer")))
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
        match page.get("next_offset").and_then(Value::as_u64) {
            Some(next) => offset = next,
            None => break,
        }
    }
    let body = json!({ "total": total, "types": types, "rows": rows });
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
            printable(row["variant"].as_str().unwrap_or_default()),
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
        let _ = writeln!(out, "({shown} of {total} streams shown)");
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
        out.push('\n');
    }
    out
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
        let c = AdminClient::new("http://127.0.0.1:18002/admin/", None).unwrap();
        assert_eq!((c.host.as_str(), c.prefix.as_str()), ("127.0.0.1:18002", "/admin"));
        assert!(AdminClient::new("https://127.0.0.1:18002", None).is_err());
        assert!(AdminClient::new("http://user@h:1", None).is_err());
        assert_eq!(encode("a b/<&>"), "a%20b%2F%3C%26%3E");
    }

    #[test]
    fn the_table_has_a_column_per_type_and_the_nack_texts_below() {
        let body = json!({"total": 2, "types": ["cluster", "listener"], "rows": [
            {"node_id": "envoy-1", "group": "blue", "variant": "sotw", "connected_ms": 0,
             "cells": {"cluster": {"state": "synced"}, "listener": {"state": "pending", "since_ms": 57_000}}},
            {"node_id": "envoy-2\u{1b}[2J", "variant": "delta", "connected_ms": 0,
             "cells": {"cluster": {"state": "nacked", "rejected_version": "v9", "error": "no\nMAGLEV"}}},
        ]});
        let text = render_table(&body, 60_000);
        let expected = "\
NODE               GROUP   VARIANT   CONNECTED   CLUSTER     LISTENER
envoy-1            blue    sotw      60s         SYNCED      PENDING 3s
envoy-2\\u{1b}[2J   -       delta     60s         NACKED v9   -

NACKs:
  envoy-2\\u{1b}[2J cluster: no\\u{a}MAGLEV
";
        assert_eq!(text, expected);
    }
}
