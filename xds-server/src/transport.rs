//! Accepting connections for the gRPC, REST and admin ports: TLS with client certificates, a
//! deadline for the TLS handshake and the first bytes of the protocol, an accept loop that backs
//! off on errors (out of file descriptors, say) instead of spinning, and, where set, a cap on the
//! connections open at once, on the connections of each peer, and an idle timeout.
//! [`serve_http`] serves an HTTP router on it with a deadline for each request's headers.
//!
//! A listener's connection cap is what keeps one port's peers from taking the process's file
//! descriptors from the others: past it, connections wait in the kernel's backlog, which costs
//! the process none. Caps that add up to less than the [open-file limit](fd_limit()) keep a flood
//! on one port from stopping the others. The per-peer cap keeps one peer from taking a whole
//! port: a connection past it is closed as soon as it is accepted.
//!
//! [`Incoming`] is both a `Stream` of connections for tonic's
//! `serve_with_incoming_shutdown` and an [`axum::serve::Listener`] whose address is the
//! connection's [`Peer`] (remote address and verified client certificates), so that
//! `axum::serve(incoming, router.into_make_service_with_connect_info::<Peer>())` hands every
//! request the peer the [authorization point](crate::authz) decides on.
//!
//! Nothing is spawned: handshakes progress while the server polls the stream for the next
//! connection (it always does), at most [`TransportConfig::max_handshakes`] at a time.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tokio_util::sync::PollSemaphore;

use crate::authz::Peer;
use crate::status::lock;

mod open_files;
mod peers;

pub use open_files::{FdLimit, MAX_RAISED_FD_LIMIT, fd_limit, raise_fd_limit};
use peers::{PeerCounts, PeerSlot, Refusals};
/// The TLS library [`tls_config`] and [`Incoming::tls`] take their configuration from, so that
/// a server can name `rustls::ServerConfig` without depending on the same version itself.
pub use tokio_rustls::rustls;

/// The TLS connector a tool builds from [`client_tls_config`] to call a server's HTTPS port.
pub use tokio_rustls::TlsConnector;

/// How connections are accepted.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TransportConfig {
    /// A connection must finish its TLS handshake and send its first
    /// [`PREFACE_BYTES`] bytes (the HTTP/2 preface, or an HTTP/1 request line) within this
    /// time after it is accepted, or it is closed (default 10 s).
    pub handshake_timeout: Duration,
    /// Connections in their handshake at once; past it, new connections wait in the kernel's
    /// backlog (default 256).
    pub max_handshakes: usize,
    /// The first pause after an accept error; doubled up to `max_accept_backoff` (100 ms).
    pub accept_backoff: Duration,
    /// The longest pause after repeated accept errors (1 s).
    pub max_accept_backoff: Duration,
    /// `TCP_NODELAY` on accepted connections (true).
    pub nodelay: bool,
    /// Close a connection this long after it was accepted (`None`, the default: never). With
    /// several replicas behind a load balancer, clients that all moved to the survivors when one
    /// replica went away spread out again once it is back. tonic does not expose HTTP/2 GOAWAY,
    /// so the connection is closed: an xDS client reconnects, and since it resends the versions
    /// it holds it is resent nothing unchanged.
    pub max_connection_age: Option<Duration>,
    /// Each connection's age varies at random by up to this fraction of
    /// `max_connection_age` either way (0.1), so connections opened together (after a replica
    /// restart) do not all close together.
    pub max_connection_age_jitter: f64,
    /// Connections open at once, handshakes included (`None`, the default: no cap). Past it,
    /// nothing more is accepted until one closes: new connections wait in the kernel's backlog,
    /// holding no file descriptor of the process.
    pub max_connections: Option<usize>,
    /// Connections one peer may hold open at once, handshakes included (`None`, the default: no
    /// cap of its own). A peer is an IPv4 address, or an IPv6 /64 prefix (one host's usual
    /// share: it cannot dodge the cap by rotating its addresses); an IPv4-mapped IPv6 address
    /// counts as the IPv4 address. A connection past its peer's cap is closed (reset) as soon as
    /// it is accepted, before any handshake or read: it takes no place under `max_connections`,
    /// so one peer cannot hold the whole port, as it could under `max_connections` alone.
    /// Refusals are logged at warn level, at most once a second per listener, with their count.
    /// Peers behind one NAT or proxy share a cap: set it above what such a group opens.
    pub max_connections_per_peer: Option<usize>,
    /// Close a connection on which nothing was read or written for this long (`None`, the
    /// default: never). For ports with short requests only (admin): a REST long poll or an xDS
    /// stream may rightly be quiet for a long time.
    pub idle_timeout: Option<Duration>,
    /// With [`serve_http`]: an HTTP/1 request's headers must arrive within this time (10 s), or
    /// the connection is closed (a client sending a byte now and then holds no connection).
    pub header_read_timeout: Duration,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `TransportConfig::default()`.
