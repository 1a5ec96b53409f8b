#!/usr/bin/env python3
"""Interop test: a real proxyless gRPC client (grpcio) against xds-file-server.

The client dials ``xds:///demo-service``; xds-file-server serves the Listener, RouteConfiguration,
Cluster and ClusterLoadAssignment from a YAML file that this script rewrites while it runs:

  1. started    the server starts on free ports and answers /healthz
  2. routed     RPCs reach backend A (the only endpoint)
  2b. load      the Cluster's ``lrs_server: {self: {}}`` makes the client report its load to the
                server over LRS: /status counts those RPCs per cluster and locality within the
                reporting interval, and /metrics shows them
  3. updated    the endpoint moves to backend B: RPCs reach B
  4. nack       a Cluster that gRPC rejects: /status shows the client's NACK, RPCs still reach B
  5. recovered  a valid Cluster again: the NACK clears, the client ACKs the version sent
  6. bad-config a YAML syntax error: /status shows config.error, serving goes on; then restored
  7. federation a second target, ``xds://mesh.example/fed-service``, resolved through the bootstrap's
                ``authorities`` (gRPC's xDS federation, proposal A47): every resource of it has an
                ``xdstp://`` name, the Listener's context parameters in another order in the file
                than in the client's template (rule C1: the same resource); RPCs reach backend A
                while the first target keeps reaching B
  8. missing    a target whose Listener does not exist, ``xds:///no-such-service``: the server
                answers the client's subscription with ``NOT_FOUND`` in ``resource_errors`` (TP3,
                rule C4; no client feature asks for it), its /status shows that error for the
                client, and the step prints how long grpcio takes to fail an RPC to the target.
                grpcio 1.85 does not read the field yet (gRPC A88): it fails after its 15 s
                does-not-exist timer; a client that reads it fails at once. The step passes either
                way, as long as the RPC fails and the first target keeps working.

Usage: grpc_xds_test.py [SERVER_BINARY]   (default: <repo>/target/debug/xds-file-server)
Prints one ``PASS step: ...`` / ``FAIL step: ...`` line per step and ends with
``N passed, M failed``; exits non-zero on any failure. Every wait is bounded.
"""

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
LISTENER_URL = "type.googleapis.com/envoy.config.listener.v3.Listener"
MISSING = "no-such-service"
# How long an RPC to a target with no Listener may take to fail: past grpcio's 15 s timer.
MISSING_WAIT = 40
NODE_ID = "interop-client"
STEPS = ["started", "routed", "load", "updated", "nack", "recovered", "bad-config", "federation",
         "missing"]

# How long each kind of wait may take, in seconds.
HEALTHZ_WAIT = 20
FIRST_ROUTE_WAIT = 30
UPDATE_WAIT = 15
STATUS_WAIT = 15
RPC_TIMEOUT = 2
STEADY_RPCS = 5  # RPCs that must all reach the expected backend once a step has converged
# Load reporting: the interval the server asks for (gRPC takes no less than 1 s), and the RPCs the
# load step makes before it waits for their report.
LRS_INTERVAL_MS = 1000
LOAD_RPCS = 20
CLUSTER = "demo-cluster"
LOCALITY = {"region": "local", "zone": "", "sub_zone": ""}
# Federation (step 7): the authority of the xdstp:// names, and the client's listener name
# template for it, with context parameters in sorted order (the file names them unsorted).
AUTHORITY = "mesh.example"
LISTENER_TEMPLATE = f"xdstp://{AUTHORITY}/envoy.config.listener.v3.Listener/%s?env=prod&zone=z1"


