"""kill -9 of a tdock-server with --data_dir in sync mode, ten times at
seeded random moments, while a producer process writes and a consumer
process reads; the server is restarted on the same store each time.
Checked: every Put acknowledged before a kill is present afterwards with
identical bytes; no row is handed to the consumer twice; a Put that was
interrupted is, right after the restart, either fully present or absent —
never partial. Meanwhile a churn process writes large cells (the store's
value log, in 1 MiB segments here) into a second dock and releases each step
once the next is written: its latest acknowledged step reads back intact
after every restart, its interrupted Put is all or nothing, and the value
log reuses its segment files instead of growing. And two trainer processes,
ranks 0 and 1 of a BALANCED consumer of the first dock with leases (long
enough never to expire here), Get their shares and Ack each lease, retrying
the same Ack after a kill: a retried Ack is answered, or refused as already
acknowledged (stored before the kill), nothing else; a Get whose answer the
kill lost is asked again by its round. Checked: every row of every step is
acknowledged exactly once, by the one rank it was handed to; no row is
handed out again once acknowledged; each step's rows are split evenly over
both ranks; no lease is left in flight. And a dropper process drops rows and
groups of a third dock and seals its steps: every drop and seal answered
before a kill is there after the restart (the rows read as dropped with
their reason, the step as sealed), and after the last restart every step
holds exactly the drops asked for. And a rollout process reserves rows of a
fourth dock for its newest version, writes them naming the reservation, and
advances the version: every reservation answered before a kill is there
after the restart (its rows carry its version), every write of it too, and
the dock's version is never below one answered. Loopback only, bounded in
time."""

import os
import pathlib
import random
import resource
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest

import tdock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from server_process import drain, server_binary, start_server  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
STEPS = 12
KILLS = 10
SEED = 20261123

sys.path.insert(0, str(HERE))
from crash_worker import (CHURN_ROWS, DROP_GROUPS, DROP_WRITTEN, PUTS_PER_STEP,  # noqa: E402
                          ROWS_PER_PUT, cell, churn_cells)

ROWS = PUTS_PER_STEP * ROWS_PER_PUT  # of a step of the first dock
RANKS = 2  # of its trainer


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data_dir, port):
    proc, address = start_server(f"--listen=127.0.0.1:{port}", f"--data_dir={data_dir}",
                                 "--durability=sync", "--metrics_listen=",
                                 "--value_log_segment_mb=1")
    drain(proc)
    return proc, address


def worker(*args, log):
    return subprocess.Popen([sys.executable, str(HERE / "crash_worker.py"), *args],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))


def lines(path):
    """The log's complete lines, split (a worker may be stopped mid-line)."""
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    return [l.split() for l in text.splitlines() if l.strip()]


def rows_state(dock, step, rows):
    """Per row: True if its cell reads back as written, False if absent;
    raises if a cell holds other bytes."""
    state = []
    for r in rows:
        try:
            got = dock.read(step, [r], ["x"]).row("x", 0)
        except tdock.errors.FailedPrecondition:
            state.append(False)  # not written, or the step is not live
            continue
        assert got.tolist() == cell(step, r).tolist(), f"step {step} row {r}: other bytes"
        state.append(True)
    return state


def churn_state(dock, step):
    """Per churn row: True if both its cells read back as written, False if
    absent (or the step is released); raises if a cell holds other bytes."""
    state = []
    for r in range(CHURN_ROWS):
        try:
            b = dock.read(step, [r], ["x", "y"])
        except tdock.errors.FailedPrecondition:
            state.append(False)
            continue
        x, y = churn_cells(step, r)
        assert b.row("x", 0).tolist() == x.tolist(), f"churn step {step} row {r}: other bytes"
        assert b.row("y", 0).tolist() == y.tolist(), f"churn step {step} row {r}: other bytes"
        state.append(True)
    return state


def check_rollout(dock, log):
    """Every reservation the rollout logged as answered is there (its rows
    carry its version), every write of one too, and the dock's version is at
    least the last one answered. Returns the reservations checked."""
    answered = lines(log)
    versions = [int(l[1]) for l in answered if l[0] == "version"]
    assert dock.status().version >= max(versions, default=0)
    reserved = [l for l in answered if l[0] == "reserved"]
    for l in reserved:
        step, version, rows = int(l[2]), int(l[3]), [int(r) for r in l[4:]]
        listed = dock.list_rows(step)
        assert [listed[r].version for r in rows] == [version] * len(rows), \
            f"reservation {l[1]}: its rows lost their version"
    for l in answered:
        if l[0] == "wrote":
            step, rows = int(l[2]), [int(r) for r in l[3:]]
            read = dock.read(step, rows)
            for i, row in enumerate(rows):
                assert read.row("x", i).tolist() == cell(step, row).tolist(), \
                    f"reservation {l[1]}: row {row} lost"
    return len(reserved)


