#!/usr/bin/python3
"""Turns the comparison benchmark's samples into compare.json and compare.md.

    report.py SAMPLES.jsonl OUT_PREFIX [--iperf FILE.json ...] [--meta KEY=VALUE ...]

SAMPLES.jsonl holds one line per timed pass (from tdock_compare and
compare.py); each iperf3 file is the output of `iperf3 -c ... -J`. Rates are
payload bytes per second of wall time in GB/s (1e9 B/s), the median over
passes. Writes OUT_PREFIX.json and OUT_PREFIX.md and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

CONTENDERS = ("tdock", "tdock-native", "tdock-aio", "redis", "grpc")
LABELS = {"tdock": "tdock", "tdock-native": "tdock native", "tdock-aio": "tdock asyncio",
          "redis": "Redis", "grpc": "plain gRPC", "iperf3": "iperf3"}
CLIENTS = {"cpp": "C++", "python": "Python"}


def load_samples(path: str) -> dict:
    """(client, contender, shape, direction) -> list of GB/s."""
    rates = defaultdict(list)
    meta = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            s = json.loads(line)
            key = (s["client"], s["contender"], s["shape"], s["direction"])
            rates[key].append(s["bytes"] / s["seconds"] / 1e9)
            meta[s["shape"]] = (s["bytes"], s["chunk_rows"])
    return rates, meta


def load_iperf(paths: list[str]) -> list[float]:
    runs = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if "error" in doc:
            raise SystemExit(f"iperf3 failed: {doc['error']}")
        runs.append(doc["end"]["sum_received"]["bits_per_second"] / 8 / 1e9)
    return runs


def ratio(a, b):
    return a / b if a and b else None


def fmt(x, suffix=""):
    return "-" if x is None else f"{x:.2f}{suffix}"


def build(rates: dict, meta: dict, iperf: list[float], extra: dict) -> dict:
    med = {k: statistics.median(v) for k, v in rates.items()}
    ceiling = statistics.median(iperf) if iperf else None
    shapes = [s for s in ("small", "medium") if s in meta] + sorted(
        set(meta) - {"small", "medium"})
    rows, targets = [], []
    for shape in shapes:
        for client in CLIENTS:
            for direction in ("put", "get"):
                r = {c: med.get((client, c, shape, direction)) for c in CONTENDERS}
                if r["tdock"] is None and r["redis"] is None:
                    continue
                rows.append({
                    "shape": shape, "client": client, "direction": direction,
                    "gbps": r, "iperf3_gbps": ceiling,
                    "passes": len(rates.get((client, "tdock", shape, direction), [])),
                    "tdock_over_redis": ratio(r["tdock"], r["redis"]),
                    "tdock_over_grpc": ratio(r["tdock"], r["grpc"]),
                    "tdock_over_iperf3": ratio(r["tdock"], ceiling),
                    "samples": {c: [round(x, 3) for x in
                                    rates.get((client, c, shape, direction), [])]
                                for c in CONTENDERS},
                })
        cpp_get = next((r for r in rows if (r["shape"], r["client"], r["direction"])
                        == (shape, "cpp", "get")), None)
        if cpp_get:
            v = cpp_get["tdock_over_redis"]
            targets.append({"shape": shape, "target": "C++ Get: tdock >= 2x Redis",
                            "value": v, "met": v is not None and v >= 2.0})
            v = cpp_get["tdock_over_iperf3"]
            targets.append({"shape": shape, "target": "C++ Get: tdock >= 0.5x iperf3",
                            "value": v, "met": v is not None and v >= 0.5})
        for direction in ("put", "get"):
            cpp = med.get(("cpp", "tdock", shape, direction))
            py = med.get(("python", "tdock", shape, direction))
            native = med.get(("python", "tdock-native", shape, direction))
            aio = med.get(("python", "tdock-aio", shape, direction))
            op = direction.title()
            # (target, (contender, baseline), the least ratio met, whether it applies)
            for target, over, at_least, measured in (
                    (f"Python client >= 0.9x C++ client ({op})", (py, cpp), 0.9, True),
                    (f"native Python client >= 0.9x C++ client ({op})", (native, cpp), 0.9,
                     True),
                    ("native Python Put >= 3x grpcio Python Put", (native, py), 3.0,
                     direction == "put"),
                    (f"asyncio client within 10% of blocking ({op})", (aio, py), 0.9, True)):
                if measured and over[0] and over[1]:
                    value = over[0] / over[1]
                    targets.append({"shape": shape, "target": target, "value": value,
                                    "met": value >= at_least})
    for row in rows:
        if row["client"] == "python":
            cpp = med.get(("cpp", "tdock", row["shape"], row["direction"]))
            row["python_over_cpp"] = ratio(row["gbps"]["tdock"], cpp)
            row["aio_over_blocking"] = ratio(row["gbps"]["tdock-aio"], row["gbps"]["tdock"])
            row["native_over_cpp"] = ratio(row["gbps"]["tdock-native"], cpp)
    shape_info = {s: {"bytes_per_pass": b, "chunk_rows": c} for s, (b, c) in meta.items()}
    return {"unit": "GB/s (1e9 payload bytes per second, median over passes)",
            "shapes": shape_info, "iperf3_gbps_runs": [round(x, 3) for x in iperf],
            "iperf3_gbps": ceiling, "results": rows, "targets": targets, "meta": extra}


def markdown(report: dict) -> str:
    out = ["# tdock vs Redis, plain gRPC and iperf3 (loopback)", ""]
    meta = report["meta"]
    if meta:
        out.append(", ".join(f"{k}: {v}" for k, v in meta.items()))
        out.append("")
    for shape, info in report["shapes"].items():
        out.append(f"- **{shape}**: {info['bytes_per_pass'] / 1e6:.0f} MB per pass, "
                   f"{info['chunk_rows']} rows (all columns) per call")
    runs = ", ".join(f"{x:.2f}" for x in report["iperf3_gbps_runs"])
    out += [f"- iperf3 (one stream, the ceiling): {fmt(report['iperf3_gbps'])} GB/s "
            f"(runs: {runs or '-'})", "",
            "GB/s, median over passes; ratios are tdock / contender.", "",
            "| shape | client | op | tdock | tdock native | tdock asyncio | Redis | plain gRPC "
            "| tdock/Redis | tdock/gRPC | tdock/iperf3 | Python/C++ | native/C++ "
            "| asyncio/blocking |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["results"]:
        g = r["gbps"]
        out.append(
            f"| {r['shape']} | {CLIENTS[r['client']]} | {r['direction'].title()} "
            f"| {fmt(g['tdock'])} | {fmt(g['tdock-native'])} | {fmt(g['tdock-aio'])} "
            f"| {fmt(g['redis'])} | {fmt(g['grpc'])} "
            f"| {fmt(r['tdock_over_redis'], 'x')} | {fmt(r['tdock_over_grpc'], 'x')} "
            f"| {fmt(r['tdock_over_iperf3'], 'x')} | {fmt(r.get('python_over_cpp'), 'x')} "
            f"| {fmt(r.get('native_over_cpp'), 'x')} | {fmt(r.get('aio_over_blocking'), 'x')} |")
    out += ["", "Targets:", "", "| shape | target | value | |", "|---|---|---:|---|"]
    for t in report["targets"]:
        out.append(f"| {t['shape']} | {t['target']} | {fmt(t['value'], 'x')} "
                   f"| {'met' if t['met'] else '**not met**'} |")
    out += ["", "How each moves a chunk (rows x all columns, one call in flight):", "",
            "- tdock: one Put / one Get (step, count = chunk rows) per chunk; C++ "
            "tdock::Client (Put borrows the prepared buffers), Python tdock package "
            "(Put from 2-D numpy arrays, its bytes sent by grpcio, Get (GetStream) "
            "then Batch.packed per column); tdock native: the Python package with "
            "its Puts' bytes sent by the C++ client (tdock._native); tdock asyncio: the same through tdock.aio, awaited one call "
            "at a time.",
            "- Redis: one key per (row, column); one MSET / one MGET per chunk. C++: "
            "hiredis (MSET written with writev from the prepared buffers unless "
            "redis_mset=hiredis); Python: redis-py (hiredis parser when installed), "
            "np.frombuffer on every value read.",
            "- plain gRPC: bench/baseline.proto Send / Fetch, the chunk's bytes in one "
            "protobuf bytes field, server in its own process (C++ only).",
            "- iperf3: one TCP stream, client to server; no application copies."]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("samples")
    parser.add_argument("out_prefix")
    parser.add_argument("--iperf", nargs="*", default=[])
    parser.add_argument("--meta", nargs="*", default=[])
    args = parser.parse_args()
    rates, meta = load_samples(args.samples)
    extra = dict(m.split("=", 1) for m in args.meta)
    report = build(rates, meta, load_iperf(args.iperf), extra)
    with open(args.out_prefix + ".json", "w") as f:
        json.dump(report, f, indent=1)
    text = markdown(report)
    with open(args.out_prefix + ".md", "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
