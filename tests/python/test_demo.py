"""scripts/demo.sh (the quick start's main job) and scripts/python-env.sh say
what they are doing before each phase of their set-up, and keep saying it
while a quiet step (configuring, a pip install) runs, so that minutes of
configuring, building or installing are never silent, and still run what
they ran before. The phases themselves are stand-ins here (commands that
print what they were asked), so the scripts run in a second."""

import os
import shutil
import stat
import subprocess

from conftest import REPO


def _stub(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(cmd, **kw):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=60, check=True, **kw)
    return out.stdout.splitlines()


def _copy_python_env(tmp_path):
    (tmp_path / "scripts").mkdir(exist_ok=True)
    for name in ("python-env.sh", "progress.sh", "python-requirements.txt",
                 "python-requirements-nodeps.txt"):
        shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)


def test_demo_announces_each_phase_before_it_runs(tmp_path):
    """Each phase (Debian packages, configuring, building, the Python
    environment, the example) is announced, in order, before its command
    runs; the commands and their arguments are those the demo always ran,
    the Python environment is the demo's own (.venv-demo, not the user's
    .venv), and the example gets the demo's arguments."""
    (tmp_path / "scripts").mkdir()
    for name in ("demo.sh", "progress.sh"):
        shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)
    _stub(tmp_path / "scripts" / "install-deps.sh", 'echo "RAN install-deps $*"\n')
    _stub(tmp_path / "scripts" / "python-env.sh",
          f'echo "RAN python-env $*" >&2\necho {tmp_path}/venv-python\n')
    _stub(tmp_path / "venv-python", 'echo "RAN example $*"\n')
    _stub(tmp_path / "bin" / "cmake", 'echo "RAN cmake $*" >&2\n')  # configure's stdout is hidden
    (tmp_path / "build").mkdir()
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               TDOCK_PROGRESS_EVERY="3600")  # no progress line between these
    lines = _run(["bash", str(tmp_path / "scripts" / "demo.sh"), "--steps", "1"],
                 env=env)
    ran = [line for line in lines if line.startswith("RAN ")]
    assert ran == [
        "RAN install-deps ",
        "RAN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release",
        "RAN cmake --build build -j 2 --target tdock-server tdock_python",
        "RAN python-env .venv-demo",
        f"RAN example examples/grpo_pipeline.py --server_bin "
        f"{tmp_path}/build/server/tdock-server --steps 1",
    ], lines
    # The line just before each command announces it.
    announced = [lines[i - 1] if i else "" for i in map(lines.index, ran)]
    for line, (number, what) in zip(announced, [
            ("1/5", "Debian packages"), ("2/5", "configuring"), ("3/5", "building"),
            ("4/5", "Python environment .venv-demo/"), ("5/5", "examples/grpo_pipeline.py")]):
        assert line.startswith("demo [") and f"s] {number} " in line and what in line, line


def test_python_env_announces_each_install(tmp_path):
    """python-env.sh says which of its three pip installs it is starting
    before each one, with the same pip arguments as before, prints the
    environment's python last, and says nothing once the environment is
    up to date."""
    _copy_python_env(tmp_path)
    _stub(tmp_path / "venv" / "bin" / "python", 'echo "RAN $*" >&2\n')
    script = str(tmp_path / "scripts" / "python-env.sh")
    lines = _run(["bash", script, "venv"], env=dict(os.environ, TDOCK_PROGRESS_EVERY="3600"))
    pip = [line for line in lines if line.startswith("RAN ")]
    assert pip == ["RAN -m pip install --quiet --disable-pip-version-check torch==2.13.0",
                   "RAN -m pip install --quiet --disable-pip-version-check -r "
                   "scripts/python-requirements.txt",
                   "RAN -m pip install --quiet --disable-pip-version-check --no-deps -r "
                   "scripts/python-requirements-nodeps.txt"], lines
    before = [lines[i - 1] if i else "" for i in map(lines.index, pip)]
    assert before[0] == "python-env: 1/3 installing torch==2.13.0"
    assert before[1].startswith("python-env: 2/3 installing scripts/python-requirements.txt")
    assert before[2] == ("python-env: 3/3 installing scripts/python-requirements-nodeps.txt "
                         "without dependencies")
    assert lines[-1] == f"{tmp_path}/venv/bin/python"
    assert _run(["bash", script, "venv"]) == [f"{tmp_path}/venv/bin/python"]


def test_a_quiet_install_says_it_is_still_running(tmp_path):
    """While a pip install runs without output, python-env.sh prints
    "... still installing <what> (N s)" lines (to stderr), and none once it
    has ended; the install's exit status is the script's. The stand-in pip
    waits until it sees such a line, so no timing is assumed."""
    _copy_python_env(tmp_path)
    log = tmp_path / "log"
    _stub(tmp_path / "venv" / "bin" / "python",
          f'for _ in $(seq 600); do grep -q "still installing" {log} && break; sleep 0.1; done\n'
          f'grep -q "still installing" {log} || exit 7\n')
    with open(log, "w") as out:
        done = subprocess.run(["bash", str(tmp_path / "scripts" / "python-env.sh"), "venv"],
                              stdout=subprocess.DEVNULL, stderr=out, timeout=120,
                              env=dict(os.environ, TDOCK_PROGRESS_EVERY="0.2"))
    lines = log.read_text().splitlines()
    assert done.returncode == 0, lines
    still = [line for line in lines if "still" in line]
    assert still and all(line.startswith("  ... still installing ") and line.endswith(" s)")
                         for line in still), lines
    # Each install's progress lines come between its announcement and the next.
    assert "torch==2.13.0" in still[0] and lines.index(still[0]) > lines.index(
        "python-env: 1/3 installing torch==2.13.0"), lines
    assert lines[-1] == "python-env: done", lines


def test_progress_every_minute_under_ci():
    """The progress interval: 15 s at a terminal, 60 s under CI=true (a CI
    log gets one line a minute per quiet step), TDOCK_PROGRESS_EVERY over
    both; a failing step's exit status comes through."""
    def every(**env):
        clean = {k: v for k, v in os.environ.items() if k not in ("CI", "TDOCK_PROGRESS_EVERY")}
        out = subprocess.run(["bash", "-c", "source scripts/progress.sh && progress_every"],
                             cwd=REPO, env=dict(clean, **env), stdout=subprocess.PIPE,
                             text=True, check=True, timeout=60)
        return out.stdout.strip()
    assert every() == "15"
    assert every(CI="true") == "60"
    assert every(CI="true", TDOCK_PROGRESS_EVERY="5") == "5"
    failed = subprocess.run(["bash", "-c", "source scripts/progress.sh && with_progress x "
                             "bash -c 'exit 3'"], cwd=REPO, timeout=60)
    assert failed.returncode == 3
