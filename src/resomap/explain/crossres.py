"""After a sweep: compare each model's saved maps across resolutions, seeds (the noise floor) and methods, with
the references of compare.study beside every number, and draw the figures."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.config.schema import ExplainabilityConfig
from resomap.explain.compare import NO_FLOOR, Study, fmt_value, study
from resomap.explain.figures import (
    QUALITY_SCORES,
    Verdict,
    agreement_matrix,
    per_map_scaled,
    probe_grid,
    quality_vs_resolution,
    save_figure,
)
from resomap.explain.intervals import quality_lines, quality_table
from resomap.explain.measures import METRICS
from resomap.explain.probe import load_maps
from resomap.explain.run import PROBE_KEY

log = logging.getLogger(__name__)


def load_sweep_maps(entries: Iterable[tuple], metas: dict | None = None):
    """entries (model, resolution, seed, npz) -> maps[model][seed][res][method], images[model][seed][res] (uint8
    [N,C,r,r]). A seed whose probe images differ from the lowest seed's at some resolution (maps written before
    the probe set followed the data seed) is left out of the comparison with a warning: only maps of the same
    images can be compared across seeds. `metas`, when given, is filled with metas[model][seed][res] = the npz's
    meta (targets, the model's predictions and probabilities, class names)."""
    maps: dict[str, dict[int, dict[int, dict[str, np.ndarray]]]] = defaultdict(lambda: defaultdict(dict))
    images: dict[str, dict[int, dict[int, np.ndarray]]] = defaultdict(lambda: defaultdict(dict))
    for entry in entries:
        model, res, seed, path = entry if len(entry) == 4 else (entry[0], entry[1], 0, entry[2])
        if not Path(path).exists():
            continue
        arrays, meta = load_maps(path)
        maps[model][seed][res] = {m: arrays[m] for m in meta.get("methods", []) if m in arrays}
        if metas is not None:
            metas.setdefault(model, {}).setdefault(seed, {})[res] = meta
        if PROBE_KEY in arrays:
            images[model][seed][res] = arrays[PROBE_KEY]
    for model in list(maps):
        seeds = sorted(maps[model])
        ref = images[model].get(seeds[0], {})
        for seed in seeds[1:]:
            mine = images[model].get(seed, {})
            same = all(np.array_equal(ref[r], mine[r]) for r in set(ref) & set(mine))
            if not same:
                log.warning("%s seed %s explained other probe images than seed %s: left out", model, seed, seeds[0])
                del maps[model][seed]
                images[model].pop(seed, None)
    return maps, images


def compare_sweep(
    entries: list[tuple],
    cfg: ExplainabilityConfig,
    out_dir: Path,
    max_probe_figures: int = 4,
    stats: Any = None,
    deterministic: Mapping[str, int] | None = None,
) -> tuple[list[Path], Study]:
    """Agreement with its references (compare.study), matrices, probe grids and quality-vs-resolution figures, and
    the quality scores with their bootstrap intervals over probe images and seeds (quality.csv, quality.txt; at
    `stats`' level, resamples and seed, cfg.stats); ``deterministic`` (model -> seed count: models whose seeds are
    one fit, the summary's ``deterministic_models``) are compared as one replicate (compare.study); returns (files,
    the study: tidy rows, matrices, floors, statements)."""
    metas: dict = {}
    maps, images = load_sweep_maps(entries, metas)
    found = study(maps, images, cfg, deterministic)
    quality_rows = quality_rows_of(metas, stats)
    files: list[Path] = write_quality(quality_rows, out_dir)
    for (model, method), entry in sorted(found.matrices.items()):
        floor = entry["floor_on_diagonal"]
        no_floor = NO_FLOOR if entry.get("deterministic") else "one seed: no noise floor"
        for metric in METRICS:
            note = (
                f"diagonal: cross-seed floor; chance {fmt_value(entry['chance'][metric])}"
                if floor
                else f"{no_floor} (diagonal = 1, self); chance {fmt_value(entry['chance'][metric])}"
            )
            title = f"{model} / {method}: {metric} across resolutions (grid {found.grid})\n{note}"
            fig = agreement_matrix(entry[metric], entry["resolutions"], metric, title, floor_diagonal=floor)
            files += save_figure(fig, out_dir / "agreement", f"{model}_{method}_{metric}")
    for (model, res), agg in sorted(found.method_matrices.items()):
        fig = agreement_matrix(agg.matrices["spearman"], agg.labels, "spearman", f"{model} @ {res}px: methods")
        files += save_figure(fig, out_dir / "agreement", f"{model}_{res}_methods_spearman")
    first = {mo: per_seed[min(per_seed)] for mo, per_seed in maps.items() if per_seed}  # probe figures: lowest seed
    first_images = {mo: images[mo].get(min(maps[mo]), {}) for mo in first}
    first_meta = {mo: metas.get(mo, {}).get(min(maps[mo]), {}) for mo in first}
    files += _probe_figures(first, defaultdict(dict, first_images), out_dir / "probes", max_probe_figures, first_meta)
    files += _quality_figures(quality_rows, out_dir / "quality")
    return files, found


def verdicts_of(meta_by_res: dict, i: int) -> dict[int, Verdict]:
    """resolution -> what the model said about probe image i (from the npz metas; absent in older files)."""
    out = {}
    for res, meta in meta_by_res.items():
        names, targets, preds, probs = (meta.get(k) or [] for k in ("class_names", "targets", "pred", "prob"))
        if i < len(preds) and i < len(targets) and i < len(probs):
            true, pred = (str(names[c]) if 0 <= c < len(names) else str(c) for c in (int(targets[i]), int(preds[i])))
            out[res] = Verdict(true, pred, float(probs[i]))
    return out


PROBE_FORMATS = ("png",)  # grids of images and maps: a PDF would embed the same pixels, slower to write and read


def _probe_figures(maps, images, out_dir: Path, limit: int, metas: dict | None = None) -> list[Path]:
    files: list[Path] = []
    metas = metas or {}
    for model, per_res in sorted(maps.items()):
        count = min((len(v) for v in images[model].values()), default=0)
        methods = sorted({m for pm in per_res.values() for m in pm})
        shared = [m for m in methods if not per_map_scaled(m)]
        for i in range(min(count, limit)):  # per probe image: methods x resolutions
            imgs = {r: images[model][r][i] for r in images[model]}
            grid = {m: {r: per_res[r][m][i] for r in per_res if m in per_res[r]} for m in methods}
            said = verdicts_of(metas.get(model, {}), i)
            verdicts = {m: said for m in methods}
            fig = probe_grid(imgs, grid, f"{model}: probe image {i}", verdicts=verdicts, shared=shared)
            files += save_figure(fig, out_dir, f"{model}_probe{i}", formats=PROBE_FORMATS)
    models = sorted(maps)
    for method in sorted({m for pr in maps.values() for pm in pr.values() for m in pm}):
        for i in range(min(limit, 2)):  # per method: models x resolutions (rows are models)
            rows = {mo: {r: maps[mo][r][method][i] for r in maps[mo] if method in maps[mo][r]} for mo in models}
            imgs = next((dict((r, images[mo][r][i]) for r in images[mo]) for mo in models if images[mo]), {})
            all_res = sorted({r for mo in models for r in maps[mo]})
            if imgs and set(all_res) <= set(imgs):
                verdicts = {mo: verdicts_of(metas.get(mo, {}), i) for mo in models}
                shared = [] if per_map_scaled(method) else models
                title = f"{method}: models x resolutions, probe image {i}"
                fig = probe_grid(imgs, rows, title, verdicts=verdicts, shared=shared)
                files += save_figure(fig, out_dir, f"{method}_models_probe{i}", formats=PROBE_FORMATS)
    return files


def _quality_figures(rows: list[dict], out_dir: Path) -> list[Path]:
    """Per model, its explanation quality against resolution with intervals and the random-map baseline."""
    files: list[Path] = []
    resolutions = sorted({int(r["resolution"]) for r in rows})
    for model in sorted({str(r["model"]) for r in rows}):
        mine = [r for r in rows if r["model"] == model and r["score"] in QUALITY_SCORES]
        if mine:
            seeds = max(int(r["seeds"]) for r in mine)
            images = max(int(r["images"]) for r in mine)
            title = f"{model}: explanation quality ({images} probe images x {seeds} seeds)"
            fig = quality_vs_resolution(mine, title, resolutions)
            files += save_figure(fig, out_dir, f"{model}_quality")
    return files


def quality_rows_of(metas: dict, stats: Any = None) -> list[dict]:
    """The rows of quality.csv: each trial's per-image quality scores (npz meta), pooled over seeds per model,
    resolution and method, with a bootstrap interval over the probe images (`explain.intervals.quality_table`)."""
    per_trial = [
        (model, res, seed, meta.get("quality_per_image") or {})
        for model, by_seed in metas.items()
        for seed, by_res in by_seed.items()
        for res, meta in by_res.items()
    ]
    kw = {"level": stats.level, "resamples": stats.resamples, "seed": stats.seed} if stats is not None else {}
    return quality_table([t for t in per_trial if t[3]], **kw)


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
    cross-seed agreement at the same resolution (>= 2 seeds), 'agreement_chance/...' its chance level (maps of
    different probe images) and 'agreement_model_free/...' the model-free reference."""
    main: dict[tuple, int] = {}
    for row in rows:
        key = (row.get("model"), row.get("method"))
        main[key] = max(main.get(key, 0), int(row.get("grid", 0) or 0))
    names = {"resolution": "agreement", "seed": "agreement_floor", "model_free": "agreement_model_free"}
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
