"""Executors run a list of trials: `local` (in this process, one after another), `local-gpus` (one worker process
per visible GPU, pinned with CUDA_VISIBLE_DEVICES), `ray` (a Ray task per trial, on a local or remote cluster)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from resomap.config import Config, build, to_dict
from resomap.config.groups import group_options, register_group
from resomap.errors import ConfigError
from resomap.registry import Registry
from resomap.sweep.cluster import check_address, check_cluster
from resomap.sweep.trial import Trial, TrialResult, run_trial
from resomap.tracking import make_tracker

log = logging.getLogger(__name__)
EXECUTORS: Registry[Callable[..., list[TrialResult]]] = Registry("executor", "resomap sweep --help")
register_group("sweep", EXECUTORS)  # the loader checks the section's selectors and options against it


def register_executor(name: str, *, options: type | None = None):
    """Decorator on `fn(trials, *, cfg, tracker, parent_run_id, progress, report) -> [TrialResult]`; `options`, a
    frozen dataclass, holds the executor's own config keys `sweep.<name>.<field>`."""
    return EXECUTORS.register(name, options=options)


def get_executor(name: str) -> Callable[..., list[TrialResult]]:
    return EXECUTORS.get(name)


def trial_spec(
    trial: Trial, parent_run_id: str | None, tracking_uri: str | None = None, threads: int | None = None
) -> dict[str, Any]:
    """A JSON-able description of a trial for a worker process or a Ray task: its config (with `tracking_uri`,
    the store the driver resolved, so a worker logs where the driver does whatever its environment says), the
    parent run it logs under, the driver's working directory (where a relative output folder resolves) and the
    torch threads it may use (None: torch's default)."""
    config = to_dict(trial.cfg)
    if tracking_uri:
        config["mlflow"] = {**config.get("mlflow", {}), "tracking_uri": tracking_uri}  # mlflow.* is in no trial key
    return {
        "config": config,
        "model": trial.model,
        "resolution": trial.resolution,
        "seed": trial.seed,
        "parent_run_id": parent_run_id,
        "cwd": os.getcwd(),
        "threads": threads,
    }


def run_trial_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Worker side: rebuild the trial, run it with its own tracker, return the result as a dict. A relative
    output folder resolves against the driver's working directory (which must then exist here: one machine or a
    shared path); an absolute one (sweep.ray.storage) needs no working directory at all."""
    from resomap.sweep.builtins import register_builtins

    register_builtins()  # a fresh worker process: the registries' config groups and checks
    cfg = build(spec["config"])
    if not Path(cfg.experiment.output_dir).is_absolute() and os.getcwd() != spec.get("cwd"):
        if not spec.get("cwd") or not os.path.isdir(spec["cwd"]):
            raise ConfigError(
                f"experiment.output_dir={cfg.experiment.output_dir!r} is relative to the driver's folder "
                f"{spec.get('cwd')}, which this worker cannot see; set sweep.ray.storage=<a folder every node sees>"
            )
        os.chdir(spec["cwd"])
    os.environ.pop("MLFLOW_RUN_ID", None)  # an inherited active run must not become this trial's parent
    if spec.get("threads"):
        import torch

        torch.set_num_threads(int(spec["threads"]))  # the trial's CPUs, not every core of a shared node
    trial = Trial(spec["model"], spec["resolution"], spec["seed"], cfg)
    result = run_trial(trial, tracker=make_tracker(cfg), parent_run_id=spec.get("parent_run_id"))
    return result.to_dict()


@register_executor("local")
def local(trials: list[Trial], *, cfg: Config, tracker, parent_run_id, progress, report) -> list[TrialResult]:
    """Trials one after another in this process."""
    results = []
    for trial in trials:
        start = time.perf_counter()
        result = run_trial(trial, tracker=tracker, parent_run_id=parent_run_id)
        progress.record(result, time.perf_counter() - start)
        report(progress.trial_line(result, time.perf_counter() - start))
        results.append(result)
    return results


@register_executor("local-gpus")
def local_gpus(trials: list[Trial], *, cfg: Config, tracker, parent_run_id, progress, report) -> list[TrialResult]:
    """One worker process per visible GPU at a time; each sees only its GPU (CUDA_VISIBLE_DEVICES)."""
    import torch

    gpus = _visible_gpus() if torch.cuda.is_available() else []
    if not gpus:
        report("[sweep] local-gpus: no GPU visible, running trials one at a time on this device")
        gpus = [None]
    queue, running, results = list(trials), {}, []
    while queue or running:
        for gpu in gpus:
            if gpu not in running and queue:
                trial = queue.pop(0)
                running[gpu] = (trial, _spawn(trial, parent_run_id, gpu), time.perf_counter())
        for gpu, (trial, proc, start) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[gpu]
            result = _collect(trial, proc)
            progress.record(result, time.perf_counter() - start)
            report(progress.trial_line(result, time.perf_counter() - start) + f" (GPU {gpu})")
            results.append(result)
        time.sleep(0.5)
    return results


def _visible_gpus() -> list[str]:
    import torch

    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        return [g.strip() for g in env.split(",") if g.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def _spawn(trial: Trial, parent_run_id: str | None, gpu: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    proc = subprocess.Popen(
        [sys.executable, "-m", "resomap.sweep.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    proc.stdin.write(json.dumps(trial_spec(trial, parent_run_id)))
    proc.stdin.close()
    return proc


def _collect(trial: Trial, proc: subprocess.Popen) -> TrialResult:
    out = proc.stdout.read() if proc.stdout else ""
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        return TrialResult.from_dict(json.loads(last))
    except (ValueError, TypeError):
        return _lost(trial, f"worker exited with code {proc.returncode} and no result")


def _lost(trial: Trial, reason: str) -> TrialResult:
    from resomap.models import get_spec

    res = TrialResult(
        trial.key,
        trial.name,
        trial.model,
        get_spec(trial.model).family,
        trial.resolution,
        trial.seed,
        "FAILED",
        error=reason,
        task=trial.cfg.experiment.task,
    )
    res.save(trial.summary_dir)
    return res


def _start_ray(cfg: Config) -> tuple[Any, bool]:
    """The ray module, initialised (unless it already is), and whether this call started it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("sweep.executor is 'ray' but Ray is not installed; pip install 'resomap[ray]'") from None
    if ray.is_initialized():
        return ray, False
    address = group_options(cfg.sweep, "ray").address
    check_address(address)  # ray.init would wait minutes on an address nothing answers
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = ""
        if address and not os.environ.get("RAY_AUTH_MODE"):  # recent Ray heads (2.60 here) ask for a token by default
            hint = "; if the head uses token authentication, set RAY_AUTH_MODE=token (its token in ~/.ray/auth_token)"
        raise ConfigError(f"sweep.ray.address={address!r}: cannot start or join Ray ({first}){hint}") from None
    log.info("Ray: %s CPU(s), %s GPU(s)", ray.cluster_resources().get("CPU", 0), ray.cluster_resources().get("GPU", 0))
    return ray, True


