"""Start the MLflow UI over the project's tracking store (binds 127.0.0.1 unless told otherwise; a bind beyond
loopback is said in one warning line, as the store has no authentication)."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from resomap.config.schema import Config
from resomap.errors import ResoMapError
from resomap.tracking.mlflow_store import default_tracking_uri

log = logging.getLogger(__name__)


def bound_address(host: str, port: int = 0) -> tuple[socket.AddressFamily, tuple]:
    """(family, socket address) that `--host host` binds; a host that is no IP address nor a name this machine
    resolves is refused in one line (ResoMapError)."""
    if not _is_ip(host) and re.fullmatch(r"[0-9.]+", host):  # 999.1.1.1: no address, and no name to look up
        raise ResoMapError(f"--host {host} is not a valid IP address; {_HOSTS}")
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError):
        why = "is neither an IP address nor a host name this machine resolves"
        raise ResoMapError(f"--host {host} {why}; {_HOSTS}") from None
    return family, addr


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_bind(host: str, port: int) -> str:
    """The address `host` binds to, after checking that `port` can be bound on it: a host that is no address (or
    resolvable name) of this machine and a taken port are each refused in one line (ResoMapError)."""
    family, addr = bound_address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ResoMapError(f"port {port} on {host} is taken; pass --port with a free one") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                what = "address" if _is_ip(host) else f"host name (it resolves to {addr[0]})"
                raise ResoMapError(
                    f"--host {host} is not an {what} of this machine, so it cannot be bound; {_HOSTS}"
                ) from None
            raise ResoMapError(f"cannot bind {host} port {port}: {exc.strerror or exc}") from None
    return str(addr[0])


_HOSTS = "pass 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of this machine's addresses"


def exposed(address: str) -> bool:
    """Whether a server bound to `address` can be reached from other machines (anything but loopback)."""
    return not ipaddress.ip_address(address).is_loopback


def exposure_warning(address: str, port: int, names: Sequence[str] = ()) -> str:
    """The two lines said when the unauthenticated MLflow store is bound beyond loopback: who can reach it, and
    which host names (`names`, from `served_names`) requests may be addressed to."""
    where = f"{address}:{port}" + (" (every interface)" if ipaddress.ip_address(address).is_unspecified else "")
    if "*" in names:
        hosts = f"{ENV_ALLOWED_HOSTS} allows every host name (*), so MLflow's DNS-rebinding protection is off"
    else:
        hosts = (
            f"it answers requests addressed to {', '.join([*names, 'localhost'])} or a private address;"
            " any other host name is refused (HTTP 403; add one with --allowed-hosts)"
        )
    return (
        f"the MLflow server on {where} is open to anyone who can reach this machine, with no authentication"
        " (runs, artifacts and deletions); to restrict it bind 127.0.0.1 or put it behind an authenticating proxy"
        f"\n  {hosts}"
    )


# MLflow 3 refuses a request whose Host header it does not allow (HTTP 403, against DNS rebinding); by default it
# allows loopback and the private address ranges only, so a machine's public address or name printed by
# `resomap server --host 0.0.0.0` was refused. Any list given to MLflow (its --allowed-hosts) replaces that default,
# so the list names it again (as mlflow.server.security_utils.get_default_allowed_hosts makes it; written out, as
# importing mlflow takes seconds): a server answers at least what it answered before.
MLFLOW_DEFAULT_HOSTS = (
    *("localhost", "127.0.0.1", "[::1]", "0.0.0.0"),
    *("localhost:*", "127.0.0.1:*", "[[]::1]:*", "0.0.0.0:*"),  # "[[]": a literal "[" in MLflow's fnmatch patterns
    *("192.168.*", "10.*", *(f"172.{i}.*" for i in range(16, 32)), "fc00:*", "fd00:*"),
)
ENV_ALLOWED_HOSTS = "MLFLOW_SERVER_ALLOWED_HOSTS"  # MLflow's own setting: its entries are kept, as written


def host_header(name: str) -> str:
    """`name` as a Host header carries it: an IPv6 address in brackets."""
    return f"[{name}]" if ":" in name and _is_ip(name) else name


def env_allowed_hosts() -> list[str]:
    """The entries of MLFLOW_SERVER_ALLOWED_HOSTS, as written (MLflow's own setting, kept when ResoMap names hosts)."""
    return [h.strip() for h in os.environ.get(ENV_ALLOWED_HOSTS, "").split(",") if h.strip()]


def served_names(address: str, host: str, extra: Sequence[str] = (), env: bool = True) -> list[str]:
    """The host names and addresses (as Host headers carry them) that requests to a server bound to `address`
    (`--host host`) may be addressed to besides loopback and private addresses: beyond loopback this machine's
    addresses (every one for a wildcard bind, else `address`) and names; then `extra` (--allowed-hosts) and, with
    `env`, the entries of MLFLOW_SERVER_ALLOWED_HOSTS."""
    names: list[str] = []
    if exposed(address):
        names.append(reachable_host(address))  # the address printed for other machines first
        if ipaddress.ip_address(address).is_unspecified:
            import psutil

            for addrs in psutil.net_if_addrs().values():
                names += [a.address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
        else:
            names.append(address)
        names += [host, socket.gethostname(), socket.getfqdn()]
    names += extra
    if env:
        names += env_allowed_hosts()
    out: list[str] = []
    for name in map(host_header, names):
        if name and name not in out and not _in_mlflow_default(name):
            out.append(name)
    return out


def _in_mlflow_default(name: str) -> bool:
    """Loopback and the wildcard addresses, which MLflow's default allows; also a link-local address with its
    zone (fe80::1%eth0), which no Host header carries."""
    if name == "localhost" or "%" in name:
        return True
    try:
        ip = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def allowed_hosts(address: str, host: str, port: int, extra: Sequence[str] = ()) -> list[str] | None:
    """MLflow's --allowed-hosts for a server bound to `address` on `port`: None on loopback with no `extra` (MLflow's
    default, as ever); else MLflow's default, every name of `served_names` with and without the port (a Host header
    carries the port unless it is the scheme's default, as behind a proxy) and MLFLOW_SERVER_ALLOWED_HOSTS as
    written. ResoMap itself never allows "*" (every host)."""
    if not exposed(address) and not extra:
        return None
    hosts = list(MLFLOW_DEFAULT_HOSTS)
    for name in served_names(address, host, extra, env=False):
        has_port = re.search(r":(\d+|\*)$", name) is not None and not name.endswith("]")
        hosts += [name] if has_port else [name, f"{name}:{port}"]
    hosts += env_allowed_hosts()
    return list(dict.fromkeys(hosts))


def reachable_host(address: str) -> str:
    """How other machines (and this one) reach a server bound to `address`: the address itself, or for a wildcard
    (0.0.0.0, ::) this machine's outward address (the one its default route leaves from), else the address its host
    name resolves to, else its host name; never 0.0.0.0, which no other machine can connect to."""
    ip = ipaddress.ip_address(address)
    if not ip.is_unspecified:
        return address
    v6 = ip.version == 6
    family = socket.AF_INET6 if v6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("2001:db8::1" if v6 else "192.0.2.1", 9))  # UDP: no packet is sent, only a route chosen
            own = probe.getsockname()[0]
        except OSError:
            own = None
    if own and not ipaddress.ip_address(own).is_unspecified:
        return own
    name = socket.gethostname()
    try:
        found = [ai[4][0] for ai in socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)]
    except (socket.gaierror, UnicodeError):
        found = []
    outward = [a for a in found if not ipaddress.ip_address(a).is_loopback]
    return outward[0] if outward else name


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def local_url(address: str, port: int) -> str:
    """The server's URL as this machine reaches it (a wildcard bind is reached on loopback)."""
    ip = ipaddress.ip_address(address)
    if ip.is_unspecified:
        address = "::1" if ip.version == 6 else "127.0.0.1"
    return url(address, port)


