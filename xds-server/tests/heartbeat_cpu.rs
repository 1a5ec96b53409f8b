//! A TTL heartbeat falling due while a response awaits its ACK must not spin the stream's loop
//! (rule S6: no spin).
//! Alone in its test binary: it measures the CPU time of this whole process.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use util::*;
use xds_cache::LinearCache;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::{EncodedResource, ResourceType};

/// User + system CPU time of this process so far (`/proc/self/stat`, in clock ticks of 10 ms).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The command name may hold spaces; fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_acks_a_ttl_resource_costs_no_cpu() {
    let cache = LinearCache::of::<ClusterLoadAssignment>();
    let ttl = Duration::from_secs(1);
    cache.upsert_encoded(EncodedResource::new(&cla("web", 8080)).unwrap().with_ttl(ttl)).unwrap();
    let server = serve(cache).await;
    let mut client = Delta::ads(&server, "envoy-1").await;
    client.subscribe(ResourceType::ClusterLoadAssignment, &["web"], &[]).await;
    let first = client.recv().await;
    assert!(first.resources[0].resource.is_some());

    // Never ACK. The heartbeat falls due after 0.5 s and stays owed; over 5 s the server must
    // stay under 5 % of a core (the spinning loop took ~80 %).
    let before = cpu_ticks();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let used_ms = (cpu_ticks() - before) * 10;
    assert!(used_ms < 250, "{used_ms} ms of CPU in 5 s with one idle client");

    // Nothing was sent meanwhile; the ACK releases the owed heartbeat at once.
    client.expect_quiet().await;
    client.ack(&first).await;
    let heartbeat = client.recv().await;
    assert_eq!(heartbeat.resources[0].name, "web");
    assert!(heartbeat.resources[0].resource.is_none(), "a heartbeat carries no body");
}
