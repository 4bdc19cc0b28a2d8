"""The Ray executor on a cluster: where a sweep's files go, and the checks that end a bad cluster set-up in one line
(exit 2) before any trial starts.

Placement (`placed`): with `sweep.ray.storage` (a folder every node sees at the same path: NFS, a mounted bucket)
the sweep's files go there: `experiment.output_dir` becomes that absolute path for the driver and every worker,
so checkpoints, per-trial results, the uint8 cache and the summary are written and read there, and the driver's
working directory plays no part. The MLflow store stays where it was (`mlflow.tracking_uri`, else the project's
mlflow.db, where `resomap ui` looks); a cluster of several nodes needs an `http://` server (`resomap server`): no
other node can write the driver's SQLite file, and SQLite on a network filesystem has no safe locking.

Checks (`check_address`, `check_tracking`, `check_cluster`): an address nothing answers on (Ray's GCS client
would otherwise wait for minutes), a tracking server that does not answer, per-trial CPUs or GPUs that no node
has, and on every alive node a probe task that the output folder is writable and the data and weight files the
config names exist there; relative paths on a cluster of several nodes are refused (they would resolve against
each worker's own working directory).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import urllib.request
from pathlib import Path
from typing import Any

from resomap.config import Config
from resomap.config.groups import group_options
from resomap.config.schema import is_hub
from resomap.errors import ConfigError
from resomap.tracking import default_tracking_uri

CONNECT_TIMEOUT_S = 5.0  # a Ray head or tracking server that does not answer within this is reported
PROBE_TIMEOUT_S = 120.0  # the per-node probe tasks (a node may need to start a worker process first)
PATH_KEYS = ("root", "manifest")  # dataset options that name files or folders


def placed(cfg: Config) -> Config:
    """`cfg` with experiment.output_dir = sweep.ray.storage (absolute) when the ray executor has a storage path,
    and mlflow.tracking_uri pinned to the store it named before (by default the project folder's mlflow.db, where
    `resomap ui` looks); unchanged otherwise. Object-storage URIs are refused: mount the bucket, give its path."""
    if cfg.sweep.executor != "ray":
        return cfg
    storage = group_options(cfg.sweep, "ray").storage
    if not storage:
        return cfg
    if "://" in storage:
        raise ConfigError(
            f"sweep.ray.storage={storage!r}: give a folder every node sees at the same path (object storage such as"
            " s3:// is not written directly: mount it, e.g. with s3fs or as NFS, and give the mount's path)"
        )
    path = str(Path(storage).expanduser().resolve())
    # the MLflow store does not move with the files: the one the config names, else the project's own
    mlflow = dataclasses.replace(cfg.mlflow, tracking_uri=default_tracking_uri(cfg))
    return dataclasses.replace(cfg, experiment=dataclasses.replace(cfg.experiment, output_dir=path), mlflow=mlflow)


def check_address(address: str | None) -> None:
    """ConfigError when `address` (host:port or ray://host:port) answers no TCP connection within
    CONNECT_TIMEOUT_S; null and 'auto' are left to ray.init."""
    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"sweep.ray.address={address!r}: expected host:port of the Ray head (e.g. 10.0.0.5:6379), 'auto' or null"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"sweep.ray.address={address!r}: no Ray head answers there ({why}); start one with `ray start --head`"
            " or fix the address"
        ) from None


def check_tracking(uri: str) -> None:
    """ConfigError when an http(s) tracking server does not answer /health within CONNECT_TIMEOUT_S (a Ray sweep
    creates its experiment and parent run on the driver before any trial, and every worker logs there)."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise ConfigError(
            f"mlflow.tracking_uri={uri}: the tracking server does not answer ({why}); start it with `resomap server`"
            " or fix the address"
        ) from None


def check_reachable(cfg: Config, tracking_uri: str) -> None:
    """The ray executor's checks that need no Ray: its address and the tracking server answer (ConfigError)."""
    if cfg.sweep.executor == "ray":
        check_address(group_options(cfg.sweep, "ray").address)
        check_tracking(tracking_uri)