def xdstp(type_name, name, params=""):
    return f"xdstp://{AUTHORITY}/envoy.config.{type_name}/{name}{params}"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_target(listener, route, cluster, eds_name, backend_port, lb_policy=None,
                  cluster_type="EDS", connect_timeout="1s", lrs=False):
    """One target's resources: an API listener, its route, one EDS cluster, one endpoint."""
    lb = f"\n    lb_policy: {lb_policy}" if lb_policy else ""
    # Report load to the server this cluster came from (gRPC's xds_cluster_impl policy).
    lrs_server = "\n    lrs_server: { self: {} }" if lrs else ""
    # An EDS name other than the cluster's: an xdstp:// one must name its own type (rule C1).
    service_name = f"\n      service_name: {eds_name}" if eds_name != cluster else ""
    return f"""\
  - "@type": type.googleapis.com/envoy.config.listener.v3.Listener
    name: {listener}
    api_listener:
      api_listener:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: demo
        rds:
          route_config_name: {route}
          config_source: {{ ads: {{}}, resource_api_version: V3 }}
        http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - "@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
    name: {route}
    virtual_hosts:
      - name: demo
        domains: ["*"]
        routes:
          - match: {{ prefix: "" }}
            route: {{ cluster: "{cluster}" }}
  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: {cluster}
    type: {cluster_type}
    connect_timeout: {connect_timeout}{lb}{lrs_server}
    eds_cluster_config:
      eds_config: {{ ads: {{}}, resource_api_version: V3 }}{service_name}
  - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
    cluster_name: {eds_name}
    endpoints:
      - locality: {{ region: local }}
        load_balancing_weight: 1
        lb_endpoints:
          - endpoint:
              address:
                socket_address: {{ address: 127.0.0.1, port_value: {backend_port} }}
"""


def render_federated(backend_port):
    """The resources of xds://mesh.example/fed-service, every one named xdstp://mesh.example/..."""
    return render_target(
        # Context parameters out of order: whether the client sends them as its template has
        # them or sorted, only the server's normalization (rule C1) makes them one name.
        listener=xdstp("listener.v3.Listener", "fed-service", "?zone=z1&env=prod"),
        route=xdstp("route.v3.RouteConfiguration", "fed-route"),
        cluster=xdstp("cluster.v3.Cluster", "fed-cluster"),
        eds_name=xdstp("endpoint.v3.ClusterLoadAssignment", "fed-cluster"),
        backend_port=backend_port,
    )


def render_config(backend_port, lb_policy="ROUND_ROBIN", cluster_type="EDS", connect_timeout="1s"):
    """The configuration file: one API listener, its route, one EDS cluster, one endpoint."""
    return "# Written by examples/interop/grpc_xds_test.py\nresources:\n" + render_target(
        "demo-service", "demo-route", CLUSTER, CLUSTER, backend_port, lb_policy=lb_policy,
        cluster_type=cluster_type, connect_timeout=connect_timeout, lrs=True)