def ui_command(
    cfg: Config, host: str, port: int, workers: int | None = None, serve: bool = False, allowed: Sequence[str] = ()
) -> list[str]:
    """The server's command line: `python -m resomap.tracking.ui_server` (MLflow's app, imported once, in uvicorn:
    `mlflow server` imports MLflow twice before it answers), or `mlflow server --app-name resomap` where the user
    turned MLflow's job execution on (only `mlflow server` starts its job runner); the same options either way.
    One worker per 2 cores (at least 1) keeps small machines responsive. `serve` (`resomap server`): a tracking
    server for sweeps whose workers log over HTTP: the store may be new, and artifacts are taken in by the server
    (`--serve-artifacts`) into <output_dir>/mlartifacts, so no worker needs the server's disk. `allowed`: host
    names requests may be addressed to besides this machine's (`allowed_hosts`)."""
    uri = default_tracking_uri(cfg)
    if uri.startswith(("http://", "https://")):
        raise ResoMapError(f"mlflow.tracking_uri is the server {uri}; open it in a browser (nothing to start here)")
    if uri.startswith("sqlite:///") and not serve:
        db = Path(uri[len("sqlite:///") :])
        if not db.exists():
            raise ResoMapError(f"no MLflow store at {db}; run `resomap sweep` or `resomap train` first")
    address = check_bind(host, port)
    n = workers or max(1, (os.cpu_count() or 2) // 2)
    jobs = job_execution()
    exe = [sys.executable, "-m", *(("mlflow", "server") if jobs else ("resomap.tracking.ui_server",))]
    cmd = [*exe, "--backend-store-uri", uri, "--host", host, "--port", str(port), "--workers", str(n)]
    if serve:
        if uri.startswith("sqlite:///"):
            Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        artifacts = (Path(cfg.experiment.output_dir) / "mlartifacts").resolve()
        cmd += ["--serve-artifacts", "--artifacts-destination", str(artifacts)]
    hosts = allowed_hosts(address, host, port, allowed)
    if hosts is not None:
        cmd += ["--allowed-hosts", ",".join(hosts)]
    if jobs and _app_registered():
        cmd += ["--app-name", APP_NAME]
    elif jobs:
        log.warning("resomap's MLflow app is not installed (pip install -e .); the UI opens on MLflow's GenAI view")
    return cmd


APP_NAME = "resomap"  # resomap.tracking.ui_app, registered in pyproject.toml's mlflow.app entry points


def _app_registered() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == APP_NAME for ep in entry_points(group="mlflow.app"))


