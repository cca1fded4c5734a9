"""Shared helpers of the deploy tests: the repository's deploy files, the
metric names docs/metrics.md documents and the dashboard uses, and tools
(promtool, prometheus, docker-compose) that must be installed."""

import json
import pathlib
import re
import shutil
import sys

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from server_process import REPO  # noqa: E402

DEPLOY = REPO / "deploy"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def tool(name):
    """The path of a command the test needs; fails (not skips) without it:
    the test command installs it (scripts/install-deps.sh)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"'{name}' not found: run scripts/install-deps.sh")
    return path


def load_yaml_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def readme_metrics():
    """{name: type} from the metrics table of docs/metrics.md."""
    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(tdock_[a-z0-9_]+)` \| (\w+) \|", text, re.M)
    assert rows, "docs/metrics.md has no metrics table"
    return dict(rows)


def series_family(name, documented):
    """The documented family a series name belongs to (a histogram's
    _bucket/_sum/_count map to the histogram), or the name itself."""
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[:-len(suffix)]
        if name.endswith(suffix) and documented.get(base) == "histogram":
            return base
    return name


def dashboard():
    with open(DEPLOY / "grafana" / "tdock-dashboard.json", encoding="utf-8") as f:
        return json.load(f)


def dashboard_exprs(board):
    """Every PromQL expression of the dashboard: panel targets and query
    variables."""
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            exprs.append(v["query"]["query"])
    return exprs


def metric_names_in(expr):
    return set(re.findall(r"\b(tdock_[a-z0-9_]+)\b", expr))