@dataclasses.dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # ray.init(address=...): host:port of a running head, 'auto', or null (a local Ray)
    gpus_per_trial: float = 1.0  # Ray resource request per trial (on a GPU cluster)
    cpus_per_trial: float = 1.0  # Ray resource request per trial; also the trial's torch threads
    # a folder every node sees at the same path (NFS, a mounted bucket): the sweep's checkpoints, results, cache
    # and summary go there (experiment.output_dir becomes it); null: experiment.output_dir, resolved on the driver
    storage: str | None = None
    max_retries: int = 2  # runs again of a trial whose worker or node died; it resumes from its last.pt in storage


@register_executor("ray", options=RayOptions)
def ray_executor(trials: list[Trial], *, cfg: Config, tracker, parent_run_id, progress, report) -> list[TrialResult]:
    """Each trial a Ray task with its CPU/GPU request, on a local Ray or a cluster.

    `sweep.ray.address` joins an existing cluster, null starts a local Ray over this machine's cores. Before any
    trial, every node is probed (`resomap.sweep.cluster.check_cluster`). The experiment and the parent run are
    made here on the driver; a worker logs its child run under the parent by id, to the store the driver resolved.
    A task whose worker or node dies is run again (`max_retries`, elsewhere if the node is gone) and resumes from
    its last.pt; a trial that raises is not retried: it fails alone (rerun it with --rerun-failed)."""
    if not trials:
        return []
    ray, started_here = _start_ray(cfg)
    import torch

    opts = group_options(cfg.sweep, "ray")
    gpus = opts.gpus_per_trial if torch.cuda.is_available() or opts.address else 0
    try:
        nodes = check_cluster(ray, cfg, opts.cpus_per_trial, gpus)
        if nodes > 1:
            report(f"[sweep] Ray: {nodes} nodes; outputs in {Path(cfg.experiment.output_dir).resolve()}")
        threads = max(1, int(opts.cpus_per_trial))
        remote = ray.remote(num_cpus=opts.cpus_per_trial, num_gpus=gpus, max_retries=opts.max_retries)(
            run_trial_from_spec
        )
        uri = getattr(tracker, "uri", None)
        pending = {remote.remote(trial_spec(t, parent_run_id, uri, threads)): (t, time.perf_counter()) for t in trials}
        results = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            trial, start = pending.pop(done[0])
            try:
                result = TrialResult.from_dict(ray.get(done[0]))
            except Exception as exc:  # a task that raised or died (worker killed, node lost) fails only its trial
                cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the task's own exception
                result = _lost(trial, f"Ray task failed: {type(cause).__name__}: {cause}".splitlines()[0])
            progress.record(result, time.perf_counter() - start)
            report(progress.trial_line(result, time.perf_counter() - start))
            results.append(result)
    finally:
        if started_here:
            ray.shutdown()
    return results
