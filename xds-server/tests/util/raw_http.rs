//! A raw HTTP/1.1 client for the REST and admin routers: one request per connection, so a test
//! sees exactly the status, headers and body the server wrote.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A reply: its status, its head lowercased (for header checks) and its body.
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    /// The body as JSON; fails the test with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`, so the reply ends at EOF).
pub async fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write the head");
    stream.write_all(body.as_bytes()).await.expect("write the body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read the reply");
    let raw = String::from_utf8(raw).expect("a UTF-8 reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    Reply { status, head: head.to_ascii_lowercase(), body: body.to_owned() }
}

/// Serves `router` (an admin or REST router) on a loopback port.
pub async fn serve_router(router: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("a local address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// One `GET` of `path`.
pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, "").await
}
