//! `transport::Incoming`'s connection caps and idle timeout: a listener never holds more
//! connections than its cap (the rest wait in the kernel's backlog), a peer never more than its
//! own cap (the rest are closed at once), and a connection on which nothing moves is closed.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use xds_server::transport::{Incoming, TransportConfig};

/// A connection to `addr` from the loopback address `from` (127.0.0.2 is another peer than
/// 127.0.0.1 on the same host).
async fn connect_from(from: [u8; 4], addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind((std::net::Ipv4Addr::from(from), 0).into()).expect("bind the source address");
    socket.connect(addr).await.expect("connect")
}

async fn listener() -> (TcpListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

#[tokio::test]
async fn a_listener_holds_no_more_connections_than_its_cap() {
    let (listener, addr) = listener().await;
    let config = TransportConfig::default().max_connections(Some(2));
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
    let config = TransportConfig::default().idle_timeout(Some(Duration::from_millis(200)));
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

#[tokio::test]
async fn a_peer_past_its_cap_is_closed_at_once_and_takes_no_place_from_others() {
    let (listener, addr) = listener().await;
    let config =
        TransportConfig::default().max_connections(Some(3)).max_connections_per_peer(Some(2));
    let mut incoming = Incoming::plain(listener, config);
    let (a, b) = ([127, 0, 0, 1], [127, 0, 0, 2]);
    let _a1 = connect_from(a, addr).await;
    let _a2 = connect_from(a, addr).await;
    let mut a3 = connect_from(a, addr).await;
    let _b1 = connect_from(b, addr).await;

    // In the order they came, but for A's third: B's connection still fits under the total cap
    // of 3, so the refused one took no place there.
    let wait = Duration::from_millis(500);
    let mut peers = Vec::new();
    let mut accepted = Vec::new();
    for _ in 0..3 {
        let conn = tokio::time::timeout(wait, incoming.next()).await.expect("accepted");
        let conn = conn.expect("some").expect("ok");
        peers.push(conn.get_ref().peer_addr().expect("peer").ip().to_string());
        accepted.push(conn);
    }
    assert_eq!(peers, ["127.0.0.1", "127.0.0.1", "127.0.0.2"]);
    // A's third was reset before anything was read from it.
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(wait, a3.read(&mut buf)).await.expect("closed at once");
    assert!(
        matches!(&read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );
    assert!(tokio::time::timeout(wait, incoming.next()).await.is_err(), "nothing else to take");

    // One of A's connections closes: A may open another.
    drop(accepted.remove(0));
    let _a4 = connect_from(a, addr).await;
    let conn = tokio::time::timeout(wait, incoming.next()).await.expect("A's next connection");
    let ip = conn.expect("some").expect("ok").get_ref().peer_addr().expect("peer").ip();
    assert_eq!(ip.to_string(), "127.0.0.1");
}
