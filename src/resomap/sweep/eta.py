"""The sweep's ETA: what the trials left will cost, from a probe of each pending (model, resolution) and the
trials done.

The mean time of the trials done is a poor guide: a 128 px trial costs many times a 32 px one, and a model not yet
run costs what it costs. So before the first trial (`sweep.cost_probe`), `probe` does for each pending pair what its
trial will do, on a small scale: builds the pair's data (decoding and caching the resolution, as the trial would:
the cache it makes is the one the trial then reads) and model, and times

    the trial's own first step: its data (from that cache) and its model, built again (`Probe.prepare_s`);
    a few real training steps through the Trainer's own step (`Trainer.probe_seconds`), at the thread count a
               fit would choose under the load of the moment: the pair's predicted training seconds and its
               seconds per image of a training step;
    the trial's explanation stage on one probe image (`explain_s`: that image's seconds, without the explainers'
               one-time set-up, x the probe images), once per model at its smallest resolution and priced at its
               others by their pixels: the part of a trial outside training that grows with the resolution
               (ROAD's imputation, the sanity check's re-explanations: on the default settings most of a 128 px
               tiny_cnn trial), which a model not yet run would otherwise not be priced for at all. Not for the
               model of the first trial: that trial measures it before the ETA is first given.

A pending trial then costs

    training:  the predicted seconds x the share of its planned epochs it will run (early stopping: the mean share
               of that model's trials done, else of those with as many planned epochs, else the geometric middle
               of the fewest early stopping allows and all of them) x k, k = measured /
               predicted seconds per epoch of the trials done (that model's own, shrunk toward all trials',
               shrunk toward 1: the probe counts as one trial)
    the rest:  prepare_s + the explanations (the model's trials done: their explanation stage's seconds, each
               priced at this resolution by its pixels; else explain_s) + what the model's trials done took
               besides these and their training (test evaluation, profiling, MLflow: the mean of that model's, else
               of all trials done; the first trial, which carries the process's one-time imports, counts only
               until two others exist)

and the ETA is the time `slots` parallel workers take for them, each taking the next pending trial when free (one
worker: their sum). The executors that run several trials at once say how many (`slots`): local-gpus one per
visible GPU, ray as many as the cluster's CPUs and GPUs hold at the per-trial request. They run the probe where the
trials run: local-gpus in a worker process on the first GPU, ray as a task with a trial's resources, each beside
the first trials (the ETA of a trial finished before the probe is per pixel).

Without a probe (sweep.cost_probe=false; a pair whose probe failed) a pending trial costs what that model's done
trials cost per pixel, or a model not yet run the mean per pixel of those that have.

Written by hand: no library estimates the run time of a list of heterogeneous jobs from a probe of each.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Pair = tuple[str, int]  # (model, resolution)
PRIOR_WEIGHT = 1.0  # the probe's own prediction counts as this many trials in the training-time calibration


@dataclasses.dataclass(frozen=True)
class Probe:
    train_s: float  # predicted training seconds of a trial of this pair, for `epochs` epochs
    image_s: float  # seconds per image of one training step
    epochs: int = 0  # the epochs (a closed-form model: fits) train_s is for; 0: not known
    fewest: int = 0  # the fewest epochs it can run (early stopping's patience + 1, at most `epochs`); 0: `epochs`
    prepare_s: float = 0.0  # the trial's data (from the resolution cache) and model, built
    explain_s: float = 0.0  # its explanations of the probe set beyond the explainers' set-up; 0: not measured

    def fixed_s(self) -> float:
        """The seconds of the trial outside training that the probe measured."""
        return self.prepare_s + self.explain_s


@dataclasses.dataclass(frozen=True)
class Done:
    pair: Pair
    seconds: float  # the whole trial
    train_s: float | None  # its training (None: it failed; it then calibrates nothing)
    epochs: int = 0  # the epochs it ran (early stopping ends some before the planned ones); 0: not known
    explain_s: float | None = None  # its explanation stage (None: not known; 0: explanations off)


class Eta:
    """Seconds left for the pending trials on `slots` parallel workers; `finished` moves a trial from pending to
    done."""

    def __init__(self, pending: list[Pair], probes: dict[Pair, Probe] | None = None, slots: int = 1):
        self.pending = list(pending)
        self.probes = dict(probes or {})
        self.slots = max(int(slots), 1)
        self.done: list[Done] = []

    def finished(
        self, pair: Pair, seconds: float, train_s: float | None, epochs: int = 0, explain_s: float | None = None
    ) -> None:
        if pair in self.pending:
            self.pending.remove(pair)
        explain = None if explain_s is None else float(explain_s)
        self.done.append(Done(pair, float(seconds), train_s, int(epochs or 0), explain))

    def seconds_left(self) -> float | None:
        """The predicted wall seconds of every pending trial, or None before any trial finished (nothing to
        calibrate the rest of a trial on) or with none pending."""
        if not self.pending or not self.done:
            return None
        return makespan([self.trial_seconds(pair) for pair in self.pending], self.slots)

    def trial_seconds(self, pair: Pair) -> float:
        probe = self.probes.get(pair)
        if probe is None:
            return self._per_pixel(pair)
        train = probe.train_s * self._epoch_share(pair[0], probe) * self._train_factor(pair[0])
        return train + max(probe.prepare_s + self._explain(pair, probe) + self._rest(pair[0]), 0.0)

    def _explain(self, pair: Pair, probe: Probe) -> float:
        """The explanation stage of a pending trial: what the model's trials done spent on theirs, each priced at
        this resolution by its pixels (their mean), else the probe's."""
        own = [d.explain_s * (pair[1] / d.pair[1]) ** 2 for d in self.done if d.pair[0] == pair[0] and d.explain_s]
        return statistics.mean(own) if own else probe.explain_s

    @staticmethod
    def _outside(d: Done, p: Probe) -> float:
        """What a trial done spent outside its training and the parts measured on their own (its data and model,
        its explanations: measured by the trial, else as the probe priced them)."""
        return d.seconds - d.train_s - p.prepare_s - (d.explain_s if d.explain_s is not None else p.explain_s)

    def _calibrated(self) -> list[tuple[Done, Probe]]:
        return [(d, self.probes[d.pair]) for d in self.done if d.train_s is not None and d.pair in self.probes]

    @staticmethod
    def _speed(d: Done, p: Probe) -> float:
        """Measured / predicted seconds per epoch of a trial done (per trial when the epochs are not known)."""
        if d.epochs and p.epochs:
            return (d.train_s / d.epochs) / (p.train_s / p.epochs)
        return d.train_s / p.train_s

    def _epoch_share(self, model: str, probe: Probe) -> float:
        """The share of its planned epochs a pending trial is expected to run (early stopping): the mean over this
        model's trials done, else over the trials done with as many planned epochs; before any, the geometric
        middle of what early stopping allows (between `fewest` and all of them)."""
        if not probe.epochs:
            return 1.0
        rows = [(d, p) for d, p in self._calibrated() if d.epochs and p.epochs]
        own = [d.epochs / p.epochs for d, p in rows if d.pair[0] == model]
        alike = [d.epochs / p.epochs for d, p in rows if p.epochs == probe.epochs]
        if own or alike:
            return statistics.mean(own or alike)
        fewest = min(probe.fewest or probe.epochs, probe.epochs)
        return math.sqrt(fewest / probe.epochs)

    def _train_factor(self, model: str) -> float:
        """Measured / predicted training speed, as a geometric mean in which the probe itself counts as one trial
        that measured 1 (PRIOR_WEIGHT): over this model's trials done, shrunk toward the factor of all trials done,
        itself shrunk toward 1. One trial of a model, with its start-up noise, then moves its prediction half-way."""
        rows = [(d, p) for d, p in self._calibrated() if p.train_s > 0 and d.train_s > 0]
        pooled = [math.log(self._speed(d, p)) for d, p in rows]
        own = [math.log(self._speed(d, p)) for d, p in rows if d.pair[0] == model]
        prior = sum(pooled) / (len(pooled) + PRIOR_WEIGHT)
        return math.exp((sum(own) + PRIOR_WEIGHT * prior) / (len(own) + PRIOR_WEIGHT))

    def _rest(self, model: str) -> float:
        """What a trial spends outside its training and the parts the probe measured (test evaluation, profiling,
        MLflow): the mean over this model's trials done, else over all trials done. The first trial carries the
        process's one-time imports and start-up; it counts only until two others exist. Not a line in the seconds
        per image: extrapolated from the few resolutions done, a slope through two noisy probe timings priced the
        next resolution's trials at many times their cost."""
        rows = self._calibrated()
        if len(rows) > 2:
            rows = rows[1:]
        if not rows:
            return statistics.mean(max(d.seconds - (d.train_s or 0.0), 0.0) for d in self.done)
        own = [self._outside(d, p) for d, p in rows if d.pair[0] == model]
        return statistics.mean(own or [self._outside(d, p) for d, p in rows])

    def _per_pixel(self, pair: Pair) -> float:
        """Without a probe: this model's seconds per pixel over its trials done, else the mean of every model's,
        times this trial's pixels."""
        per_model: dict[str, list[float]] = {}
        for d in self.done:
            per_model.setdefault(d.pair[0], []).append(d.seconds / d.pair[1] ** 2)
        own = per_model.get(pair[0])
        rate = statistics.mean(own) if own else statistics.mean(statistics.mean(v) for v in per_model.values())
        return rate * pair[1] ** 2


