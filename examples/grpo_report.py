"""What examples/grpo_pipeline.py reports: the workers' records tallied by
(role, step), checked (every row exactly once, balance stats as handed
out), and printed as a progress line, a table and a summary.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from grpo_workers import ROLES, SHORT


class Tally:
    """What the workers reported, by (role, step)."""

    def __init__(self, spec: dict):
        consumers = spec["consumers"]
        self.ranks = {r: consumers.get(r, {}).get("dp_size", 1) for r in ROLES}
        self.round_to = {r: consumers.get(r, {}).get("micro_batch", {})
                         .get("round_to", 1) for r in ROLES}
        self.cells: dict = collections.defaultdict(lambda: {
            "rows": [], "bytes_in": 0, "bytes_out": 0, "wait": 0.0,
            "first": math.inf, "done": 0.0, "mb": 0, "flat": 0, "repeats": 0,
            "rounds": collections.defaultdict(dict), "server": {}})
        self.finished = collections.defaultdict(set)  # (role, step) -> ranks

    def add(self, rec: dict) -> None:
        cell = self.cells[(rec["role"], rec["step"])]
        cell["wait"] += rec["wait"]
        if rec["kind"] == "step_done":
            self.finished[(rec["role"], rec["step"])].add(rec["rank"])
            cell["done"] = max(cell["done"], rec["t"])
            return
        repeats = set(rec.get("repeats", ()))
        cell["repeats"] += len(repeats)
        cell["rows"] += [r for i, r in enumerate(rec["rows"]) if i not in repeats]
        cell["bytes_in"] += rec["bytes_in"]
        cell["bytes_out"] += rec["bytes_out"]
        cell["first"] = min(cell["first"], rec["t"])
        if rec["mb_padded"] is not None and rec["tokens"]:
            to = self.round_to[rec["role"]]
            cell["mb"] += rec["mb_padded"]
            cell["flat"] += len(rec["rows"]) * -(-max(rec["tokens"]) // to) * to
        if rec["round"] >= 0:
            cell["rounds"][rec["round"]][rec["rank"]] = (rec["rows"], rec["tokens"])
            if rec["server_tokens"]:
                cell["server"][rec["round"]] = rec["server_tokens"]

    def step_finished(self, role: str, step: int) -> bool:
        return len(self.finished[(role, step)]) == self.ranks[role]

    def round_tokens(self, role: str, shares: dict) -> tuple[list, list]:
        """Tokens per rank of one round: tdock's split, and the round's rows
        sorted by row index cut into equal contiguous pieces."""
        dp = self.ranks[role]
        per_rank = [sum(shares[k][1]) if k in shares else 0 for k in range(dp)]
        by_row = sorted(x for rows, tokens in shares.values()
                        for x in zip(rows, tokens))
        pieces = np.array_split(np.array([t for _, t in by_row]), dp)
        return per_rank, [int(p.sum()) for p in pieces]

    def imbalance(self, role: str, cells: list[dict]) -> tuple | None:
        """Σ over rounds of the heaviest rank's tokens / Σ of the mean
        (tdock's split, contiguous split)."""
        tdock_max = contiguous_max = mean = 0.0
        for cell in cells:
            for shares in cell["rounds"].values():
                per_rank, contiguous = self.round_tokens(role, shares)
                tdock_max += max(per_rank)
                contiguous_max += max(contiguous)
                mean += sum(per_rank) / len(per_rank)
        return (tdock_max / mean, contiguous_max / mean) if mean else None

    def check(self, steps: int, rows: int) -> list[str]:
        """Problems: rows lost or duplicated, balance stats that differ."""
        problems = []
        for (role, step), cell in sorted(self.cells.items()):
            got = collections.Counter(cell["rows"])
            lost = sorted(set(range(rows)) - set(got))
            dup = sorted(r for r, k in got.items() if k > 1)
            if lost or dup:
                problems.append(f"{role} step {step}: rows lost {lost[:8]}, "
                                f"duplicated {dup[:8]}")
            for rnd, shares in sorted(cell["rounds"].items()):
                if len(shares) != self.ranks[role]:
                    problems.append(f"{role} step {step} round {rnd}: taken by ranks "
                                    f"{sorted(shares)} of {self.ranks[role]}")
            for rnd, server in cell["server"].items():
                per_rank, _ = self.round_tokens(role, cell["rounds"][rnd])
                if (max(per_rank), sum(per_rank) / len(per_rank)) != server:
                    problems.append(f"{role} step {step} round {rnd}: ranks got "
                                    f"{per_rank} tokens; server stats (max, "
                                    f"mean) {server}")
        missing = steps * len(ROLES) - len(self.cells)
        if missing:
            problems.append(f"{missing} (role, step) pairs reported no rows")
        return problems


def status_line(dock, elapsed: float) -> str:
    """Rows each role has taken per live step, from the dock's status."""
    st = dock.status()
    steps = [f"step {s.step}: " + (" ".join(
        f"{short} {s.consumed[role]}" for role, short in SHORT.items()
        if s.consumed.get(role)) or "prompts written") for s in st.steps]
    return (f"[{elapsed:6.1f}s] " + (" | ".join(steps) or "no live step")
            + f" | {sum(st.waiters.values())} Gets parked, "
            f"{st.arena_bytes_used / 2**20:.1f} MiB in use")


def ratio(a: float, b: float) -> str:
    return f"{a:,.0f} / {b:,.0f} ({a / b:.2f}x)" if b else "-"


def print_table(tally: Tally, steps: int) -> None:
    head = (f"{'step':>4} {'role':<13} {'ranks':>5} {'rows':>6} {'kB in':>8} "
            f"{'kB out':>8} {'wait s':>7} {'done s':>7}  {'imbalance tdock/contig':<23}"
            f"padded tokens tdock / batch max")
    print(head)
    print("-" * len(head))
    for step in list(range(steps)) + ["all"]:
        for role in ROLES:
            cells = [tally.cells[(role, s)] for s in
                     (range(steps) if step == "all" else [step])]
            imb = tally.imbalance(role, cells)
            mb, flat = sum(c["mb"] for c in cells), sum(c["flat"] for c in cells)
            print(f"{step:>4} {role:<13} {tally.ranks[role]:>5} "
                  f"{sum(len(c['rows']) for c in cells):>6} "
                  f"{sum(c['bytes_in'] for c in cells) / 1e3:>8.1f} "
                  f"{sum(c['bytes_out'] for c in cells) / 1e3:>8.1f} "
                  f"{sum(c['wait'] for c in cells):>7.2f} "
                  f"{max(c['done'] for c in cells):>7.1f}  "
                  f"{f'{imb[0]:.3f} / {imb[1]:.3f}' if imb else '-':<23}"
                  f"{ratio(mb, flat)}")
    print("wait s: time in Get calls waiting for rows, summed over ranks "
          "(driver: in Put, waiting for a free partition);\ndone s: when the "
          "role finished the step, since the start;\n"
          "imbalance: Σ over rounds of the heaviest rank's tokens / Σ of the "
          "mean, tdock's split vs. the round's rows cut by row index;\n"
          "padded tokens: Σ micro-batch rows x padded length vs. every row "
          "padded to the batch's longest (both rounded up to round_to).")


def rounds_line(tally: Tally) -> str:
    """The balanced roles' rounds, every one taken by every rank (checked),
    and the repeats that filled short shares (pad: repeat)."""
    rounds = sum(len(c["rounds"]) for (role, _), c in tally.cells.items()
                 if tally.ranks[role] > 1)
    repeats = sum(c["repeats"] for c in tally.cells.values())
    return (f"every rank of each balanced role took each of its {rounds} rounds"
            + (f" ({repeats} repeats filled short shares)" if repeats else ""))


def summary(tally: Tally, steps: int) -> str:
    overlapped = sum(1 for s in range(steps - 1)
                     if tally.cells[("rollout", s + 1)]["first"]
                     < tally.cells[("actor_update", s)]["done"])
    return (f"rollout of step s+1 ran while step s trained in {overlapped} of "
            f"{steps - 1} steps")
