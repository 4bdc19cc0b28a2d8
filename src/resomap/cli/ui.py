"""`resomap ui`: the MLflow UI over the project's tracking store."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from resomap.cli.args import add_config_args, load_config, port, positive_int


def cmd_ui(args: argparse.Namespace) -> int:
    from resomap.tracking.ui import experiment_links, start_ui

    cfg = load_config(args)
    proc = start_ui(cfg, args.host, args.port, args.workers)
    base = f"http://{args.host}:{args.port}"
    print(f"MLflow UI: {base}  (Ctrl-C stops it)", flush=True)
    for name, link in list(experiment_links(cfg, base).items())[:5]:
        print(f"the runs of {name}: {link}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop the server with us
        proc.terminate()
        proc.wait(timeout=30)
        return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("ui", help="start the MLflow UI over the project's tracking store")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port, default=5000, help="port (default 5000)")
    p.add_argument("--workers", type=positive_int, help="server worker processes (default: cores / 2)")
    add_config_args(p)
    p.set_defaults(func=cmd_ui)
