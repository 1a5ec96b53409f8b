//! `transport::Incoming`'s connection cap and idle timeout: a listener never holds more
//! connections than its cap (the rest wait in the kernel's backlog), and a connection on which
//! nothing moves is closed.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use xds_server::transport::{Incoming, TransportConfig};

async fn listener() -> (TcpListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

#[tokio::test]
async fn a_listener_holds_no_more_connections_than_its_cap() {
    let (listener, addr) = listener().await;
    let config = TransportConfig { max_connections: Some(2), ..Default::default() };
    let mut incoming = Incoming::plain(listener, config);
    let _clients: Vec<TcpStream> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(TcpStream::connect(addr).await.expect("connect"));
        }
        v
    };
    let wait = Duration::from_millis(300);
    let first = tokio::time::timeout(wait, incoming.next()).await.expect("first").expect("some");
    let _second = tokio::time::timeout(wait, incoming.next()).await.expect("second");
    assert!(
        tokio::time::timeout(wait, incoming.next()).await.is_err(),
        "a third connection was accepted past the cap"
    );
    // One closes: the third is taken in.
    drop(first);
    tokio::time::timeout(wait, incoming.next()).await.expect("the third, once one closed");
}

#[tokio::test]
async fn a_connection_on_which_nothing_moves_is_closed() {
    let (listener, addr) = listener().await;
    let config =
        TransportConfig { idle_timeout: Some(Duration::from_millis(200)), ..Default::default() };
    let mut incoming = Incoming::plain(listener, config);
    let mut client = TcpStream::connect(addr).await.expect("connect");
    let mut conn = incoming.next().await.expect("a connection").expect("accepted");
    // Past the handshake deadline's bytes: only the idle timeout can close it now.
    client.write_all(&[b'x'; 24]).await.expect("write");
    let mut buf = [0u8; 64];
    assert_eq!(conn.read(&mut buf).await.expect("read"), 24);
    let read = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
        .await
        .expect("the idle connection is closed within 2 s");
    let error = read.expect_err("an idle connection ends with an error");
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
}