def makespan(seconds: list[float], slots: int) -> float:
    """The wall time of jobs taken in order by `slots` workers, each taking the next job when free: their sum on
    one worker; the longest job when there are no more jobs than workers."""
    if slots <= 1:
        return sum(seconds)
    free = [0.0] * slots
    for s in seconds:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def first_of_pairs(trials: list[Any]) -> list[Any]:
    """The first trial of each model x resolution: the ones the cost probe measures."""
    first: dict[Pair, Any] = {}
    for trial in trials:
        first.setdefault((trial.model, trial.resolution), trial)
    return list(first.values())


def probe(trials: list[Any], report: Callable[[str], None] = log.info) -> dict[Pair, Probe]:
    """{(model, resolution): Probe} for each distinct pair of `trials` (its first trial's config and seed),
    measured in this process. A pair whose probe fails is left out (its trial reports the error when it runs).
    Nothing here changes what a trial computes: each trial seeds itself, and the data cache holds the same
    images whoever builds it."""
    from resomap.runtime import apply_system, resolve_device
    from resomap.sweep.trial import prepare_data, prepare_trial
    from resomap.training import Trainer
    from resomap.training.closed_form import KEPT_SECONDS
    from resomap.training.threads import kept_threads

    first = {(t.model, t.resolution): t for t in first_of_pairs(trials)}
    smallest = {pair for pair in first if pair[1] == min(r for m, r in first if m == pair[0])}
    smallest -= {pair for pair in smallest if pair[0] == trials[0].model}  # its first trial times them (`_explain`)
    out: dict[Pair, Probe] = {}
    kept: dict[Pair, Any] = {}  # the data and model of each model's smallest pair: its explanations are timed
    start, kept_before = time.perf_counter(), KEPT_SECONDS[0]
    decode = 0.0
    for pair, trial in first.items():
        cfg = trial.cfg
        try:
            device = resolve_device(cfg.system)
            with kept_threads():  # at the config's count (0: torch's default), the caller's count put back
                apply_system(cfg.system, device)
                t0 = time.perf_counter()
                prepare_data(trial, cfg, device)  # decodes and caches the resolution: the trials read that cache
                t1 = time.perf_counter()
                prepared = prepare_trial(trial, cfg, device)  # as the trial builds them (grad checkpointing too)
                t2 = time.perf_counter()
                train_s, image_s, epochs = Trainer(cfg, device, spec=prepared.spec).probe_seconds(
                    prepared.model, prepared.bundle
                )
            decode += t1 - t0
            stopping = cfg.training.early_stopping
            fewest = min(stopping.patience + 1, epochs) if stopping.enabled else epochs
            out[pair] = Probe(train_s, image_s, epochs, fewest, t2 - t1)
            if pair in smallest and cfg.explainability.enabled:
                kept[pair] = prepared
        except Exception as exc:  # priced per pixel instead; the trial itself says what is wrong
            log.info("cost probe of %s@%s failed (%s: %s)", pair[0], pair[1], type(exc).__name__, exc)
    out = _with_explanations(first, out, kept)
    if out:
        train = sum(p.train_s for p in out.values())
        rest = sum(p.fixed_s() for p in out.values())
        seconds, kept = time.perf_counter() - start, KEPT_SECONDS[0] - kept_before
        report(
            f"[sweep] cost probe: {len(out)} model x resolution pair(s) in {seconds:.1f} s ({_trial_work(decode, kept)}"
            f"{seconds - decode - kept:.1f} s the probe's own); one trial of each: training predicted at "
            f"{train / 60:.1f} min (all planned epochs), data, model and explanations at {rest / 60:.1f} min"
        )
    return out


