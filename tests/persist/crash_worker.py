#!/usr/bin/python3
"""A worker process for tests/persist/test_crash.py: it keeps working
against a tdock-server that is killed and restarted under it, and logs what
the server acknowledged.

    crash_worker.py producer ADDRESS DOCK LOG STEPS
    crash_worker.py consumer ADDRESS DOCK LOG
    crash_worker.py churn ADDRESS DOCK LOG
    crash_worker.py trainer ADDRESS DOCK LOG RANK STEPS
    crash_worker.py dropper ADDRESS DOCK LOG STEPS

producer: for each step, 8 Puts of 8 rows of column x; logs "try S P" before
a Put, "ack S P" once the server acknowledged it, "retry S P" when the server
was down, "exists S P" if a retry found it already written (stored before the
crash).
consumer: Gets 8 rows at a time for consumer "eater"; logs "got S R R ..."
once a Get returned rows. Runs until killed.
churn: writes steps 0, 1, 2, ... of 8 rows (column x: 6-8 KiB cells, in the
store's value log; column y: small cells, in RocksDB) and releases each step
once the next is written, so the value log keeps reusing its segments; logs
"try S", "ack S" (or "exists S") and "released S". Runs until killed.
trainer: rank RANK of consumer "trainer" (BALANCED, dp_size 2, leased): for
steps 0..STEPS-1, Gets its share of each round, naming the step, then Acks
the share's lease, retrying the same Ack after the server died. Logs "got S
K L R R ..." (step, round, lease, rows) once a Get returned rows; "acking S K
L R ..." right before the Ack goes out (the test aims kills at it); "ack S K
L R ..." once it was answered, "reack S K L R ..." once a retry was, "acked S
K L R ..." when a retry found the lease already acknowledged (the Ack was
stored before the crash); "lost S K" when a Get failed for the server's
death (the next Get names round K: the lost answer may have handed it out);
"fail ..." and exit 1 on any other answer; "done" after the last step.
dropper: for steps 0..STEPS-1 of a dock of DROP_GROUPS groups of 2 rows,
writes the first DROP_WRITTEN rows (column x), drops a row as failed and a
group as filtered, then seals the step (its unwritten rows drop as sealed),
retrying each call until the server answers; logs "drop S KIND R ..." (the
rows a drop named) and "seal S" once answered, and "done".
"""

import itertools
import sys
import time

import numpy as np

import tdock

ROWS_PER_PUT = 8
PUTS_PER_STEP = 8


def cell(step: int, row: int) -> np.ndarray:
    """Row `row` of step `step`: deterministic, 1..200 int32 values (small
    cells, kept in RocksDB itself; the churn dock's large ones go to the
    value log)."""
    n = 1 + (step * 64 + row * 7) % 200
    return (np.arange(n, dtype=np.int32) * 31 + step * 1000 + row).astype(np.int32)


CHURN_ROWS = 8


def churn_cells(step: int, row: int):
    """Row `row` of churn step `step`: (x, y) int32 arrays, x of 4000..7999
    values (16-32 KiB), y of 1..8."""
    n = 4000 + (step * 7 + row * 13) % 4000
    x = (np.arange(n, dtype=np.int64) * 7 + step * 100003 + row).astype(np.int32)
    y = np.full(row + 1, step * 10 + row, dtype=np.int32)
    return x, y


def log_line(f, text: str) -> None:
    f.write(text + "\n")
    f.flush()


def producer(address: str, dock_name: str, log_path: str, steps: int) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        client = tdock.Client(address, timeout=5.0)
        dock = client.dock(dock_name)
        for step in range(steps):
            for p in range(PUTS_PER_STEP):
                rows = list(range(p * ROWS_PER_PUT, (p + 1) * ROWS_PER_PUT))
                log_line(log, f"try {step} {p}")
                for _ in range(600):
                    try:
                        dock.put(step, rows, {"x": [cell(step, r) for r in rows]}, wait=5.0)
                        log_line(log, f"ack {step} {p}")
                        break
                    except tdock.errors.AlreadyExists:
                        log_line(log, f"exists {step} {p}")
                        break
                    except (tdock.errors.Unavailable, tdock.errors.DeadlineExceeded,
                            tdock.errors.Cancelled, tdock.errors.Unknown):
                        log_line(log, f"retry {step} {p}")
                        time.sleep(0.05)  # the server is down: try again
                else:
                    log_line(log, f"gave up {step} {p}")
                    return 1
                time.sleep(0.06)
        log_line(log, "done")
    return 0


