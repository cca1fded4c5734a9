"""python -m tdock (or the `tdock` command): try tdock on this machine.

    tdock serve [--server PATH] [--listen HOST:PORT] [--data_dir DIR]
                [--config SPEC.yaml] [-- more server flags]
    tdock version

`serve` runs a local tdock-server (found as tdock.server.find_binary does)
in the foreground, prints its address and a line of Python to connect, and
stops it on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys

import tdock
from tdock import errors
from tdock.server import LocalServer


def _serve(opts: argparse.Namespace) -> int:
    extra = [a for a in opts.server_args if a != "--"]
    server = LocalServer(binary=opts.server, listen=opts.listen,
                         metrics_listen=opts.metrics_listen, data_dir=opts.data_dir,
                         config=opts.config, args=extra,
                         log=sys.stderr if opts.verbose else None)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C
    server.start()
    print(f"tdock-server listening on {server.address}"
          + (f", metrics on {server.metrics_url}" if server.metrics_url else ""))
    print(f"  connect: import tdock; client = tdock.Client({server.address!r})")
    print("  Ctrl-C stops it", flush=True)
    try:
        code = server.process.wait()
        print(f"tdock-server exited with code {code}", file=sys.stderr)
        return code or 1
    except KeyboardInterrupt:
        return server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tdock", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a local tdock-server")
    serve.add_argument("--server", help="the tdock-server binary (default: "
                       "$TDOCK_SERVER_BIN, then the wheel's own, then tdock-server on PATH)")
    serve.add_argument("--listen", default="127.0.0.1:50051")
    serve.add_argument("--metrics_listen", default="127.0.0.1:9464")
    serve.add_argument("--data_dir", help="persist docks here (default: in memory)")
    serve.add_argument("--config", help="a YAML spec of docks to create at start")
    serve.add_argument("-v", "--verbose", action="store_true",
                       help="copy the server's log to stderr")
    serve.add_argument("server_args", nargs=argparse.REMAINDER,
                       help="further tdock-server flags, after --")
    sub.add_parser("version", help="print the client's version")
    opts = parser.parse_args(argv)
    if opts.command == "version":
        print(f"tdock {tdock.__version__}")
        return 0
    try:
        return _serve(opts)
    except errors.TdockError as e:
        print(f"tdock: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