def _trial_work(decode: float, kept: float) -> str:
    """What of the probe's time was the trials' own work, done once for them: the resolutions' images decoded
    into the cache they read, and closed-form fits kept on disk (training.closed_form.kept_fit)."""
    fits = f", {kept:.{1 if kept >= 0.05 else 2}f} s of closed-form fits the trials read back" if kept > 0 else ""
    return f"the trials' own work: {decode:.1f} s decoding their images{fits}; "


def _with_explanations(first: dict[Pair, Any], probes: dict[Pair, Probe], kept: dict[Pair, Any]) -> dict[Pair, Probe]:
    """`probes` with their explain_s: the explanation stage of each model in `kept` (all but the first trial's:
    that trial measures its model's, before the ETA is first given) timed at its smallest resolution
    (`_explain_seconds` on that pair's data and model as its probe built them) and priced at its other resolutions
    by their pixels (its methods' passes, imputations and re-explanations run over every pixel). Timing every pair
    was most of the probe (the quickstart: 35 of 59 s) and told the ETA little the trials done do not: once a
    model has a trial done, its trials' own explanation seconds price the rest (Eta._explain). The model with the
    cheapest training step goes first, after an untimed run that pays the explanation libraries' one-time imports
    and first calls where they cost least."""
    from resomap.runtime import apply_system, resolve_device
    from resomap.training.threads import kept_threads

    out, warm = dict(probes), True
    for pair in sorted(kept, key=lambda p: out[p].image_s):
        trial = first[pair]
        try:
            device = resolve_device(trial.cfg.system)
            with kept_threads():
                apply_system(trial.cfg.system, device)
                seconds = _explain_seconds(trial, kept.pop(pair), device, out[pair].train_s, warm)
        except Exception as exc:  # its explanations priced by the trials done instead
            log.info("cost probe of %s@%s's explanations failed (%s: %s)", *pair, type(exc).__name__, exc)
            continue
        warm = False
        for other in [p for p in out if p[0] == pair[0]]:
            out[other] = dataclasses.replace(out[other], explain_s=seconds * (other[1] / pair[1]) ** 2)
    return out


