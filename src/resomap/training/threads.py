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

A machine measures once per training step: the first measurement of a step (the model, its input batch's shape and
dtype, the precision, the optimizer) is also kept in this machine's record (MACHINE_FILE in `cache_dir()`: CPU
model, usable cores, torch version and thread candidates in its key), and every later fit of that step on this
machine trains at that count, whatever the load when it starts: a sweep run idle and the same sweep run beside
busy processes train at one count and give identical predictions (docs/performance.md "What makes two runs
bit-identical").
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
MACHINE_FILE = "threads.json"  # this machine's records, in cache_dir(): {machine key: {step key: record}}
KEPT_SLOWER = 4.0  # a kept count's first epoch this many times slower per image than measured: a warning
CACHE_ENV = "RESOMAP_CACHE_DIR"  # where this machine's records are kept (default: $XDG_CACHE_HOME/resomap)


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
        return kept_record(kept, "kept from the checkpoint resumed")
    kept = stored_record(*store) if store is not None else None
    if kept is not None:
        return kept_record(kept, "kept from the trial's first measurement")
    return None


def kept_record(kept: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of a measured record a fit reuses, its reason saying where it came from (once: a record kept from a
    kept one keeps the first source)."""
    record, why = copy.deepcopy(kept), str(kept.get("reason", ""))
    record["reason"] = why if why.startswith("kept") else f"{source} ({why})"
    return record


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


def cache_dir() -> Path:
    """This user's resomap cache on this machine: $RESOMAP_CACHE_DIR, else $XDG_CACHE_HOME/resomap, else
    ~/.cache/resomap."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "resomap"


def machine_key() -> str:
    """What a thread count's speed depends on besides the step: the CPU model, the cores this process may use,
    torch's version and default count, and the candidate counts (OMP_NUM_THREADS caps them)."""
    from resomap.runtime import cpu_model

    parts = [cpu_model(), len(usable_cpus()), torch.__version__, default_threads(), thread_candidates()]
    return json.dumps(parts, separators=(",", ":"))


def step_key(model: torch.nn.Module, x: torch.Tensor, optimizer: Any, amp: Any, channels_last: bool) -> str:
    """A training step as its speed at a thread count depends on it: the model's class and parameter count, the
    batch's shape and dtype, the autocast dtype, the memory format and the optimizer's class."""
    kind = type(model)
    params = sum(p.numel() for p in model.parameters())
    parts = [f"{kind.__module__}.{kind.__qualname__}", params, list(x.shape), str(x.dtype), str(amp), channels_last]
    return json.dumps([*parts, type(optimizer).__name__], separators=(",", ":"))


def machine_record(step: str) -> dict[str, Any] | None:
    """This machine's record for `step` (`keep_machine_record`), None when there is none or the file is unreadable
    (measure again)."""
    try:
        saved = json.loads((cache_dir() / MACHINE_FILE).read_text())
        found = saved[machine_key()][step]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return _recorded(found)


def keep_machine_record(step: str, record: dict[str, Any]) -> None:
    """Add `record` for `step` to this machine's records: under a lock (two sweeps measuring at once keep both
    steps), written atomically; the first record of a step stays (it is the one earlier fits trained at). Not
    written (a warning) when the cache folder refuses: the fit goes on, the next fit of the step measures again."""
    from filelock import FileLock, Timeout  # torch's own dependency

    from resomap.atomic import write_text

    if not record.get("candidates"):  # nothing was measured (one usable core): nothing to keep
        return
    path = cache_dir() / MACHINE_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=30):
            try:
                saved = json.loads(path.read_text())
            except (OSError, ValueError):
                saved = {}
            saved = saved if isinstance(saved, dict) else {}
            key = machine_key()
            mine = saved.get(key) if isinstance(saved.get(key), dict) else {}
            if _recorded(mine.get(step)) is None:
                saved[key] = {**mine, step: record}
                write_text(path, json.dumps(saved, indent=1, sort_keys=True))
    except (OSError, Timeout) as exc:
        log.warning("%s not written (%s): the next fit of this step measures its thread count again", path, exc)


def warn_if_slower(record: dict[str, Any] | None, epoch: dict[str, Any], name: str) -> None:
    """A kept count (this machine's record, the trial's, a checkpoint's) whose first epoch (`epoch`, its history
    entry) ran more than KEPT_SLOWER times slower per image than its steps when measured: the machine is busier
    than it was then. Said once per fit, with the way to speed it up; the count is kept (results do not follow the
    load)."""
    record = record or {}
    measured = (record.get("candidates") or {}).get(str(record.get("chosen")))
    rate = epoch.get("train/images_per_s")
    if not str(record.get("reason", "")).startswith("kept") or not measured or not rate or rate != rate:
        return
    now = 1.0 / rate
    if now > KEPT_SLOWER * measured:
        log.warning(
            "%s: %d torch thread(s) kept from an earlier measurement run %.0fx slower per image than when measured "
            "(%.3g s against %.3g s): this machine is busier now. The count is kept so the results do not depend on "
            "the load; for speed set system.threads=1 (results then differ in the last bits)",
            name, record["chosen"], now / measured, now, measured,
        )  # fmt: skip


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