impl TransportConfig {
    /// Sets `handshake_timeout` (see the field).
    #[must_use]
    pub fn handshake_timeout(mut self, value: Duration) -> Self {
        self.handshake_timeout = value;
        self
    }

    /// Sets `max_handshakes` (see the field).
    #[must_use]
    pub fn max_handshakes(mut self, value: usize) -> Self {
        self.max_handshakes = value;
        self
    }

    /// Sets `accept_backoff` (see the field).
    #[must_use]
    pub fn accept_backoff(mut self, value: Duration) -> Self {
        self.accept_backoff = value;
        self
    }

    /// Sets `max_accept_backoff` (see the field).
    #[must_use]
    pub fn max_accept_backoff(mut self, value: Duration) -> Self {
        self.max_accept_backoff = value;
        self
    }

    /// Sets `nodelay` (see the field).
    #[must_use]
    pub fn nodelay(mut self, value: bool) -> Self {
        self.nodelay = value;
        self
    }

    /// Sets `max_connection_age` (see the field): a value, or `None`.
    #[must_use]
    pub fn max_connection_age(mut self, value: impl Into<Option<Duration>>) -> Self {
        self.max_connection_age = value.into();
        self
    }

    /// Sets `max_connection_age_jitter` (see the field).
    #[must_use]
    pub fn max_connection_age_jitter(mut self, value: f64) -> Self {
        self.max_connection_age_jitter = value;
        self
    }

    /// Sets `max_connections` (see the field): a value, or `None`.
    #[must_use]
    pub fn max_connections(mut self, value: impl Into<Option<usize>>) -> Self {
        self.max_connections = value.into();
        self
    }

    /// Sets `max_connections_per_peer` (see the field): a value, or `None`.
    #[must_use]
    pub fn max_connections_per_peer(mut self, value: impl Into<Option<usize>>) -> Self {
        self.max_connections_per_peer = value.into();
        self
    }

    /// Sets `idle_timeout` (see the field): a value, or `None`.
    #[must_use]
    pub fn idle_timeout(mut self, value: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = value.into();
        self
    }

    /// Sets `header_read_timeout` (see the field).
    #[must_use]
    pub fn header_read_timeout(mut self, value: Duration) -> Self {
        self.header_read_timeout = value;
        self
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 256,
            accept_backoff: Duration::from_millis(100),
            max_accept_backoff: Duration::from_secs(1),
            nodelay: true,
            max_connection_age: None,
            max_connection_age_jitter: 0.1,
            max_connections: None,
            max_connections_per_peer: None,
            idle_timeout: None,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

/// The bytes a connection must send before [`TransportConfig::handshake_timeout`]: the length
/// of the HTTP/2 client preface.
pub const PREFACE_BYTES: usize = 24;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read { path: path.display().to_string(), error })
}

fn pem_error(path: &Path, what: String) -> TlsError {
    TlsError::Pem { path: path.display().to_string(), what }
}

/// The certificates of a PEM file: at least one.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read_file(path)?)
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no certificate".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read_file(path)?).map_err(|e| pem_error(path, e.to_string()))
}

/// The certificates of a PEM file as trust roots.
fn read_roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path)? {
        roots.add(c).map_err(|e| pem_error(path, e.to_string()))?;
    }
    Ok(roots)
}

/// A rustls server configuration from PEM files: the server's chain and key, and with
/// `client_ca` a required, verified client certificate (mTLS). ALPN offers `h2` and
/// `http/1.1`.
pub fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = read_certs(cert)?;
    let key_der = read_key(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                read_roots(ca)?.into(),
                provider,
            )
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_single_cert(certs, key_der).map_err(|e| TlsError::Rustls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A rustls client configuration from PEM files, for a tool that calls a server's HTTPS port
/// (the admin port's): the CA that signed the server's certificate and, for a server that asks
/// for one (mTLS), the client's chain and key. ALPN offers `http/1.1`.
pub fn client_tls_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(read_roots(ca)?);
    let mut config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|e| TlsError::Rustls(e.to_string()))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

