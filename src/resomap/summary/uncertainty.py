"""Uncertainty on the sweep's headline numbers, from the trials' per-image score tables, whatever the task.

Each trial's task (resomap.tasks) names its per-image scores and reads them from the trial's folder
(classification: correct or not per image, from predictions.csv; segmentation: mIoU and boundary F1 per image, from
seg_predictions.csv). For each model x resolution: every score pooled over seeds with a bootstrap interval over
test images (an image keeps its scores under every seed, so the interval reflects the test set's size), macro-F1
likewise where the records hold labels and predictions, and the headline score's interval over test images and
training seeds (a two-way bootstrap, with >= 3 seeds; the seeds' mean and std of each test metric sit beside it in
the row), and the headline score above the task's trivial predictor and above each classical baseline: a
descriptive interval (paired image bootstrap) and the one-sided sign-flip test of the per-image differences that
decides "shown above" (exact on 0/1 outcomes: no verdict hangs on a resampling seed). A model whose seeds give
identical per-image predictions, or that is deterministic by its spec (``one_fit``: a closed-form fit the seed
does not change, pixel_logreg, hog_svm, lite0_linear; summary.aligned) is one replicate: its row is marked
``deterministic`` and gets no interval over seeds.
Whether a model's decided resolution (summary.decision) is its smallest sufficient resolution is
:func:`sufficiency`, the one rule (the decision's scope, the trivial predictor, the classical baselines,
convergence).

Everything returned is plain dicts of JSON-safe values (a row's columns are keyword arguments of
``summary.rows.SummaryRow``; None where a number is not available, never NaN), with a ``reason`` in words wherever
something is missing. The statistics themselves live in :mod:`resomap.stats`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.summary.aligned import Aligned, TrialRecord, align, no_records, one_fit
from resomap.summary.rows import BASELINE_KEYS, SCORE_ENDS, TWOWAY_WORDS, SummaryRow
from resomap.tasks import Score, Task


def _num(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# ------------------------------------------------------------------------------------------------ per row


def interval_columns(members: list[TrialRecord], cfg: StatsConfig) -> dict[str, Any]:
    """The uncertainty columns of one model x resolution row (see the module docstring): keyword arguments of
    :class:`~resomap.summary.rows.SummaryRow` (a column that cannot be computed is left out: its default is None)
    and ``note``."""
    task = members[0].task
    empty = {f"{sc.column}{end}": None for sc in task.scores for end in SCORE_ENDS}
    row: dict[str, Any] = {"n_seeds": len(members), "ci_level": cfg.level, "image_scores": empty}
    row["score_columns"] = [sc.column for sc in task.scores]
    row["words"] = {**dict(task.words), **{sc.column: sc.words for sc in task.scores}, "trivial": task.trivial_words}
    notes: list[str] = []
    row["deterministic"] = one_fit(members)
    with_scores = {m.id[2]: m.own for m in members if m.own is not None}
    lacking = [m.id[2] for m in members if m.own is None]
    aligned = align(with_scores, task)
    if isinstance(aligned, str):
        notes.append(f"image interval not available: {aligned}")
    else:
        if lacking:
            notes.append(f"pooled over seeds {aligned.seeds}: {no_records(task)} for seeds {lacking}")
        notes += aligned.notes
        row["n_test_images"] = int(aligned.index.size)
        notes += _score_intervals(aligned, task, row, cfg, _train_counts(members))
    if row["deterministic"]:  # its seeds are one fit: nothing to resample across them
        notes.append(f"{TWOWAY_WORDS} not available: one replicate (one fit)")
    elif not isinstance(aligned, str):
        notes += _twoway(aligned, task.scores[0], row, cfg)
    elif len(members) > 1:
        notes.append(f"{TWOWAY_WORDS} not available: {aligned}")
    row["note"] = "; ".join(notes)
    return row


def _twoway(aligned: Aligned, headline: Score, row: dict[str, Any], cfg: StatsConfig) -> list[str]:
    """The headline score's interval over test images and training seeds (stats.twoway_bootstrap, >= 3 seeds) into
    ``row``; its note."""
    values = aligned.finite(headline.name)
    iv = stats.twoway_bootstrap(values, level=cfg.level, resamples=cfg.resamples, seed=cfg.seed)
    row["twoway_ci_low"], row["twoway_ci_high"] = iv.low, iv.high
    return [] if iv.available else [f"{TWOWAY_WORDS} {iv.reason}"]


ABOVE_SEED = 12345  # the flips' seed of the "shown above" test where it is not exact (a continuous score)


def above_p(differences: np.ndarray, resamples: int, lattice: int | None = None) -> float | None:
    """The one-sided p of "the model scores above the compared predictor" from the per-image differences (each
    side's seeds averaged): the sign-flip test (stats.sign_flip, alternative "greater"). On 0/1 outcomes the
    differences lie on a 1/k lattice (k the seed count, or the least common multiple of both sides') and the p is
    exact; on a continuous score its flips come from ABOVE_SEED, not stats.seed (standard error <= 0.002). So the
    verdict ``summary.rows.shown_above`` reads from it is the same whatever the bootstrap's seed. None without
    images."""
    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0:
        return None
    return stats.sign_flip(d, alternative="greater", lattice=lattice, resamples=resamples, seed=ABOVE_SEED).p_value


def _train_counts(members: list[TrialRecord]) -> list[int] | None:
    """The training split's count per class the trials recorded (result.json data.train_counts; the first trial
    that has it: a sweep's trials share their split); None for results from before it."""
    for m in members:
        counts = (m.result.get("data") or {}).get("train_counts")
        if isinstance(counts, list) and counts:
            return [int(c) for c in counts]
    return None


def _trivial(
    aligned: Aligned, task: Task, row: dict[str, Any], settings: dict[str, Any], counts: list[int] | None
) -> list[str]:
    """The trivial predictor's headline score on the row's test images (task.trivial_scores: the training split's
    majority class (`counts`, per class; None: the test images'), all background) and the model's score above it
    with an interval (a paired image bootstrap of the per-image difference, the seeds averaged per image;
    descriptive) and the one-sided sign-flip p that decides "shown above" (:func:`above_p`) into ``row``; notes."""
    headline = task.scores[0].name
    baseline = task.trivial_scores(aligned.scores, aligned.label, counts)
    if baseline is None:
        return []
    mine = np.asarray(aligned.scores[headline], dtype=np.float64).mean(axis=0)
    scored = np.isfinite(mine) & np.isfinite(baseline)
    iv = stats.bootstrap_scores(mine[scored] - baseline[scored], **settings)
    row["trivial_score"] = float(baseline[scored].mean()) if scored.any() else None
    row["over_trivial"], row["over_trivial_ci_low"], row["over_trivial_ci_high"] = iv.estimate, iv.low, iv.high
    row["over_trivial_p"] = above_p(mine[scored] - baseline[scored], settings["resamples"], len(aligned.seeds))
    return [] if iv.available else [f"interval above {task.trivial_words} not available: {iv.reason}"]


CLASSICAL = "classical"  # the family of the classical baselines (resomap.models.classical)


def baseline_columns(
    model: str,
    res: int,
    groups: Mapping[tuple[str, int], list[TrialRecord]],
    cfg: StatsConfig,
    best: Mapping[str, int | None] | None = None,
) -> dict[str, Any]:
    """The headline score of `model` at `res` above each classical baseline of the sweep at the same resolution and
    above each model named in ``cfg.baselines`` at that model's best resolution (`baselines`, by name; a named one's
    entry also holds that `resolution`), and the first classical one by name again in the first-baseline columns
    (`baseline_model`, `over_baseline`, ...: the columns summaries had before a sweep could hold several): per image,
    each model's score averaged over its seeds, the difference bootstrapped over the test images both were tested on
    (the interval, descriptive) and its one-sided sign-flip p (:func:`above_p`: it decides "shown above"). Empty for
    a classical model itself or when the sweep has none; a named baseline is compared with the classical ones only.
    `best`: :func:`named_best` of the sweep, where the caller has it (the same for every row)."""
    if groups[(model, res)][0].result.get("family") == CLASSICAL:
        return {}
    names = sorted(m for (m, r), ms in groups.items() if r == res and ms[0].result.get("family") == CLASSICAL)
    best = named_best(groups, cfg) if best is None else best
    named = {} if model in cfg.baselines else {name: at for name, at in best.items() if name not in names}
    if not names and not named:
        return {}
    found, notes = {}, []
    for name, at in [*((n, res) for n in names), *sorted(named.items())]:
        found[name], note = _above_baseline(groups[(model, res)], groups[(name, at)], name, cfg)
        notes += [note] if note else []
        if name in named:
            found[name]["resolution"] = at
    out: dict[str, Any] = {"baselines": found}
    if names:
        first = found[names[0]]
        out.update(baseline_model=names[0], baseline_score=first["score"], over_baseline=first["over"])
        out.update(over_baseline_ci_low=first["ci_low"], over_baseline_ci_high=first["ci_high"])
        out.update(over_baseline_p=first["p"])
    return out | ({"note": "; ".join(notes)} if notes else {})


def named_best(groups: Mapping[tuple[str, int], list[TrialRecord]], cfg: StatsConfig) -> dict[str, int]:
    """Each model of stats.baselines that has per-image records -> its best resolution (:func:`best_resolution`)."""
    found = {name: best_resolution(name, groups) for name in cfg.baselines}
    return {name: at for name, at in found.items() if at is not None}


def best_resolution(model: str, groups: Mapping[tuple[str, int], list[TrialRecord]]) -> int | None:
    """The resolution at which `model`'s headline score, pooled over its seeds and the test images every seed was
    tested on, is highest (the smaller on a tie); None when the sweep has no per-image records of it. Chosen on
    the test images: that favours the named baseline, so "shown above it" is the harder claim."""
    best: tuple[float, int] | None = None
    for (name, res), members in sorted(groups.items()):
        if name != model:
            continue
        aligned = align({m.id[2]: m.own for m in members if m.own is not None}, members[0].task)
        if isinstance(aligned, str):
            continue
        score = float(np.nanmean(aligned.scores[members[0].task.scores[0].name]))
        if best is None or score > best[0]:
            best = (score, res)
    return None if best is None else best[1]


def _above_baseline(
    members: list[TrialRecord], base: list[TrialRecord], name: str, cfg: StatsConfig
) -> tuple[dict[str, float | None], str | None]:
    """({"score", "over", "ci_low", "ci_high", "p"}, note) of one model's headline score above the baseline `name`
    (`base`: its trials at the same resolution) on the test images both were tested on."""
    task = members[0].task
    headline = task.scores[0].name
    found: dict[str, float | None] = dict.fromkeys(BASELINE_KEYS)
    mine = align({m.id[2]: m.own for m in members if m.own is not None}, task)
    theirs = align({m.id[2]: m.own for m in base if m.own is not None}, task)
    if isinstance(mine, str) or isinstance(theirs, str):
        return found, f"not compared with {name}: {mine if isinstance(mine, str) else theirs}"
    common, a, b = np.intersect1d(mine.index, theirs.index, return_indices=True)
    x = np.asarray(mine.scores[headline], dtype=float)[:, a].mean(axis=0)
    y = np.asarray(theirs.scores[headline], dtype=float)[:, b].mean(axis=0)
    scored = np.isfinite(x) & np.isfinite(y)
    iv = stats.bootstrap_scores(x[scored] - y[scored], level=cfg.level, resamples=cfg.resamples, seed=cfg.seed)
    found.update(score=float(y[scored].mean()) if scored.any() else None)
    found.update(over=iv.estimate, ci_low=iv.low, ci_high=iv.high)
    found.update(p=above_p(x[scored] - y[scored], cfg.resamples, math.lcm(len(mine.seeds), len(theirs.seeds))))
    if not iv.available:
        return found, f"interval above {name} not available: {iv.reason}"
    if common.size < max(mine.index.size, theirs.index.size):
        return found, f"compared with {name} on the {common.size} test images both were tested on"
    return found, None


def _score_intervals(
    aligned: Aligned, task: Task, row: dict[str, Any], cfg: StatsConfig, counts: list[int] | None = None
) -> list[str]:
    """Each score pooled over seeds with its image-bootstrap interval (and macro-F1 where the records hold labels
    and predictions) into ``row``; the notes on what is not available."""
    settings = {"level": cfg.level, "resamples": cfg.resamples, "seed": cfg.seed}
    notes, found = [], []
    for sc in task.scores:
        values = aligned.finite(sc.name)
        if values.shape[1] < aligned.index.size:
            notes.append(f"{sc.column}: {values.shape[1]} of {aligned.index.size} images scored under every seed")
        iv = stats.bootstrap_scores(values, **settings)
        found.append((sc.column, iv))
        scored = row["image_scores"]
        scored[f"{sc.column}_pooled"], scored[f"{sc.column}_ci_low"], scored[f"{sc.column}_ci_high"] = (
            iv.estimate,
            iv.low,
            iv.high,
        )
    notes += _trivial(aligned, task, row, settings, counts)
    if aligned.label is not None:
        f1 = stats.pooled_macro_f1(aligned.label, aligned.prediction, **settings)
        row["test_macro_f1_pooled"], row["test_macro_f1_ci_low"] = f1.estimate, f1.low
        row["test_macro_f1_ci_high"] = f1.high
        found.append(("test_macro_f1", f1))
    for name, iv in found:
        if not iv.available or iv.reason:
            notes.append(f"{name} interval{' not available' if not iv.available else ''}: {iv.reason}")
    row["ci_method"] = found[0][1].method + (", seeds pooled" if len(aligned.seeds) > 1 else "")
    return notes


# ------------------------------------------------------------------------------------------------ per model


# ------------------------------------------------------------------------------------------------ sufficient?

NO_SUFFICIENT = "no sufficient resolution shown"
# (b) and (c) test the images' seed-averaged differences: a statement about these trained checkpoints, not the model
GATE_SCOPE = "for these checkpoints (test images the unit, seeds averaged)"


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Whether a model's decided resolution is its smallest sufficient resolution with the evidence beside it, and
    why in words: ``reason`` is '<res> px is enough (...)' / 'needs <ref> px (...)' or 'no sufficient resolution
    shown: <the first missing piece of evidence>'; ``evidence``: what was shown, in words ('' where none)."""

    sufficient: bool
    reason: str
    evidence: str = ""


def reference_flaw(rec: Mapping[str, Any], rows: Mapping[int, SummaryRow], paired: Iterable[Mapping[str, Any]]) -> str:
    """What makes a model's reference resolution a poor yardstick, in words ('' when nothing does): any of its
    trials flagged undertrained, or a smaller resolution of the model shown above it by the paired tests between
    resolutions (significant after Holm: the reference is worse, so "not worse than the reference by the margin"
    says little of what the model needs). ``rows``: the model's summary rows by resolution; ``paired``: its
    paired test rows (resolution_a < resolution_b, effect = b - a)."""
    ref = rec.get("reference")
    if ref is None:
        return ""
    parts = []
    row = rows.get(int(ref))
    if row is not None and row.undertrained:
        parts.append("undertrained")
    above = sorted(
        (int(t["resolution_a"]), t.get("p_adjusted"))
        for t in paired
        if t.get("resolution_b") == ref and t.get("significant") and (t.get("effect") or 0.0) < 0
    )
    if above:
        shown = ", ".join(f"{res} px" + (f" (Holm p {p:.2g})" if p is not None else "") for res, p in above)
        parts.append(f"shown below {shown} by the paired tests")
    return f"the reference {ref} px is {' and '.join(parts)}" if parts else ""


def sufficiency(rec: Mapping[str, Any], row: SummaryRow | None) -> Evidence:
    """The one rule of a model's smallest sufficient resolution (every table, figure, the report and MLflow read its
    result; "which configuration to use" across models is summary.answer's): the model's decided resolution
    (``rec``: its recommendation row, RECOMMENDATION_COLUMNS; ``row``: the summary row of that model at that
    resolution) is its smallest sufficient resolution only when all hold, checked in this order:

    (a) a decision about the model exists: ``rec`` is available, ``decided`` and of ``scope`` "model" (a row
        without a scope is of checkpoint scope: a statement about the trained checkpoints, not the model);
    (b) the decision's reference is a fair yardstick: ``rec["reference_flaw"]`` (:func:`reference_flaw`) is empty
        (a flaw of the decision itself, so it comes before the gates on the decided resolution);
    (c) the model is shown above the task's trivial predictor there (``SummaryRow.shown_above``: the one-sided
        sign-flip test);
    (d) it is shown above each classical baseline of the sweep that ran at that resolution and each model named in
        stats.baselines at that model's best resolution (a classical model is not compared with the baselines: for
        it (d) does not apply; a named one is compared with the classical ones only);
    (e) none of its trials there is flagged undertrained (the row's convergence records).

    (a) is at the decision's scope; (c) and (d) test the per-image differences with the seeds averaged, so they
    speak of the trained checkpoints and the words say so (GATE_SCOPE).

    Otherwise 'no sufficient resolution shown: <reason>' with the first that fails."""
    res = rec.get("resolution")
    if not rec.get("available") or res is None:
        why = str(rec.get("reason") or "")
        return _none(f"no decision ({why})" if why else "no decision")
    if not rec.get("decided"):
        return _none(_undecided(rec))
    if rec.get("scope", "checkpoint") != "model":
        return _none("no decision about the model (checkpoint scope only)")
    if rec.get("reference_flaw"):
        return _none(f"{rec['reference_flaw']}: not worse than it by the margin is no evidence of enough pixels")
    if row is None:
        return _none(f"no summary row for {res} px")
    trivial = row.words.get("trivial") or "the trivial predictor"
    if not row.shown_above():
        why = _bound(row.over_trivial_p, row.over_trivial_ci_low, row.ci_level)
        return _none(f"{res} px is not shown above {trivial}{why}")
    baselines = {} if row.family == CLASSICAL else row.compared_baselines()
    for name, found in sorted(baselines.items()):
        if not row.shown_above(name):
            why = _bound(found.get("p"), found.get("ci_low"), row.ci_level)
            return _none(f"{res} px is not shown above {row.baseline_label(name)}{why}")
    if row.undertrained:
        return _none(f"{res} px is undertrained ({row.undertrained_reason or 'a seed is flagged'})")
    above = " and ".join([trivial, *(row.baseline_label(name) for name in sorted(baselines))])
    evidence = f"a decision about the model; shown above {above} {GATE_SCOPE}; not undertrained"
    ref, margin = rec.get("reference"), rec.get("margin")
    within = f", within {float(margin):g} of {ref} px" if margin is not None and ref is not None else ""
    said = f"{res} px is enough{within}" if res != ref else f"needs {res} px"
    return Evidence(True, f"{said} ({evidence})", evidence)


def _none(why: str) -> Evidence:
    return Evidence(False, f"{NO_SUFFICIENT}: {why}")


def _bound(p: Any, low: Any, level: Any) -> str:
    """The evidence in words: the one-sided p of the sign-flip test that decides, with the interval's lower bound
    beside it; the lower bound alone in a summary from before the test."""
    p, low, level = _num(p), _num(low), _num(level)
    bound = None if low is None else f"{f'{level:.0%} ' if level is not None else ''}CI lower bound {low:+.3f}"
    if p is not None:
        return f" (one-sided p {p:.3g}" + (f"; {bound})" if bound else ")")
    return " (no interval)" if bound is None else f" ({bound})"


def _undecided(rec: Mapping[str, Any]) -> str:
    """The undecided decision in words: the first clause of its reason where it says so ('undecided: no smaller
    resolution shown non-inferior to 128 px at margin 0.02'), else 'undecided at margin 0.02 (<its reason>)'."""
    reason = str(rec.get("reason") or "")
    if reason.startswith("undecided"):
        return reason.split(";")[0].strip()
    margin = _num(rec.get("margin"))
    text = f"undecided at margin {margin:g}" if margin is not None else "undecided"
    return f"{text} ({reason})" if reason else text
