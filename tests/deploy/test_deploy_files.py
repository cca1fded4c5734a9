"""The deploy files are valid and agree with each other and with the server:
Prometheus's own checker, docker-compose's validator (no engine needed), the
dashboard against docs/metrics.md, the Kubernetes manifests' cross
references, the Dockerfile's promises, and the dock config against a real
tdock-server."""

import re
import subprocess
import sys
import urllib.request

import pytest
import yaml

import tdock
from conftest import (DEPLOY, REPO, dashboard, dashboard_exprs, load_yaml_docs,
                      metric_names_in, readme_metrics, series_family, tool)
from server_process import drain, start_server, stop_server

K8S = DEPLOY / "k8s"


def run(*cmd):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_promtool_accepts_prometheus_config():
    """promtool check config passes on deploy/prometheus.yml, and it scrapes
    the compose service's metrics port."""
    r = run(tool("promtool"), "check", "config", str(DEPLOY / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    (config,) = load_yaml_docs(DEPLOY / "prometheus.yml")
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "tdock"]
    assert job["static_configs"][0]["targets"] == ["tdock-server:9464"]


def test_docker_compose_config_is_valid():
    """docker-compose validates docker-compose.yml without an engine."""
    r = run(tool("docker-compose"), "-f", "docker-compose.yml", "config", "-q")
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_services_fit_together():
    """Every bind-mounted file exists; the server listens where Prometheus
    and the example look for it; the example waits for a healthy server;
    the server's metrics port is not published on the host."""
    (compose,) = load_yaml_docs(REPO / "docker-compose.yml")
    services = compose["services"]
    assert set(services) == {"tdock-server", "prometheus", "grafana", "example"}
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
    server = services["tdock-server"]
    assert "--metrics_listen=0.0.0.0:9464" in server["command"]
    assert "--listen=0.0.0.0:50051" in server["command"]
    assert not any("9464" in p for p in server.get("ports", [])), \
        "the metrics port must stay inside the compose network"
    assert all(p.startswith("127.0.0.1:") for s in services.values()
               for p in s.get("ports", [])), "published ports bind loopback"
    example = services["example"]
    assert example["depends_on"]["tdock-server"]["condition"] == "service_healthy"
    cmd = example["command"]
    assert cmd[cmd.index("--server") + 1] == "tdock-server:50051"
    assert cmd[cmd.index("--dock") + 1] != "grpo", \
        "the example's dock must not clash with deploy/docks.yaml's"


def test_grafana_provisioning_points_at_prometheus_and_dashboard():
    """The datasource has the uid the dashboard's variable defaults to and
    Prometheus's compose address; the dashboard provider reads the directory
    compose mounts the dashboard into."""
    (ds,) = load_yaml_docs(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    (source,) = ds["datasources"]
    assert source["uid"] == "prometheus" and source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    (dash,) = load_yaml_docs(DEPLOY / "grafana/provisioning/dashboards/tdock.yaml")
    path = dash["providers"][0]["options"]["path"]
    (compose,) = load_yaml_docs(REPO / "docker-compose.yml")
    mounts = [v.split(":")[1] for v in compose["services"]["grafana"]["volumes"]]
    assert f"{path}/tdock-dashboard.json" in mounts
    board = dashboard()
    (var,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert var["current"]["value"] == source["uid"]


def test_dashboard_is_generated_and_complete():
    """tdock-dashboard.json is deploy/grafana/dashboard.py's output; every
    panel has a title, a description and queries; ids are unique; the dock
    variable exists."""
    r = run(sys.executable, str(DEPLOY / "grafana" / "dashboard.py"), "--check")
    assert r.returncode == 0, r.stderr
    board = dashboard()
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 15
    for p in panels:
        assert p["title"] and p["description"] and p["targets"], p["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert "dock" in {v["name"] for v in board["templating"]["list"]}


def test_dashboard_uses_only_documented_metrics():
    """Every metric name in the dashboard's queries is in the table of docs/metrics.md
    (which the end-to-end test checks against what the server exports), and
    the dashboard covers the flows: ready, consumed, available, waiting,
    buffer, requests, balance."""
    documented = readme_metrics()
    used = set()
    for expr in dashboard_exprs(dashboard()):
        for name in metric_names_in(expr):
            family = series_family(name, documented)
            assert family in documented, f"dashboard uses undocumented {name}"
            used.add(family)
    for needed in ("tdock_rows_written_total", "tdock_rows_handed_out_total",
                   "tdock_rows_ready", "tdock_rows_consumed", "tdock_rows_available",
                   "tdock_get_wait_seconds", "tdock_arena_bytes_used",
                   "tdock_requests_total", "tdock_request_duration_seconds",
                   "tdock_last_round_rank_imbalance_ratio",
                   "tdock_last_round_padding_ratio"):
        assert needed in used, f"no panel shows {needed}"


def test_readme_metric_names_follow_prometheus_conventions():
    """Names are tdock_*; counters end in _total; units are base units."""
    for name, kind in readme_metrics().items():
        assert (kind == "counter") == name.endswith("_total"), name
        assert not re.search(r"_(ms|milliseconds|kb|mb|mib)(_|$)", name), name


def k8s_objects():
    (kustomization,) = load_yaml_docs(K8S / "kustomization.yaml")
    objects = {}
    for resource in kustomization["resources"]:
        for doc in load_yaml_docs(K8S / resource):
            objects[doc["kind"]] = doc
    return objects


def test_k8s_configmap_is_deploy_docks_yaml():
    """The ConfigMap's docks.yaml is deploy/docks.yaml, byte for byte."""
    cm = k8s_objects()["ConfigMap"]
    assert cm["data"]["docks.yaml"] == (DEPLOY / "docks.yaml").read_text(encoding="utf-8")


def test_k8s_manifests_reference_each_other():
    """Selectors match the pod labels; gRPC probes and the Service target
    the container's named ports; scrape annotations name the metrics port;
    --config lies under the ConfigMap's mount; the pod runs as the
    Dockerfile's non-root user; the NetworkPolicy limits the metrics port."""
    objs = k8s_objects()
    assert set(objs) == {"ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    dep = objs["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert objs["Service"]["spec"]["selector"].items() <= labels.items()
    assert objs["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"].items() \
        <= labels.items()
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9464}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["grpc"], probe
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    assert f"--metrics_listen=0.0.0.0:{ports['metrics']}" in c["args"]
    assert f"--listen=0.0.0.0:{ports['grpc']}" in c["args"]
    for p in objs["Service"]["spec"]["ports"]:
        assert p["targetPort"] in ports
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    (config,) = [a for a in c["args"] if a.startswith("--config=")]
    (mount,) = c["volumeMounts"]
    assert config == f"--config={mount['mountPath']}/docks.yaml"
    (volume,) = pod["spec"]["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["configMap"]["name"] == objs["ConfigMap"]["metadata"]["name"]
    user = re.search(r"^USER (\d+)", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert pod["spec"]["securityContext"]["runAsUser"] == int(user.group(1))
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    metrics_rules = [r for r in objs["NetworkPolicy"]["spec"]["ingress"]
                     if any(p["port"] == "metrics" for p in r["ports"])]
    assert metrics_rules and all(r.get("from") for r in metrics_rules)


def dockerfile_stages():
    """{stage name: [(instruction, arguments)]} with continuations joined."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    stages, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        if instr == "FROM":
            current = args.split(" AS ")[-1].strip()
            stages[current] = []
        stages[current].append((instr, args.strip()))
    return stages


def test_dockerfile_stages():
    """Multi-stage on Debian 12: the server image runs as a non-root user,
    exposes the gRPC and metrics ports, checks health with `tdockctl health`;
    every file copied from the context exists."""
    stages = dockerfile_stages()
    assert list(stages) == ["build", "server", "example"]
    assert stages["build"][0] == ("FROM", "debian:bookworm AS build")
    server = stages["server"]
    assert server[0][1].startswith("debian:bookworm")
    users = [a for i, a in server if i == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    assert ("EXPOSE", "50051 9464") in server
    (health,) = [a for i, a in server if i == "HEALTHCHECK"]
    assert '"tdockctl"' in health and '"health"' in health
    assert not any(i == "RUN" and "install-deps" in a for i, a in server), \
        "the runtime stage must not install the -dev packages"
    for stage in stages.values():
        for instr, args in stage:
            if instr == "COPY" and "--from=" not in args:
                for source in args.split()[:-1]:
                    assert (REPO / source).exists(), f"COPY {source}: not found"


def test_server_starts_with_deploy_docks_yaml():
    """The real tdock-server creates the docks of deploy/docks.yaml (the
    config compose, the image and the ConfigMap use) at start-up."""
    (spec,) = load_yaml_docs(DEPLOY / "docks.yaml")
    proc, address = start_server(f"--config={DEPLOY / 'docks.yaml'}")
    try:
        drain(proc)
        with tdock.Client(address, timeout=30.0) as client:
            docks = {d.name: d for d in client.list_docks()}
            assert set(docks) == {spec["name"]}
            status = client.dock(spec["name"]).status()
            assert status is not None
    finally:
        stop_server(proc)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in
                                        list(DEPLOY.rglob("*.yaml")) +
                                        list(DEPLOY.rglob("*.yml"))))
def test_yaml_files_parse(path):
    """Every YAML file under deploy/ parses."""
    with open(REPO / path, encoding="utf-8") as f:
        assert list(yaml.safe_load_all(f))


SHARDED = K8S / "sharded"


def sharded_objects():
    (kustomization,) = load_yaml_docs(SHARDED / "kustomization.yaml")
    objects = {}
    for resource in kustomization["resources"]:
        for doc in load_yaml_docs(SHARDED / resource):
            objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def _flag(args, name):
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return value


def test_k8s_sharded_manifests_reference_each_other():
    """deploy/k8s/sharded: the controller is a StatefulSet of one whose
    journal (--data_dir) is its volume claim and whose Service the shards'
    --controller names; the shards are a DaemonSet that takes its node's name
    and address from the downward API (--node, --advertise on the hostPort)
    and records its cells in a volume of the pod (--data_dir);
    selectors match the pods, probes and Services the named ports; the
    ConfigMap is deploy/docks.yaml."""
    objs = sharded_objects()
    assert set(objs) == {("ConfigMap", "tdock-docks"), ("StatefulSet", "tdock-controller"),
                         ("Service", "tdock-controller"), ("DaemonSet", "tdock-shard")}
    assert objs[("ConfigMap", "tdock-docks")]["data"]["docks.yaml"] == \
        (DEPLOY / "docks.yaml").read_text(encoding="utf-8")
    sts = objs[("StatefulSet", "tdock-controller")]
    service = objs[("Service", "tdock-controller")]
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    pod = sts["spec"]["template"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert "--role=controller" in c["args"]
    assert _flag(c["args"], "listen") == f"0.0.0.0:{ports['grpc']}"
    assert _flag(c["args"], "metrics_listen") == f"0.0.0.0:{ports['metrics']}"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert _flag(c["args"], "data_dir") == mounts[claim["metadata"]["name"]]
    assert _flag(c["args"], "config") == f"{mounts['docks']}/docks.yaml"
    for p in service["spec"]["ports"]:
        assert p["targetPort"] in ports
    grpc_port = [p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["grpc"], probe

    ds = objs[("DaemonSet", "tdock-shard")]
    pod = ds["spec"]["template"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (c,) = pod["spec"]["containers"]
    assert "--role=shard" in c["args"]
    assert _flag(c["args"], "controller") == f"{service['metadata']['name']}:{grpc_port}"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "HOST_IP": "status.hostIP"}
    (grpc,) = [p for p in c["ports"] if p["name"] == "grpc"]
    assert grpc["hostPort"] == grpc["containerPort"]
    assert _flag(c["args"], "listen") == f"0.0.0.0:{grpc['containerPort']}"
    assert _flag(c["args"], "node") == "$(NODE_NAME)"
    assert _flag(c["args"], "advertise") == f"$(HOST_IP):{grpc['hostPort']}"
    assert not any(a.startswith("--shard_id") for a in c["args"])  # from the node's name
    # Its cells recorded in a volume of the pod: a container restart keeps them.
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert _flag(c["args"], "data_dir") == mounts["cells"]
    assert "emptyDir" in volumes["cells"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == grpc["containerPort"], probe
    metrics = [p["containerPort"] for p in c["ports"] if p["name"] == "metrics"][0]
    assert int(pod["metadata"]["annotations"]["prometheus.io/port"]) == metrics


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_k8s_sharded_command_lines_run_as_local_processes(tmp_path, monkeypatch):
    """The manifests' own command lines, run here: the controller's with its
    config and journal paths and ports made local, two shards' with the
    downward API's values filled in (two node names, this host's address)
    and the controller's address for its Service's; a worker on each node
    puts rows through its node's shard and the docks of deploy/docks.yaml
    hand them back from both."""
    import numpy as np

    objs = sharded_objects()
    (controller_c,) = objs[("StatefulSet", "tdock-controller")]["spec"]["template"]["spec"][
        "containers"]
    (shard_c,) = objs[("DaemonSet", "tdock-shard")]["spec"]["template"]["spec"]["containers"]

    def local(args, replace):
        return [replace.get(a.split("=", 1)[0], a) if "=" in a else a for a in args]

    controller_args = local(controller_c["args"], {
        "--listen": "--listen=127.0.0.1:0",
        "--metrics_listen": "--metrics_listen=127.0.0.1:0",
        "--config": f"--config={DEPLOY / 'docks.yaml'}",
        "--data_dir": f"--data_dir={tmp_path / 'journal'}"})
    controller, address = start_server(*controller_args)
    drain(controller)
    procs = [controller]
    try:
        for node in ("node-a", "node-b"):
            port = _free_port()
            args = local(shard_c["args"], {
                "--controller": f"--controller={address}",
                "--listen": f"--listen=127.0.0.1:{port}",
                "--metrics_listen": "--metrics_listen=127.0.0.1:0",
                "--advertise": f"--advertise=127.0.0.1:{port}",
                "--data_dir": f"--data_dir={tmp_path / node}"})
            args = [a.replace("$(NODE_NAME)", node) for a in args]
            shard, _ = start_server(*args)
            drain(shard)
            procs.append(shard)
        (spec,) = load_yaml_docs(DEPLOY / "docks.yaml")
        with tdock.Client(address, timeout=30.0) as client:
            assert sorted(s.node for s in client.shards()) == ["node-a", "node-b"]
            dock = client.dock(spec["name"])
            n = spec["n_samples_per_prompt"]
            for group, node in enumerate(("node-a", "node-b")):
                monkeypatch.setenv("TDOCK_NODE", node)
                rows = list(range(group * n, (group + 1) * n))
                dock.put(0, rows, {"prompt_ids": [np.arange(3, dtype=np.int32)] * n,
                                   "response_ids": [np.arange(5, dtype=np.int32) + r
                                                    for r in rows]})
            monkeypatch.delenv("TDOCK_NODE")
            # Each worker's rows went to its node's shard.
            for shard in procs[1:]:
                text = urllib.request.urlopen(shard.metrics_url, timeout=10).read().decode()
                assert re.search(r'tdock_payload_bytes_total\{direction="in"\} [1-9]', text)
            got = {}
            for _ in range(2):
                b = dock.get("reward", wait=10, count=n)
                for i, row in enumerate(b.rows):
                    got[int(row)] = b.row("response_ids", i).tolist()
            assert got == {r: list(range(r, r + 5)) for r in range(2 * n)}
    finally:
        unclean = []
        for proc in reversed(procs):  # every one stopped, then the first bad exit
            try:
                stop_server(proc)
            except AssertionError as e:
                unclean.append(e)
        if unclean:
            raise unclean[0]
