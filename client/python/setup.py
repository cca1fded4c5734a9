"""Installs the tdock Python client (package `tdock`).

    /usr/bin/python3 -m pip install ./client/python

needs no network: it uses the setuptools, grpcio, protobuf and numpy of the
system (Debian: python3-setuptools python3-grpcio python3-protobuf
python3-numpy, and protobuf-compiler-grpc for protoc and grpc_python_plugin).
The wire modules (tdock/v1/dock_pb2*.py) are generated from
../../proto/tdock/v1/dock.proto while building; they are not in the source.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO = os.path.join("tdock", "v1", "dock.proto")


def _tool(name, env):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise SystemExit(f"tdock: '{name}' not found (Debian: apt-get install "
                         f"protobuf-compiler protobuf-compiler-grpc), or set {env}")
    return path


class BuildWithProto(build_py):
    """build_py that also generates tdock/v1/dock_pb2{,_grpc}.py."""

    def run(self):
        super().run()
        if not os.path.exists(os.path.join(PROTO_ROOT, PROTO)):
            raise SystemExit(f"tdock: {PROTO} not found under {PROTO_ROOT}; "
                             "install from a checkout of the repository")
        out = os.path.abspath(self.build_lib)
        os.makedirs(os.path.join(out, "tdock", "v1"), exist_ok=True)
        subprocess.check_call([
            _tool("protoc", "PROTOC"), "-I", PROTO_ROOT,
            f"--python_out={out}", f"--grpc_python_out={out}",
            "--plugin=protoc-gen-grpc_python="
            + _tool("grpc_python_plugin", "GRPC_PYTHON_PLUGIN"),
            os.path.join(PROTO_ROOT, PROTO)])
        open(os.path.join(out, "tdock", "v1", "__init__.py"), "a").close()


setup(
    name="tdock",
    version="0.1.0",
    description="Python client of tdock, a transfer dock for RL post-training",
    packages=["tdock"],
    python_requires=">=3.9",
    install_requires=["grpcio", "protobuf", "numpy"],
    extras_require={"torch": ["torch"], "yaml": ["pyyaml"]},
    cmdclass={"build_py": BuildWithProto},
)