type Handshake<S> = Pin<Box<dyn Future<Output = Option<Conn<S>>> + Send>>;

/// Turns an accepted TCP connection into the served one (TLS handshake, or nothing).
type Upgrade<S> =
    Arc<dyn Fn(TcpStream) -> Pin<Box<dyn Future<Output = io::Result<S>> + Send>> + Send + Sync>;

/// What a connection type tells about its peer.
pub trait PeerInfo {
    /// The peer: address and verified client certificates.
    fn peer(&self) -> Peer;
}

impl PeerInfo for TcpStream {
    fn peer(&self) -> Peer {
        Peer { remote_addr: self.peer_addr().ok(), certificates: None }
    }
}

impl PeerInfo for TlsStream<TcpStream> {
    fn peer(&self) -> Peer {
        let (tcp, session) = self.get_ref();
        Peer {
            remote_addr: tcp.peer_addr().ok(),
            certificates: session
                .peer_certificates()
                .map(|c| Arc::new(c.iter().map(|c| c.as_ref().to_vec()).collect())),
        }
    }
}

/// Accepted connections (see the module doc).
#[must_use = "an Incoming accepts nothing until it is served"]
pub struct Incoming<S> {
    listener: TcpListener,
    upgrade: Upgrade<S>,
    config: TransportConfig,
    handshakes: FuturesUnordered<Handshake<S>>,
    backoff: Option<Pin<Box<Sleep>>>,
    next_backoff: Duration,
    /// The connection cap's slots (`max_connections`), and one taken for the next accept.
    slots: Option<PollSemaphore>,
    reserved: Option<OwnedSemaphorePermit>,
    /// The connections each peer holds (`max_connections_per_peer`), shared with the
    /// connections, which give their place back when they close.
    peers: Option<Arc<Mutex<PeerCounts>>>,
    refusals: Refusals,
}

impl<S> std::fmt::Debug for Incoming<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("local_addr", &self.listener.local_addr().ok())
            .field("handshakes", &self.handshakes.len())
            .field("peers", &self.peers.as_ref().map(|peers| lock(peers).peers()))
            .finish()
    }
}

impl Incoming<TcpStream> {
    /// Plain TCP connections from `listener`.
    pub fn plain(listener: TcpListener, config: TransportConfig) -> Self {
        Self::with_upgrade(listener, config, Arc::new(|tcp| Box::pin(async move { Ok(tcp) })))
    }
}

