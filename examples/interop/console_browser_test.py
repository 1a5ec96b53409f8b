#!/usr/bin/env python3
"""Browser test of the operator console: headless Chromium drives ``/ui`` of xds-file-server.

Clients:
  - a real proxyless gRPC client (grpcio) dialing ``xds:///demo-service`` (node ``grpc-client``);
  - raw ADS streams (hand-encoded DiscoveryRequests over grpcio's generic stub): ``stuck-proxy``
    subscribes and never ACKs (PENDING), ``edge-N`` ACK every response (SYNCED), and one whose
    node id is an HTML/script payload (it must show as text).

Steps:
  1. started   the server, the clients; the page lists every client, the script node as text
               (no alert, no injected element, ``window.__xss`` unset)
  2. nack      the config gets a Cluster gRPC rejects (MAGLEV): the page shows the gRPC client's
               cell NACKED with the client's text at most 2 s after the admin API has it, with no
               page reload
  3. filter    the state filter narrows the rows to the NACKing client; the node search to one
  4. recover   the config is fixed: the cell is SYNCED again, at most 2 s after the API has it
  5. detail    the gRPC client's detail view shows its streams, its cluster SYNCED, what its
               group serves, and its events: the NACK of step 2 and the ACK after the fix
  6. cli       ``xds-file-server status`` prints the table, ``--node`` one node, ``-o json``
  7. panels    a refused file with markup in it: the Configuration panel lists the refusal with
               the server's error text as text (nothing injected); the ACK latency panel draws
               its chart

``--screenshot PATH`` saves a PNG of the page while the clients are SYNCED, PENDING and NACKED.

Usage: console_browser_test.py [SERVER_BINARY] [--screenshot docs/console.png]
Needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver) and the
``selenium`` and ``grpcio`` packages (examples/interop/requirements.txt).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import grpc_xds_test as interop  # noqa: E402  (its config rendering and file writing)

REPO = interop.REPO
GRPC_NODE = "grpc-client"
STUCK_NODE = "stuck-proxy"
EDGE_NODES = ["edge-1", "edge-2", "edge-3"]
SCRIPT_NODE = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">evil-node'
CLUSTER_TYPE_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ADS_METHOD = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
# How much later than the admin API the page may show a change (it polls every second).
PAGE_LAG = 2.0
WAIT = 20
STEPS = ["started", "nack", "filter", "recover", "detail", "cli", "panels"]


# --- a raw ADS client: protobuf by hand, enough for a SotW DiscoveryRequest ------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def discovery_request(node_id=None, version="", nonce=""):
    # DiscoveryRequest: version_info 1, node 2 (Node: id 1, cluster 2), type_url 4, nonce 5.
    msg = b""
    if version:
        msg += field(1, version)
    if node_id is not None:
        msg += field(2, field(1, node_id) + field(2, "console-test"))
    msg += field(4, CLUSTER_TYPE_URL)
    if nonce:
        msg += field(5, nonce)
    return msg


def read_fields(data):
    """The length-delimited fields of a message: {number: [bytes, ...]} (varints skipped)."""
    fields, i = {}, 0
    while i < len(data):
        key, shift = 0, 0
        while True:
            b = data[i]; i += 1
            key |= (b & 0x7F) << shift; shift += 7
            if not b & 0x80:
                break
        number, wire = key >> 3, key & 7
        if wire == 0:
            while data[i] & 0x80:
                i += 1
            i += 1
        elif wire == 2:
            size, shift = 0, 0
            while True:
                b = data[i]; i += 1
                size |= (b & 0x7F) << shift; shift += 7
                if not b & 0x80:
                    break
            fields.setdefault(number, []).append(data[i:i + size]); i += size
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"wire type {wire}")
    return fields


class RawAds:
    """One ADS stream subscribed to every Cluster; ACKs each response unless `stuck`."""

    def __init__(self, grpc, target, node_id, stuck):
        import queue
        self.requests = queue.Queue()
        self.node_id, self.stuck = node_id, stuck
        self.channel = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)])
        call = self.channel.stream_stream(ADS_METHOD, request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
        self.requests.put(discovery_request(node_id))
        self.responses = call(iter(self.requests.get, None))
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            for response in self.responses:
                if self.stuck:
                    continue
                f = read_fields(response)
                version = f.get(1, [b""])[0].decode()
                nonce = f.get(5, [b""])[0].decode()
                self.requests.put(discovery_request(version=version, nonce=nonce))
        except Exception:  # noqa: BLE001 - the stream ends when the test stops
            pass

    def close(self):
        self.requests.put(None)
        self.channel.close()


# --- the test ---------------------------------------------------------------------------------

class ConsoleTest(interop.Test):
    def __init__(self, grpc, server_bin, workdir, grpc_port, screenshot):
        super().__init__(grpc, server_bin, workdir, grpc_port)
        self.screenshot = screenshot
        self.raw = []
        self.driver = None

    def stop(self):
        if self.driver is not None:
            self.driver.quit()
        for client in self.raw:
            client.close()
        super().stop()

    def base(self):
        return f"http://127.0.0.1:{self.admin_port}/"

    def api(self, query=""):
        _, body = self.http_get("/ui/api/proxies" + query)
        return json.loads(body)

    def api_state(self, node):
        q = "?q=" + urllib.parse.quote(node, safe="")
        for row in self.api(q)["rows"]:
            if row["node_id"] == node:
                return row["cells"].get("cluster", {}).get("state")
        return None

    # --- the browser ----------------------------------------------------------------------

    def start_browser(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1400,900",
                     f"--user-data-dir={os.path.join(self.workdir, 'chromium')}"]:
            options.add_argument(flag)
        # Loopback only: never through a proxy from the environment.
        options.add_argument("--no-proxy-server")
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        self.driver.set_page_load_timeout(WAIT)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def page_cell(self, node):
        """The state and text of `node`'s cluster cell on the page, read from the DOM."""
        return self.js("""
            const row = Array.from(document.querySelectorAll('#rows tr')).find(r => r.dataset.node === arguments[0]);
            if (!row) return null;
            const cell = row.querySelector('td[data-type="cluster"]');
            if (!cell) return null;
            const text = cell.querySelector('.nack-text');
            return {state: cell.dataset.state || null, text: text ? text.textContent : null,
                    label: cell.textContent};
        """, node)

    def page_nodes(self):
        return self.js("return Array.from(document.querySelectorAll('#rows tr')).map(r => r.dataset.node);")

    def wait_page(self, what, predicate, wait=WAIT):
        deadline = time.monotonic() + wait
        last = None
        while time.monotonic() < deadline:
            self.check_server_alive()
            last = predicate()
            if last:
                return last
            time.sleep(0.05)
        raise interop.StepFailed(f"the page did not show {what} within {wait}s (last: {last!r})")

    def wait_api_then_page(self, node, state, wait=WAIT):
        """Waits for the admin API to report `state` for `node`, then for the page: returns the
        page's lag behind the API (seconds)."""
        self.poll_api(f"{node} {state}", lambda: self.api_state(node) == state, wait)
        api_at = time.monotonic()
        cell = self.wait_page(f"{node} {state}", lambda: (c := self.page_cell(node)) and c["state"] == state and c,
                              wait=PAGE_LAG + 1)
        lag = time.monotonic() - api_at
        if lag > PAGE_LAG:
            raise interop.StepFailed(f"the page showed {node} {state} {lag:.1f}s after the API")
        return lag, cell

    def poll_api(self, what, predicate, wait=WAIT):
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.check_server_alive()
            if predicate():
                return
            time.sleep(0.05)
        raise interop.StepFailed(f"the admin API did not report {what} within {wait}s")

    # --- steps ------------------------------------------------------------------------------

    def step_started(self):
        detail = super().step_started()
        self.call_until("backend-A", interop.FIRST_ROUTE_WAIT)
        target = f"127.0.0.1:{self.grpc_port}"
        self.raw.append(RawAds(self.grpc, target, STUCK_NODE, stuck=True))
        for node in EDGE_NODES + [SCRIPT_NODE]:
            self.raw.append(RawAds(self.grpc, target, node, stuck=False))
        for node, state in [(GRPC_NODE, "synced"), (STUCK_NODE, "pending"), (SCRIPT_NODE, "synced")]:
            self.poll_api(f"{node} {state}", lambda: self.api_state(node) == state)
        self.start_browser()
        self.driver.get(self.base() + "ui")
        # A marker that a reload would lose: the page must update itself.
        self.js("window.__marker = 42;")
        everyone = [GRPC_NODE, STUCK_NODE, SCRIPT_NODE] + EDGE_NODES
        self.wait_page("every client", lambda: set(everyone) <= set(self.page_nodes() or []))
        link = self.js("""
            const row = Array.from(document.querySelectorAll('#rows tr')).find(r => r.dataset.node === arguments[0]);
            return row.querySelector('td.node a').textContent;""", SCRIPT_NODE)
        if link != SCRIPT_NODE:
            raise interop.StepFailed(f"the script node shows as {link!r}")
        injected = self.js("return [typeof window.__xss, document.querySelectorAll('#rows script, #rows img').length];")
        if injected != ["undefined", 0]:
            raise interop.StepFailed(f"the node id was parsed as HTML: {injected}")
        from selenium.common.exceptions import NoAlertPresentException
        try:
            self.driver.switch_to.alert.dismiss()
            raise interop.StepFailed("an alert opened")
        except NoAlertPresentException:
            pass
        pending = self.page_cell(STUCK_NODE)
        if pending["state"] != "pending" or not pending["label"].startswith("PENDING"):
            raise interop.StepFailed(f"the stuck client shows {pending}")
        return detail + f"; page lists {len(self.page_nodes())} proxies, the script node as text"

    def step_nack(self):
        written = time.monotonic()
        write_config(self, lb_policy="MAGLEV")
        lag, cell = self.wait_api_then_page(GRPC_NODE, "nacked")
        since_write = time.monotonic() - written
        # grpcio names the field it rejects.
        if not cell["text"] or "lb_policy" not in cell["text"]:
            raise interop.StepFailed(f"the NACK text is not shown: {cell}")
        if self.js("return window.__marker;") != 42:
            raise interop.StepFailed("the page reloaded")
        # Expand it, as an operator would, for the screenshot.
        self.js("""
            const row = Array.from(document.querySelectorAll('#rows tr')).find(r => r.dataset.node === arguments[0]);
            row.querySelector('td[data-type="cluster"] details').open = true;""", GRPC_NODE)
        time.sleep(1.2)  # a refresh: the expanded text stays open
        if self.js("""
            const row = Array.from(document.querySelectorAll('#rows tr')).find(r => r.dataset.node === arguments[0]);
            return row.querySelector('td[data-type="cluster"] details').open;""", GRPC_NODE) is not True:
            raise interop.StepFailed("an expanded NACK closed on refresh")
        if self.screenshot:
            self.driver.save_screenshot(self.screenshot)
        return (f"NACKED on the page {lag:.2f}s after the API ({since_write:.2f}s after the file was "
                f"written): {' '.join(cell['text'].split())[:120]!r}")

    def step_filter(self):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        Select(self.driver.find_element(By.ID, "f-state")).select_by_value("nacked")
        self.wait_page("only the NACKing client", lambda: self.page_nodes() == [GRPC_NODE])
        if "state=nacked" not in self.driver.current_url:
            raise interop.StepFailed(f"the filter is not in the address: {self.driver.current_url}")
        Select(self.driver.find_element(By.ID, "f-state")).select_by_value("")
        box = self.driver.find_element(By.ID, "f-q")
        box.send_keys("stuck")
        self.wait_page("only the stuck client", lambda: self.page_nodes() == [STUCK_NODE])
        box.clear()
        self.js("const q = document.getElementById('f-q'); q.dispatchEvent(new Event('input'));")
        self.wait_page("every client again", lambda: len(self.page_nodes() or []) == 2 + len(EDGE_NODES) + 1)
        return "state=nacked shows 1 row, node search 'stuck' 1 row, cleared shows all"

    def step_recover(self):
        write_config(self)
        lag, _ = self.wait_api_then_page(GRPC_NODE, "synced")
        if self.js("return window.__marker;") != 42:
            raise interop.StepFailed("the page reloaded")
        return f"SYNCED on the page {lag:.2f}s after the API, no reload"

    def step_detail(self):
        from selenium.webdriver.common.by import By

        link = self.driver.find_element(By.LINK_TEXT, GRPC_NODE)
        link.click()
        self.wait_page("the detail view", lambda: self.js(
            "return document.getElementById('d-node').textContent;") == GRPC_NODE)
        states = self.wait_page("the cluster's state", lambda: self.js(
            "return Array.from(document.querySelectorAll('#d-streams .cell')).map(c => c.dataset.state);"))
        served = self.wait_page("what the group serves", lambda: self.js(
            "return Array.from(document.querySelectorAll('#d-served h4')).map(h => h.textContent);"))
        if "synced" not in states or "cluster" not in served:
            raise interop.StepFailed(f"detail: states {states}, served types {served}")
        same = self.js("return document.querySelectorAll('#d-served span.synced').length;")
        if not same:
            raise interop.StepFailed("the detail shows no resource held at the served version")
        # A served resource opens as its JSON (what /config_dump gives, redacted), and stays open
        # across the page's updates.
        self.js("document.querySelector('#d-served details.resource summary').click();")
        time.sleep(1.5)
        shown = self.js("""
            const d = document.querySelector('#d-served details.resource');
            return d && d.open ? [d.querySelector('summary').textContent, d.querySelector('pre').textContent] : null;""")
        if not shown:
            raise interop.StepFailed("a served resource does not open (or closed at the next update)")
        resource = json.loads(shown[1])
        if resource.get("name") != shown[0]:
            raise interop.StepFailed(f"the resource's JSON is not {shown[0]}: {shown[1][:200]}")
        # Its history: the NACK of step 2 with the client's text, then the ACK of the fix.
        events = self.wait_page("the stream's events", lambda: self.js("""
            const h = Array.from(document.querySelectorAll('#d-streams h4')).find(h => h.textContent === 'Events');
            return h ? Array.from(h.nextElementSibling.querySelectorAll('tbody tr')).map(r => r.textContent) : null;"""))
        nacked = [i for i, e in enumerate(events) if "NACKed" in e and "cluster" in e]
        acked = [i for i, e in enumerate(events) if "ACKed" in e and "NACKed" not in e and "cluster" in e]
        # (An ACK is shown with the response it answers: "sent version V (...), ACKed after N ms".)
        if not nacked or not acked or acked[-1] < nacked[-1]:
            raise interop.StepFailed(f"events: no cluster NACK followed by an ACK: {events}")
        return (f"states {states}, served types {served}, {same} resources held as served, "
                f"{shown[0]} opens as its JSON, "
                f"{len(events)} events with the NACK and the ACK after it")

    def step_cli(self):
        admin = f"http://127.0.0.1:{self.admin_port}"
        table = subprocess.run([self.server_bin, "status", "--admin", admin], capture_output=True,
                               text=True, timeout=20, check=True).stdout
        lines = table.splitlines()
        if not lines[0].startswith("NODE") or "CLUSTER" not in lines[0]:
            raise interop.StepFailed(f"no header: {table}")
        grpc_line = next((l for l in lines if l.startswith(GRPC_NODE)), "")
        stuck_line = next((l for l in lines if l.startswith(STUCK_NODE)), "")
        if "SYNCED" not in grpc_line or "PENDING" not in stuck_line:
            raise interop.StepFailed(f"unexpected table:\n{table}")
        one = subprocess.run([self.server_bin, "status", "--admin", admin, "--node", GRPC_NODE],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        if GRPC_NODE not in one or "SYNCED" not in one:
            raise interop.StepFailed(f"unexpected --node output:\n{one}")
        data = json.loads(subprocess.run([self.server_bin, "status", "--admin", admin, "-o", "json"],
                                         capture_output=True, text=True, timeout=20, check=True).stdout)
        if data["total"] != len(data["rows"]) or SCRIPT_NODE not in [r["node_id"] for r in data["rows"]]:
            raise interop.StepFailed(f"unexpected JSON: {data}")
        return f"table of {len(lines) - 1} rows, --node and -o json as expected"

    def step_panels(self):
        refused = self.status()["config"]["reloads_error"]
        interop.write_atomically(self.config_path, "resources: [ {<script>window.__xss=3</script>\n")
        self.poll_api("the refused file", lambda: self.status()["config"]["reloads_error"] > refused)
        api_error = json.loads(self.http_get("/ui/api/config")[1])["history"][0]["error"]
        self.driver.get(self.base() + "ui?panel=config")
        shown = self.wait_page("the refused reload", lambda: self.js("""
            const cell = document.querySelector('#p-body .error-text');
            return cell ? cell.textContent : null;"""))
        if shown != api_error:
            raise interop.StepFailed(f"the panel shows {shown!r}, the API {api_error!r}")
        if self.js("return window.__xss === undefined && !document.querySelector('#p-body script');") is not True:
            raise interop.StepFailed("markup from the error text ran or reached the page as HTML")
        loads = self.status()["config"]["loads"]
        interop.write_atomically(self.config_path, interop.render_config(self.port_a))
        self.wait_loads(loads, stale_error=self.status()["config"]["error"])
        self.driver.get(self.base() + "ui?panel=ack")
        bars = self.wait_page("the ACK latency chart", lambda: self.js(
            "return Array.from(document.querySelectorAll('#p-body svg.chart rect.bar')).filter(r => +r.getAttribute('width') > 0).length;"))
        return f"the refusal shown as text ({len(shown)} bytes), ACK latency chart with {bars} non-empty bucket(s)"


def write_config(test, lb_policy="ROUND_ROBIN"):
    loads = test.status()["config"]["loads"]
    interop.write_atomically(test.config_path, interop.render_config(test.port_a, lb_policy=lb_policy))
    test.wait_loads(loads)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", nargs="?", default=os.path.join(REPO, "target", "debug", "xds-file-server"))
    parser.add_argument("--screenshot", help="save a PNG of the page with NACKED, PENDING and SYNCED rows")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (config, server log)")
    args = parser.parse_args()
    server_bin = os.path.abspath(args.server)
    screenshot = os.path.abspath(args.screenshot) if args.screenshot else None
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"]:
        if not os.access(tool, os.X_OK):
            print(f"FAIL started: no {tool} (apt-get install -y chromium chromium-driver)")
            return 1

    grpc_port = interop.free_port()
    os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = json.dumps({
        "xds_servers": [{"server_uri": f"127.0.0.1:{grpc_port}", "channel_creds": [{"type": "insecure"}],
                         "server_features": ["xds_v3"]}],
        "node": {"id": GRPC_NODE, "cluster": "console"},
    })
    for var in ("grpc_proxy", "https_proxy", "http_proxy", "all_proxy"):
        os.environ.pop(var, None)
        os.environ.pop(var.upper(), None)
    sys.stdout.reconfigure(line_buffering=True)
    import grpc

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = tempfile.mkdtemp(prefix="xds-console-")
    test = ConsoleTest(grpc, server_bin, workdir, grpc_port, screenshot)
    passed = failed = 0
    try:
        for name in STEPS:
            if failed:
                print(f"FAIL {name}: skipped (an earlier step failed)")
                failed += 1
                continue
            t0 = time.monotonic()
            try:
                detail = getattr(test, "step_" + name)()
                print(f"PASS {name}: {detail} [{time.monotonic() - t0:.1f}s]")
                passed += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported the same way
                failed += 1
                reason = str(e) if isinstance(e, interop.StepFailed) else "".join(
                    traceback.format_exception(type(e), e, e.__traceback__)).strip()
                print(f"FAIL {name}: {reason} [{time.monotonic() - t0:.1f}s]")
                print("  last lines of the server's log:")
                print(test.server_log_tail())
    finally:
        test.stop()
        if args.keep or failed:
            print(f"(config and server log kept in {workdir})")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
