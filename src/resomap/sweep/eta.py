"""The sweep's ETA: what the trials left will cost, from a probe of each pending (model, resolution) and the
trials done.

The mean time of the trials done is a poor guide: a 128 px trial costs many times a 32 px one, and a model not yet
run costs what it costs. So before the first trial (local executor, `sweep.cost_probe`), `probe` builds each
pending pair's data (as its trial will: the resolution cache it makes is the one the trial then reads) and model,
and times a few real training steps through the Trainer's own step (`Trainer.probe_seconds`): the pair's predicted
training seconds and its seconds per image of a training step. A pending trial then costs

    training:  the predicted seconds x the share of its planned epochs it will run (early stopping: the mean share
               of that model's trials done, else of those with as many planned epochs, else the geometric middle
               of the fewest early stopping allows and all of them) x k, k = measured /
               predicted seconds per epoch of the trials done (that model's own, shrunk toward all trials',
               shrunk toward 1: the probe counts as one trial)
    the rest:  a + b x (seconds per image), fitted on that model's trials done (test evaluation at every
               resolution, profiling, explanations and MLflow, which grow with the model's cost per image); the
               mean of all trials done for a model not yet run

Without a probe (the Ray and local-gpus executors run trials elsewhere; sweep.cost_probe=false; a pair whose probe
failed) a pending trial costs what that model's done trials cost per pixel, or a model not yet run the mean per
pixel of those that have.

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


@dataclasses.dataclass(frozen=True)
class Done:
    pair: Pair
    seconds: float  # the whole trial
    train_s: float | None  # its training (None: it failed; it then calibrates nothing)
    epochs: int = 0  # the epochs it ran (early stopping ends some before the planned ones); 0: not known


class Eta:
    """Seconds left for the pending trials; `finished` moves a trial from pending to done."""

    def __init__(self, pending: list[Pair], probes: dict[Pair, Probe] | None = None):
        self.pending = list(pending)
        self.probes = dict(probes or {})
        self.done: list[Done] = []

    def finished(self, pair: Pair, seconds: float, train_s: float | None, epochs: int = 0) -> None:
        if pair in self.pending:
            self.pending.remove(pair)
        self.done.append(Done(pair, float(seconds), train_s, int(epochs or 0)))

    def seconds_left(self) -> float | None:
        """The predicted seconds of every pending trial, or None before any trial finished (nothing to calibrate
        the rest of a trial on) or with none pending."""
        if not self.pending or not self.done:
            return None
        return sum(self.trial_seconds(pair) for pair in self.pending)

    def trial_seconds(self, pair: Pair) -> float:
        probe = self.probes.get(pair)
        if probe is None:
            return self._per_pixel(pair)
        train = probe.train_s * self._epoch_share(pair[0], probe) * self._train_factor(pair[0])
        return train + self._rest(pair[0], probe.image_s)

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

    def _rest(self, model: str, image_s: float) -> float:
        """A trial's seconds outside training: a + b x image_s, least squares (a, b >= 0) over this model's trials
        done; the mean of all trials done for a model not yet run (another model's slope says nothing of this one's:
        pixel_logreg's rest grows with resolution while its training step costs next to nothing). The first trial
        carries the process's one-time imports and start-up; it counts only until two others exist."""
        rows = self._calibrated()
        if len(rows) > 2:
            rows = rows[1:]
        if not rows:
            return statistics.mean(max(d.seconds - (d.train_s or 0.0), 0.0) for d in self.done)
        own = [(p.image_s, max(d.seconds - d.train_s, 0.0)) for d, p in rows if d.pair[0] == model]
        if not own:
            return statistics.mean(max(d.seconds - d.train_s, 0.0) for d, _ in rows)
        a, b = _line([x for x, _ in own], [y for _, y in own])
        return a + b * image_s

    def _per_pixel(self, pair: Pair) -> float:
        """Without a probe: this model's seconds per pixel over its trials done, else the mean of every model's,
        times this trial's pixels."""
        per_model: dict[str, list[float]] = {}
        for d in self.done:
            per_model.setdefault(d.pair[0], []).append(d.seconds / d.pair[1] ** 2)
        own = per_model.get(pair[0])
        rate = statistics.mean(own) if own else statistics.mean(statistics.mean(v) for v in per_model.values())
        return rate * pair[1] ** 2


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, b) of y = a + b x by least squares with a, b >= 0 (the mean when x does not vary)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    if b < 0:
        return my, 0.0
    if a < 0:  # through the origin
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


def probe(trials: list[Any], report: Callable[[str], None] = log.info) -> dict[Pair, Probe]:
    """{(model, resolution): Probe} for each distinct pair of `trials` (its first trial's config and seed),
    measured in this process. A pair whose probe fails is left out (its trial reports the error when it runs).
    Nothing here changes what a trial computes: each trial seeds itself, and the data cache holds the same
    images whoever builds it."""
    from resomap.runtime import apply_system, resolve_device
    from resomap.sweep.trial import prepare_trial
    from resomap.training import Trainer
    from resomap.training.threads import kept_threads

    first: dict[Pair, Any] = {}
    for trial in trials:
        first.setdefault((trial.model, trial.resolution), trial)
    out: dict[Pair, Probe] = {}
    start = time.perf_counter()
    for pair, trial in first.items():
        cfg = trial.cfg
        try:
            device = resolve_device(cfg.system)
            with kept_threads():  # at the config's count (0: torch's default), the caller's count put back
                apply_system(cfg.system, device)
                prepared = prepare_trial(trial, cfg, device)  # as the trial builds them (grad checkpointing too)
                train_s, image_s, epochs = Trainer(cfg, device).probe_seconds(prepared.model, prepared.bundle)
            stopping = cfg.training.early_stopping
            fewest = min(stopping.patience + 1, epochs) if stopping.enabled else epochs
            out[pair] = Probe(train_s, image_s, epochs, fewest)
        except Exception as exc:  # priced per pixel instead; the trial itself says what is wrong
            log.info("cost probe of %s@%s failed (%s: %s)", pair[0], pair[1], type(exc).__name__, exc)
    if out:
        total = sum(p.train_s for p in out.values())
        report(
            f"[sweep] cost probe: {len(out)} model x resolution pair(s) in {time.perf_counter() - start:.1f} s; "
            f"training one trial of each predicted at {total / 60:.1f} min (all planned epochs)"
        )
    return out
