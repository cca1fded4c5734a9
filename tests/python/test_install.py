"""The package installs with pip from client/python without the network, and
the installed copy (with its generated wire modules) talks to a server."""

import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO


def test_pip_install_without_network(tmp_path, server):
    if shutil.which("protoc") is None:
        pytest.fail("protoc is missing (Debian: protobuf-compiler)")
    # A copy of the two directories the package is built from, so the build
    # leaves nothing in the checkout.
    shutil.copytree(REPO / "client" / "python", tmp_path / "client" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                  "__pycache__"))
    shutil.copytree(REPO / "proto", tmp_path / "proto")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--no-index", "--quiet",
                    str(tmp_path / "client" / "python")], check=True)
    script = textwrap.dedent(f"""
        import tdock, tdock.v1.dock_pb2
        assert tdock.__file__.startswith({str(venv)!r}), tdock.__file__
        with tdock.Client({server!r}) as c:
            print(type(c.list_docks()).__name__)
    """)
    # Run outside the build tree so PYTHONPATH cannot supply the package.
    out = subprocess.run([python, "-c", script], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "list"
