"""`resomap ui`: the MLflow UI over the project's tracking store; `resomap server`: the same server as a tracking
server that sweeps on several machines log to (it may start on an empty store and takes in artifacts)."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from resomap.cli.args import add_config_args, load_config, port, positive_int


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def cmd_ui(args: argparse.Namespace) -> int:
    from resomap.cli import preflight

    # the UI needs the store and the experiment's name: the torch-free check of the config (this process only
    # waits on the server; importing the registries would load torch, ~650 MB), else the full load
    cfg = preflight.config(args) or load_config(args)
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in watched}  # restored on return (tests call main in-process)
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C (SIGINT): stop the server with us, from the start
            if before[sig] != signal.SIG_IGN:  # ignored when we started (nohup: SIGHUP): it stays ignored, as
                signal.signal(sig, _interrupt)  # Python itself leaves an ignored SIGINT
        return _serve(cfg, args)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _serve(cfg: Any, args: argparse.Namespace) -> int:
    """Start the server, print its addresses, wait; stop it however the wait ends."""
    from resomap.tracking.ui import bound_address, experiment_links, reachable_host, start_ui, stop_ui, url

    try:
        proc = start_ui(cfg, args.host, args.port, args.workers, serve=args.serve)  # stops it if interrupted
    except KeyboardInterrupt:
        return 0
    try:
        # as other machines reach it: a wildcard bind (0.0.0.0) is printed as this machine's address
        base = url(reachable_host(str(bound_address(args.host, args.port)[1][0])), args.port)
        print(f"MLflow UI: {base}  (Ctrl-C stops it)", flush=True)
        if args.serve:
            print(f"tracking server: log sweeps to it with mlflow.tracking_uri={base}", flush=True)
        for name, link in list(experiment_links(cfg, base).items())[:5]:
            print(f"the runs of {name}: {link}", flush=True)
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (the terminal closed)
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        stop_ui(proc)


HOST_HELP = (
    "interface to bind (default 127.0.0.1: this machine only); any other exposes the store, which has no"
    " authentication, to whoever reaches it"
)


def add_commands(sub: Any) -> None:
    p = sub.add_parser("ui", help="start the MLflow UI over the project's tracking store")
    p.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    p.add_argument("--port", type=port, default=5000, help="port (default 5000)")
    p.add_argument("--workers", type=positive_int, help="server worker processes (default: cores / 2)")
    add_config_args(p)
    p.set_defaults(func=cmd_ui, serve=False)
    p = sub.add_parser(
        "server",
        help="start an MLflow tracking server over the project's store for sweeps on several machines "
        "(mlflow.tracking_uri=http://HOST:PORT); artifacts go through it",
    )
    p.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    p.add_argument("--port", type=port, default=5000, help="port (default 5000)")
    p.add_argument("--workers", type=positive_int, help="server worker processes (default: cores / 2)")
    add_config_args(p)
    p.set_defaults(func=cmd_ui, serve=True)
