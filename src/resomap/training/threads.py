"""Torch's intra-op thread count for training, chosen by measurement (`system.threads: 0` on the CPU).

Why measure: on a CPU shared with other work, torch's default (one thread per core) collapses as soon as another
process keeps a core busy (libgomp's workers spin at every barrier while a partner is descheduled; docs/
performance.md "Threads"), while on an idle machine more threads are faster. Which one holds depends on the load
at the time, so the Trainer times a few real training steps at each candidate count, interleaved, when a fit
starts, and keeps the fastest. The record (`choose_threads`) goes into `trainer.meta['threads']`, the checkpoints
and result.json; a resumed fit keeps the count of the run it resumes (same floating-point reduction order).

A trial measures once: the record is also stored beside its checkpoints (STORE, with the trial's key) as soon as it
is measured, so a trial killed before its first checkpoint, or run again after its checkpoints were discarded,
trains at the count its first attempt chose, whatever the load is when it runs again.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from resomap.runtime import default_threads, usable_cpus

log = logging.getLogger(__name__)

ROUNDS = 3  # interleaved rounds at most (each: one timed step per candidate)
BUDGET_S = 2.0  # no new round once the timed rounds took this long (one at least, if 2+ counts are left)
MARGIN = 0.05  # a higher count must be this much faster per image: fewer threads degrade less when load comes
DROP_RATIO, DROP_S = 3.0, 0.25  # a warm-up step this many times and seconds slower than the fastest: no rounds
STORE = "threads.json"  # a trial's measured record, beside its checkpoints: {"key": trial key, "record": ...}


def thread_candidates(cores: int | None = None, default: int | None = None, capped: bool | None = None) -> list[int]:
    """The counts to try: 1, torch's default and every core this process may use (`os.sched_getaffinity`), plus
    half of them on 8 cores or more. OMP_NUM_THREADS set (a user's or Ray's per-task limit) caps them at torch's
    default, which honours it."""
    cores = cores or len(usable_cpus())
    default = default or default_threads()
    capped = "OMP_NUM_THREADS" in os.environ if capped is None else capped
    top = max(1, min(default, cores) if capped else cores)
    found = {1, top, min(default, top)}
    if top >= 8:
        found.add(top // 2)
    return sorted(found)


@contextlib.contextmanager
def kept_threads() -> Iterator[int]:
    """Run the block and put torch's intra-op thread count back as it was (yields that count)."""
    before = torch.get_num_threads()
    try:
        yield before
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def choose_threads(
    step: Callable[[], object],
    images: int,
    candidates: Sequence[int] | None = None,
    *,
    rounds: int = ROUNDS,
    budget_s: float = BUDGET_S,
    timer: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Time `step` (one real training step of `images` images) at each thread count and pick the lowest median
    seconds per image (a higher count only when more than MARGIN faster). First one untimed step at the first
    count (first-call kernels and allocations), then one warm-up step per count: a count DROP_RATIO times slower
    than the fastest (and DROP_S slower) is out (a collapsed count's steps are the expensive ones); the rest take
    up to `rounds` interleaved rounds, the order rotated per round so a burst of load hits every count alike, with
    no new round once the timed steps took `budget_s`. Torch's thread count is restored; the caller applies the
    choice. Returns {chosen, candidates: {"n": seconds per image}, reason, rounds, seconds}."""
    counts = sorted(set(candidates or thread_candidates()))
    if len(counts) == 1:
        return fixed_record(counts[0], "one usable core: nothing to measure")
    start, per = timer(), max(images, 1)
    with kept_threads():
        warm = {n: _timed(step, n, timer) for n in [counts[0], *counts]}  # the first count's second step counts
        fastest = min(warm.values())
        kept = [n for n in counts if warm[n] <= DROP_RATIO * fastest or warm[n] - fastest <= DROP_S]
        samples, done, timed = {n: [warm[n] / per] for n in counts}, 0, 0.0
        while len(kept) > 1 and done < rounds and (done == 0 or timed < budget_s):
            for n in kept[done % len(kept) :] + kept[: done % len(kept)]:
                took = _timed(step, n, timer)
                timed += took
                samples[n] = [*samples[n][int(done == 0) :], took / per]  # the warm-up figure only until then
            done += 1
    medians = {n: statistics.median(v) for n, v in samples.items()}
    chosen = kept[0]
    for n in kept[1:]:
        if medians[n] < medians[chosen] * (1 - MARGIN):
            chosen = n
    return {
        "chosen": chosen,
        "candidates": {str(n): medians[n] for n in counts},
        "reason": _reason(counts, kept, medians, done),
        "rounds": done,
        "seconds": timer() - start,
    }


def _timed(step: Callable[[], object], threads: int, timer: Callable[[], float]) -> float:
    """Seconds of one `step` at `threads` torch threads."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    t0 = timer()
    step()
    return timer() - t0


def _reason(counts: list[int], kept: list[int], medians: dict[int, float], rounds: int) -> str:
    shown = ", ".join(f"{n}: {medians[n]:.3g}" for n in counts)
    out = [n for n in counts if n not in kept]
    dropped = f"; {', '.join(map(str, out))} out after the warm-up step (>= {DROP_RATIO:g}x slower)" if out else ""
    return f"measured: fastest of {len(counts)} counts, {rounds} interleaved round(s){dropped} (s/image {shown})"


def fixed_record(threads: int, reason: str) -> dict[str, Any]:
    """The record of a count that was not measured (set in the config, CUDA, a resumed run...)."""
    return {"chosen": int(threads), "candidates": {}, "reason": reason, "rounds": 0, "seconds": 0.0}


def preset_record(
    system: Any, device: torch.device, resumed: Any = None, store: tuple[Path, str] | None = None
) -> dict[str, Any] | None:
    """The record when no measurement runs, else None: system.threads set (it wins), CUDA (the GPU does the
    work), torchrun (ranks must step together), torch.compile (compiled kernels may fix their count when
    compiled), a resumed fit whose checkpoint recorded its count (`resumed`: meta['threads'] of the checkpoint
    the fit restored, None for a fresh fit), or the record stored for the trial (`store`: (file, trial key),
    `stored_record`)."""
    from resomap.training import distributed

    if system.threads > 0:
        return fixed_record(system.threads, f"system.threads={system.threads} set in the config")
    if device.type != "cpu":
        return fixed_record(torch.get_num_threads(), f"not measured on {device.type}: the accelerator does the work")
    if distributed.is_distributed():
        return fixed_record(torch.get_num_threads(), "not measured under torchrun: threads as the launcher set them")
    if system.compile:
        return fixed_record(torch.get_num_threads(), "not measured with system.compile: torch's default")
    kept = _recorded(resumed)
    if kept is not None:
        record, why = copy.deepcopy(kept), str(kept.get("reason", ""))
        record["reason"] = why if why.startswith("kept") else f"kept from the checkpoint resumed ({why})"
        return record
    kept = stored_record(*store) if store is not None else None
    if kept is not None:
        record, why = copy.deepcopy(kept), str(kept.get("reason", ""))
        record["reason"] = why if why.startswith("kept") else f"kept from the trial's first measurement ({why})"
        return record
    return None


def stored_record(path: Path, key: str) -> dict[str, Any] | None:
    """The record `store_record` wrote at `path` for the trial `key`; None when there is none, it is unreadable
    (a cut-short file: measure again) or it belongs to another config."""
    try:
        saved = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("key") != key:
        return None
    return _recorded(saved.get("record"))


def store_record(store: tuple[Path, str] | None, record: dict[str, Any]) -> None:
    """Keep a measured record at `store` = (file, trial key), atomically (a kill leaves the old file or the new
    one); nothing without a store. Not written (a warning) when the disk refuses: the fit goes on, and a rerun
    measures again."""
    from resomap.atomic import write_text

    if store is None:
        return
    path, key = store
    try:
        write_text(path, json.dumps({"key": key, "record": record}, indent=1, sort_keys=True))
    except OSError as exc:
        log.warning("%s not written (%s): a rerun of this trial measures its thread count again", path, exc)


def _recorded(record: Any) -> dict[str, Any] | None:
    """A resumed checkpoint's meta['threads'] when it holds a usable count (else None: measure)."""
    try:
        chosen = int(record["chosen"])
    except (TypeError, KeyError, ValueError):  # an older checkpoint without one
        return None
    return record if 1 <= chosen <= max(thread_candidates()) and record.get("candidates") else None


def first_batch(loader: Any) -> tuple | None:
    """The loader's first batch (None when it has none); the iterator is closed (a worker pool is not left
    behind until garbage collection)."""
    batches = iter(loader)
    try:
        return next(batches, None)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def training_state_kept(model: torch.nn.Module, optimizer: Any, scheduler: Any, scaler: Any) -> Iterator[None]:
    """Run the block (training steps that only measure) and put back what a step changes: the weights and
    buffers, the optimizer's state and learning rates, the scheduler, the grad scaler, the RNG states and the
    train/eval mode, so the fit that follows is the one it would have been without them."""
    from resomap.training.checkpoint import rng_state, set_rng_state

    saved = (
        {k: v.detach().clone() for k, v in model.state_dict().items()},
        copy.deepcopy(optimizer.state_dict()),
        copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None,
        copy.deepcopy(scaler.state_dict()) if scaler is not None else None,
        rng_state(),
        model.training,
    )
    try:
        yield
    finally:
        weights, opt, sched, scale, rng, training = saved
        model.load_state_dict(weights)
        optimizer.load_state_dict(opt)
        optimizer.zero_grad(set_to_none=True)
        if sched is not None:
            scheduler.load_state_dict(sched)
        if scale is not None:
            scaler.load_state_dict(scale)
        set_rng_state(rng)
        model.train(training)


def environment_fields(record: dict[str, Any] | None) -> dict[str, str]:
    """result.json's `environment.threads` (the count trained with) and `threads_measured` (seconds per image per
    count, or why nothing was measured); strings like the rest of the environment (MLflow tags
    resomap.env.threads*)."""
    if not record:
        why = "not measured (no training steps: a closed-form fit)"
        return {"threads": str(torch.get_num_threads()), "threads_measured": why}
    cands = record.get("candidates") or {}
    shown = ", ".join(f"{n}: {s:.4g} s/image" for n, s in cands.items())
    return {"threads": str(record["chosen"]), "threads_measured": shown or f"not measured: {record['reason']}"}
