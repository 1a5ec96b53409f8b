//! Small control planes built on the library, as a user would write them.
//!
//! - [`inventory`]: a `Cache` over an inventory of your own (the `custom-cache` binary serves it).
//! - `linear-endpoints` (a binary): a programmatic control plane over a `LinearCache`.
//! - [`health`]: health checking delegated to the proxies (HDS) fed back into EDS, taking
//!   reports only from authorized reporters (the `hds-to-eds` binary serves it).

pub mod health;
pub mod inventory;

/// Serves `routes` on 127.0.0.1:18000 until Ctrl-C: what every example here does once its cache
/// is set up.
///
/// # Errors
///
/// The transport's error when the port cannot be bound or serving fails.
pub async fn serve_until_ctrl_c(
    routes: xds_server::tonic::service::Routes,
) -> Result<(), xds_server::tonic::transport::Error> {
    xds_server::tonic::transport::Server::builder()
        .add_routes(routes)
        .serve_with_shutdown(std::net::SocketAddr::from(([127, 0, 0, 1], 18000)), async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