def _explain_seconds(trial: Any, prepared: Any, device: Any, train_s: float, warm: bool) -> float:
    """The trial's explanation stage and its probe images for its probe set (0 with explainability off), from
    both run on one probe image (in a folder thrown away): the image's seconds without the explainers' one-time set-up
    (build_seconds), x the probe images. `warm`: first an untimed run, so the first pair does not pay the
    libraries' imports. The stage is given the predicted training seconds, so explainability.budget_share skips
    what the trial would skip."""
    import tempfile
    from pathlib import Path

    from resomap.records import PROBE_IMAGES_DIR
    from resomap.reports.probe_images import write_probe_images
    from resomap.stages import explain_stage

    cfg = trial.cfg
    if not cfg.explainability.enabled:
        return 0.0
    one = dataclasses.replace(cfg, explainability=dataclasses.replace(cfg.explainability, probe_size=1))
    for untimed in (True, False) if warm else (False,):
        with tempfile.TemporaryDirectory(prefix="resomap-probe-") as folder:
            t0 = time.perf_counter()
            found = explain_stage(prepared.model, prepared.spec, prepared.bundle, one, trial.seed, Path(folder),
                                  device, train_seconds=train_s)  # fmt: skip
            if found.maps:  # the trial draws its probe images after the stage (sweep.trial), so time it too
                write_probe_images(found.maps, Path(folder) / PROBE_IMAGES_DIR)
            seconds = time.perf_counter() - t0
        if not untimed:
            build = sum(v for k, v in found.metrics.items() if k.endswith("/build_seconds"))
            return max(seconds - build, 0.0) * cfg.explainability.probe_size
    return 0.0
