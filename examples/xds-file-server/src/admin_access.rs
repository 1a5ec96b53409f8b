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

/// Decides the admin port's access from where it listens and the credentials configured: the
/// error, for a non-loopback address with neither, says what to give.
pub(crate) fn admin_access(
    addr: SocketAddr,
    token_file: Option<&Path>,
    client_ca: Option<&Path>,
) -> Result<AdminAccess, String> {
    if let Some(path) = token_file {
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

fn unauthorized(reason: &'static str) -> Response {
    let body = serde_json::json!({ "error": reason });
    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], axum::Json(body))
        .into_response()
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
        let error = admin_access(any, None, None).expect_err("refused");
        assert!(error.contains("not a loopback address") && error.contains("--admin-token-file"));
        assert_eq!(admin_access(local, None, None), Ok(AdminAccess::Local));
        assert_eq!(admin_access(local6, None, None), Ok(AdminAccess::Local));
        let ca = Path::new("ca.pem");
        assert_eq!(admin_access(any, None, Some(ca)), Ok(AdminAccess::MutualTls));
        let file = token_file("ok", "s3cret\n");
        let access = admin_access(any, Some(&file), None).expect("a token");
        assert_eq!(access, AdminAccess::Token(AdminToken(b"s3cret".as_slice().into())));
    }

    #[test]
    fn a_token_file_that_is_missing_empty_or_huge_is_refused_at_start() {
        let any: SocketAddr = "0.0.0.0:18002".parse().expect("addr");
        let missing = Path::new("/nonexistent/admin-token");
        assert!(
            admin_access(any, Some(missing), None).expect_err("missing").contains("cannot read")
        );
        let empty = token_file("empty", " \n");
        assert!(admin_access(any, Some(&empty), None).expect_err("empty").contains("no token"));
        let huge = token_file("huge", &"x".repeat(MAX_TOKEN_BYTES + 1));
        assert!(admin_access(any, Some(&huge), None).expect_err("huge").contains("at most"));
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
