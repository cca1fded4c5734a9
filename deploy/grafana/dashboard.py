#!/usr/bin/python3
"""Writes tdock-dashboard.json, the Grafana dashboard of tdock's metrics.

    /usr/bin/python3 deploy/grafana/dashboard.py          # rewrite the JSON
    /usr/bin/python3 deploy/grafana/dashboard.py --check  # exit 1 if stale

The dashboard is generated so that every panel has the same shape and the
tests can check it (tests/deploy: the JSON is this script's output, and it
names only metrics the server exports). Edit this file, not the JSON.
"""

import argparse
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "tdock-dashboard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
DOCK = 'dock=~"$dock"'
RATE = "$__rate_interval"


def panel(title, description, targets, *, unit="short", kind="timeseries",
          stack=False, min_zero=True, text_mode="value"):
    """A panel without its position; targets are (expr, legend) pairs."""
    defaults = {"unit": unit, "custom": {}}
    if kind == "timeseries":
        defaults["custom"] = {"lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never",
                              "stacking": {"mode": "normal" if stack else "none"}}
    if min_zero:
        defaults["min"] = 0
    return {
        "type": kind, "title": title, "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": ({"legend": {"displayMode": "table", "placement": "right",
                                "calcs": ["lastNotNull", "max"]},
                     "tooltip": {"mode": "multi", "sort": "desc"}}
                    if kind == "timeseries" else
                    {"reduceOptions": {"calcs": ["lastNotNull"]},
                     "colorMode": "none", "graphMode": "none",
                     "textMode": text_mode}),
        "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend,
                     "refId": chr(ord("A") + i)}
                    for i, (expr, legend) in enumerate(targets)],
    }


def quantiles(metric, by, labels):
    """p50 and p95 of a histogram by the given label."""
    return [(f"histogram_quantile({q}, sum by ({by}, le) "
             f"(rate({metric}_bucket{{{labels}}}[{RATE}])))",
             f"{{{{{by}}}}} p{int(q * 100)}") for q in (0.5, 0.95)]


