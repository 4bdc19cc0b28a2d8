"""Start the MLflow UI over the project's tracking store (binds 127.0.0.1 unless told otherwise)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from resomap.config.schema import Config
from resomap.errors import ResoMapError
from resomap.tracking.mlflow_store import default_tracking_uri

log = logging.getLogger(__name__)


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ui_command(cfg: Config, host: str, port: int, workers: int | None = None, serve: bool = False) -> list[str]:
    """The `mlflow server` command line; one worker per 2 cores (at least 1) keeps small machines responsive.
    `serve` (`resomap server`): a tracking server for sweeps whose workers log over HTTP: the store may be new,
    and artifacts are taken in by the server (`--serve-artifacts`) into <output_dir>/mlartifacts, so no worker
    needs the server's disk."""
    uri = default_tracking_uri(cfg)
    if uri.startswith(("http://", "https://")):
        raise ResoMapError(f"mlflow.tracking_uri is the server {uri}; open it in a browser (nothing to start here)")
    if uri.startswith("sqlite:///") and not serve:
        db = Path(uri[len("sqlite:///") :])
        if not db.exists():
            raise ResoMapError(f"no MLflow store at {db}; run `resomap sweep` or `resomap train` first")
    if not port_free(host, port):
        raise ResoMapError(f"port {port} on {host} is taken; pass --port with a free one")
    n = workers or max(1, (os.cpu_count() or 2) // 2)
    exe = [sys.executable, "-m", "mlflow", "server"]
    cmd = [*exe, "--backend-store-uri", uri, "--host", host, "--port", str(port), "--workers", str(n)]
    if serve:
        if uri.startswith("sqlite:///"):
            Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        artifacts = (Path(cfg.experiment.output_dir) / "mlartifacts").resolve()
        cmd += ["--serve-artifacts", "--artifacts-destination", str(artifacts)]
    if _app_registered():
        cmd += ["--app-name", APP_NAME]
    else:
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
            time.sleep(0.5)
    return False


# What browsing needs, nothing more: MLflow 3's server otherwise starts a job runner and six Huey task consumers
# (GenAI scorers, trace rollups, periodic tasks) that poll the store all the time, measured at about 60% of a core
# on an idle 2-core machine (0.2% without them; scripts/benchmark_ui.py).
LIGHT_SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "GIT_PYTHON_REFRESH": "quiet"}


def server_env() -> dict[str, str]:
    """The environment of the server process: the light settings unless the user set them otherwise."""
    return {**LIGHT_SERVER_ENV, **os.environ}


def ui_log_path(cfg: Config) -> Path:
    """The server's log: <output_dir>/.cache/mlflow-ui.log (ignored by git, out of the project root's listing)."""
    return Path(cfg.experiment.output_dir) / ".cache" / "mlflow-ui.log"


def start_ui(
    cfg: Config, host: str = "127.0.0.1", port: int = 5000, workers: int | None = None, serve: bool = False
) -> subprocess.Popen:
    """Start the server in the background, in its own process group (mlflow server and the workers it starts), and
    return its process; the caller stops it with `stop_ui`. `serve`: see `ui_command`."""
    cmd = ui_command(cfg, host, port, workers, serve)
    env = server_env()
    log_path = ui_log_path(cfg)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log_file:  # the child keeps its own handle
        proc = subprocess.Popen(
            cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
    try:
        up = wait_until_up(f"http://{host}:{port}", proc=proc)
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


def experiment_links(cfg: Config, base: str) -> dict[str, str]:
    """{experiment name: link to its runs table with ResoMap's columns} for the experiments of the store that
    ResoMap logged to (they carry its shared runs-table view), the config's own first, then the most recent."""
    import json
    import urllib.parse

    from resomap.tracking.mlflow_store import VIEW_KEY, VIEW_TAG

    query = urllib.parse.urlencode({"max_results": 100, "order_by": "last_update_time DESC"})
    try:
        with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/search?{query}", timeout=10) as resp:
            found = json.load(resp).get("experiments", [])
    except (OSError, ValueError):
        return {}
    ours = [e for e in found if any(t.get("key") == VIEW_TAG for t in e.get("tags", []))]
    name = cfg.mlflow.experiment or cfg.experiment.name
    ours.sort(key=lambda e: e["name"] != name)  # stable: the rest stay most recent first
    view = f"runs?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"
    return {e["name"]: f"{base}/#/experiments/{e['experiment_id']}/{view}" for e in ours}
