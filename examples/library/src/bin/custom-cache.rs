//! Serves EDS from an inventory of your own (see `xds_examples::inventory`) on 127.0.0.1:18000.

use xds_examples::inventory::Inventory;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let inventory = Inventory::default();
    inventory.set_service("payments", &[9001, 9002])?;
    inventory.set_service("search", &[9101])?;
    println!("custom-cache: EDS for `payments` and `search` on 127.0.0.1:18000");
    xds_examples::serve_until_ctrl_c(xds_server::XdsServer::new(inventory).routes()).await?;
    Ok(())
}
