//! Who may use the admin port. It lists every connected node, its subscriptions and NACK texts,
//! and dumps any group's configuration: on a loopback address only local processes reach it;
//! anywhere else the binary refuses to start unless the port asks for credentials, a bearer
//! token (`--admin-token-file`) or a client certificate from `--admin-client-ca` (mTLS).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use xds_server::authz::{self, Access, Entry};
use xds_server::{Authorizer, Refusal};

/// The longest admin token accepted from its file.
const MAX_TOKEN_BYTES: usize = 4096;

/// How the admin port checks who asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AdminAccess {
    /// No credentials: the port is on a loopback address.
    Local,
    /// A bearer token on every request but `/healthz` (and mTLS too, if a client CA is given).
    Token(AdminToken),
    /// Client certificates from the admin client CA, checked in the TLS handshake.
    MutualTls,
}

/// The admin bearer token, read once at start.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AdminToken(Arc<[u8]>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// The token in `path`: its content without surrounding whitespace (a trailing newline),
    /// not empty, at most 4 KiB.
    pub(crate) fn read(path: &Path) -> Result<AdminToken, String> {
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("cannot read --admin-token-file {shown}: {e}"))?;
        if meta.len() > MAX_TOKEN_BYTES as u64 {
            return Err(format!(
                "--admin-token-file {shown} is {} bytes; a token is at most {MAX_TOKEN_BYTES}",
                meta.len()
            ));
        }
        let raw = std::fs::read(path)
            .map_err(|e| format!("cannot read --admin-token-file {shown}: {e}"))?;
        let token = raw.trim_ascii();
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(format!("--admin-token-file {shown} holds no token"));
        }
        Ok(AdminToken(token.into()))
    }

    /// Whether `given` is the token, in time that does not depend on where they differ.
    fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq(&self.0, given)
    }
}

/// Compares every byte whatever the first difference (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl AdminAccess {
    /// Whether the admin port asks for credentials. When it does, what it guards (every node's
    /// subscriptions, versions and NACK texts) must not be had elsewhere without them: CSDS on
    /// the gRPC port is then refused ([`CsdsOnAdminOnly`]).
    pub(crate) fn guarded(&self) -> bool {
        !matches!(self, AdminAccess::Local)
    }

    /// Whether the admin port must be served over TLS: a bearer token off loopback would
    /// otherwise cross the network in the clear, to be read and replayed by anyone on the path.
    pub(crate) fn needs_tls(&self, addr: SocketAddr) -> bool {
        match self {
            AdminAccess::Local => false,
            AdminAccess::Token(_) => !addr.ip().is_loopback(),
            AdminAccess::MutualTls => true,
        }
    }
}

/// Decides the admin port's access from where it listens and the credentials configured: the
/// error, for a non-loopback address with neither, says what to give. `tls` says whether the
/// server has a certificate (`--tls-cert`, `--tls-key`): a token off loopback needs it.
pub(crate) fn admin_access(
    addr: SocketAddr,
    token_file: Option<&Path>,
    client_ca: Option<&Path>,
    tls: bool,
) -> Result<AdminAccess, String> {
    if let Some(path) = token_file {
        if !addr.ip().is_loopback() && !tls {
            return Err(format!(
                "--admin-addr {addr} is not a loopback address and --admin-token-file was given \
                 without --tls-cert and --tls-key: the token would cross the network in the \
                 clear; give a certificate (the admin port is then served over TLS) or bind it \
                 to 127.0.0.1"
            ));
        }
        return AdminToken::read(path).map(AdminAccess::Token);
    }
    if client_ca.is_some() {
        return Ok(AdminAccess::MutualTls);
    }
    if addr.ip().is_loopback() {
        return Ok(AdminAccess::Local);
    }
    Err(format!(
        "--admin-addr {addr} is not a loopback address, and the admin port shows every connected \
         node, its configuration and its NACKs: give --admin-token-file FILE (requests then need \
         `Authorization: Bearer <token>`) or --admin-client-ca FILE with --tls-cert and \
         --tls-key (requests then need a client certificate from that CA), or bind it to \
         127.0.0.1"
    ))
}

/// `router` with every request but `/healthz` (a liveness probe that tells nothing) refused
/// with 401 and the reason unless it carries `Authorization: Bearer <token>`.
pub(crate) fn require_token(router: axum::Router, token: AdminToken) -> axum::Router {
    router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
        let token = token.clone();
        async move {
            if request.uri().path() == "/healthz" {
                return next.run(request).await;
            }
            match check(&token, request.headers().get(header::AUTHORIZATION)) {
                Ok(()) => next.run(request).await,
                Err(reason) => unauthorized(reason),
            }
        }
    }))
}

/// Why a request's `Authorization` header does not carry the token.
fn check(token: &AdminToken, given: Option<&header::HeaderValue>) -> Result<(), &'static str> {
    let Some(given) = given else {
        return Err("the admin port needs `Authorization: Bearer <token>` (--admin-token-file)");
    };
    let given = given.as_bytes();
    let Some(bearer) = given
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|_| given[7..].trim_ascii())
    else {
        return Err("the admin port takes `Authorization: Bearer <token>` only");
    };
    if token.matches(bearer) { Ok(()) } else { Err("the bearer token is not the admin token") }
}

/// The file server's policy when the admin port asks for credentials: CSDS (every node's
/// subscriptions, versions and NACK texts) only through the admin port, whatever the policy
/// `inner` says about the gRPC port's CSDS service. Everything else is `inner`'s to decide.
pub(crate) struct CsdsOnAdminOnly<A>(pub(crate) A);