def data_paths(cfg: Config) -> dict[str, str]:
    """The files and folders the config names that every worker must read: the dataset's path options and the
    local weight files (config key -> path)."""
    out: dict[str, str] = {}
    name = cfg.data.dataset
    options = group_options(cfg.data, name)
    for key in PATH_KEYS:
        value = getattr(options, key, None) if options is not None else None
        if isinstance(value, str) and value:
            out[f"data.{name}.{key}"] = value
    for model, path in (cfg.models.pretrained or {}).items():
        if not is_hub(path):  # `hub`: each node reads its own cache (resomap.models.hub), not a shared file
            out[f"models.pretrained.{model}"] = str(path)
    return out


def check_cluster(ray: Any, cfg: Config, cpus: float, gpus: float) -> int:
    """Before any trial, on a started or joined Ray: ConfigError (one line) when no node has the per-trial CPUs or
    GPUs, when a cluster of several nodes gets a SQLite tracking store or relative paths, or when some node cannot
    write the output folder or read a data or weight file. Returns the number of alive nodes."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for what, need in (("CPU", cpus), ("GPU", gpus)):
        most = max((float(n.get("Resources", {}).get(what, 0)) for n in nodes), default=0.0)
        if need > most:
            key = f"sweep.ray.{what.lower()}s_per_trial"
            raise ConfigError(
                f"{key}={need:g}: no node of the cluster has that many {what}s (the most: {most:g}); set it to"
                f" {most:g} or less"
            )
    out_dir = cfg.experiment.output_dir
    paths = data_paths(cfg)
    uri = default_tracking_uri(cfg)
    if len(nodes) > 1 and uri.startswith("sqlite:"):
        raise ConfigError(
            f"mlflow.tracking_uri is the SQLite file {uri.removeprefix('sqlite:///')} and the cluster has {len(nodes)}"
            " nodes, which cannot all write it: start `resomap server` and set mlflow.tracking_uri=http://HOST:PORT"
        )
    if len(nodes) > 1:
        relative = {"experiment.output_dir": out_dir, **paths}
        for key, value in relative.items():
            if not Path(value).expanduser().is_absolute():
                fix = f"set {key} to an absolute path every node sees"
                if key == "experiment.output_dir":
                    fix = "set sweep.ray.storage=<a folder every node sees>"
                raise ConfigError(f"{key}={value!r} is relative and the cluster has {len(nodes)} nodes: {fix}")
    absolute = {k: str(Path(v).expanduser().resolve()) for k, v in paths.items()}
    _probe_nodes(ray, nodes, str(Path(out_dir).resolve()), absolute)
    return len(nodes)


def _probe_nodes(ray: Any, nodes: list[dict], out_dir: str, paths: dict[str, str]) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(node_probe)
    on = lambda n: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))  # noqa: E731
    refs = {on(n).remote(out_dir, paths): n for n in nodes}
    ready, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
    if waiting:
        ip = refs[waiting[0]].get("NodeManagerAddress", "?")
        raise ConfigError(f"node {ip} did not answer a probe task within {PROBE_TIMEOUT_S:.0f} s; check that it is up")
    for ref in ready:
        problem = ray.get(ref)
        if problem:
            raise ConfigError(f"node {refs[ref].get('NodeManagerAddress', '?')}: {problem}")


def node_probe(out_dir: str, paths: dict[str, str]) -> str:
    """Runs on one node: '' when `out_dir` can be written there (a file made and removed) and every path exists,
    else what is wrong, in words."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / f".resomap-probe-{socket.gethostname()}-{os.getpid()}"
        marker.write_text("ok", encoding="utf-8")
        marker.unlink()
    except OSError as exc:
        return (
            f"cannot write the output folder {out_dir} ({exc.strerror or type(exc).__name__}); give a folder every"
            " node can write (sweep.ray.storage=...)"
        )
    for key, path in paths.items():
        if not Path(path).exists():
            return f"{key}={path} does not exist there; put it on a path every node sees"
    return ""