ROWS = [
    ("Data flow: is rollout starving the trainer, is a consumer lagging?", [
        panel("Rows written per second, by column",
              "Cells written (rate of tdock_rows_written_total). The rollout "
              "columns (response_ids) set the pace; the training columns follow.",
              [(f"sum by (column) (rate(tdock_rows_written_total{{{DOCK}}}[{RATE}]))",
                "{{column}}")], unit="rows/s"),
        panel("Rows handed out per second, by consumer",
              "Rows each consumer took (rate of tdock_rows_handed_out_total). A "
              "consumer well below the rate at which its columns are written is "
              "lagging.",
              [(f"sum by (consumer) (rate(tdock_rows_handed_out_total{{{DOCK}}}[{RATE}]))",
                "{{consumer}}")], unit="rows/s"),
        panel("Rows ready, by column (live steps)",
              "Rows of live steps whose cell of the column is written.",
              [(f"sum by (column) (tdock_rows_ready{{{DOCK}}})", "{{column}}")]),
        panel("Rows consumed, by consumer (live steps)",
              "Rows of live steps handed out to the consumer.",
              [(f"sum by (consumer) (tdock_rows_consumed{{{DOCK}}})",
                "{{consumer}}")]),
        panel("Rows dropped per second, by reason",
              "Rows taken out of their steps (rate of tdock_rows_dropped_total): "
              "filtered (DAPO's groups whose rewards do not vary), failed "
              "rollouts, sealed (unwritten when the step was sealed), stale, "
              "expired, surplus, unused (past a group's declared size). A high "
              "failed rate points at the rollout side.",
              [(f"sum by (reason) (rate(tdock_rows_dropped_total{{{DOCK}}}[{RATE}]))",
                "{{reason}}")], unit="rows/s"),
        panel("Rows available, not yet taken, by consumer",
              "Rows whose columns are all ready but that the consumer has not "
              "taken. Growing: the consumer is the bottleneck. Near zero while "
              "its Gets wait: its producers are.",
              [(f"sum by (consumer) (tdock_rows_available{{{DOCK}}})",
                "{{consumer}}")]),
    ]),
    ("Waiting: the pipeline bubble", [
        panel("Get wait before data was ready, by consumer",
              "How long Gets that returned rows waited for them "
              "(tdock_get_wait_seconds). High for a training role: it is "
              "starved by the roles that write its columns.",
              quantiles("tdock_get_wait_seconds", "consumer", DOCK), unit="s"),
        panel("Time waiting per second, by consumer",
              "Seconds of Get waiting per second of wall time, summed over the "
              "consumer's ranks: 1 means one rank idle all the time.",
              [(f"sum by (consumer) (rate(tdock_get_wait_seconds_sum{{{DOCK}}}[{RATE}]))",
                "{{consumer}}")], unit="s"),
        panel("Parked calls",
              "Gets waiting for rows, by consumer; Puts waiting for a free step "
              "partition or memory (producers ahead of training by more than "
              "steps_in_flight).",
              [(f"sum by (consumer) (tdock_parked_gets{{{DOCK}}})",
                "Get {{consumer}}"),
               (f"sum(tdock_parked_puts{{{DOCK}}})", "Put")]),
    ]),
    ("Delivery: leased rows (consumers with lease_ms)", [
        panel("Rows in flight under a lease, by consumer",
              "Rows handed out and not yet acknowledged (tdock_rows_in_flight). "
              "Flat while the consumer's workers are busy; rows that stay in "
              "flight past lease_ms come back.",
              [(f"sum by (consumer) (tdock_rows_in_flight{{{DOCK}}})",
                "{{consumer}}")]),
        panel("Rows handed back per second, by consumer",
              "Rows of expired or nacked leases, handed out again "
              "(tdock_rows_returned_total). Non-zero: workers die, or take "
              "longer than lease_ms.",
              [(f"sum by (consumer) (rate(tdock_rows_returned_total{{{DOCK}}}[{RATE}]))",
                "{{consumer}}")], unit="rows/s"),
        panel("Lease expiries and nacks per second",
              "Leases that expired unacknowledged and leases handed back by "
              "Nack.",
              [(f"sum by (consumer) (rate(tdock_lease_expiries_total{{{DOCK}}}[{RATE}]))",
                "expired {{consumer}}"),
               (f"sum by (consumer) (rate(tdock_lease_nacks_total{{{DOCK}}}[{RATE}]))",
                "nacked {{consumer}}")], unit="ops"),
    ]),
    ("Versions and staleness (asynchronous RL)", [
        panel("Policy version",
              "The dock's current policy version, set by the trainer after each "
              "weight update (SetVersion).",
              [(f"max by (dock) (tdock_dock_version{{{DOCK}}})", "{{dock}}")]),
        panel("Staleness trained on, by consumer",
              "Median and 99th percentile of the staleness of rows handed out "
              "(the dock's version minus the row's, when claimed; "
              "tdock_handed_out_staleness). Rows without a version are not "
              "counted.",
              [(f"histogram_quantile(0.5, sum by (consumer, le) "
                f"(rate(tdock_handed_out_staleness_bucket{{{DOCK}}}[{RATE}])))",
                "p50 {{consumer}}"),
               (f"histogram_quantile(0.99, sum by (consumer, le) "
                f"(rate(tdock_handed_out_staleness_bucket{{{DOCK}}}[{RATE}])))",
                "p99 {{consumer}}")], unit="none"),
        panel("Producers waiting for admission",
              "Reservations waiting for a step that can train their rows within "
              "the staleness bound (tdock_parked_reservations), and the mean wait "
              "of those granted after waiting.",
              [(f"sum(tdock_parked_reservations{{{DOCK}}})", "waiting"),
               (f"sum(rate(tdock_admission_wait_seconds_total{{{DOCK}}}[{RATE}])) / "
                f"sum(rate(tdock_admission_waits_total{{{DOCK}}}[{RATE}]))", "mean wait (s)")]),
        panel("Rows past the bound per second, by consumer",
              "Rows a consumer's max_staleness passed over or dropped "
              "(tdock_rows_stale_total). Non-zero: rollout runs further ahead "
              "than the bound allows.",
              [(f"sum by (consumer) (rate(tdock_rows_stale_total{{{DOCK}}}[{RATE}]))",
                "{{consumer}}")], unit="rows/s"),
    ]),
    ("Buffer", [
        panel("Arena bytes",
              "Payload bytes held by live steps, bytes of arena chunks the "
              "dock's pool holds, and the memory limit (0: unlimited). Used "
              "near the limit: Puts park until a step is released.",
              [(f"sum(tdock_arena_bytes_used{{{DOCK}}})", "used"),
               (f"sum(tdock_arena_bytes_reserved{{{DOCK}}})", "reserved"),
               (f"sum(tdock_memory_limit_bytes{{{DOCK}}}) > 0", "limit")],
              unit="bytes"),
        panel("Steps live and the oldest live step",
              "Steps written to and not yet released, and the oldest of them. "
              "An oldest step that stops moving while others pile up: a step "
              "is not being released.",
              [(f"sum by (dock) (tdock_steps_live{{{DOCK}}})", "live {{dock}}"),
               (f"min by (dock) (tdock_oldest_live_step{{{DOCK}}})",
                "oldest {{dock}}")]),
    ]),
    ("Requests", [
        panel("Calls per second, by method",
              "Finished calls (tdock_requests_total).",
              [("sum by (method) (rate(tdock_requests_total[$__rate_interval]))",
                "{{method}}")], unit="reqps"),
        panel("Errors per second, by method and code",
              "Calls that ended with a status other than OK. DEADLINE_EXCEEDED: "
              "a client deadline shorter than the call (a Get whose wait ends "
              "without rows returns an empty batch, not an error); "
              "INVALID_ARGUMENT: a client bug.",
              [('sum by (method, code) (rate(tdock_requests_total{code!="OK"}'
                '[$__rate_interval]))', "{{method}} {{code}}")], unit="reqps"),
        panel("Latency, by method",
              "Call latency from arrival to status; a Get's includes its wait.",
              quantiles("tdock_request_duration_seconds", "method", ""),
              unit="s"),
        panel("Bytes per second, by method",
              "Request (in) and response (out) message bytes.",
              [("sum by (method) (rate(tdock_received_bytes_total[$__rate_interval]))",
                "in {{method}}"),
               ("sum by (method) (rate(tdock_sent_bytes_total[$__rate_interval]))",
                "out {{method}}")], unit="Bps"),
    ]),
    ("Balance", [
        panel("Rank imbalance, last round, by consumer",
              "The heaviest rank's cost over the mean in the consumer's last "
              "round (1 is perfect). Balanced consumers only.",
              [(f"tdock_last_round_rank_imbalance_ratio{{{DOCK}}}",
                "{{consumer}}")], min_zero=False),
        panel("Rank imbalance, p50 and p95 over rounds",
              "From the histogram of every round's imbalance.",
              quantiles("tdock_round_rank_imbalance_ratio", "consumer", DOCK),
              min_zero=False),
        panel("Padding ratio, last batch, by consumer",
              "Padded tokens over real tokens in the consumer's last batch with "
              "micro-batches (1 is no padding).",
              [(f"tdock_last_round_padding_ratio{{{DOCK}}}", "{{consumer}}")]),
        panel("Padding ratio, p50 and p95 over batches",
              "From the histogram of every batch's padding ratio.",
              quantiles("tdock_round_padding_ratio", "consumer", DOCK)),
    ]),
    ("Scale-out: a controller and its shards (docs/scale-out.md)", [
        panel("Payload bytes per second, by server",
              "Cell bytes each server took in (Puts) and sent out (Gets, Reads, "
              "a shard's ReadCells). A controller's stay at 0: it carries cell "
              "locations only, counted under Requests' bytes.",
              [("sum by (instance) (rate(tdock_payload_bytes_total"
                '{direction="in"}[$__rate_interval]))', "in {{instance}}"),
               ("sum by (instance) (rate(tdock_payload_bytes_total"
                '{direction="out"}[$__rate_interval]))', "out {{instance}}")],
              unit="Bps"),
        panel("Puts waiting at a shard per second, by reason",
              "Puts that waited at their shard: admission (their step not yet "
              "admitted, as the controller's step feed says) or memory "
              "(--shard_memory_limit_mb). Steady admission waits: rollout runs "
              "ahead of training.",
              [("sum by (instance, reason) (rate(tdock_shard_put_waits_total"
                "[$__rate_interval]))", "{{reason}} {{instance}}")], unit="reqps"),
        panel("Step feed up, by shard",
              "1 while a shard follows its controller's step feed; 0: it asks "
              "every second and Puts wait at the controller.",
              [("tdock_shard_step_feed_up", "{{instance}}")]),
        panel("Shards declared lost",
              "Shards the controller declared lost (not heard from for "
              "--shard_lost_after_ms); their rows were dropped as lost.",
              [("sum(tdock_shards_lost_total)", "lost")], kind="stat"),
    ]),
    ("Process", [
        panel("Resident memory", "tdock-server's resident set size.",
              [("tdock_process_resident_memory_bytes", "{{instance}}")],
              unit="bytes"),
        panel("CPU", "CPU seconds per second (1 = one core busy).",
              [("rate(tdock_process_cpu_seconds_total[$__rate_interval])",
                "{{instance}}")], unit="percentunit"),
        panel("Open file descriptors", "Sockets and files the server holds.",
              [("tdock_process_open_fds", "{{instance}}")]),
        panel("Uptime", "Seconds since the server started.",
              [("tdock_uptime_seconds", "{{instance}}")], kind="stat", unit="s"),
        panel("Version", "The server's build (tdock_build_info).",
              [("tdock_build_info", "{{version}}")], kind="stat",
              text_mode="name"),
    ]),
]


