"""A sweep's finished trials with their per-image score tables (`TrialRecord`, read by each trial's task), the
seeds' tables stacked on the test images they share (`align`), and the one test of a deterministic fit
(`identical_seeds`: seeds that are one replicate). What the summary's intervals (summary.uncertainty) and decisions
(summary.decision) are computed from."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.records import ScoreTable
from resomap.tasks import Task, of_result

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
    """Whether the seeds of one model x resolution are seen to be one fit (one replicate): two or more seeds, every
    one with per-image records, that give the same prediction for every test image they share at every test
    resolution they share (the same per-image scores where the task keeps no predictions), the trial's own
    resolution included. Seeds that do what a trivial predictor does are not counted as one fit (every image in one
    class; a segmenter's scores equal to all background's): any collapsed network agrees with itself. pixel_logreg
    and hog_svm (fitted in closed form on data the seed does not change) are one fit; a network trained from a
    seeded initialisation is not."""
    same, informative = _agreement(members)
    return bool(same) and informative


def seeds_disagree(members: list[TrialRecord]) -> bool:
    """Whether two seeds of one model x resolution, both with per-image records, differ on some test image."""
    return _agreement(members)[0] is False


def _agreement(members: list[TrialRecord]) -> tuple[bool | None, bool]:
    """(whether the seeds agree on every shared image at every shared resolution, None with fewer than two seeds
    with records; whether somewhere they do more than a trivial predictor)."""
    members = [m for m in members if m.own is not None]
    if len(members) < 2:
        return None, False
    task = members[0].task
    shared = sorted(set.intersection(*(set(m.tables) for m in members)))
    shared = [res for res in shared if all(len(m.tables[res].index) for m in members)]
    informative = False  # somewhere the seeds do more than a trivial predictor
    for res in shared:
        aligned = align({m.id[2]: m.tables[res] for m in members}, task)
        if isinstance(aligned, str):
            return None, False
        if aligned.prediction is not None:
            arrays = [np.asarray(aligned.prediction)]
            informative = informative or np.unique(arrays[0][0]).size > 1
        else:
            arrays = [np.asarray(aligned.scores[sc.name], dtype=np.float64) for sc in task.scores]
            trivial = task.trivial_scores(aligned.scores, aligned.label)
            same = trivial is not None and np.allclose(arrays[0][0], trivial, equal_nan=True)
            informative = informative or not same
        if any(not np.array_equal(v[0], other, equal_nan=True) for v in arrays for other in v[1:]):
            return False, informative
    return True, informative


def declared_deterministic(members: Iterable[TrialRecord]) -> bool:
    """Whether the trials' model is deterministic by its spec (result.json's `deterministic`: a closed-form fit on
    fixed features, register_model's `deterministic`)."""
    return any(bool(m.result.get("deterministic")) for m in members)


def one_fit(members: list[TrialRecord]) -> bool:
    """Whether one model x resolution's seeds are one replicate: deterministic by its spec and no two seeds
    disagree, or seen to be one fit (:func:`identical_seeds`). The one test of determinism: the summary rows, the
    recommendation rows (:func:`deterministic`) and, through them, the explanation comparison (no cross-seed floor,
    no relabelling test) read it."""
    if declared_deterministic(members):
        return not seeds_disagree(members)
    return identical_seeds(members)


def deterministic(by_res: Mapping[int, list[TrialRecord]]) -> bool:
    """One model is deterministic when its seeds are one fit (:func:`one_fit`) at every resolution."""
    return bool(by_res) and all(one_fit(members) for members in by_res.values())


def spec_contradicted(by_res: Mapping[int, list[TrialRecord]]) -> str:
    """A warning when a model that is deterministic by its spec has seeds that disagree ('' otherwise): the
    resolutions where they do. Such a model is then treated as one whose seeds are replicates."""
    members = [m for ms in by_res.values() for m in ms]
    if not declared_deterministic(members):
        return ""
    where = sorted(res for res, ms in by_res.items() if seeds_disagree(ms))
    if not where:
        return ""
    at = ", ".join(f"{res} px" for res in where)
    return (
        f"its spec says the training seed changes nothing, but its seeds gave different predictions at {at}: its "
        "seeds are treated as replicates"
    )


def one_replicate(n_seeds: int) -> str:
    """What a deterministic model's decision sentence adds, once per model: its seeds count as one replicate."""
    return f"Deterministic fit: its {n_seeds} seeds are one replicate."
