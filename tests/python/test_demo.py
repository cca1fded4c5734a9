"""scripts/demo.sh (the quick start's main job) and scripts/python-env.sh say
what they are doing before each phase of their set-up, so that minutes of
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


def test_demo_announces_each_phase_before_it_runs(tmp_path):
    """Each phase (Debian packages, configuring, building, the Python
    environment, the example) is announced, in order, before its command
    runs; the commands and their arguments are those the demo always ran,
    and the example gets the demo's arguments."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "demo.sh", tmp_path / "scripts" / "demo.sh")
    _stub(tmp_path / "scripts" / "install-deps.sh", 'echo "RAN install-deps $*"\n')
    _stub(tmp_path / "scripts" / "python-env.sh",
          f'echo "RAN python-env $*" >&2\necho {tmp_path}/venv-python\n')
    _stub(tmp_path / "venv-python", 'echo "RAN example $*"\n')
    _stub(tmp_path / "bin" / "cmake", 'echo "RAN cmake $*" >&2\n')  # configure's stdout is hidden
    (tmp_path / "build").mkdir()
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    lines = _run(["bash", str(tmp_path / "scripts" / "demo.sh"), "--steps", "1"],
                 env=env)
    ran = [line for line in lines if line.startswith("RAN ")]
    assert ran == [
        "RAN install-deps ",
        "RAN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release",
        "RAN cmake --build build -j 2 --target tdock-server tdock_python",
        "RAN python-env .venv",
        f"RAN example examples/grpo_pipeline.py --server_bin "
        f"{tmp_path}/build/server/tdock-server --steps 1",
    ], lines
    # The line just before each command announces it.
    announced = [lines[i - 1] if i else "" for i in map(lines.index, ran)]
    for line, (number, what) in zip(announced, [
            ("1/5", "Debian packages"), ("2/5", "configuring"), ("3/5", "building"),
            ("4/5", "Python environment .venv/"), ("5/5", "examples/grpo_pipeline.py")]):
        assert line.startswith("demo [") and f"s] {number} " in line and what in line, line


def test_python_env_announces_each_install(tmp_path):
    """python-env.sh says which of its three pip installs it is starting
    before each one, with the same pip arguments as before, prints the
    environment's python last, and says nothing once the environment is
    up to date."""
    (tmp_path / "scripts").mkdir()
    for name in ("python-env.sh", "python-requirements.txt",
                 "python-requirements-nodeps.txt"):
        shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)
    _stub(tmp_path / "venv" / "bin" / "python", 'echo "RAN $*" >&2\n')
    script = str(tmp_path / "scripts" / "python-env.sh")
    lines = _run(["bash", script, "venv"])
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
