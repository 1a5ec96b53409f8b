//! Serves EDS from an inventory of your own (see `xds_examples::inventory`) on 127.0.0.1:18000.

use xds_examples::inventory::Inventory;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let inventory = Inventory::default();
    inventory.set_service("payments", &[9001, 9002])?;
    inventory.set_service("search", &[9101])?;
    println!("custom-cache: EDS for `payments` and `search` on 127.0.0.1:18000");
    tonic::transport::Server::builder()
        .add_routes(xds_server::XdsServer::new(inventory).routes())
        .serve_with_shutdown("127.0.0.1:18000".parse()?, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