def dashboard():
    panels, y, next_id = [], 0, 1
    for title, row in ROWS:
        panels.append({"type": "row", "title": title, "collapsed": False,
                       "id": next_id, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                       "panels": []})
        next_id, y = next_id + 1, y + 1
        width = 24 // min(len(row), 3)
        for i, p in enumerate(row):
            x = (i % 3) * width
            if i and i % 3 == 0:
                y += 8
            panels.append({"id": next_id,
                           "gridPos": {"h": 8, "w": width, "x": x, "y": y}, **p})
            next_id += 1
        y += 8
    variables = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource",
         "query": "prometheus", "current": {"text": "Prometheus",
                                            "value": "prometheus"}},
        {"name": "dock", "label": "dock", "type": "query", "datasource": DS,
         "query": {"query": "label_values(tdock_steps_live, dock)",
                   "refId": "dock"},
         "definition": "label_values(tdock_steps_live, dock)",
         "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
         "current": {"text": "All", "value": "$__all"}, "sort": 1},
    ]
    return {
        "uid": "tdock", "title": "tdock", "tags": ["tdock", "rl"],
        "description": "tdock transfer dock: data flow, waiting, buffer, "
                       "requests, balance (docs/metrics.md)",
        "editable": True, "graphTooltip": 1, "refresh": "10s",
        "schemaVersion": 39, "version": 1, "time": {"from": "now-30m",
                                                    "to": "now"},
        "templating": {"list": variables}, "annotations": {"list": []},
        "panels": panels,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if tdock-dashboard.json is not this output")
    text = json.dumps(dashboard(), indent=2) + "\n"
    if ap.parse_args().check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run {__file__}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
