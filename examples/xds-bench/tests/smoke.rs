//! Smoke run of the benchmark tools (CI runs benchmarks only this way): `xds-bench-server`, and
//! the floor `xds-floor-server`, each with 200 clusters, then `xds-load` with 5 clients and 5
//! updates over delta ADS and over SotW ADS, and a burst of 50 changes within 200 ms.
//! Passes only when every client got the initial configuration and every update
//! (`5 passed, 0 failed`, the generator's own verdict).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
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
        start(env!("CARGO_BIN_EXE_xds-bench-server"), "xds-bench-server");
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

/// Starts `exe` with 200 clusters and runs 5 xds-load clients with 5 updates against it, over
/// delta and over SotW.
fn check_server(exe: &str, name: &str) {
    let (server, grpc, http, pid) = start(exe, name);
    for mode in ["delta", "sotw"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xds-load"))
            .args(["--server", &format!("http://{grpc}")])
            .args(["--trigger", &format!("http://{http}/bench/update?i={{k}}")])
            .args(["--stats", &format!("http://{http}/bench/stats")])
            .args(["--clients", "5", "--mode", mode, "--updates", "5", "--interval-ms", "100"])
            .args(["--timeout-s", "10", "--storm-timeout-s", "20", "--settle-ms", "200"])
            .args(["--server-pid", &pid])
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
    drop(server);
}

/// Starts `exe` with 200 clusters; answers it with its gRPC and HTTP addresses and its pid.
fn start(exe: &str, name: &str) -> (Server, String, String, String) {
    let (grpc, http) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut child = Command::new(exe)
        .args(["--clusters", "200", "--grpc-addr", &grpc, "--http-addr", &http])
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
