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
identical per-image predictions (``identical_seeds``: a closed-form fit the seed does not change, pixel_logreg,
hog_svm) is one replicate: its row and recommendation are marked ``deterministic``, and it gets no interval over
seeds. For each model and score: the paired tests between its resolutions on the same test images
(``stats.compare_resolutions``: McNemar, clustered over images with several seeds, or a paired bootstrap for a 0/1
score, the paired bootstrap with a sign-flip test for any other; descriptive) and, on the headline score, the
decision: each resolution against the
reference at the margin, and the decided resolution (``stats.noninferiority``); whether it is recommended is
:func:`recommendation` (the decision's scope, the trivial predictor, the classical baselines, convergence).

Everything returned is plain dicts of JSON-safe values (a row's columns are keyword arguments of
``reports.rows.SummaryRow``; None where a number is not available, never NaN), with a ``reason`` in words wherever
something is missing. The statistics themselves live in :mod:`resomap.stats`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.records import ScoreTable
from resomap.reports.rows import BASELINE_KEYS, SCORE_ENDS, TWOWAY_WORDS, SummaryRow
from resomap.tasks import Score, Task, of_result

TrialId = tuple[str, int, int]  # (model, resolution, seed): unique within a sweep and within an analysis


def no_records(task: Task) -> str:
    return f"no {task.records_file} (a result from before per-image records)"


@dataclasses.dataclass
class TrialRecord:
    """One finished trial: its result.json tree, its folder, its task and its per-image scores at every test
    resolution."""

    result: dict[str, Any]
    folder: Path | None
    tables: dict[int, ScoreTable]
    task: Task

    @property
    def id(self) -> TrialId:
        return trial_id(self.result)

    @property
    def own(self) -> ScoreTable | None:
        """Scores at the trial's own (training) resolution, None when absent or empty."""
        rec = self.tables.get(int(self.result["resolution"]))
        return rec if rec is not None and len(rec.index) else None


def trial_id(result: Mapping[str, Any]) -> TrialId:
    return (str(result["model"]), int(result["resolution"]), int(result.get("seed") or 0))


def load_records(results: Iterable[Mapping[str, Any]], folders: Mapping[TrialId, Path] | None) -> list[TrialRecord]:
    """The FINISHED results with their per-image scores (read from ``folders[trial_id]`` when known)."""
    records = []
    for result in results:
        if result.get("status") != "FINISHED":
            continue
        task = of_result(result)
        folder = (folders or {}).get(trial_id(result))
        tables = task.read_scores(Path(folder)) if folder is not None else {}
        records.append(TrialRecord(dict(result), Path(folder) if folder is not None else None, tables, task))
    return sorted(records, key=lambda r: r.id)


def group_records(records: Iterable[TrialRecord]) -> dict[tuple[str, int], list[TrialRecord]]:
    groups: dict[tuple[str, int], list[TrialRecord]] = defaultdict(list)
    for rec in records:
        groups[(rec.id[0], rec.id[1])].append(rec)
    return {k: sorted(v, key=lambda r: r.id[2]) for k, v in sorted(groups.items())}


def _num(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# ------------------------------------------------------------------------------------------------ aligned arrays


@dataclasses.dataclass(frozen=True)
class Aligned:
    """Seeds x images arrays on the images every seed was tested on (sorted by image index)."""

    seeds: list[int]
    index: np.ndarray  # [N]
    scores: dict[str, np.ndarray]  # score name -> [S, N] (bool for a 0/1 score; NaN where an image has no score)
    label: np.ndarray | None  # [N], where the records hold labels and predictions
    prediction: np.ndarray | None  # [S, N]
    notes: list[str]
    positive: np.ndarray | None = None  # [S, N]: the probability of class 1 (two classes), where every seed has it

    def finite(self, name: str) -> np.ndarray:
        """The score's [S, N] on the images scored under every seed."""
        values = self.scores[name]
        if values.dtype == bool:
            return values
        return values[:, np.isfinite(values).all(axis=0)]


def align(tables_by_seed: Mapping[int, ScoreTable], task: Task) -> Aligned | str:
    """Stack the seeds' scores on their common test images; a reason (str) when that cannot be done."""
    if not tables_by_seed:
        return no_records(task)
    seeds = sorted(tables_by_seed)
    sets = [set(np.asarray(tables_by_seed[s].index).tolist()) for s in seeds]
    common = np.array(sorted(set.intersection(*sets)), dtype=np.int64)
    if common.size == 0:
        return "the seeds were tested on different images (no image in common)"
    notes = []
    if any(len(s) != common.size for s in sets):
        notes.append(f"seeds tested on different images: pooled over the {common.size} images they share")
    positions = []
    for s in seeds:
        rec = tables_by_seed[s]
        order = np.argsort(rec.index, kind="stable")
        idx = np.asarray(rec.index)[order]
        positions.append(order[np.searchsorted(idx, common)])
    tables = [tables_by_seed[s] for s in seeds]
    names = [sc.name for sc in task.scores]
    names += sorted(set.intersection(*(set(t.scores) for t in tables)) - set(names))  # e.g. a trivial predictor's
    scores = {name: np.stack([t.scores[name][pos] for t, pos in zip(tables, positions)]) for name in names}
    label = prediction = None
    if all(t.label is not None and t.prediction is not None for t in tables):
        labels = [np.asarray(t.label)[pos] for t, pos in zip(tables, positions)]
        if any(not np.array_equal(labels[0], lab) for lab in labels[1:]):
            return "the seeds' test labels differ for the same image index (different datasets?)"
        label = labels[0]
        prediction = np.stack([np.asarray(t.prediction)[pos] for t, pos in zip(tables, positions)])
    positive = None
    if all(t.positive is not None for t in tables):
        positive = np.stack([np.asarray(t.positive, dtype=np.float64)[pos] for t, pos in zip(tables, positions)])
    return Aligned(seeds, common, scores, label, prediction, notes, positive)


# ------------------------------------------------------------------------------------------------ replicates


def identical_seeds(members: list[TrialRecord]) -> bool:
    """Whether the seeds of one model x resolution are one fit (one replicate): two or more seeds, every one with
    per-image records, that give the same prediction for every test image they share at every test resolution they
    share (the same per-image scores where the task keeps no predictions), the trial's own resolution included.
    Seeds that do what a trivial predictor does are not counted as one fit (every image in one class; a segmenter's
    scores equal to all background's): any collapsed network agrees with itself. pixel_logreg and hog_svm (fitted
    in closed form on data the seed does not change) are one fit; a network trained from a seeded initialisation is
    not. The one test of determinism: the summary rows, the recommendation rows (:func:`deterministic`) and,
    through them, the explanation comparison (no cross-seed floor, no relabelling test) read it."""
    if len(members) < 2 or any(m.own is None for m in members):
        return False
    task = members[0].task
    shared = sorted(set.intersection(*(set(m.tables) for m in members)))
    shared = [res for res in shared if all(len(m.tables[res].index) for m in members)]
    informative = False  # somewhere the seeds do more than a trivial predictor
    for res in shared:
        aligned = align({m.id[2]: m.tables[res] for m in members}, task)
        if isinstance(aligned, str):
            return False
        if aligned.prediction is not None:
            arrays = [np.asarray(aligned.prediction)]
            informative = informative or np.unique(arrays[0][0]).size > 1
        else:
            arrays = [np.asarray(aligned.scores[sc.name], dtype=np.float64) for sc in task.scores]
            trivial = task.trivial_scores(aligned.scores, aligned.label)
            same = trivial is not None and np.allclose(arrays[0][0], trivial, equal_nan=True)
            informative = informative or not same
        if any(not np.array_equal(v[0], other, equal_nan=True) for v in arrays for other in v[1:]):
            return False
    return informative


def deterministic(by_res: Mapping[int, list[TrialRecord]]) -> bool:
    """One model is deterministic when its seeds are one fit (:func:`identical_seeds`) at every resolution."""
    return bool(by_res) and all(identical_seeds(members) for members in by_res.values())


def one_replicate(n_seeds: int) -> str:
    """What a deterministic model's decision sentence adds, once per model: its seeds count as one replicate."""
    return f"Deterministic fit: its {n_seeds} seeds are one replicate."


# ------------------------------------------------------------------------------------------------ per row


def interval_columns(members: list[TrialRecord], cfg: StatsConfig) -> dict[str, Any]:
    """The uncertainty columns of one model x resolution row (see the module docstring): keyword arguments of
    :class:`~resomap.reports.rows.SummaryRow` (a column that cannot be computed is left out: its default is None)
    and ``note``."""
    task = members[0].task
    empty = {f"{sc.column}{end}": None for sc in task.scores for end in SCORE_ENDS}
    row: dict[str, Any] = {"n_seeds": len(members), "ci_level": cfg.level, "image_scores": empty}
    row["score_columns"] = [sc.column for sc in task.scores]
    row["words"] = {**dict(task.words), **{sc.column: sc.words for sc in task.scores}, "trivial": task.trivial_words}
    notes: list[str] = []
    row["deterministic"] = identical_seeds(members)
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
        notes += _score_intervals(aligned, task, row, cfg)
    if row["deterministic"]:  # its seeds are one fit: nothing to resample across them
        notes.append(f"{TWOWAY_WORDS} not available: one replicate (deterministic fit)")
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
    verdict ``reports.rows.shown_above`` reads from it is the same whatever the bootstrap's seed. None without
    images."""
    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0:
        return None
    return stats.sign_flip(d, alternative="greater", lattice=lattice, resamples=resamples, seed=ABOVE_SEED).p_value


def _trivial(aligned: Aligned, task: Task, row: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The trivial predictor's headline score on the row's test images (task.trivial_scores: the majority class,
    all background) and the model's score above it with an interval (a paired image bootstrap of the per-image
    difference, the seeds averaged per image; descriptive) and the one-sided sign-flip p that decides "shown
    above" (:func:`above_p`) into ``row``; notes."""
    headline = task.scores[0].name
    baseline = task.trivial_scores(aligned.scores, aligned.label)
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
    model: str, res: int, groups: Mapping[tuple[str, int], list[TrialRecord]], cfg: StatsConfig
) -> dict[str, Any]:
    """The headline score of `model` at `res` above each classical baseline of the sweep at the same resolution
    (`baselines`, by name), and the first by name again in the first-baseline columns (`baseline_model`,
    `over_baseline`, ...: the columns summaries had before a sweep could hold several): per image, each model's
    score averaged over its seeds, the difference bootstrapped over the test images both were tested on (the
    interval, descriptive) and its one-sided sign-flip p (:func:`above_p`: it decides "shown above"). Empty for a
    classical model itself or when the sweep has none."""
    if groups[(model, res)][0].result.get("family") == CLASSICAL:
        return {}
    names = sorted(m for (m, r), ms in groups.items() if r == res and ms[0].result.get("family") == CLASSICAL)
    if not names:
        return {}
    found, notes = {}, []
    for name in names:
        found[name], note = _above_baseline(groups[(model, res)], groups[(name, res)], name, cfg)
        notes += [note] if note else []
    first = found[names[0]]
    out: dict[str, Any] = {"baseline_model": names[0], "baseline_score": first["score"], "baselines": found}
    out.update(
        over_baseline=first["over"], over_baseline_ci_low=first["ci_low"], over_baseline_ci_high=first["ci_high"]
    )
    out.update(over_baseline_p=first["p"])
    return out | ({"note": "; ".join(notes)} if notes else {})


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


def _score_intervals(aligned: Aligned, task: Task, row: dict[str, Any], cfg: StatsConfig) -> list[str]:
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
    notes += _trivial(aligned, task, row, settings)
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


@dataclasses.dataclass(frozen=True)
class Compared:
    """A model's resolutions on the seeds and test images every one of them has: ``arrays`` {score name:
    {resolution: [S, N]}} (a score's images where some resolution or seed has none are left out of that score),
    ``aligned`` each resolution's Aligned records and ``common`` the shared image indices."""

    arrays: dict[str, dict[int, np.ndarray]]
    seeds: list[int]
    n_images: int
    notes: list[str]
    aligned: dict[int, Aligned]
    common: np.ndarray


def _scores_by_resolution(by_res: Mapping[int, list[TrialRecord]], task: Task) -> Compared | str:
    """The resolutions' scores on the seeds and images every compared resolution has (Compared); or a reason."""
    notes: list[str] = []
    usable = {r: {m.id[2]: m.own for m in ms if m.own is not None} for r, ms in by_res.items()}
    skipped = sorted(r for r, p in usable.items() if not p)
    usable = {r: p for r, p in usable.items() if p}
    if not usable:
        return f"no resolution has per-image predictions ({no_records(task)})"
    if skipped:
        notes.append(f"not compared ({no_records(task)}): {', '.join(f'{r} px' for r in skipped)}")
    if len(usable) < 2:
        only = next(iter(usable))
        return "; ".join([f"only {only} px has per-image predictions: nothing to compare it with", *notes])
    seeds = sorted(set.intersection(*(set(p) for p in usable.values())))
    if not seeds:
        return "; ".join(["no seed was tested at every resolution", *notes])
    if any(len(p) != len(seeds) for p in usable.values()):
        notes.append(f"compared on the seeds every resolution has: {seeds}")
    aligned = {r: align({s: p[s] for s in seeds}, task) for r, p in usable.items()}
    bad = next((f"{r} px: {a}" for r, a in aligned.items() if isinstance(a, str)), None)
    if bad:
        return bad
    common = np.array(sorted(set.intersection(*(set(a.index.tolist()) for a in aligned.values()))), dtype=np.int64)
    if common.size == 0:
        return "the resolutions were tested on different images (no image in common)"
    if any(a.index.size != common.size for a in aligned.values()):
        notes.append(f"compared on the {common.size} test images every resolution has")
    out: dict[str, dict[int, np.ndarray]] = {}
    for sc in task.scores:
        arrays = {r: a.scores[sc.name][:, np.searchsorted(a.index, common)] for r, a in aligned.items()}
        if not sc.binary:
            scored = np.logical_and.reduce([np.isfinite(v).all(axis=0) for v in arrays.values()])
            if not scored.all():
                notes.append(f"{sc.column}: compared on the {int(scored.sum())} images scored everywhere")
            arrays = {r: v[:, scored] for r, v in arrays.items()}
        out[sc.name] = arrays
    return Compared(out, seeds, int(common.size), notes, aligned, common)


@dataclasses.dataclass(frozen=True)
class MetricScores:
    """The decision metric's per-image values {resolution: [S, N']}, its words, whether they are 0/1 and what its
    images are in words (a class's recall counts that class's test images)."""

    scores: dict[int, np.ndarray]
    words: str
    binary: bool
    images: str = "test images"


def decide(
    scores: Mapping[int, Any],
    cfg: StatsConfig,
    *,
    alpha: float | None = None,
    binary: bool | None = None,
    words: str = "accuracy",
    images: str = "test images",
) -> stats.Decision:
    """The non-inferiority decision (stats.noninferiority) of ``scores`` {resolution: [S, N]} with the settings of
    stats (margin, reference, level, power, scope, seed_sd); ``alpha``: a look's one-sided alpha (else 1 - level).
    The one call of the decision: the summary and each look of an adaptive sweep."""
    return stats.noninferiority(
        scores,
        margin=cfg.margin,
        reference=cfg.reference,
        level=cfg.level,
        power=cfg.power,
        metric=words,
        alpha=alpha,
        scope=cfg.scope,
        binary=binary,
        seed_sd=cfg.seed_sd,
        images=images,
    )


def decision_scores(
    found: Compared, task: Task, metric: str | None, class_names: list[str] | None
) -> MetricScores | str:
    """The per-image values of the decision metric ``metric`` (stats.metric; None: the task's headline score), or
    why they cannot be had.
    A metric the task scores per image is read as it is; a classification metric (balanced accuracy, macro-F1, a
    class's recall, AUROC) is built from the labels, predictions and probabilities by resomap.stats.per_image."""
    from resomap.errors import ConfigError
    from resomap.stats import per_image

    named = next((sc for sc in task.scores if sc.name == (metric or task.scores[0].name)), None)
    if named is not None:
        return MetricScores(found.arrays[named.name], named.words, named.binary)
    try:
        parsed = per_image.parse_metric(str(metric))
        out = {}
        for res, a in found.aligned.items():
            if a.label is None or a.prediction is None:
                return f"{parsed.words} needs labels and predictions; the {task.name} records have none"
            pos = np.searchsorted(a.index, found.common)
            positive = None if a.positive is None else a.positive[:, pos]
            out[res] = per_image.values(parsed, a.label[pos], a.prediction[:, pos], positive, class_names)
    except ConfigError as exc:
        return f"stats.metric {metric}: {exc}"
    return MetricScores(out, parsed.words, parsed.binary, parsed.images)


def _pair_row(model: str, metric: str, row: stats.PairComparison) -> dict[str, Any]:
    t = row.test
    return {
        "model": model,
        "metric": metric,  # the score compared; accuracy_a / accuracy_b are its means
        "resolution_a": row.resolution_a,
        "resolution_b": row.resolution_b,
        "accuracy_a": t.accuracy_a,
        "accuracy_b": t.accuracy_b,
        "effect": t.effect,  # accuracy(b) - accuracy(a)
        "ci_low": t.low,
        "ci_high": t.high,
        "p_value": t.p_value,
        "p_adjusted": row.p_adjusted,
        "significant": bool(row.significant),
        "level": t.level,
        "method": t.method,
        "correction": row.correction,
        "n_images": t.n_images,
        "n_seeds": t.n_seeds,
        "b01": t.b01,
        "b10": t.b10,
        "available": bool(t.available),
        "reason": t.reason or "",
    }


def _method(score: Score, cfg: StatsConfig) -> str:
    """The paired test of a score: the configured one for a 0/1 score; the paired bootstrap (sign-flip) for any
    other (McNemar's test needs 0/1 outcomes)."""
    return cfg.paired_test if score.binary else "bootstrap"


def compare_model(
    model: str, by_res: Mapping[int, list[TrialRecord]], cfg: StatsConfig
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(paired test rows of every score, descriptive; the decision on the headline score: every resolution against
    the reference at the margin, stats.decide.noninferiority) of one model's resolutions."""
    task = next(iter(by_res.values()))[0].task
    headline = task.scores[0]
    rec_row = _empty_recommendation(model, cfg.metric or headline.name, cfg)
    rec_row["deterministic"] = deterministic(by_res)  # its seeds are one fit: their variance is exactly zero
    dropped = sorted(r for r in cfg.dropped.get(model, []) if r in by_res)
    by_res = {r: ms for r, ms in by_res.items() if r not in dropped}  # fewer seeds: left out of the comparisons
    if dropped:
        rec_row["verdicts"] = [_dropped_verdict(r, cfg) for r in dropped]
    if not by_res:
        rec_row.update(
            reason="every resolution was dropped", sentence=f"{model}: no decision: every resolution dropped"
        )
        return [], rec_row
    found = _scores_by_resolution(by_res, task)
    if isinstance(found, str):
        rec_row["reason"] = found
        rec_row["sentence"] = f"{model}: no recommendation: {found}"
        return [], rec_row
    arrays, seeds, notes = found.arrays, found.seeds, found.notes
    settings = {"level": cfg.level, "correction": cfg.correction, "resamples": cfg.resamples, "seed": cfg.seed}
    rows = []
    for sc in task.scores:  # each score: its own family of pairs, adjusted on its own (descriptive)
        found_rows = stats.compare_resolutions(arrays[sc.name], method=_method(sc, cfg), **settings)
        rows += [_pair_row(model, sc.name, row) for row in found_rows]
    chosen = decision_scores(found, task, cfg.metric, class_names(by_res))
    if isinstance(chosen, str):
        rec_row.update(reason=chosen, sentence=f"{model}: no decision: {chosen}", note="; ".join(notes))
        return rows, rec_row
    scores = chosen.scores
    if cfg.reference is not None and cfg.reference not in scores:
        why = f"the reference {cfg.reference} px has no per-image records to compare with"
        rec_row.update(reason=why, sentence=f"{model}: no decision: {why}", note="; ".join(notes))
        return rows, rec_row
    decision = decide(
        scores,
        cfg,
        alpha=cfg.look_alpha.get(model),  # an adaptive sweep's alpha of this look (stats.spending); else 1 - level
        binary=chosen.binary,
        words=chosen.words,
        images=chosen.images,
    )
    means = {r: float(np.asarray(v, dtype=float).mean()) for r, v in scores.items()}
    rec_row.update(
        resolution=decision.resolution,
        reference=decision.reference,
        decided=decision.decided,
        accuracy=means[decision.resolution],
        reference_accuracy=means[decision.reference],
        detectable=_detectable(decision),
        n_seeds=len(seeds),
        n_images=int(next(iter(scores.values())).shape[1]),  # a class's recall: that class's test images
        scope=decision.scope,
        available=True,
        reason=decision.reason,
        sentence=f"{model}: {decision.reason}",
        note="; ".join(notes),
        verdicts=[v.to_dict() for v in decision.verdicts] + rec_row.get("verdicts", []),
    )
    if dropped:
        rec_row["note"] = "; ".join(
            filter(None, [rec_row["note"], f"dropped earlier: {', '.join(map(str, dropped))} px"])
        )
    return rows, rec_row


def _dropped_verdict(resolution: int, cfg: StatsConfig) -> dict[str, Any]:
    """The verdict of a resolution an adaptive sweep showed inferior at an earlier look (its summary.md section
    says when and with which bounds); not tested again on the later seeds, which it does not have."""
    return {
        "resolution": resolution,
        "reference": cfg.reference,
        "verdict": "inferior",
        "margin": cfg.margin,
        "level": cfg.level,
        "difference": None,
        "low": None,
        "high": None,
        "p_value": None,
        "detectable": None,
        "n_images": 0,
        "n_seeds": 0,
        "reason": "shown inferior at an earlier look of the adaptive sweep (or below one that was); not run further",
    }


def _empty_recommendation(model: str, metric: str, cfg: StatsConfig) -> dict[str, Any]:
    """A recommendation row before (or without) a decision: RECOMMENDATION_COLUMNS with what is known."""
    return {
        "model": model,
        "metric": metric,
        "resolution": None,
        "recommended": False,  # set by build_summary from `recommendation` (the evidence beside the decision)
        "reference": None,
        "decided": False,
        "scope": cfg.scope,
        "accuracy": None,
        "reference_accuracy": None,
        "level": cfg.level,
        "margin": cfg.margin,
        "detectable": None,
        "power": cfg.power,
        "n_seeds": None,
        "n_images": None,
        "deterministic": False,
        "available": False,
        "reason": "",
        "recommendation": "",
        "sentence": "",
        "note": "",
    }


# ------------------------------------------------------------------------------------------------ recommended?

NO_RECOMMENDATION = "no recommendation"


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Whether a model's decided resolution is recommended, and why in words: ``reason`` is
    'recommended: <res> px (...)' or 'no recommendation: <the first missing piece of evidence>'."""

    recommended: bool
    reason: str


def recommendation(rec: Mapping[str, Any], row: SummaryRow | None) -> Evidence:
    """The one rule of "recommended" (every table, figure, the report and MLflow read its result): the model's
    decided resolution (``rec``: its recommendation row, RECOMMENDATION_COLUMNS; ``row``: the summary row of that
    model at that resolution) is recommended only when all hold, checked in this order:

    (a) a decision about the model exists: ``rec`` is available, ``decided`` and of ``scope`` "model" (a row
        without a scope is of checkpoint scope: a statement about the trained checkpoints, not the model);
    (b) the model is shown above the task's trivial predictor there (``SummaryRow.shown_above``: the one-sided
        sign-flip test);
    (c) it is shown above each classical baseline of the sweep that ran at that resolution (a classical model is
        not compared with the baselines: for it (c) does not apply);
    (d) none of its trials there is flagged undertrained (the row's convergence records).

    Otherwise 'no recommendation: <reason>' with the first that fails."""
    res = rec.get("resolution")
    if not rec.get("available") or res is None:
        why = str(rec.get("reason") or "")
        return _none(f"no decision ({why})" if why else "no decision")
    if not rec.get("decided"):
        return _none(_undecided(rec))
    if rec.get("scope", "checkpoint") != "model":
        return _none("no decision about the model (checkpoint scope only)")
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
            return _none(f"{res} px is not shown above {name}{why}")
    if row.undertrained:
        return _none(f"{res} px is undertrained ({row.undertrained_reason or 'a seed is flagged'})")
    above = " and ".join([trivial, *sorted(baselines)])
    return Evidence(True, f"recommended: {res} px (a decision about the model; shown above {above}; not undertrained)")


def _none(why: str) -> Evidence:
    return Evidence(False, f"{NO_RECOMMENDATION}: {why}")


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


def metric_scores(by_res: Mapping[int, list[TrialRecord]], metric: str | None = None) -> MetricScores | str:
    """The decision metric (stats.metric; None: the task's headline score) of a model's resolutions as the decision
    compares them; or the reason why not."""
    task = next(iter(by_res.values()))[0].task
    found = _scores_by_resolution(by_res, task)
    if isinstance(found, str):
        return found
    return decision_scores(found, task, metric, class_names(by_res))


def class_names(by_res: Mapping[int, list[TrialRecord]]) -> list[str] | None:
    """The class names the model's trials recorded (result.json's data.classes), None when none did."""
    for members in by_res.values():
        for m in members:
            found = (m.result.get("data") or {}).get("classes")
            if found:
                return [str(c) for c in found]
    return None


def _detectable(decision: stats.Decision) -> float | None:
    """The detectable margin of the first tested resolution (the design's, as the others share its images)."""
    return next((v.detectable for v in decision.verdicts if v.detectable is not None), None)


def compare_models(records: Iterable[TrialRecord], cfg: StatsConfig) -> tuple[list[dict], list[dict]]:
    """(every model's paired test rows, one recommendation per model)."""
    by_model: dict[str, dict[int, list[TrialRecord]]] = defaultdict(dict)
    for (model, res), members in group_records(records).items():
        by_model[model][res] = members
    paired, recs = [], []
    for model, by_res in sorted(by_model.items()):
        rows, rec = compare_model(model, by_res, cfg)
        paired += rows
        recs.append(rec)
    return paired, recs
