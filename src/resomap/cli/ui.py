"""`resomap ui`: the MLflow UI over the project's tracking store; `resomap server`: the same server as a tracking
server that sweeps on several machines log to (it may start on an empty store and takes in artifacts)."""

from __future__ import annotations

import argparse
import ipaddress
import re
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
    from resomap.tracking.ui import (
        bound_address,
        reachable_host,
        resomap_experiments,
        start_ui,
        stop_ui,
        url,
        view_link,
    )

    try:
        # stops it if interrupted
        proc = start_ui(cfg, args.host, args.port, args.workers, args.serve, args.allowed_hosts)
    except KeyboardInterrupt:
        return 0
    try:
        # as other machines reach it: a wildcard bind (0.0.0.0) is printed as this machine's address
        base = url(reachable_host(str(bound_address(args.host, args.port)[1][0])), args.port)
        # the sweep's runs view first (what a reader opens), then its charts against resolution, then the UI's home
        for i, (name, exp_id) in enumerate(list(resomap_experiments(cfg, base).items())[:5]):
            print(f"the runs of {name}: {view_link(base, exp_id)}", flush=True)
            if i == 0:
                print(f"  its charts against resolution: {view_link(base, exp_id, charts=True)}", flush=True)
                print(f"  its runs in parallel coordinates: {view_link(base, exp_id, parallel=True)}", flush=True)
        print(f"MLflow UI: {base}  (Ctrl-C stops it)", flush=True)
        if args.serve:
            print(f"tracking server: log sweeps to it with mlflow.tracking_uri={base}", flush=True)
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


ALLOWED_HOSTS_HELP = (
    "comma-separated host names or addresses (optionally :PORT, * as a wildcard) that requests may be addressed to"
    " besides this machine's, e.g. a proxy's or a DNS name; any other Host header is refused (MLflow's DNS-rebinding"
    " protection)"
)

# a host name (letters, digits, - _ . and * wildcards) or an IPv6 address in brackets, then an optional :PORT or :*
_HOST_ENTRY = re.compile(
    r"(?P<host>\[[0-9A-Fa-f:.*]+\]|[A-Za-z0-9_*](?:[A-Za-z0-9_.*-]*[A-Za-z0-9_*])?)(?::(?P<port>\d+|\*))?"
)


def allowed_host_list(text: str) -> list[str]:
    """--allowed-hosts: its entries as Host headers carry them (an IPv6 address in brackets); an empty or malformed
    entry, or "*" alone (every host: no protection), is refused in one line."""
    hosts = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise argparse.ArgumentTypeError(f"an empty entry in {text!r}; give host names separated by commas")
        if entry.strip("*:") == "":
            raise argparse.ArgumentTypeError(
                f"{entry!r} would allow every host and turn off MLflow's DNS-rebinding protection; name the hosts"
            )
        try:
            if ipaddress.ip_address(entry).version == 6:  # a bare IPv6 address: bracket it, as a Host header does
                entry = f"[{entry}]"
        except ValueError:
            pass
        match = _HOST_ENTRY.fullmatch(entry)
        if match is None or (match["port"] not in (None, "*") and not 0 < int(match["port"]) < 65536):
            raise argparse.ArgumentTypeError(
                f"{entry!r} is not a host name or address with an optional :PORT, e.g. mlflow.example.org or"
                " 10.0.0.5:5000"
            )
        hosts.append(entry)
    return hosts


def add_commands(sub: Any) -> None:
    p = sub.add_parser("ui", help="start the MLflow UI over the project's tracking store")
    p.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    p.add_argument("--port", type=port, default=5000, help="port (default 5000)")
    p.add_argument("--workers", type=positive_int, help="server worker processes (default: cores / 2)")
    p.add_argument("--allowed-hosts", type=allowed_host_list, default=[], metavar="HOSTS", help=ALLOWED_HOSTS_HELP)
    add_config_args(p)
    p.set_defaults(func=cmd_ui, serve=False, own_signals=True)
    p = sub.add_parser(
        "server",
        help="start an MLflow tracking server over the project's store for sweeps on several machines "
        "(mlflow.tracking_uri=http://HOST:PORT); artifacts go through it",
    )
    p.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    p.add_argument("--port", type=port, default=5000, help="port (default 5000)")
    p.add_argument("--workers", type=positive_int, help="server worker processes (default: cores / 2)")
    p.add_argument("--allowed-hosts", type=allowed_host_list, default=[], metavar="HOSTS", help=ALLOWED_HOSTS_HELP)
    add_config_args(p)
    p.set_defaults(func=cmd_ui, serve=True, own_signals=True)