def write_atomically(path, text):
    """Writes a temp file beside `path`, then renames it over `path`: the server never reads half."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".config-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class StepFailed(Exception):
    pass


class Test:
    def __init__(self, grpc, server_bin, workdir, grpc_port):
        self.grpc = grpc
        self.server_bin = server_bin
        self.workdir = workdir
        self.config_path = os.path.join(workdir, "config.yaml")
        self.log_path = os.path.join(workdir, "server.log")
        self.grpc_port = grpc_port
        self.http_port = free_port()
        self.admin_port = free_port()
        self.backends = {}  # name -> (server, port)
        self.server = None
        self.log_file = None
        self.channel = None
        self.rpc = None
        self.ok_rpcs = 0  # RPCs that returned a reply: what the client's load reports must count

    # --- processes --------------------------------------------------------------------------

    def start_backend(self, name):
        grpc = self.grpc
        from concurrent import futures

        reply = f"backend-{name}".encode()
        handler = grpc.method_handlers_generic_handler(
            "demo.Echo", {"Who": grpc.unary_unary_rpc_method_handler(lambda req, ctx: reply)}
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.backends[name] = (server, port)
        return port

    def start_server(self):
        self.log_file = open(self.log_path, "wb")
        env = dict(os.environ, NO_COLOR="1")
        self.server = subprocess.Popen(
            [
                self.server_bin,
                "--config", self.config_path,
                "--grpc-addr", f"127.0.0.1:{self.grpc_port}",
                "--http-addr", f"127.0.0.1:{self.http_port}",
                "--admin-addr", f"127.0.0.1:{self.admin_port}",
                "--lrs-interval-ms", str(LRS_INTERVAL_MS),
                "--log", "info",
            ],
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )

    def stop(self):
        if self.channel is not None:
            self.channel.close()
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(timeout=5)
        if self.log_file is not None:
            self.log_file.close()
        for server, _ in self.backends.values():
            server.stop(grace=None)

    def server_log_tail(self, lines=25):
        try:
            with open(self.log_path, "rb") as f:
                tail = collections.deque(f, maxlen=lines)
        except OSError as e:
            return f"    (no server log: {e})"
        return "".join("    | " + l.decode("utf-8", "replace") for l in tail).rstrip()

    def check_server_alive(self):
        if self.server is not None and self.server.poll() is not None:
            raise StepFailed(f"xds-file-server exited with status {self.server.returncode}")

    # --- HTTP -------------------------------------------------------------------------------

    # Loopback only: never through an http_proxy from the environment.
    _opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def http_get(self, path, timeout=2):
        url = f"http://127.0.0.1:{self.admin_port}{path}"
        with self._opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()

    def status(self):
        _, body = self.http_get("/status")
        return json.loads(body)

    def cluster_status(self, status):
        """The Cluster type's status on the client's newest stream (None if not subscribed yet)."""
        streams = [s for s in status.get("streams", []) if s.get("node_id") == NODE_ID]
        if not streams:
            return None
        stream = max(streams, key=lambda s: s.get("stream", 0))
        return stream.get("types", {}).get(CLUSTER_URL)

    # --- RPCs -------------------------------------------------------------------------------

    def call(self):
        """One RPC through xds:///demo-service: the backend's reply, or raises grpc.RpcError."""
        reply = self.rpc(b"", timeout=RPC_TIMEOUT).decode()
        self.ok_rpcs += 1
        return reply

    def call_until(self, expected, wait):
        """RPCs until one reaches `expected`, for at most `wait` seconds; returns how many it took."""
        deadline = time.monotonic() + wait
        tries, last = 0, None
        while time.monotonic() < deadline:
            self.check_server_alive()
            tries += 1
            try:
                got = self.call()
                if got == expected:
                    return tries
                last = f"reply {got!r}"
            except self.grpc.RpcError as e:
                last = f"{e.code().name}: {e.details()}"
            time.sleep(0.1)
        raise StepFailed(f"no RPC reached {expected} within {wait}s ({tries} tries; last: {last})")

    def expect_steady(self, expected, count=STEADY_RPCS):
        """`count` RPCs in a row that all reach `expected`."""
        for i in range(count):
            try:
                got = self.call()
            except self.grpc.RpcError as e:
                raise StepFailed(f"RPC {i + 1}/{count} failed: {e.code().name}: {e.details()}")
            if got != expected:
                raise StepFailed(f"RPC {i + 1}/{count} reached {got}, expected {expected}")

    def wait_loads(self, before, wait=STATUS_WAIT, stale_error=None):
        """Waits until the server has loaded the config more times than `before`; fails early if
        it reports an error (other than `stale_error`, the one from before the rewrite)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.check_server_alive()
            config = self.status().get("config", {})
            if config.get("loads", 0) > before:
                return config
            if config.get("error") and config["error"] != stale_error:
                raise StepFailed(f"the server rejected the config: {config['error']}")
            time.sleep(0.1)
        raise StepFailed(f"the server did not reload the config within {wait}s")

    def poll_status(self, what, predicate, wait=STATUS_WAIT, during=None):
        """Polls /status until predicate(status) is truthy; runs during() on every round."""
        deadline = time.monotonic() + wait
        last = None
        while time.monotonic() < deadline:
            self.check_server_alive()
            last = self.status()
            found = predicate(last)
            if found:
                return found
            if during is not None:
                during()
            time.sleep(0.2)
        shown = json.dumps(self.cluster_status(last) if last else None)
        raise StepFailed(f"{what} not seen within {wait}s; Cluster status: {shown}; config: {json.dumps(last.get('config') if last else None)}")

    # --- steps ------------------------------------------------------------------------------

    def step_started(self):
        port_a = self.start_backend("A")
        port_b = self.start_backend("B")
        self.port_a, self.port_b = port_a, port_b
        write_atomically(self.config_path, render_config(port_a))
        self.start_server()
        deadline = time.monotonic() + HEALTHZ_WAIT
        last = None
        while time.monotonic() < deadline:
            self.check_server_alive()
            try:
                code, body = self.http_get("/healthz", timeout=1)
                if code == 200:
                    break
                last = f"HTTP {code}"
            except OSError as e:
                last = str(e)
            time.sleep(0.1)
        else:
            raise StepFailed(f"/healthz did not answer within {HEALTHZ_WAIT}s (last: {last})")
        config = self.status().get("config", {})
        if config.get("error") or config.get("loads", 0) < 1:
            raise StepFailed(f"the initial config did not load: {json.dumps(config)}")
        self.channel = self.grpc.insecure_channel("xds:///demo-service",
                                                  options=[("grpc.enable_http_proxy", 0)])
        self.rpc = self.channel.unary_unary("/demo.Echo/Who")
        return (f"server up (gRPC :{self.grpc_port}, HTTP :{self.http_port}, admin :{self.admin_port}), "
                f"backends A :{port_a}, B :{port_b}")

    def step_routed(self):
        t0 = time.monotonic()
        tries = self.call_until("backend-A", FIRST_ROUTE_WAIT)
        took = time.monotonic() - t0
        self.expect_steady("backend-A")
        cluster = self.cluster_status(self.status())
        acked = cluster and cluster.get("acked_version")
        if not acked:
            raise StepFailed(f"RPCs work but /status shows no ACKed Cluster: {json.dumps(cluster)}")
        return f"xds:///demo-service reached backend-A after {took:.1f}s ({tries} tries); Cluster acked {acked}"

    def locality_load(self, status):
        """The server's view of demo-cluster's load in the backends' locality (None if absent)."""
        cluster = status.get("load", {}).get("clusters", {}).get(CLUSTER)
        for loc in (cluster or {}).get("localities", []):
            if all(loc.get(k) == v for k, v in LOCALITY.items()):
                return loc
        return None

    def metric(self, text, name, labels=None):
        """The value of `name{labels}` in a Prometheus text page (None if absent)."""
        want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "") + " "
        for line in text.splitlines():
            if line.startswith(want):
                return int(line[len(want):])
        return None

    def step_load(self):
        self.expect_steady("backend-A", count=LOAD_RPCS)
        expected = self.ok_rpcs
        t0 = time.monotonic()
        # Every RPC so far went to the one locality; the client reports every interval, so the
        # server's window must count them all (and nothing more) within a few intervals.
        wait = 3 * LRS_INTERVAL_MS / 1000 + 2

        def counted(status):
            loc = self.locality_load(status)
            return loc if loc and loc.get("succeeded") == expected else None

        try:
            loc = self.poll_status(f"{expected} RPCs in the load of {CLUSTER}", counted, wait=wait)
        except StepFailed:
            raise StepFailed(f"the server's load view did not count the {expected} RPCs within "
                             f"{wait}s: {json.dumps(self.status().get('load'))}")
        took = time.monotonic() - t0
        if loc.get("issued") != expected or loc.get("errors") != 0:
            raise StepFailed(f"the locality's load is not {expected} issued, 0 errors: {json.dumps(loc)}")
        # /status pages the load view: `?node=` counts that node's reporting streams.
        _, body = self.http_get(f"/status?node={NODE_ID}")
        if not json.loads(body).get("load", {}).get("node_streams"):
            raise StepFailed(f"the load view has no stream of node {NODE_ID}")
        _, body = self.http_get("/metrics")
        text = body.decode()
        labels = {"cluster": CLUSTER, "locality": "local//"}
        got = {r: self.metric(text, "xds_lrs_window_requests", dict(labels, result=r))
               for r in ("issued", "succeeded", "errors")}
        if got != {"issued": expected, "succeeded": expected, "errors": 0}:
            raise StepFailed(f"/metrics xds_lrs_window_requests for {labels}: {got}")
        reports = self.metric(text, "xds_lrs_reports_total")
        return (f"{expected} RPCs reported over LRS and counted in {CLUSTER} / region 'local' "
                f"{took:.1f}s after the last one ({reports} reports so far); /metrics agrees")

    def step_updated(self):
        loads = self.status()["config"]["loads"]
        t0 = time.monotonic()
        write_atomically(self.config_path, render_config(self.port_b))
        self.wait_loads(loads)
        self.call_until("backend-B", UPDATE_WAIT)
        took = time.monotonic() - t0
        self.expect_steady("backend-B")
        return f"endpoint moved to backend-B; RPCs followed within {took:.1f}s"

    def step_nack(self):
        before = self.cluster_status(self.status()) or {}
        good = before.get("acked_version")
        loads = self.status()["config"]["loads"]
        # Envoy accepts MAGLEV; gRPC has no Maglev balancer and must reject the Cluster.
        write_atomically(self.config_path, render_config(self.port_b, lb_policy="MAGLEV"))
        self.wait_loads(loads)
        rpcs = [0]

        def keep_serving():
            self.expect_steady("backend-B", count=1)
            rpcs[0] += 1

        def nacked(status):
            c = self.cluster_status(status)
            nack = c and c.get("nack")
            return (c, nack) if nack and nack.get("error") else None

        cluster, nack = self.poll_status("a NACK of the Cluster", nacked, during=keep_serving)
        if good and cluster.get("acked_version") != good:
            raise StepFailed(f"acked_version moved from {good} to {cluster.get('acked_version')} despite the NACK")
        if cluster.get("sent_version") == good:
            raise StepFailed(f"the rejected Cluster was not sent as a new version: {json.dumps(cluster)}")
        self.expect_steady("backend-B")
        self.nacked_version = cluster.get("sent_version")
        error = " ".join(nack["error"].split())
        if len(error) > 160:
            error = error[:157] + "..."
        return (f"client NACKed version {self.nacked_version} (kept {nack.get('version')!r}): {error!r}; "
                f"{rpcs[0] + STEADY_RPCS} RPCs meanwhile all reached backend-B")

    def step_recovered(self):
        loads = self.status()["config"]["loads"]
        write_atomically(self.config_path, render_config(self.port_b, connect_timeout="2s"))
        self.wait_loads(loads)

        def recovered(status):
            c = self.cluster_status(status)
            if not c or c.get("nack") is not None:
                return None
            sent, acked = c.get("sent_version"), c.get("acked_version")
            if sent and acked == sent and sent != self.nacked_version:
                return c
            return None

        cluster = self.poll_status("the NACK cleared and the new Cluster ACKed", recovered,
                                   during=lambda: self.expect_steady("backend-B", count=1))
        self.expect_steady("backend-B")
        return f"nack cleared, client ACKed version {cluster['acked_version']}; RPCs reach backend-B"

    def step_bad_config(self):
        config = self.status()["config"]
        loads = config["loads"]
        good_text = render_config(self.port_b, connect_timeout="2s")
        write_atomically(self.config_path, "resources:\n  - [unclosed\n    name: {oops\n")

        def rejected(status):
            c = status.get("config", {})
            return c.get("error") or None

        error = self.poll_status("config.error", rejected,
                                 during=lambda: self.expect_steady("backend-B", count=1))
        if self.status()["config"].get("loads") != loads:
            raise StepFailed("the invalid config counted as a load")
        self.expect_steady("backend-B")
        cluster = self.cluster_status(self.status())
        if not cluster or cluster.get("nack") is not None:
            raise StepFailed(f"the Cluster status changed: {json.dumps(cluster)}")
        write_atomically(self.config_path, good_text)
        self.wait_loads(loads, stale_error=error)

        def cleared(status):
            return status.get("config", {}).get("error") is None

        self.poll_status("config.error cleared", cleared)
        self.expect_steady("backend-B")
        error = " ".join(error.split())
        if len(error) > 120:
            error = error[:117] + "..."
        return f"invalid YAML reported ({error!r}) while RPCs kept reaching backend-B; restored, error cleared"


    def step_federation(self):
        write_atomically(self.config_path, render_config(self.port_b, connect_timeout="2s")
                         + render_federated(self.port_a))
        channel = self.grpc.insecure_channel(f"xds://{AUTHORITY}/fed-service",
                                             options=[("grpc.enable_http_proxy", 0)])
        try:
            rpc = channel.unary_unary("/demo.Echo/Who")
            deadline = time.monotonic() + FIRST_ROUTE_WAIT
            tries, last = 0, None
            while time.monotonic() < deadline:
                self.check_server_alive()
                tries += 1
                try:
                    got = rpc(b"", timeout=RPC_TIMEOUT).decode()
                    if got == "backend-A":
                        break
                    last = f"reply {got!r}"
                except self.grpc.RpcError as e:
                    last = f"{e.code().name}: {e.details()}"
                time.sleep(0.1)
            else:
                raise StepFailed(f"xds://{AUTHORITY}/fed-service reached no backend-A within "
                                 f"{FIRST_ROUTE_WAIT}s ({tries} tries; last: {last})")
            for i in range(STEADY_RPCS):
                got = rpc(b"", timeout=RPC_TIMEOUT).decode()
                if got != "backend-A":
                    raise StepFailed(f"federated RPC {i + 1} reached {got}")
        finally:
            channel.close()
        self.expect_steady("backend-B")
        return (f"xds://{AUTHORITY}/fed-service (xdstp:// Listener, route, cluster and endpoints) "
                f"reached backend-A after {tries} tries; xds:///demo-service still reaches backend-B")

    def step_missing(self):
        channel = self.grpc.insecure_channel(f"xds:///{MISSING}",
                                             options=[("grpc.enable_http_proxy", 0)])

        def told(status):
            for stream in status.get("streams", []):
                if stream.get("node_id") != NODE_ID:
                    continue
                error = stream.get("types", {}).get(LISTENER_URL, {}).get("errors", {}).get(MISSING)
                if error:
                    return error
            return None

        try:
            rpc = channel.unary_unary("/demo.Echo/Who")
            t0 = time.monotonic()
            call = rpc.future(b"", timeout=MISSING_WAIT)
            # While the channel lives the client subscribes to the Listener, and the error stands.
            error = self.poll_status(f"a resource error for Listener {MISSING}", told)
            try:
                got = call.result().decode()
                raise StepFailed(f"an RPC to xds:///{MISSING} reached {got}")
            except self.grpc.RpcError as e:
                took = time.monotonic() - t0
                failure = f"{e.code().name}: {' '.join((e.details() or '').split())[:100]}"
                if e.code() == self.grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise StepFailed(f"the RPC to xds:///{MISSING} did not fail within "
                                     f"{MISSING_WAIT}s") from None
        finally:
            channel.close()
        if error.get("code") != 5:
            raise StepFailed(f"the client was told {json.dumps(error)}, not NOT_FOUND (5)")
        self.expect_steady("backend-B")
        print(f"  grpcio {self.grpc.__version__} took {took:.1f}s to fail an RPC to a target "
              f"whose Listener does not exist ({failure})")
        return (f"NOT_FOUND sent for Listener {MISSING}; grpcio failed the RPC after {took:.1f}s "
                f"({failure}); xds:///demo-service still reaches backend-B")

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", nargs="?", default=os.path.join(REPO, "target", "debug", "xds-file-server"),
                        help="the xds-file-server binary (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (config, server log)")
    args = parser.parse_args()
    server_bin = os.path.abspath(args.server)
    if not os.access(server_bin, os.X_OK):
        print(f"FAIL started: no executable at {server_bin} (cargo build -p xds-file-server)")
        print(f"0 passed, {len(STEPS)} failed")
        return 1

    # The xDS port must be in the bootstrap before grpc is imported.
    grpc_port = free_port()
    os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = json.dumps({
        "xds_servers": [{
            "server_uri": f"127.0.0.1:{grpc_port}",
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }],
        "node": {"id": NODE_ID, "cluster": "interop"},
        # Federation (step 7): names under this authority come from the same server.
        "authorities": {
            AUTHORITY: {
                "xds_servers": [{
                    "server_uri": f"127.0.0.1:{grpc_port}",
                    "channel_creds": [{"type": "insecure"}],
                    "server_features": ["xds_v3"],
                }],
                "client_listener_resource_name_template": LISTENER_TEMPLATE,
            },
        },
    })
    # Everything is on loopback: grpc must not send the xDS or the data channel through a proxy
    # from the environment (its no_proxy matching sees `demo-service`, not 127.0.0.1).
    for var in ("grpc_proxy", "https_proxy", "http_proxy", "all_proxy"):
        os.environ.pop(var, None)
        os.environ.pop(var.upper(), None)
    sys.stdout.reconfigure(line_buffering=True)  # keep our lines whole among grpc's stderr logs
    import grpc

    print(f"grpcio {grpc.__version__}, server {server_bin}")
    # A CI timeout's SIGTERM still runs the `finally` below that stops the server and backends.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = tempfile.mkdtemp(prefix="xds-interop-")
    test = Test(grpc, server_bin, workdir, grpc_port)
    passed = failed = 0
    started = time.monotonic()
    try:
        for name in STEPS:
            if failed:
                print(f"FAIL {name}: skipped (an earlier step failed)")
                failed += 1
                continue
            t0 = time.monotonic()
            try:
                detail = getattr(test, "step_" + name.replace("-", "_"))()
                print(f"PASS {name}: {detail} [{time.monotonic() - t0:.1f}s]")
                passed += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported the same way
                failed += 1
                reason = str(e) if isinstance(e, StepFailed) else "".join(
                    traceback.format_exception_only(type(e), e)).strip()
                print(f"FAIL {name}: {reason} [{time.monotonic() - t0:.1f}s]")
                print("  last lines of the server's log:")
                print(test.server_log_tail())
            sys.stdout.flush()
    finally:
        test.stop()
        if args.keep or failed:
            print(f"(config and server log kept in {workdir})")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"total time {time.monotonic() - started:.1f}s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