def wait_until_up(url: str, timeout_s: float = 240.0, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


# What browsing needs, nothing more: MLflow 3's server otherwise starts a job runner and six Huey task consumers
# (GenAI scorers, trace rollups, periodic tasks) that poll the store all the time, measured at about 60% of a core
# on an idle 2-core machine (0.2% without them; scripts/benchmark_ui.py).
LIGHT_SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "GIT_PYTHON_REFRESH": "quiet"}


def server_env() -> dict[str, str]:
    """The environment of the server process: the light settings unless the user set them otherwise."""
    return {**LIGHT_SERVER_ENV, **os.environ}


def job_execution() -> bool:
    """Whether the user turned MLflow's job execution on (MLFLOW_SERVER_ENABLE_JOB_EXECUTION, read as MLflow reads
    it): `mlflow server` then starts its job runner, which ResoMap's own server process does not."""
    return server_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"].strip().lower() in ("true", "1")


def ui_log_path(cfg: Config) -> Path:
    """The server's log: <output_dir>/.cache/mlflow-ui.log (ignored by git, out of the project root's listing)."""
    return Path(cfg.experiment.output_dir) / ".cache" / "mlflow-ui.log"


def start_ui(
    cfg: Config,
    host: str = "127.0.0.1",
    port: int = 5000,
    workers: int | None = None,
    serve: bool = False,
    allowed: Sequence[str] = (),
) -> subprocess.Popen:
    """Start the server in the background, in its own process group (mlflow server and the workers it starts), and
    return its process; the caller stops it with `stop_ui`. `serve`, `allowed`: see `ui_command`. A host beyond
    loopback is warned about (anyone reaching the machine can read and delete runs; the host names it answers) once
    every check passed."""
    cmd = ui_command(cfg, host, port, workers, serve, allowed)  # every check first: an error is the only line said
    address = str(bound_address(host, port)[1][0])
    if exposed(address):
        log.warning("%s", exposure_warning(address, port, served_names(address, host, allowed)))
    env = server_env()
    log_path = ui_log_path(cfg)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log_file:  # the child keeps its own handle
        proc = subprocess.Popen(
            cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
    try:
        up = wait_until_up(local_url(address, port), proc=proc)
    except BaseException:  # interrupted while waiting: leave nothing running
        stop_ui(proc)
        raise
    if not up:
        stop_ui(proc)
        lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise ResoMapError(f"the MLflow UI did not start ({log_path}): {lines[-1] if lines else 'no output'}")
    return proc


def stop_ui(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """Stop the server and every process of its group (SIGTERM, then SIGKILL after `grace_s`): terminating only
    `mlflow server` left its uvicorn worker listening on the port."""
    import signal

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + wait_s  # the leader is gone: wait for the rest of its group
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.1)
        if not _group_alive(proc.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def resomap_experiments(cfg: Config, base: str) -> dict[str, str]:
    """{experiment name: its id} for the experiments of the store at `base` that ResoMap logged to (they carry its
    sweep view, resomap.tracking.views), the config's own first, then the most recent (`view_link` makes their
    links)."""
    import json
    import urllib.parse

    from resomap.tracking.views import VIEW_TAG

    query = urllib.parse.urlencode({"max_results": 100, "order_by": "last_update_time DESC"})
    try:
        with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/search?{query}", timeout=10) as resp:
            found = json.load(resp).get("experiments", [])
    except (OSError, ValueError):
        return {}
    ours = [e for e in found if any(t.get("key") == VIEW_TAG for t in e.get("tags", []))]
    name = cfg.mlflow.experiment or cfg.experiment.name
    ours.sort(key=lambda e: e["name"] != name)  # stable: the rest stay most recent first
    return {e["name"]: e["experiment_id"] for e in ours}


def view_link(base: str, experiment_id: str, parallel: bool = False, charts: bool = False) -> str:
    """The link to a ResoMap view of an experiment's runs (resomap.tracking.views): the sweep view, as a table or
    (`charts`) on its charts against resolution, or (`parallel`) the parallel-coordinates view."""
    from resomap.tracking.views import PARALLEL_KEY, VIEW_KEY

    key, mode = (PARALLEL_KEY, "CHART") if parallel else (VIEW_KEY, "CHART" if charts else "TABLE")
    view = f"runs?viewStateShareKey={key}&workflowType=machine_learning&compareRunsMode={mode}"
    return f"{base}/#/experiments/{experiment_id}/{view}"