def check_drops(dock, log, final=False):
    """Every drop and seal the dropper logged as answered is there: the rows
    read as dropped for the reason given, the step is sealed; after the last
    run (`final`) each step's other written rows are not dropped, and its
    unwritten ones are dropped as sealed. Returns the drops checked."""
    answered = [l for l in lines(log) if l[0] in ("drop", "seal")]
    sealed = {st.step for st in dock.status().steps if st.sealed}
    dropped = {}  # (step, row) -> reason
    for l in answered:
        step = int(l[1])
        if l[0] == "seal":
            assert step in sealed, f"step {step}: its answered seal is gone"
            continue
        for r in l[3:]:
            dropped[(step, int(r))] = l[2]
    for (step, row), reason in dropped.items():
        with pytest.raises(tdock.errors.FailedPrecondition, match=f"was dropped \\({reason}\\)"):
            dock.read(step, [row])
    if final:
        for step in {int(l[1]) for l in answered}:
            for row in range(2 * DROP_GROUPS):
                if (step, row) in dropped:
                    continue
                if row >= DROP_WRITTEN:
                    with pytest.raises(tdock.errors.FailedPrecondition, match="dropped \\(sealed\\)"):
                        dock.read(step, [row])
                else:
                    assert dock.read(step, [row]).row("x", 0).tolist() == cell(step, row).tolist()
    return len(dropped)


def await_ack(paths, timeout=2.0):
    """Returns once a trainer rank logs "acking" (it is sending an Ack), or
    after `timeout` seconds. Killed then, the server has stored the Ack or
    not, and answered it or not: random moments seldom fall into an Ack."""
    logs = [open(p, "rb") for p in paths]
    try:
        for f in logs:
            f.seek(0, os.SEEK_END)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(b"acking" in f.read() for f in logs):
                return
            time.sleep(0.0005)
    finally:
        for f in logs:
            f.close()


def trainer_failures(paths):
    """The trainer ranks' "fail" lines, for a failed assertion's message."""
    return [" ".join(l) for p in paths if p.exists() for l in lines(p) if l[0] == "fail"]