impl<A: Authorizer> Authorizer for CsdsOnAdminOnly<A> {
    fn authorize(&self, request: &authz::Request<'_>) -> Result<(), Refusal> {
        if matches!(request.access, Access::ClientStatus) && request.entry != Entry::Admin {
            return Err(Refusal(
                "client status (CSDS) is served on the admin port only, which asks for \
                 credentials"
                    .to_owned(),
            ));
        }
        self.0.authorize(request)
    }

    fn authorize_resource(&self, request: &authz::Request<'_>, name: &str) -> Result<(), Refusal> {
        self.0.authorize_resource(request, name)
    }

    fn checks_resources(&self) -> bool {
        self.0.checks_resources()
    }
}

/// A 401 that also closes an HTTP/1.1 connection: a peer without the token keeps no slot of the
/// admin port's connection cap by sending a refused request now and then. (HTTP/2 forbids the
/// header; hyper drops it there.)
fn unauthorized(reason: &'static str) -> Response {
    let body = serde_json::json!({ "error": reason });
    let headers = [(header::WWW_AUTHENTICATE, "Bearer"), (header::CONNECTION, "close")];
    (StatusCode::UNAUTHORIZED, headers, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_file(name: &str, content: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("xds-admin-{name}-{}", std::process::id()));
        std::fs::write(&path, content).expect("write");
        path
    }

    #[test]
    fn off_loopback_the_admin_port_needs_a_token_or_a_client_ca() {
        let any: SocketAddr = "0.0.0.0:18002".parse().expect("addr");
        let local: SocketAddr = "127.0.0.1:18002".parse().expect("addr");
        let local6: SocketAddr = "[::1]:18002".parse().expect("addr");
        let error = admin_access(any, None, None, true).expect_err("refused");
        assert!(error.contains("not a loopback address") && error.contains("--admin-token-file"));
        assert_eq!(admin_access(local, None, None, false), Ok(AdminAccess::Local));
        assert_eq!(admin_access(local6, None, None, false), Ok(AdminAccess::Local));
        let ca = Path::new("ca.pem");
        assert_eq!(admin_access(any, None, Some(ca), true), Ok(AdminAccess::MutualTls));
        let file = token_file("ok", "s3cret\n");
        let access = admin_access(any, Some(&file), None, true).expect("a token");
        assert_eq!(access, AdminAccess::Token(AdminToken(b"s3cret".as_slice().into())));
        assert!(access.needs_tls(any) && access.guarded());
        let local_token = admin_access(local, Some(&file), None, false).expect("a local token");
        assert!(!local_token.needs_tls(local) && local_token.guarded());
        assert!(!AdminAccess::Local.guarded());
    }

    #[test]
    fn a_token_off_loopback_without_a_certificate_is_refused_at_start() {
        let any: SocketAddr = "0.0.0.0:18002".parse().expect("addr");
        let file = token_file("cleartext", "s3cret\n");
        let error = admin_access(any, Some(&file), None, false).expect_err("in the clear");
        assert!(error.contains("in the") && error.contains("--tls-cert"), "{error}");
    }

    #[test]
    fn with_a_guarded_admin_port_csds_is_refused_everywhere_else() {
        let peer = xds_server::Peer::default();
        let ask = |entry| {
            let request = authz::Request { peer: &peer, entry, access: Access::ClientStatus };
            CsdsOnAdminOnly(xds_server::AllowAll).authorize(&request)
        };
        assert!(ask(Entry::Csds).expect_err("grpc csds").0.contains("admin port only"));
        assert!(ask(Entry::Rest).is_err());
        assert!(ask(Entry::Admin).is_ok());
        let node = xds_server::prelude::Node::default();
        let type_url = xds_server::proto::TypeUrl::from(xds_server::proto::ResourceType::Cluster);
        let resources = authz::Request {
            peer: &peer,
            entry: Entry::Stream,
            access: Access::Resources { node: &node, type_url: &type_url },
        };
        assert!(CsdsOnAdminOnly(xds_server::AllowAll).authorize(&resources).is_ok());
    }

    #[test]
    fn a_token_file_that_is_missing_empty_or_huge_is_refused_at_start() {
        let any: SocketAddr = "0.0.0.0:18002".parse().expect("addr");
        let missing = Path::new("/nonexistent/admin-token");
        assert!(
            admin_access(any, Some(missing), None, true)
                .expect_err("missing")
                .contains("cannot read")
        );
        let empty = token_file("empty", " \n");
        let error = admin_access(any, Some(&empty), None, true).expect_err("empty");
        assert!(error.contains("no token"));
        let huge = token_file("huge", &"x".repeat(MAX_TOKEN_BYTES + 1));
        let error = admin_access(any, Some(&huge), None, true).expect_err("huge");
        assert!(error.contains("at most"));
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let token = AdminToken(b"s3cret".as_slice().into());
        let value = |v: &str| header::HeaderValue::from_str(v).expect("header");
        assert_eq!(check(&token, Some(&value("Bearer s3cret"))), Ok(()));
        assert_eq!(check(&token, Some(&value("bearer s3cret"))), Ok(()));
        assert!(check(&token, None).expect_err("missing").contains("needs"));
        assert!(check(&token, Some(&value("Bearer s3cre"))).expect_err("short").contains("not"));
        assert!(check(&token, Some(&value("Bearer s3cretX"))).is_err());
        assert!(check(&token, Some(&value("Basic s3cret"))).expect_err("basic").contains("only"));
        assert!(check(&token, Some(&value("Bearer"))).is_err());
    }

    #[test]
    fn comparison_checks_every_byte() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
