"""Executors run a list of trials: `local` (in this process, one after another), `local-gpus` (one worker process
per visible GPU, pinned with CUDA_VISIBLE_DEVICES), `ray` (a Ray task per trial, on a local or remote cluster).

The two that run trials elsewhere also run the ETA's cost probe there (resomap.sweep.eta: local-gpus in a worker
process on the first GPU, ray as a task with a trial's resources, beside the first trials) and tell the ETA how
many trials run at once (`progress.eta.slots`)."""

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

from resomap import interrupts
from resomap.config import Config, build, to_dict
from resomap.config.groups import group_options, register_group
from resomap.errors import ConfigError
from resomap.registry import Registry
from resomap.sweep.cluster import check_address, check_cluster
from resomap.sweep.identity import Trial
from resomap.sweep.trial import TrialResult, run_trial
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
    parent run it logs under, the driver's working directory (where a relative output folder resolves), the
    torch threads it may use (None: torch's default) and the data's lines the driver said."""
    from resomap.data.verify import said_lines

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
        "said": said_lines(),  # the skipped images the driver said ahead of the trials: not said again there
    }


def run_trial_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Worker side: rebuild the trial, run it with its own tracker, return the result as a dict, with the seconds
    it took here (`task_seconds`: a Ray task's time in the queue is not the trial's)."""
    start = time.perf_counter()
    trial = _trial_from_spec(spec)
    result = run_trial(trial, tracker=make_tracker(trial.cfg), parent_run_id=spec.get("parent_run_id"))
    return {**result.to_dict(), "task_seconds": time.perf_counter() - start}


def probe_from_specs(specs: list[dict[str, Any]]) -> dict[str, Any]:
    """Worker side of the ETA's cost probe (resomap.sweep.eta.probe) of the trials of `specs`, measured where the
    trials run: {"probes": {"model@resolution": Probe fields}, "lines": what the probe reported}."""
    from resomap.sweep.eta import probe

    lines: list[str] = []
    found = probe([_trial_from_spec(spec) for spec in specs], lines.append)
    return {"probes": {f"{m}@{r}": dataclasses.asdict(p) for (m, r), p in found.items()}, "lines": lines}


def probes_from(found: dict[str, Any]) -> dict[tuple[str, int], Any]:
    """`probe_from_specs`'s probes as the ETA takes them: {(model, resolution): Probe}."""
    from resomap.sweep.eta import Probe

    pairs = {}
    for name, fields in (found.get("probes") or {}).items():
        model, _, resolution = name.rpartition("@")
        pairs[(model, int(resolution))] = Probe(**fields)
    return pairs


def _trial_from_spec(spec: dict[str, Any]) -> Trial:
    """The trial of a spec, in a worker. A relative output folder resolves against the driver's working directory
    (which must then exist here: one machine or a shared path); an absolute one (sweep.ray.storage) needs no
    working directory at all."""
    from resomap.data.verify import said
    from resomap.sweep.builtins import register_builtins

    register_builtins()  # a fresh worker process: the registries' config groups and checks
    said(spec.get("said") or [])  # the driver's data check said them before any trial started
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
    return Trial(spec["model"], spec["resolution"], spec["seed"], cfg)


def probed(trials: list[Trial], cfg: Config) -> list[Trial]:
    """The trials whose pairs the cost probe measures (the first of each model x resolution); [] when
    sweep.cost_probe is off or there is at most one trial (nothing left to estimate after it)."""
    from resomap.sweep.eta import first_of_pairs

    return first_of_pairs(trials) if cfg.sweep.cost_probe and len(trials) > 1 else []


def _probe_found(found: dict[str, Any], progress: Any, report: Callable[[str], None], where: str) -> None:
    """A probe's answer from a worker: its probes into the ETA, its lines reported, saying where it ran."""
    progress.eta.probes = probes_from(found)
    for line in found.get("lines") or []:
        report(f"{line} ({where})")


@register_executor("local")
def local(trials: list[Trial], *, cfg: Config, tracker, parent_run_id, progress, report) -> list[TrialResult]:
    """Trials one after another in this process."""
    results = []
    for trial in trials:
        interrupts.check()  # a Ctrl-C lost in a callback: no trial starts after it
        start = time.perf_counter()
        result = run_trial(trial, tracker=tracker, parent_run_id=parent_run_id)
        progress.record(result, time.perf_counter() - start)
        report(progress.trial_line(result, time.perf_counter() - start))
        results.append(result)
    return results


@register_executor("local-gpus")
def local_gpus(trials: list[Trial], *, cfg: Config, tracker, parent_run_id, progress, report) -> list[TrialResult]:
    """One worker process per visible GPU at a time; each sees only its GPU (CUDA_VISIBLE_DEVICES)."""
    if not trials:
        return []
    import torch

    gpus = _visible_gpus() if torch.cuda.is_available() else []
    if not gpus:
        report("[sweep] local-gpus: no GPU visible, running trials one at a time on this device")
        gpus = [None]
    progress.eta.slots = len(gpus)
    queue, running, results = list(trials), {}, []
    first = probed(trials, cfg)
    if first:  # the first GPU probes while the others start on the trials
        running[gpus[0]] = (None, _start_worker({"probe": [trial_spec(t, None) for t in first]}, gpus[0]), 0.0)
    while queue or running:
        interrupts.check()
        for gpu in gpus:
            if gpu not in running and queue:
                trial = queue.pop(0)
                running[gpu] = (trial, _spawn(trial, parent_run_id, gpu), time.perf_counter())
        for gpu, (trial, proc, start) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[gpu]
            if trial is None:
                _probe_collected(proc, progress, report, f"GPU {gpu}" if gpu is not None else "a worker process")
                continue
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
    return _start_worker(trial_spec(trial, parent_run_id), gpu)


def _start_worker(spec: dict[str, Any], gpu: str | None) -> subprocess.Popen:
    """A worker process (resomap.sweep.worker) given `spec` on stdin, seeing only `gpu` when one is named."""
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
    proc.stdin.write(json.dumps(spec))
    proc.stdin.close()
    return proc


def _answer(proc: subprocess.Popen) -> Any:
    """What a finished worker printed last (one JSON line); ValueError when it printed none."""
    out = proc.stdout.read() if proc.stdout else ""
    return json.loads(out.strip().splitlines()[-1] if out.strip() else "")


def _probe_collected(proc: subprocess.Popen, progress: Any, report: Callable[[str], None], where: str) -> None:
    """The probe worker's answer into the ETA; one that gave none leaves it per pixel."""
    try:
        _probe_found(_answer(proc), progress, report, where)
    except (ValueError, TypeError, AttributeError):
        log.info("cost probe worker exited with code %s and no probes: the ETA stays per pixel", proc.returncode)


def _collect(trial: Trial, proc: subprocess.Popen) -> TrialResult:
    """The worker's result; a worker stopped by Ctrl-C or SIGTERM left its trial resumable (resomap.sweep.worker):
    the sweep stops too, with no failure recorded."""
    if proc.returncode in {code for sig in interrupts.WATCHED for code in (128 + sig, -sig)}:
        raise KeyboardInterrupt
    try:
        return TrialResult.from_dict(_answer(proc))
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
    # null: a Ray of this sweep's own. ray.init(address=None) would join the newest Ray started on this machine
    # (another sweep's, a test's, or a dead one's stale record), unless RAY_ADDRESS names the cluster to join.
    join = address or (None if os.environ.get("RAY_ADDRESS") else "local")
    try:
        ray.init(address=join, include_dashboard=False, log_to_driver=False)
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
    # ray.init(address=...): host:port of a running head, 'auto', or null (a Ray of its own; RAY_ADDRESS's if set)
    address: str | None = None
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
        progress.eta.slots = _ray_slots(ray.cluster_resources(), opts.cpus_per_trial, gpus)
        task = ray.remote(num_cpus=opts.cpus_per_trial, num_gpus=gpus, max_retries=opts.max_retries)
        remote = task(run_trial_from_spec)
        uri = getattr(tracker, "uri", None)
        first = probed(trials, cfg)  # submitted first, so a worker takes it first
        probing = task(probe_from_specs).remote([trial_spec(t, None, uri, threads) for t in first]) if first else None
        pending = {remote.remote(trial_spec(t, parent_run_id, uri, threads)): (t, time.perf_counter()) for t in trials}
        results = []
        while pending:
            interrupts.check()
            done, _ = ray.wait([*pending, *([probing] if probing else [])], num_returns=1)
            if probing is not None and done[0] == probing:
                try:
                    _probe_found(ray.get(probing), progress, report, "a Ray task")
                except Exception as exc:  # the trials report their own errors; the ETA stays per pixel
                    log.info("cost probe task failed (%s): the ETA stays per pixel", exc)
                probing = None
                continue
            trial, start = pending.pop(done[0])
            seconds = None
            try:
                payload = ray.get(done[0])
                seconds = payload.pop("task_seconds", None)
                result = TrialResult.from_dict(payload)
            except Exception as exc:  # a task that raised or died (worker killed, node lost) fails only its trial
                cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the task's own exception
                result = _lost(trial, f"Ray task failed: {type(cause).__name__}: {cause}".splitlines()[0])
            seconds = seconds or time.perf_counter() - start  # since submission: the queue's wait included
            progress.record(result, seconds)
            report(progress.trial_line(result, seconds))
            results.append(result)
    finally:
        if started_here:
            ray.shutdown()
    return results


def _ray_slots(resources: dict[str, float], cpus_per_trial: float, gpus_per_trial: float) -> int:
    """How many trials the cluster runs at once: its CPUs (and GPUs, when trials ask for them) over a trial's."""
    slots = int(resources.get("CPU", 0) // cpus_per_trial) if cpus_per_trial > 0 else 1
    if gpus_per_trial:
        slots = min(slots, int(resources.get("GPU", 0) // gpus_per_trial))
    return max(slots, 1)
