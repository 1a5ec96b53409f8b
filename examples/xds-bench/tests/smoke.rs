//! Smoke run of the benchmark tools (CI runs benchmarks only this way): `xds-bench-server`, and
//! the floor `xds-floor-server`, each with 200 clusters, then `xds-load` with 5 clients and 5
//! updates over delta ADS and over SotW ADS, and a burst of 50 changes within 200 ms; and
//! `xds-bench-server --per-node-groups 5` (a snapshot per node, 180 of the 200 clusters shared),
//! whose nodes must be served their own resources. Passes only when every client got the initial
//! configuration and every update (`5 passed, 0 failed`, the generator's own verdict). With
//! churn (`--churn-rate`), delta clients dropping and resuming during the updates must be resent
//! nothing they hold by `xds-bench-server`, while the floor (no resumption) resends it all.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn the_load_generator_sees_every_update_over_delta_and_sotw() {
    check_server(env!("CARGO_BIN_EXE_xds-bench-server"), "xds-bench-server");
}

#[test]
fn the_floor_serves_the_load_generator_over_delta_and_sotw() {
    check_server(env!("CARGO_BIN_EXE_xds-floor-server"), "xds-floor-server");
}

#[test]
fn a_burst_reaches_every_client_over_delta_and_sotw() {
    let (server, grpc, http, pid) =
        start(env!("CARGO_BIN_EXE_xds-bench-server"), "xds-bench-server", &[]);
    for mode in ["delta", "sotw"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xds-load"))
            .args(["--server", &format!("http://{grpc}")])
            .args(["--burst-url", &format!("http://{http}/bench/burst?n={{n}}&ms={{ms}}")])
            .args(["--stats", &format!("http://{http}/bench/stats")])
            .args(["--clients", "5", "--mode", mode, "--burst", "50", "--burst-ms", "200"])
            .args(["--timeout-s", "10", "--storm-timeout-s", "20", "--settle-ms", "200"])
            .args(["--server-pid", &pid, "--brief"])
            .output()
            .expect("xds-load runs");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && report.lines().last() == Some("50 passed, 0 failed")
                && report.contains("every client holds every last version after"),
            "xds-load --burst --mode {mode} failed ({}):\n{report}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(server);
}

#[test]
fn clients_resuming_under_churn_are_resent_nothing_they_hold() {
    let (server, grpc, http, pid) =
        start(env!("CARGO_BIN_EXE_xds-bench-server"), "xds-bench-server", &[]);
    let report = run_churn(&grpc, &http, &pid, "xds-bench-server");
    assert_eq!(figure(&report, "resent after reconnect: "), 0, "held resources resent:\n{report}");
    drop(server);
}

#[test]
fn the_floor_resends_everything_to_clients_resuming_under_churn() {
    let (server, grpc, http, pid) =
        start(env!("CARGO_BIN_EXE_xds-floor-server"), "xds-floor-server", &[]);
    let report = run_churn(&grpc, &http, &pid, "xds-floor-server");
    // Each resumed stream is sent the 200 Clusters and the 200 ClusterLoadAssignments again
    // (the last one may not be answered yet when the report is made): the counter sees what a
    // server resends.
    let (resent, reconnections) =
        (figure(&report, "resent after reconnect: "), figure(&report, "reconnections: "));
    assert!(
        resent > 0 && resent >= 400 * reconnections.saturating_sub(1),
        "the floor resends all it serves:\n{report}"
    );
    drop(server);
}

/// 20 delta clients, 5 updates 300 ms apart, while half of the clients drop their stream every
/// second and resume; checks that every update reached every client and that streams were
/// dropped and resumed; answers the report.
fn run_churn(grpc: &str, http: &str, pid: &str, name: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_xds-load"))
        .args(["--server", &format!("http://{grpc}")])
        .args(["--trigger", &format!("http://{http}/bench/update?i={{k}}")])
        .args(["--stats", &format!("http://{http}/bench/stats")])
        .args(["--clients", "20", "--mode", "delta", "--updates", "5", "--interval-ms", "300"])
        .args(["--churn-rate", "0.5"])
        .args(["--timeout-s", "10", "--storm-timeout-s", "20", "--settle-ms", "200"])
        .args(["--server-pid", pid, "--brief"])
        .output()
        .expect("xds-load runs");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && report.lines().last() == Some("5 passed, 0 failed"),
        "xds-load --churn-rate against {name} failed ({}):\n{report}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(figure(&report, "reconnections: ") > 0, "no stream was dropped:\n{report}");
    assert!(report.contains("churn: drop -> first response"), "{report}");
    report
}

/// The number that follows `label` at the start of a report line.
fn figure(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} line:\n{report}"))
}