def consumer(address: str, dock_name: str, log_path: str) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        client = tdock.Client(address, timeout=5.0)
        dock = client.dock(dock_name)
        while True:
            try:
                b = dock.get("eater", wait=1.0)
            except (tdock.errors.Unavailable, tdock.errors.DeadlineExceeded,
                    tdock.errors.Cancelled, tdock.errors.Unknown):
                time.sleep(0.05)
                continue
            if len(b):
                log_line(log, "got " + " ".join(map(str, [b.step, *b.rows.tolist()])))


RETRY = (tdock.errors.Unavailable, tdock.errors.DeadlineExceeded, tdock.errors.Cancelled,
         tdock.errors.Unknown)


def churn(address: str, dock_name: str, log_path: str) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        client = tdock.Client(address, timeout=5.0)
        dock = client.dock(dock_name)
        rows = list(range(CHURN_ROWS))
        for step in itertools.count():
            cells = [churn_cells(step, r) for r in rows]
            log_line(log, f"try {step}")
            while True:
                try:
                    dock.put(step, rows, {"x": [c[0] for c in cells], "y": [c[1] for c in cells]},
                             wait=5.0)
                    log_line(log, f"ack {step}")
                    break
                except tdock.errors.AlreadyExists:
                    log_line(log, f"exists {step}")
                    break
                except RETRY:
                    time.sleep(0.05)
            time.sleep(0.005)  # a few hundred MiB a run is plenty
            if step == 0:
                continue
            while True:
                try:
                    dock.release(step - 1)
                except tdock.errors.FailedPrecondition:
                    pass  # released before a crash
                except RETRY:
                    time.sleep(0.05)
                    continue
                log_line(log, f"released {step - 1}")
                break
    return 0


DROP_GROUPS = 6
DROP_WRITTEN = 8  # of a dropper step's 12 rows


def answered(call):
    """Runs `call` until the server answers (it is killed and restarted
    under the caller); returns its answer."""
    for _ in range(600):
        try:
            return call()
        except RETRY:
            time.sleep(0.05)
    raise Refused("the server never came back")


