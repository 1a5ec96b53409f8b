//! The harnesses of the cargo-fuzz targets, one function per target; `fuzz_targets/*.rs` only
//! wrap them in `fuzz_target!`. See `fuzz/README.md` for how to build and run them.
//!
//! Every harness panics when an invariant breaks, and a panic is what libFuzzer reports. Inputs
//! are read with [`arbitrary`] where structure helps the fuzzer reach deep states (operation
//! sequences, well-formed requests with a few fields left to chance) and taken as raw bytes where
//! the parser itself is under test.
#![warn(missing_docs, unreachable_pub)]

mod config;
mod core;
mod model;
mod server;

/// `core_sotw`: one [`xds_core::SotwSubStream`] driven through an arbitrary sequence of client
/// requests (any names, nonces, versions and `error_detail`), ACKs and NACKs of the latest
/// response, resource upserts and deletes in a model view (with TTLs, a change log that may be
/// forgotten, a view that may not be ready), polls (with and without deferred removals),
/// heartbeats and time passing.
///
/// Checks: at most one response in flight, and none while one waits for its ACK; nonces never
/// empty nor repeated; requests classified as the rules say (S4 ACK, S5 NACK, S7 stale requests
/// change nothing); every response at the view's version (S16), with each name once (S14), only
/// subscribed resources as the view has them (S9), and every subscribed one for full-state types
/// (S11); heartbeats only for TTL resources the client holds. At the end, once the client ACKs
/// everything and the view stops changing, nothing more is sent (S6) and the client holds what
/// the view has for its subscription (all of it for full-state types; partial-state clients may
/// keep deleted extras).
pub fn core_sotw(data: &[u8]) {
    core::sotw(data);
}

/// `core_delta`: one [`xds_core::DeltaSubStream`] driven like [`core_sotw`], with subscribe and
/// unsubscribe lists, declared initial versions (D7) and resends (D10).
///
/// Checks, besides those of `core_sotw` that apply: entries sorted and unique across resources
/// and removals; a present resource is the view's and subscribed; an absent one (D6) is
/// subscribed by name and does not exist; a removal (D5) is of something gone that the client
/// held. At the end the client holds exactly what the view has for its subscription.
pub fn core_delta(data: &[u8]) {
    core::delta(data);
}

/// `server_request`: one gRPC call through [`xds_server::XdsServer::routes`], in process: SotW
/// ADS, delta ADS, a per-type stream or a unary fetch, with a body of one or more framed
/// messages (well-formed requests with fields left to chance, perhaps cut or with junk after,
/// or the input's bytes), or the input's bytes unframed, split into chunks. The request body
/// ends, so the call must end.
///
/// Checks: HTTP 200; every message decodes as a `DiscoveryResponse` or `DeltaDiscoveryResponse`
/// with a type URL and (on streams) a unique nonce, resources of that type and names once; the
/// response ends with one valid `grpc-status` (in trailers or trailers-only) and within 5 s; a
/// successful fetch answers one message.
pub fn server_request(data: &[u8]) {
    server::server_request(data);
}

/// `config_parse`: text through `xds_file_server::config::parse_str` (as YAML and as JSON), through
/// `xds_proto::from_yaml_str` and `from_json_str` for every built-in resource type, and through
/// `xds_proto::yaml_to_json`.
///
/// Checks: no panic; errors name the file and a reason; a message that reads writes back out as
/// JSON and reads again to the same message.
pub fn config_parse(data: &[u8]) {
    config::config_parse(data);
}

/// `rest_body`: one HTTP request through [`xds_server::XdsServer::rest_router`] with any method,
/// a discovery path, the CSDS path or any path, and a body that is JSON with fields left to
/// chance (perhaps cut or with wrong fields) or the input's bytes, with a `content-length` that
/// may lie.
///
/// Checks: a status the REST API documents (200, 304, 400, 403, 404, 405, 413, 501; never 500),
/// a JSON object for 200, no body for 304, a message for every error, an answer within 5 s.
pub fn rest_body(data: &[u8]) {
    server::rest_body(data);
}
