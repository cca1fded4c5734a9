"""Runs a command against a controller with two shards (docs/scale-out.md).

    python tests/sharded_run.py python examples/grpo_pipeline.py --steps 3 ...

Starts tdock-server --role=controller and two shards of it on loopback, each
on a node name of its own (the command's processes match neither, so their
Puts spread over both shards by hash), runs the command with
`--server CONTROLLER` appended, stops the servers, and exits with the
command's exit code (1 if it passed but a server did not exit cleanly).
TDOCK_SERVER_BIN names the server binary.
"""

import subprocess
import sys

from server_process import start_sharded, drain, stop_server


def main() -> int:
    procs, address = start_sharded(2)
    drain(procs[0])
    try:
        code = subprocess.run([*sys.argv[1:], "--server", address]).returncode
    finally:
        unclean = False
        for proc in reversed(procs):
            try:
                stop_server(proc)
            except AssertionError as e:
                print(f"sharded_run: {e}", file=sys.stderr)
                unclean = True
    return code or int(unclean)


if __name__ == "__main__":
    sys.exit(main())
