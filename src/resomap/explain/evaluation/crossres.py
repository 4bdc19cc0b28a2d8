"""After a sweep: compare each model's saved maps across resolutions, seeds (the noise floor) and methods, with
the references of compare.study beside every number; the figures are drawn from what it returns
(`ComparisonData`) by resomap.reports.explain_comparison."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.config.schema import ExplainabilityConfig
from resomap.explain.evaluation.compare import Study, study
from resomap.explain.evaluation.intervals import quality_lines, quality_table, seed_means
from resomap.explain.evaluation.placement import placements
from resomap.explain.evaluation.where import FloorInputs
from resomap.explain.methods.nuisance import FLOOR_PREFIX
from resomap.explain.methods.probe import PROBE_KEY, PROBE_MASKS_KEY, load_maps

log = logging.getLogger(__name__)


def load_sweep_maps(
    entries: Iterable[tuple], metas: dict | None = None, floors: dict | None = None, masks: dict | None = None
):
    """entries (model, resolution, seed, npz) -> maps[model][seed][res][method], images[model][seed][res] (uint8
    [N,C,r,r]). A seed whose probe images differ from the lowest seed's at some resolution (maps written before
    the probe set followed the data seed) is left out of the comparison with a warning: only maps of the same
    images can be compared across seeds. `metas`, when given, is filled with metas[model][seed][res] = the npz's
    meta (targets, the model's predictions and probabilities, class names); `floors`, when given, with
    floors[model][seed][res][method] = the method's shift-floor maps (explain.methods.nuisance), where saved;
    `masks` with masks[model][res] = the probe images' object masks (bool [N,r,r]), where the data has them."""
    maps: dict[str, dict[int, dict[int, dict[str, np.ndarray]]]] = defaultdict(lambda: defaultdict(dict))
    images: dict[str, dict[int, dict[int, np.ndarray]]] = defaultdict(lambda: defaultdict(dict))
    for entry in entries:
        model, res, seed, path = entry if len(entry) == 4 else (entry[0], entry[1], 0, entry[2])
        if not Path(path).exists():
            continue
        arrays, meta = load_maps(path)
        maps[model][seed][res] = {m: arrays[m] for m in meta.get("methods", []) if m in arrays}
        if floors is not None:
            held = {m: arrays[FLOOR_PREFIX + m] for m in meta.get("methods", []) if FLOOR_PREFIX + m in arrays}
            floors.setdefault(model, {}).setdefault(seed, {})[res] = held
        if metas is not None:
            metas.setdefault(model, {}).setdefault(seed, {})[res] = meta
        if PROBE_KEY in arrays:
            images[model][seed][res] = arrays[PROBE_KEY]
        if masks is not None and PROBE_MASKS_KEY in arrays:
            masks.setdefault(model, {})[res] = arrays[PROBE_MASKS_KEY]
    for model in list(maps):
        seeds = sorted(maps[model])
        ref = images[model].get(seeds[0], {})
        for seed in seeds[1:]:
            mine = images[model].get(seed, {})
            same = all(np.array_equal(ref[r], mine[r]) for r in set(ref) & set(mine))
            if not same:
                log.warning("%s seed %s explained other probe images than seed %s: left out", model, seed, seeds[0])
                del maps[model][seed]
                (floors or {}).get(model, {}).pop(seed, None)
                images[model].pop(seed, None)
    return maps, images


@dataclasses.dataclass
class ComparisonData:
    """What a comparison's figures are drawn from (resomap.reports.explain_comparison.draw_comparison): the study,
    the maps, probe images and npz metas of each model's lowest seed (model -> resolution -> ...), the quality
    rows, and the folder the comparison writes to."""

    study: Study
    maps: dict[str, dict[int, dict[str, np.ndarray]]]
    images: dict[str, dict[int, np.ndarray]]
    metas: dict[str, dict[int, dict]]
    quality_rows: list[dict]
    out_dir: Path
    quality_images: dict = dataclasses.field(default_factory=dict)
    placements: list = dataclasses.field(default_factory=list)  # where the maps sit (explain.evaluation.placement)


def compare_sweep(
    entries: list[tuple],
    cfg: ExplainabilityConfig,
    out_dir: Path,
    stats: Any = None,
    deterministic: Mapping[str, int] | None = None,
) -> tuple[list[Path], ComparisonData]:
    """Agreement with its references (compare.study), and the quality scores with their bootstrap intervals over
    probe images and seeds (quality.csv, quality.txt; at `stats`' level, resamples and seed, cfg.stats);
    ``deterministic`` (model -> seed count: models whose seeds are one fit, the summary's
    ``deterministic_models``) are compared as one replicate (compare.study); returns (files, what the figures are
    drawn from: the study with its tidy rows, matrices, floors and statements)."""
    metas: dict = {}
    floors: dict = {}
    masks: dict = {}
    maps, images = load_sweep_maps(entries, metas, floors, masks)
    reference = getattr(stats, "reference", None)
    at_reference = {mo: by_res[reference if reference in by_res else max(by_res)] for mo, by_res in masks.items()}
    per_trial = _per_trial(metas)
    means = seed_means(per_trial)
    failed = {
        (mo, res, method): str(why)
        for mo, by_seed in metas.items()
        for by_res in by_seed.values()
        for res, meta in by_res.items()
        for method, why in (meta.get("failed") or {}).items()
    }
    inputs = FloorInputs(floors, at_reference, reference, 1.0 - getattr(stats, "level", 0.95), means, failed)
    found = study(maps, images, cfg, deterministic, inputs)
    quality_rows = quality_rows_of(metas, stats)
    files: list[Path] = write_quality(quality_rows, out_dir)
    first = {mo: per_seed[min(per_seed)] for mo, per_seed in maps.items() if per_seed}  # probe figures: lowest seed
    first_images = {mo: images[mo].get(min(maps[mo]), {}) for mo in first}
    first_meta = {mo: metas.get(mo, {}).get(min(maps[mo]), {}) for mo in first}
    placed = [p for mo in first for p in _placements(mo, first[mo], first_meta[mo], at_reference.get(mo), cfg)]
    return files, ComparisonData(found, first, first_images, first_meta, quality_rows, Path(out_dir), means, placed)


def _placements(model: str, maps: dict, metas: dict, masks: Any, cfg: ExplainabilityConfig) -> list:
    """Where one model's maps sit (explain.evaluation.placement), classes by the reference trial's targets."""
    if len(maps) < 2 or not metas:
        return []
    meta = metas[max(metas)]
    targets = meta.get("targets") or []
    if len(targets) != len(next(iter(next(iter(maps.values())).values()), [])):
        return []
    return placements(maps, np.asarray(targets), meta.get("class_names") or [], masks, model, cfg.common_grid)


def quality_rows_of(metas: dict, stats: Any = None) -> list[dict]:
    """The rows of quality.csv: each trial's per-image quality scores (npz meta), pooled over seeds per model,
    resolution and method, with a bootstrap interval over the probe images (`intervals.quality_table`)."""
    kw = {"level": stats.level, "resamples": stats.resamples, "seed": stats.seed} if stats is not None else {}
    return quality_table(_per_trial(metas), **kw)


def _per_trial(metas: dict) -> list[tuple]:
    """(model, resolution, seed, its per-image quality scores) of each trial that has them (npz meta)."""
    per_trial = [
        (model, res, seed, meta.get("quality_per_image") or {})
        for model, by_seed in metas.items()
        for seed, by_res in by_seed.items()
        for res, meta in by_res.items()
    ]
    return [t for t in per_trial if t[3]]


def write_quality(rows: list[dict], out_dir: Path) -> list[Path]:
    """quality.csv and quality.txt (`quality_rows_of`); nothing when there are no rows."""
    if not rows:
        return []
    return [
        write_rows(rows, out_dir / "quality.csv"),
        write_text(out_dir / "quality.txt", "\n".join(quality_lines(rows)) + "\n"),
    ]


def mean_agreement(rows: list[dict]) -> dict[str, float]:
    """MLflow metric names -> values, at the main grid (the largest grid in the rows of a model and method):
    'agreement/<model>/<method>/<metric>' the mean cross-resolution agreement, 'agreement_floor/...' the mean
    cross-seed agreement at the same resolution (>= 2 seeds), 'agreement_shift_floor/...' the mean agreement of
    the maps with their shifted-and-undone maps (the floor of every model), 'agreement_chance/...' its chance
    level (maps of different probe images) and 'agreement_model_free/...' the model-free reference."""
    main: dict[tuple, int] = {}
    for row in rows:
        key = (row.get("model"), row.get("method"))
        main[key] = max(main.get(key, 0), int(row.get("grid", 0) or 0))
    names = {"resolution": "agreement", "seed": "agreement_floor", "model_free": "agreement_model_free"}
    names["shift_floor"] = "agreement_shift_floor"  # the maps against their shifted-and-undone maps (where.py)
    acc: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        kind = row.get("kind")
        if kind == "chance" and row.get("of", "resolution") == "resolution":
            name = "agreement_chance"
        else:
            name = names.get(kind, "")
        if not name or int(row.get("grid", 0) or 0) != main[(row.get("model"), row.get("method"))]:
            continue
        if np.isfinite(row["value"]):
            acc[f"{name}/{row['model']}/{row['method']}/{row['metric']}"].append(row["value"])
    return {k: float(np.mean(v)) for k, v in acc.items()}


def write_rows(rows: list[dict], path: Path) -> Path:
    import pandas as pd

    return write_text(path, pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))
