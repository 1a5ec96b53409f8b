#!/usr/bin/env python3
"""How the operator console holds up with many connected proxies: a load-generator run with a
written report (docs/benchmarks.md, "The operator console with 10,000 proxies"), not a test.

Starts xds-file-server on a generated configuration (10 EDS clusters named as xds-load expects),
connects N delta ADS clients with xds-load (which, given --restart-wait-s, keeps them connected
after they hold the configuration), then times:
  - the console's JSON (`/ui/api/proxies`) for several filters, sorts and page sizes, 3 times each;
  - the detail JSON of one node;
  - the page in headless Chromium: from navigation to the first 100 (or 500) rows, and the
    page's own refreshes (it polls every second).

Usage: console_at_scale.py SERVER_BINARY XDS_LOAD_BINARY [--clients 10000] [--port 18700]
Needs Debian's chromium and chromium-driver and the `selenium` package
(examples/interop/requirements.txt).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

# Chromium's own flags for a closed network (no background connections) and no sandbox (root).
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
QUERIES = [
    "limit=100", "limit=500", "sort=state&limit=100", "state=pending&limit=100",
    "q=load-99&limit=100", "sort=node&order=desc&offset=9900&limit=100",
]


def config(clusters):
    lines = ["resources:"]
    for i in range(clusters):
        lines += [
            '  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster',
            f"    name: cluster-{i}",
            "    type: EDS",
            "    eds_cluster_config: { eds_config: { ads: {}, resource_api_version: V3 } }",
            '  - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment',
            f"    cluster_name: cluster-{i}",
            "    endpoints:",
            "      - lb_endpoints:",
            "          - endpoint: { address: { socket_address: "
            f"{{ address: 10.0.0.{i + 1}, port_value: 8080 }} }} }}",
        ]
    return "\n".join(lines) + "\n"


def get(url):
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
    return time.monotonic() - started, body


def wait_connected(admin, clients, limit_s):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            _, body = get(f"{admin}/ui/api/proxies?limit=1")
            page = json.loads(body)
            if page["total"] >= clients and page["counts"].get("synced", 0) >= 2 * clients:
                return
        except OSError:
            pass
        time.sleep(1)
    sys.exit(f"{clients} clients were not connected and synced within {limit_s} s")


def browser(admin):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS + ["--user-data-dir=" + tempfile.mkdtemp()]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        for path, rows in [("/ui", 100), ("/ui?sort=state&limit=500", 500)]:
            started = time.monotonic()
            driver.get(admin + path)
            while len(driver.find_elements(By.CSS_SELECTOR, "tbody tr")) < rows:
                time.sleep(0.02)
            first = time.monotonic() - started
            stamps, watched = set(), time.monotonic()
            while len(stamps) < 4 and time.monotonic() - watched < 10:
                stamps.add(driver.execute_script(
                    "return document.body.innerText.match(/updated [^\\n]*/)?.[0]"))
                time.sleep(0.05)
            print(f"page {path}: {rows} rows {first:.2f} s after navigation; "
                  f"{len(stamps) - 1} refreshes in {time.monotonic() - watched:.2f} s")
        started = time.monotonic()
        driver.get(admin + "/ui?node=load-5000")
        while "load-5000" not in driver.page_source or not driver.find_elements(By.TAG_NAME, "table"):
            time.sleep(0.02)
        print(f"page /ui?node=load-5000: shown {time.monotonic() - started:.2f} s after navigation")
    finally:
        driver.quit()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("server")
    parser.add_argument("xds_load")
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--port", type=int, default=18700)
    args = parser.parse_args()
    grpc, http, admin_port = args.port, args.port + 1, args.port + 2
    admin = f"http://127.0.0.1:{admin_port}"
    work = tempfile.mkdtemp(prefix="console-at-scale-")
    path = os.path.join(work, "config.yaml")
    with open(path, "w") as f:
        f.write(config(10))
    # Every client connects from 127.0.0.1: one peer, so the per-peer cap must allow them all.
    caps = str(args.clients + 2000)
    server = subprocess.Popen(
        [args.server, "--config", path, "--grpc-addr", f"127.0.0.1:{grpc}",
         "--http-addr", f"127.0.0.1:{http}", "--admin-addr", f"127.0.0.1:{admin_port}",
         "--max-connections", caps, "--max-connections-per-peer", caps,
         "--max-streams", str(2 * args.clients), "--log", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = None
    try:
        time.sleep(2)
        load = subprocess.Popen(
            [args.xds_load, "--server", f"http://127.0.0.1:{grpc}", "--clients", str(args.clients),
             "--mode", "delta", "--updates", "0", "--restart-wait-s", "600",
             "--connect-concurrency", "500", "--stats", f"{admin}/metrics"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.monotonic()
        wait_connected(admin, args.clients, 300)
        print(f"{args.clients} delta clients connected and synced after "
              f"{time.monotonic() - started:.1f} s")
        for query in QUERIES:
            times, size = [], 0
            for _ in range(3):
                took, body = get(f"{admin}/ui/api/proxies?{query}")
                times.append(took)
                size = len(body)
            shown = " / ".join(f"{t * 1000:.0f}" for t in times)
            print(f"/ui/api/proxies?{query}: {shown} ms, {size} bytes")
        detail = [get(f"{admin}/ui/api/proxy?node=load-5000")[0] for _ in range(3)]
        print("/ui/api/proxy?node=load-5000: " + " / ".join(f"{t * 1000:.0f}" for t in detail) + " ms")
        browser(admin)
        with open(f"/proc/{server.pid}/status") as f:
            rss = next(line for line in f if line.startswith("VmRSS")).split()[1]
        print(f"server RSS {int(rss) // 1024} MiB")
    finally:
        for process in (load, server):
            if process is not None:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