def check_trainer(paths):
    """Checks the trainer ranks' logs (see the module comment); returns how
    often each line kind occurred."""
    kinds = Counter()
    handed = {}  # (step, row) -> the rank it was handed to
    acked = {}  # (step, row) -> the rank whose Ack (or retried Ack) covered it
    for rank, path in enumerate(paths):
        done = set()  # this rank's acknowledged rows, so far in its log
        for l in lines(path):
            kinds[l[0]] += 1
            if l[0] not in ("got", "ack", "reack", "acked"):
                continue
            rows = {(int(l[1]), int(r)) for r in l[4:]}
            if l[0] == "got":
                assert not rows & done, f"rank {rank}: {sorted(rows & done)} handed out again"
                for row in rows:
                    assert handed.setdefault(row, rank) == rank, f"{row} handed to both ranks"
                continue
            for row in rows:
                assert row not in acked, f"{row} acknowledged twice"
                acked[row] = rank
            done |= rows
    every = {(s, r) for s in range(STEPS) for r in range(ROWS)}
    assert set(acked) == every, f"never acknowledged: {sorted(every - set(acked))[:10]}"
    for s in range(STEPS):  # a balanced round gives each rank as many rows
        per_rank = Counter(rank for (step, _), rank in acked.items() if step == s)
        assert [per_rank[r] for r in range(RANKS)] == [ROWS // RANKS] * RANKS, (s, per_rank)
    return kinds


def test_kill_9_loses_no_acknowledged_put_and_hands_out_no_row_twice(tmp_path):
    rng = random.Random(SEED)
    data_dir, port = tmp_path / "db", free_port()
    produced, consumed = tmp_path / "producer.log", tmp_path / "consumer.log"
    churned, dropping = tmp_path / "churn.log", tmp_path / "dropper.log"
    rolled = tmp_path / "rollout.log"
    trained = [tmp_path / f"trainer{r}.log" for r in range(RANKS)]
    proc, address = start(data_dir, port)
    with tdock.Client(address) as c:
        c.create_dock({
            "name": "crash", "num_prompts": ROWS, "steps_in_flight": 16,
            "columns": {"x": {"dtype": "int32"}},
            "length_columns": ["x"],  # the trainer's rounds balance tokens
            # "auditor" never reads, so no step is ever released and every
            # acknowledged cell stays readable to the final check.
            "consumers": {"eater": {"columns": ["x"], "dispatch_size": 8},
                          "auditor": {"columns": ["x"]},
                          # Rounds of 4 rows: many Gets and Acks for the kills
                          # to interrupt. Its leases never expire here: a row
                          # comes back only when its round is asked for again.
                          "trainer": {"columns": ["x"], "policy": "balanced",
                                      "dp_size": RANKS, "dispatch_size": 2,
                                      "lease_ms": 600000}}})
        c.create_dock({
            "name": "churn", "num_prompts": CHURN_ROWS, "steps_in_flight": 2,
            "columns": {"x": {"dtype": "int32"}, "y": {"dtype": "int32"}},
            "consumers": {"never": {"columns": ["x", "y"]}}})
        c.create_dock({
            "name": "drops", "num_prompts": DROP_GROUPS, "n_samples_per_prompt": 2,
            "steps_in_flight": 64, "columns": {"x": {"dtype": "int32"}},
            "consumers": {"never": {"columns": ["x"]}}})
        # Admission under a bound that never holds a producer back: no step
        # is ever released here.
        c.create_dock({
            "name": "async", "num_prompts": 4, "n_samples_per_prompt": 2,
            "steps_in_flight": 64, "columns": {"x": {"dtype": "int32"}},
            "consumers": {"never": {"columns": ["x"], "max_staleness": 1000}}})
    workers_log = open(tmp_path / "workers.out", "w")
    producer = worker("producer", address, "crash", str(produced), str(STEPS), log=workers_log)
    consumer = worker("consumer", address, "crash", str(consumed), log=workers_log)
    churner = worker("churn", address, "churn", str(churned), log=workers_log)
    dropper = worker("dropper", address, "drops", str(dropping), "64", log=workers_log)
    trainers = [worker("trainer", address, "crash", str(trained[r]), str(r), str(STEPS),
                       log=workers_log) for r in range(RANKS)]
    roller = worker("rollout", address, "async", str(rolled), "100", log=workers_log)
    partial = []
    try:
        # The kills start once every worker is running (has opened its log):
        # six Python processes take a while to start on two cores.
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in (produced, consumed, churned, dropping, rolled,
                                           *trained)):
            assert time.monotonic() < deadline, (tmp_path / "workers.out").read_text()
            time.sleep(0.05)
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.2, 0.8))
            if kill % 2:  # every other kill lands in a trainer's Ack
                await_ack(trained)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            # The producer and the churn wait while the restarted server is
            # checked, so the retry of the Put each had in flight cannot land
            # in the middle of the check of that Put (which reads it row by
            # row, and would see it half there).
            for w in (producer, churner, dropper, roller):
                w.send_signal(signal.SIGSTOP)
            acked_before = {(int(s), int(p)) for kind, s, p in
                            (l for l in lines(produced) if l[0] in ("ack", "exists"))}
            tried = [l for l in lines(produced) if l[0] == "try"]
            proc, _ = start(data_dir, port)
            with tdock.Client(address, timeout=10) as c:
                dock = c.dock("crash")
                for s, p in acked_before:  # acknowledged before this kill: all there
                    rows = range(p * ROWS_PER_PUT, (p + 1) * ROWS_PER_PUT)
                    assert all(rows_state(dock, s, rows)), f"kill {kill}: put {s}/{p} lost"
                if tried:  # the Put in flight at the kill: all or nothing
                    s, p = int(tried[-1][1]), int(tried[-1][2])
                    state = rows_state(dock, s, range(p * ROWS_PER_PUT, (p + 1) * ROWS_PER_PUT))
                    partial.append((kill, s, p, state))
                    assert all(state) or not any(state), f"kill {kill}: put {s}/{p} partial"
                # The churn dock: its latest acknowledged step (never released
                # yet) is intact; the Put it was trying is all or nothing.
                churn = c.dock("churn")
                acked = [int(l[1]) for l in lines(churned) if l[0] in ("ack", "exists")]
                if acked:
                    assert all(churn_state(churn, max(acked))), f"kill {kill}: churn lost"
                tried = [int(l[1]) for l in lines(churned) if l[0] == "try"]
                if tried and tried[-1] not in acked:
                    state = churn_state(churn, tried[-1])
                    assert all(state) or not any(state), f"kill {kill}: churn put partial"
                check_drops(c.dock("drops"), dropping)
                check_rollout(c.dock("async"), rolled)
            for w in (producer, churner, dropper, roller):
                w.send_signal(signal.SIGCONT)
        assert producer.wait(timeout=120) == 0, (tmp_path / "workers.out").read_text()
        for t in trainers:  # they finish the last step once it is written
            assert t.wait(timeout=60) == 0, trainer_failures(trained)
        assert dropper.wait(timeout=120) == 0, (tmp_path / "workers.out").read_text()
        assert roller.wait(timeout=120) == 0, (tmp_path / "workers.out").read_text()
    finally:
        for w in (producer, consumer, churner, dropper, roller, *trainers):
            if w.poll() is None:
                w.kill()
                w.wait()
        workers_log.close()
        proc.kill()
        proc.wait()

    # After the last restart: every Put of the run is present, byte for byte.
    proc, address = start(data_dir, port)
    try:
        with tdock.Client(address, timeout=10) as c:
            dock = c.dock("crash")
            for s in range(STEPS):
                assert all(rows_state(dock, s, range(ROWS))), s
            status = dock.status()
            drops = check_drops(c.dock("drops"), dropping, final=True)
            reservations = check_rollout(c.dock("async"), rolled)
        assert drops >= 3 * 10, f"the dropper dropped only {drops} rows"
        assert reservations >= 80, f"the rollout made only {reservations} reservations"
        assert len(status.steps) == STEPS
        # No row was handed to the eater twice, across every restart.
        got = [(int(l[1]), int(r)) for l in lines(consumed) if l[0] == "got" for r in l[2:]]
        assert got, "the consumer got nothing"
        assert len(got) == len(set(got)), "a row was handed out twice"
        eaten = {s: status.steps[i].consumed["eater"] for i, s in
                 enumerate(st.step for st in status.steps)}
        assert sum(eaten.values()) >= len(got)
        assert len([l for l in lines(produced) if l[0] == "exists"]) <= KILLS
        # The kills hit the producer while it was writing: it found the
        # server gone several times (several times at one Put when restarts
        # are slow on a loaded machine).
        assert len([l for l in lines(produced) if l[0] == "retry"]) >= 3
        # The churn wrote many segments' worth of cells; the value log reused
        # its files instead of keeping one per MiB written.
        churn_steps = {int(l[1]) for l in lines(churned) if l[0] in ("ack", "exists")}
        churn_mib = sum(sum(churn_cells(s, r)[0].nbytes for r in range(CHURN_ROWS))
                        for s in churn_steps) / 2**20
        segments = list((data_dir / "values").glob("*.vlog"))
        assert churn_mib >= 10, f"the churn wrote only {churn_mib:.1f} MiB"
        assert len(segments) <= 8, f"{len(segments)} segment files for {churn_mib:.1f} MiB"
        # The trainer took every row of every step, and acknowledged them all:
        # nothing is left in flight after the restart.
        assert all(st.consumed["trainer"] == ROWS for st in status.steps)
        assert status.leases["trainer"].in_flight == 0, status.leases["trainer"]
        assert status.leases["trainer"].rows_in_flight == 0, status.leases["trainer"]
        kinds = check_trainer(trained)
        puts = Counter(l[0] for l in lines(produced))
        print(f"\n{KILLS} kills; producer: {puts['ack'] + puts['exists']} Puts, "
              f"{puts['retry']} retries; trainer: {kinds['got']} shares, Acks answered "
              f"{kinds['ack']} at once, {kinds['reack']} on a retry, {kinds['acked']} "
              f"retries found them already acknowledged; {kinds['lost']} Gets lost; "
              f"{drops} rows dropped; {reservations} reservations")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.parametrize("flag, message", [
    ("--durability=eventually", "--durability must be sync or async"),
    ("--flush_interval_ms=0", "--flush_interval_ms must be positive"),
    ("--value_log_segment_mb=0", "--value_log_segment_mb must be 1..1024"),
    ("--value_log_segment_mb=4096", "--value_log_segment_mb must be 1..1024"),
])
def test_bad_persistence_flag_exits_2_naming_it(tmp_path, flag, message):
    r = subprocess.run([server_binary(), "--listen=127.0.0.1:0", "--metrics_listen=",
                        f"--data_dir={tmp_path / 'db'}", flag],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "db").exists()  # nothing was opened or created


def test_server_takes_the_hard_open_file_limit(tmp_path):
    """Value-log segments, RocksDB files and client sockets each hold a
    descriptor: the server raises its soft limit to the hard one, at most
    2^20 (started here with a soft limit of 256)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 256:
        pytest.skip(f"the hard open-file limit here is {hard}: nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
    try:
        proc, _ = start(tmp_path / "db", free_port())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        limits = pathlib.Path(f"/proc/{proc.pid}/limits").read_text()
        line = next(l for l in limits.splitlines() if l.startswith("Max open files"))
        soft, hard = line.split()[3:5]
        expected = 2**20 if hard == "unlimited" else min(int(hard), 2**20)
        assert int(soft) == expected, line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