#[test]
fn per_node_snapshots_serve_each_node_its_own_and_every_update() {
    let (server, grpc, http, pid) = start(
        env!("CARGO_BIN_EXE_xds-bench-server"),
        "xds-bench-server --per-node-groups 5",
        &["--per-node-groups", "5"],
    );
    // Clusters 0..180 are shared (the default share, 0.9), 180..200 each node's own.
    for kind in ["clusters", "endpoints"] {
        let shared = |node| fetch(&http, kind, node, "cluster-0");
        assert_eq!(shared("load-0"), shared("load-4"), "shared {kind} are the same for every node");
        let own = |node| fetch(&http, kind, node, "cluster-199");
        let (own0, own1) = (own("load-0"), own("load-1"));
        assert_ne!(own0, own1, "a node's own {kind} differ between nodes");
        assert!(own0.contains("load-0") && own1.contains("load-1"), "{own0}\n{own1}");
    }
    let own = |node| fetch(&http, "endpoints", node, "cluster-199");

    // xds-load's updates (clusters 0..5, shared) reach every client, delta and SotW.
    run_load(&grpc, &http, &pid, "xds-bench-server --per-node-groups 5");

    // An update of a node's own cluster reaches every group, each with its own content.
    let port = get(&http, "/bench/update?i=199");
    let port = port.trim();
    assert!(port.parse::<u32>().is_ok(), "the update answers its port: {port:?}");
    for node in ["load-0", "load-4"] {
        let body = own(node);
        assert!(
            body.contains(&format!("\"portValue\":{port}"))
                && body.contains(&format!("\"{node}\"")),
            "{node} holds cluster-199 on port {port}, in its own locality: {body}"
        );
    }
    drop(server);
}

/// The resource `name` the REST-JSON API serves `node` at `/v3/discovery:{kind}`, as JSON text
/// (without the response's version, which differs between groups).
fn fetch(http: &str, kind: &str, node: &str, name: &str) -> String {
    let request = format!(r#"{{"node":{{"id":"{node}"}},"resource_names":["{name}"]}}"#);
    let body = exchange(http, "POST", &format!("/v3/discovery:{kind}"), &request);
    let response: serde_json::Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("a JSON DiscoveryResponse for {node} ({e}): {body}"));
    let resources = &response["resources"];
    assert!(resources.as_array().is_some_and(|r| r.len() == 1), "{node} {name}: {body}");
    resources.to_string()
}

/// `GET path` of the server's HTTP port: the body of a 200 answer.
fn get(http: &str, path: &str) -> String {
    exchange(http, "GET", path, "")
}

/// One HTTP/1.0 exchange (so that the answer is not chunked and ends with the connection):
/// the body of a 200 answer.
fn exchange(http: &str, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(http).expect("the HTTP port answers");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("a read timeout");
    let request = format!(
        "{method} {path} HTTP/1.0\r\nhost: {http}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("the request is sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{method} {path}: {answer}"
    );
    body.to_owned()
}

/// Starts `exe` with 200 clusters and runs 5 xds-load clients with 5 updates against it, over
/// delta and over SotW.
fn check_server(exe: &str, name: &str) {
    let (server, grpc, http, pid) = start(exe, name, &[]);
    run_load(&grpc, &http, &pid, name);
    drop(server);
}

/// Runs 5 xds-load clients with 5 updates against the server `name`, over delta and over SotW.
fn run_load(grpc: &str, http: &str, pid: &str, name: &str) {
    for mode in ["delta", "sotw"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xds-load"))
            .args(["--server", &format!("http://{grpc}")])
            .args(["--trigger", &format!("http://{http}/bench/update?i={{k}}")])
            .args(["--stats", &format!("http://{http}/bench/stats")])
            .args(["--clients", "5", "--mode", mode, "--updates", "5", "--interval-ms", "100"])
            .args(["--timeout-s", "10", "--storm-timeout-s", "20", "--settle-ms", "200"])
            .args(["--server-pid", pid])
            .output()
            .expect("xds-load runs");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && report.lines().last() == Some("5 passed, 0 failed"),
            "xds-load --mode {mode} against {name} failed ({}):\n{report}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Starts `exe` with 200 clusters (and `extra` arguments); answers it with its gRPC and HTTP
/// addresses and its pid.
fn start(exe: &str, name: &str, extra: &[&str]) -> (Server, String, String, String) {
    let (grpc, http) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut child = Command::new(exe)
        .args(["--clusters", "200", "--grpc-addr", &grpc, "--http-addr", &http])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let server = Server(child);

    // The server prints a line with its pid once both ports listen.
    let started = Instant::now();
    let mut pid = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("server output");
        if let Some(rest) = line.split(" pid ").nth(1) {
            pid = rest.split(':').next().map(str::to_owned);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{name} did not start");
    }
    let pid = pid.unwrap_or_else(|| panic!("{name} printed its pid"));
    (server, grpc, http, pid)
}