impl Incoming<TlsStream<TcpStream>> {
    /// TLS connections from `listener` (see [`tls_config`]).
    pub fn tls(
        listener: TcpListener,
        config: TransportConfig,
        tls: Arc<rustls::ServerConfig>,
    ) -> Self {
        let acceptor = TlsAcceptor::from(tls);
        Self::with_upgrade(
            listener,
            config,
            Arc::new(move |tcp| {
                let acceptor = acceptor.clone();
                Box::pin(async move { acceptor.accept(tcp).await })
            }),
        )
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Incoming<S> {
    fn with_upgrade(listener: TcpListener, config: TransportConfig, upgrade: Upgrade<S>) -> Self {
        Incoming {
            listener,
            upgrade,
            next_backoff: config.accept_backoff,
            slots: config.max_connections.map(|n| {
                PollSemaphore::new(Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS))))
            }),
            reserved: None,
            peers: config
                .max_connections_per_peer
                .map(|n| Arc::new(Mutex::new(PeerCounts::new(n)))),
            refusals: Refusals::new(std::time::Instant::now()),
            config,
            handshakes: FuturesUnordered::new(),
            backoff: None,
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    fn poll_accept(&mut self, cx: &mut Context<'_>) {
        loop {
            if self.handshakes.len() >= self.config.max_handshakes {
                return;
            }
            if let Some(sleep) = &mut self.backoff {
                if sleep.as_mut().poll(cx).is_pending() {
                    return;
                }
                self.backoff = None;
            }
            // At the cap, accept nothing until a connection closes (its slot wakes this).
            if self.reserved.is_none()
                && let Some(slots) = &mut self.slots
            {
                match slots.poll_acquire(cx) {
                    Poll::Ready(slot) => self.reserved = slot,
                    Poll::Pending => return,
                }
            }
            match self.listener.poll_accept(cx) {
                Poll::Pending => return,
                Poll::Ready(Ok((tcp, addr))) => {
                    self.next_backoff = self.config.accept_backoff;
                    // Past its peer's cap: closed before a handshake or a read costs anything.
                    let peer = match self.peers.as_ref().map(|p| PeerSlot::take(p, addr.ip())) {
                        Some(None) => {
                            self.refuse(tcp, addr);
                            continue;
                        }
                        taken => taken.flatten(),
                    };
                    if self.config.nodelay {
                        let _ = tcp.set_nodelay(true);
                    }
                    let deadline = Instant::now() + self.config.handshake_timeout;
                    let max_age = self
                        .config
                        .max_connection_age
                        .map(|age| jittered(age, self.config.max_connection_age_jitter));
                    let upgrade = (self.upgrade)(tcp);
                    let held = Held { _peer: peer, _total: self.reserved.take() };
                    let idle = self.config.idle_timeout;
                    self.handshakes.push(Box::pin(async move {
                        match tokio::time::timeout_at(deadline, upgrade).await {
                            Ok(Ok(io)) => Some(Conn::new(io, deadline, max_age, idle, held)),
                            Ok(Err(e)) => {
                                tracing::debug!(%addr, error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!(%addr, "TLS handshake timed out");
                                None
                            }
                        }
                    }));
                }
                // The peer gave up before we took it: nothing wrong with the listener.
                Poll::Ready(Err(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::Interrupted
                    ) => {}
                // Out of file descriptors (EMFILE/ENFILE), out of memory, ...: the error repeats
                // at once, so pause instead of spinning on a core.
                Poll::Ready(Err(e)) => {
                    tracing::warn!(error = %e, pause = ?self.next_backoff, "accept failed; pausing");
                    self.backoff = Some(Box::pin(tokio::time::sleep(self.next_backoff)));
                    self.next_backoff = (self.next_backoff * 2).min(self.config.max_accept_backoff);
                }
            }
        }
    }
}

impl<S> Incoming<S> {
    /// Closes a connection whose peer is at its cap: at once, with a reset (no `TIME_WAIT` kept
    /// for it), before anything is read. Its place under `max_connections` stays reserved for
    /// the next accept. The log line counts every refusal since the last line, of any peer, and
    /// names the last peer refused.
    fn refuse(&mut self, tcp: TcpStream, addr: std::net::SocketAddr) {
        let _ = tcp.set_zero_linger();
        drop(tcp);
        if let Some(refused) = self.refusals.handle_refusal(std::time::Instant::now()) {
            tracing::warn!(
                local = ?self.listener.local_addr().ok(),
                last_peer = %addr.ip(),
                refused,
                cap = self.config.max_connections_per_peer,
                "connections refused: their peer holds its cap of connections open"
            );
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for Incoming<S> {
    type Item = Result<Conn<S>, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            this.poll_accept(cx);
            match this.handshakes.poll_next_unpin(cx) {
                Poll::Ready(Some(Some(conn))) => return Poll::Ready(Some(Ok(conn))),
                // A failed handshake: room for another accept.
                Poll::Ready(Some(None)) => continue,
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S> axum::serve::Listener for Incoming<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + PeerInfo + 'static,
{
    type Io = Conn<S>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Some(Ok(conn)) = self.next().await {
                let peer = conn.inner.peer();
                return (conn, peer);
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(Peer { remote_addr: Some(self.listener.local_addr()?), certificates: None })
    }
}

impl<S> axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Incoming<S>>>
    for Peer
where
    S: AsyncRead + AsyncWrite + Unpin + Send + PeerInfo + 'static,
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, Incoming<S>>) -> Self {
        stream.remote_addr().clone()
    }
}

/// An accepted connection: closed with `TimedOut` if its first [`PREFACE_BYTES`] bytes do not
/// arrive by the deadline (connections that never speak
/// would otherwise hold a file descriptor each, for free, until the limit).
#[derive(Debug)]
pub struct Conn<S> {
    inner: S,
    deadline: Option<Pin<Box<Sleep>>>,
    read: usize,
    /// When the connection has lived its [`TransportConfig::max_connection_age`].
    expires: Option<Pin<Box<Sleep>>>,
    /// [`TransportConfig::idle_timeout`], and when it runs out unless bytes move.
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    /// Its places under the caps, given back when it closes.
    _held: Held,
}

/// A connection's places under [`TransportConfig::max_connections`] and
/// [`TransportConfig::max_connections_per_peer`] (each where set), held until it is dropped.
/// Fields drop in order: the peer's count goes down before the total's permit wakes the accept
/// loop, which may take the same peer's next connection at once.
#[derive(Debug)]
struct Held {
    _peer: Option<PeerSlot>,
    _total: Option<OwnedSemaphorePermit>,
}

/// `age` varied at random by up to `jitter` (a fraction) either way.
fn jittered(age: Duration, jitter: f64) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A fresh SipHash key per call is randomness enough for spreading reconnects.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let unit = (random >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
    let jitter = jitter.clamp(0.0, 1.0);
    age.mul_f64(1.0 - jitter + 2.0 * jitter * unit)
}

impl<S> Conn<S> {
    fn new(
        inner: S,
        deadline: Instant,
        max_age: Option<Duration>,
        idle: Option<Duration>,
        held: Held,
    ) -> Self {
        Conn {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
            read: 0,
            expires: max_age.map(|age| Box::pin(tokio::time::sleep(age))),
            idle: idle.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
            _held: held,
        }
    }

    /// After a read or write: bytes moved (the idle timer starts again), or it waits, and the
    /// error to end the connection with if it has been idle too long.
    fn check_idle(&mut self, cx: &mut Context<'_>, moved: bool) -> Option<io::Error> {
        let (timeout, sleep) = self.idle.as_mut()?;
        if moved {
            sleep.as_mut().reset(Instant::now() + *timeout);
            return None;
        }
        sleep
            .as_mut()
            .poll(cx)
            .is_ready()
            .then(|| io::Error::new(io::ErrorKind::TimedOut, "the connection was idle too long"))
    }

    /// The connection inside.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(expires) = &mut this.expires
            && expires.as_mut().poll(cx).is_ready()
        {
            // Past its maximum age: the server sees the connection end, closes its streams, and
            // the client reconnects (to whichever replica the balancer picks).
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the connection reached its maximum age",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Some(deadline) = &mut this.deadline {
            this.read += buf.filled().len() - before;
            if this.read >= PREFACE_BYTES {
                this.deadline = None;
            } else if polled.is_pending() && deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent no request before the handshake deadline",
                )));
            }
        }
        let moved = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if (moved || polled.is_pending())
            && let Some(error) = this.check_idle(cx, moved)
        {
            return Poll::Ready(Err(error));
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        let moved = matches!(polled, Poll::Ready(Ok(n)) if n > 0);
        if (moved || polled.is_pending())
            && let Some(error) = self.check_idle(cx, moved)
        {
            return Poll::Ready(Err(error));
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        let moved = matches!(polled, Poll::Ready(Ok(n)) if n > 0);
        if (moved || polled.is_pending())
            && let Some(error) = self.check_idle(cx, moved)
        {
            return Poll::Ready(Err(error));
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Conn<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Serves `router` over HTTP/1.1 and HTTP/2 on `incoming` until `shutdown` completes, then waits
/// for open connections to finish their requests. Every request carries its connection's
/// [`Peer`] as `axum::extract::ConnectInfo<Peer>` (for the authorization point), and an HTTP/1
/// request's headers must arrive within [`TransportConfig::header_read_timeout`]; together with
/// [`Incoming`]'s guards (handshake deadline, connection caps, idle timeout) a port served this
/// way holds no connection a peer leaves idle or trickles bytes into.
pub async fn serve_http<S>(
    mut incoming: Incoming<S>,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + PeerInfo + 'static,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(incoming.config.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            _ = &mut shutdown => break,
            conn = incoming.next() => match conn {
                Some(Ok(conn)) => conn,
                Some(Err(_)) => continue,
                None => break,
            },
        };
        let peer = conn.inner.peer();
        let service = tower::ServiceExt::map_request(
            router.clone(),
            move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer.clone()));
                request
            },
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        let served = builder.serve_connection_with_upgrades(TokioIo::new(conn), service);
        let served = graceful.watch(served.into_owned());
        tokio::spawn(async move {
            if let Err(e) = served.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
        });
    }
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_ages_vary_within_the_jitter() {
        let age = Duration::from_secs(100);
        let ages: Vec<Duration> = (0..200).map(|_| jittered(age, 0.1)).collect();
        assert!(
            ages.iter().all(|a| *a >= Duration::from_secs(90) && *a <= Duration::from_secs(110))
        );
        assert!(ages.iter().any(|a| *a != ages[0]), "the ages vary");
        assert_eq!(jittered(age, 0.0), age);
    }
}
