"""End to end with a real Prometheus: tdock-server on loopback with traffic
from examples/grpo_pipeline.py, Prometheus (Debian's) scraping it with a
configuration derived from deploy/prometheus.yml, and queries through
Prometheus's HTTP API. Both processes are stopped by PID whatever happens."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import (DEPLOY, REPO, dashboard, dashboard_exprs, load_yaml_docs,
                      metric_names_in, readme_metrics, series_family, tool)
from server_process import drain, start_server, stop_server

DOCK = "e2e"
STEPS, PROMPTS, N, DP = 4, 8, 4, 2
ROWS = STEPS * PROMPTS * N
# The example's columns and roles (examples/grpo.yaml): it writes every
# column of every row and every role takes every row exactly once.
COLUMNS = {"prompt_ids", "response_ids", "rewards", "ref_log_prob",
           "old_log_prob", "advantages"}
CONSUMERS = {"rollout", "reward", "ref_logprob", "actor_logprob", "advantage",
             "actor_update"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Debian's prometheus on a free loopback port, scraping `target`
    (HOST:PORT) with deploy/prometheus.yml's tdock job, every 500 ms."""

    def __init__(self, tmp_path, target):
        (config,) = load_yaml_docs(DEPLOY / "prometheus.yml")
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "tdock"]
        job["static_configs"] = [{"targets": [target]}]
        job["scrape_interval"] = "500ms"
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(tmp_path / "prometheus.log", "w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={path}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address={self.url[len('http://'):]}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_for(lambda: self.get("/-/ready", raw=True), "Prometheus ready")

    def get(self, path, raw=False, **params):
        url = self.url + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read()
        except OSError:
            return None
        if raw:
            return body
        reply = json.loads(body)
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expr):
        """{frozenset(labels): value} of an instant query."""
        data = self.get("/api/v1/query", query=expr) or {"result": []}
        return {frozenset((k, v) for k, v in s["metric"].items()
                          if k not in ("instance", "job", "__name__")):
                float(s["value"][1]) for s in data["result"]}

    def wait_for(self, check, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                pytest.fail(f"prometheus exited {self.proc.returncode}:\n"
                            + self.log.read()[-3000:])
            result = check()
            if result:
                return result
            time.sleep(0.25)
        self.log.seek(0)
        pytest.fail(f"timed out waiting for {what}; prometheus log:\n"
                    + self.log.read()[-3000:])

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


@pytest.fixture
def server():
    proc, address = start_server()
    drain(proc)
    try:
        yield proc, address
    finally:
        stop_server(proc)


@pytest.fixture
def prometheus(tmp_path, server):
    proc, _ = server
    target = urllib.parse.urlsplit(proc.metrics_url).netloc
    prom = Prometheus(tmp_path, target)
    try:
        yield prom
    finally:
        prom.stop()


def by(label, series):
    return {dict(k)[label]: v for k, v in series.items()}


def test_prometheus_sees_what_the_example_wrote_and_read(server, prometheus):
    """While the GRPO example runs against the server, Prometheus scrapes
    it; afterwards the dock's written/handed-out counters in Prometheus equal
    the rows the example wrote per column and read per role, live-step
    ready/consumed series were scraped during the run, and every metric of
    the table of docs/metrics.md and of the dashboard is among the series Prometheus
    ingested."""
    _, address = server
    prometheus.wait_for(lambda: prometheus.query('up{job="tdock"}') ==
                        {frozenset(): 1.0}, "the first scrape")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    example = subprocess.run(
        [sys.executable, str(REPO / "examples" / "grpo_pipeline.py"),
         "--server", address, "--dock", DOCK, "--steps", str(STEPS),
         "--prompts", str(PROMPTS), "--n", str(N), "--dp", str(DP),
         "--time_scale", "0.5", "--keep_dock", "--quiet"],
        env=env, capture_output=True, text=True, timeout=300)
    assert example.returncode == 0, example.stdout + example.stderr

    sel = f'{{dock="{DOCK}"}}'
    written = prometheus.wait_for(
        lambda: (lambda s: s if len(s) == len(COLUMNS) and
                 set(s.values()) == {ROWS} else None)(
            by("column", prometheus.query(f"tdock_rows_written_total{sel}"))),
        "a scrape after the example")
    assert written == {c: ROWS for c in COLUMNS}
    handed = by("consumer", prometheus.query(f"tdock_rows_handed_out_total{sel}"))
    assert handed == {c: ROWS for c in CONSUMERS}

    # Live steps were scraped while the example ran: series of response_ids
    # readiness and reward's consumption per step, never above a step's rows.
    window = "[5m]"
    ready = prometheus.query(
        f'max_over_time(tdock_rows_ready{{dock="{DOCK}",column="response_ids"}}{window})')
    # (a step scraped only before its first response, then released between
    # two scrapes, has a series whose maximum is 0)
    assert ready and all(0 <= v <= PROMPTS * N for v in ready.values()), ready
    assert max(ready.values()) > 0, ready
    consumed = prometheus.query(
        f'max_over_time(tdock_rows_consumed{{dock="{DOCK}",consumer="reward"}}{window})')
    assert consumed and all(0 <= v <= PROMPTS * N for v in consumed.values())
    assert max(consumed.values()) > 0, consumed
    # Every step was released at the end.
    assert prometheus.query(f"tdock_steps_live{sel}") == {
        frozenset({("dock", DOCK)}): 0.0}
    # Balanced roles reported their rounds.
    imbalance = by("consumer", prometheus.query(
        f"tdock_last_round_rank_imbalance_ratio{sel}"))
    assert set(imbalance) == {"ref_logprob", "actor_logprob", "actor_update"}
    assert all(v >= 1.0 for v in imbalance.values())
    # The Python client's Gets are GetStream calls.
    gets = by("code", prometheus.query(
        'sum by (code) (tdock_requests_total{method="GetStream"})'))
    assert gets.get("OK", 0) > 0

    documented = readme_metrics()
    ingested = set(prometheus.get("/api/v1/label/__name__/values"))
    families = {series_family(n, documented) for n in ingested
                if n.startswith("tdock_")}
    assert set(documented) <= families, \
        f"documented but never exported: {set(documented) - families}"
    assert families <= set(documented), \
        f"exported but not in docs/metrics.md: {families - set(documented)}"
    for expr in dashboard_exprs(dashboard()):
        for name in metric_names_in(expr):
            assert name in ingested, f"dashboard queries {name}, never scraped"
