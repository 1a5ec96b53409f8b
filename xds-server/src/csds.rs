//! CSDS: the client status discovery service. STUB: filled by the CSDS work.

use crate::server::XdsServer;

pub(crate) fn add_routes(router: axum::Router, _server: XdsServer) -> axum::Router {
    router
}
