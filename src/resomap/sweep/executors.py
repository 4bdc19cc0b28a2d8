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
from typing import Any

from resomap.config import Config, build, to_dict
from resomap.config.groups import group_options, register_group
from resomap.registry import Registry
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


def trial_spec(trial: Trial, parent_run_id: str | None) -> dict[str, Any]:
    """A JSON-able description of a trial for a worker process or a Ray task."""
    return {
        "config": to_dict(trial.cfg),
        "model": trial.model,
        "resolution": trial.resolution,
        "seed": trial.seed,
        "parent_run_id": parent_run_id,
        "cwd": os.getcwd(),  # where relative experiment paths resolve
    }


def run_trial_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Worker side: rebuild the trial, run it with its own tracker, return the result as a dict."""
    if spec.get("cwd") and os.path.isdir(spec["cwd"]) and os.getcwd() != spec["cwd"]:
        os.chdir(spec["cwd"])  # a Ray worker may have been started elsewhere (on a cluster the path must be shared)
    from resomap.sweep.builtins import register_builtins

    register_builtins()  # a fresh worker process: the registries' config groups and checks
    cfg = build(spec["config"])
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
    from resomap.errors import ConfigError

    try:
        import ray
    except ImportError:
        raise ConfigError("sweep.executor is 'ray' but Ray is not installed; pip install 'resomap[ray]'") from None
    if ray.is_initialized():
        return ray, False
    try:
        address = group_options(cfg.sweep, "ray").address
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"sweep.ray.address={address!r}: cannot start or join Ray ({first})") from None
    log.info("Ray: %s CPU(s), %s GPU(s)", ray.cluster_resources().get("CPU", 0), ray.cluster_resources().get("GPU", 0))
    return ray, True


@dataclasses.dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # ray.init(address=...); null starts a local Ray
    gpus_per_trial: float = 1.0  # Ray resource request per trial (on a GPU cluster)
    cpus_per_trial: float = 1.0  # Ray resource request per trial


@register_executor("ray", options=RayOptions)
def ray_executor(trials: list[Trial], *, cfg: Config, tracker, parent_run_id, progress, report) -> list[TrialResult]:
    """Each trial a Ray task with its CPU/GPU request, on a local Ray or a cluster.

    `sweep.ray.address` joins an existing cluster, null starts a local Ray over this machine's cores. A task is
    not retried: one that raises or dies fails only its trial (rerun it with --rerun-failed; it resumes from its
    last.pt). On a cluster, experiment.output_dir and the MLflow store must be reachable from every node."""
    if not trials:
        return []
    ray, started_here = _start_ray(cfg)
    import torch

    opts = group_options(cfg.sweep, "ray")
    gpus = opts.gpus_per_trial if torch.cuda.is_available() or opts.address else 0
    remote = ray.remote(num_cpus=opts.cpus_per_trial, num_gpus=gpus, max_retries=0)(run_trial_from_spec)
    pending = {remote.remote(trial_spec(t, parent_run_id)): (t, time.perf_counter()) for t in trials}
    results = []
    try:
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