def dropper(address: str, dock_name: str, log_path: str, steps: int) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        client = tdock.Client(address, timeout=5.0)
        dock = client.dock(dock_name)
        for step in range(steps):
            rows = list(range(DROP_WRITTEN))
            try:
                answered(lambda: dock.put(step, rows, {"x": [cell(step, r) for r in rows]},
                                          wait=5.0))
            except tdock.errors.AlreadyExists:
                pass  # stored before a kill
            row = step % DROP_WRITTEN
            answered(lambda: dock.drop(step, rows=[row], reason="failed"))
            log_line(log, f"drop {step} failed {row}")
            group = (step + 1) % (DROP_WRITTEN // 2)
            if group == row // 2:
                group = (group + 1) % (DROP_WRITTEN // 2)
            answered(lambda: dock.drop(step, groups=[group], reason="filtered"))
            log_line(log, f"drop {step} filtered {2 * group} {2 * group + 1}")
            answered(lambda: dock.seal(step))
            log_line(log, f"seal {step}")
            time.sleep(0.1)
        log_line(log, "done")
    return 0


def rollout(address: str, dock_name: str, log_path: str, count: int) -> int:
    """Reserves rows for the dock's newest version, writes them naming the
    reservation, and advances the version every third reservation; logs
    each answer (a reservation whose answer a kill lost is asked again: the
    first one's rows stay reserved until its deadline)."""
    with open(log_path, "a", encoding="utf-8") as log:
        client = tdock.Client(address, timeout=5.0)
        dock = client.dock(dock_name)
        for i in range(count):
            if i % 3 == 0:
                answered(lambda: dock.set_version(i // 3))
                log_line(log, f"version {i // 3}")
            r = answered(lambda: dock.reserve(4, deadline=600.0, wait=5.0))
            if r.timed_out:
                continue
            rows = " ".join(str(row) for row in r.rows)
            log_line(log, f"reserved {r.id} {r.step} {r.version} {rows}")
            try:
                answered(lambda: dock.put(r.step, None, {"x": [cell(r.step, row) for row in r.rows]},
                                          reservation=r, wait=5.0))
            except tdock.errors.AlreadyExists:
                pass  # stored before a kill
            log_line(log, f"wrote {r.id} {r.step} {rows}")
            time.sleep(0.02)
        log_line(log, "done")
    return 0


def connect(address: str, client=None):
    """A new client (closing `client`): its channel connects at once instead
    of waiting out the reconnect backoff of one that saw the server die."""
    if client is not None:
        client.close()
    return tdock.Client(address, timeout=5.0)


class Refused(Exception):
    """An answer the server's promises rule out."""


def ack_share(address: str, client, dock_name: str, b):
    """Acks `b`'s lease, retrying the same Ack across restarts. Returns
    (client, kind): "ack" if the first Ack was answered, "reack" if a retry
    was, "acked" if a retry found the lease acknowledged (by the Ack whose
    answer the crash lost). Raises Refused on any other answer."""
    retried = False
    while True:
        try:
            client.dock(dock_name).ack(b)
            return client, "reack" if retried else "ack"
        except RETRY:
            retried = True
            time.sleep(0.05)  # the server is down: a new connection, the same Ack
            client = connect(address, client)
        except tdock.errors.TdockError as e:
            if (retried and isinstance(e, tdock.errors.FailedPrecondition)
                    and "already acknowledged" in e.message):
                return client, "acked"
            raise Refused(f"{'retried ' if retried else ''}Ack: {e}") from None


def trainer(address: str, dock_name: str, log_path: str, rank: int, steps: int) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        client = connect(address)
        step, k = 0, 0  # the round this rank asks for next
        lost = False  # the last Get failed: it may have been served all the same
        while step < steps:
            try:
                # After a lost answer the rank names the round: served before,
                # it comes again under a new lease (the old one is replaced);
                # otherwise it is served now. Naming it always would hide
                # whether a plain Get resumes at the right round.
                b = client.dock(dock_name).get("trainer", rank=rank, step=step, wait=1.0,
                                               round=k if lost else None)
            except RETRY:
                if not lost:
                    log_line(log, f"lost {step} {k}")
                lost = True
                time.sleep(0.05)
                client = connect(address, client)
                continue
            except tdock.errors.TdockError as e:
                log_line(log, f"fail Get of step {step} round {k}: {e}")
                return 1
            lost = False
            if b.timed_out or not len(b):
                continue
            head = f"{b.step} {b.round} {b.lease} " + " ".join(map(str, b.rows.tolist()))
            log_line(log, f"got {head}")
            if (b.step, b.round) != (step, k) or b.lease is None:
                log_line(log, f"fail expected step {step} round {k} under a lease")
                return 1
            log_line(log, f"acking {head}")
            try:
                client, kind = ack_share(address, client, dock_name, b)
            except Refused as e:
                log_line(log, f"fail {head}: {e}")
                return 1
            log_line(log, f"{kind} {head}")
            step, k = (step + 1, 0) if b.end_of_step else (step, k + 1)
        log_line(log, "done")
    return 0


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "producer":
        sys.exit(producer(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    if role == "churn":
        sys.exit(churn(sys.argv[2], sys.argv[3], sys.argv[4]))
    if role == "dropper":
        sys.exit(dropper(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    if role == "rollout":
        sys.exit(rollout(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    if role == "trainer":
        sys.exit(trainer(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
                         int(sys.argv[6])))
    sys.exit(consumer(sys.argv[2], sys.argv[3], sys.argv[4]))
