"""After a sweep: compare each model's saved maps across resolutions (and methods), and draw the figures."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from resomap.atomic import write_text
from resomap.config.schema import ExplainabilityConfig
from resomap.explain.compare import compare_all
from resomap.explain.figures import agreement_matrix, probe_grid, quality_vs_resolution, save_figure
from resomap.explain.probe import load_maps
from resomap.explain.run import PROBE_KEY

log = logging.getLogger(__name__)
QUALITY_PLOTTED = ("deletion_auc", "insertion_auc", "pointing_game", "energy_in_mask")


def load_sweep_maps(entries: Iterable[tuple[str, int, Path]]):
    """entries (model, resolution, npz) -> maps[model][res][method], images[model][res] (uint8 [N,C,r,r])."""
    maps: dict[str, dict[int, dict[str, np.ndarray]]] = defaultdict(dict)
    images: dict[str, dict[int, np.ndarray]] = defaultdict(dict)
    for model, res, path in entries:
        if not Path(path).exists():
            continue
        arrays, meta = load_maps(path)
        maps[model][res] = {m: arrays[m] for m in meta.get("methods", []) if m in arrays}
        if PROBE_KEY in arrays:
            images[model][res] = arrays[PROBE_KEY]
    return maps, images


def compare_sweep(
    entries: list[tuple[str, int, Path]],
    quality: dict[tuple[str, int], dict[str, float]],
    cfg: ExplainabilityConfig,
    out_dir: Path,
    max_probe_figures: int = 4,
) -> tuple[list[Path], list[dict]]:
    """Agreement matrices, probe grids and quality-vs-resolution figures; returns (files, tidy agreement rows)."""
    maps, images = load_sweep_maps(entries)
    by_method, by_res, rows = compare_all(maps, cfg)
    files: list[Path] = []
    for (model, method), agg in sorted(by_method.items()):
        for metric, matrix in agg.matrices.items():
            fig = agreement_matrix(matrix, agg.labels, metric, f"{model} / {method}: {metric} across resolutions")
            files += save_figure(fig, out_dir / "agreement", f"{model}_{method}_{metric}")
    for (model, res), agg in sorted(by_res.items()):
        fig = agreement_matrix(agg.matrices["spearman"], agg.labels, "spearman", f"{model} @ {res}px: methods")
        files += save_figure(fig, out_dir / "agreement", f"{model}_{res}_methods_spearman")
    files += _probe_figures(maps, images, out_dir / "probes", max_probe_figures)
    files += _quality_figures(quality, out_dir / "quality")
    return files, rows


def _probe_figures(maps, images, out_dir: Path, limit: int) -> list[Path]:
    files: list[Path] = []
    for model, per_res in sorted(maps.items()):
        count = min((len(v) for v in images[model].values()), default=0)
        methods = sorted({m for pm in per_res.values() for m in pm})
        for i in range(min(count, limit)):  # per probe image: methods x resolutions
            imgs = {r: images[model][r][i] for r in images[model]}
            grid = {m: {r: per_res[r][m][i] for r in per_res if m in per_res[r]} for m in methods}
            files += save_figure(probe_grid(imgs, grid, f"{model}: probe image {i}"), out_dir, f"{model}_probe{i}")
    models = sorted(maps)
    for method in sorted({m for pr in maps.values() for pm in pr.values() for m in pm}):
        for i in range(min(limit, 2)):  # per method: models x resolutions (rows are models)
            rows = {mo: {r: maps[mo][r][method][i] for r in maps[mo] if method in maps[mo][r]} for mo in models}
            imgs = next((dict((r, images[mo][r][i]) for r in images[mo]) for mo in models if images[mo]), {})
            all_res = sorted({r for mo in models for r in maps[mo]})
            if imgs and set(all_res) <= set(imgs):
                fig = probe_grid(imgs, rows, f"{method}: models x resolutions, probe image {i}")
                files += save_figure(fig, out_dir, f"{method}_models_probe{i}")
    return files


def _quality_figures(quality: dict[tuple[str, int], dict[str, float]], out_dir: Path) -> list[Path]:
    files: list[Path] = []
    for model in sorted({m for m, _ in quality}):
        for metric in QUALITY_PLOTTED:
            values: dict[str, dict[int, float]] = defaultdict(dict)
            for (mo, res), scores in quality.items():
                if mo != model:
                    continue
                for key, value in scores.items():
                    _, method, name = key.split("/", 2)
                    if name == metric and np.isfinite(value):
                        values[method][res] = value
            if values:
                fig = quality_vs_resolution(values, metric, f"{model}: {metric}")
                files += save_figure(fig, out_dir, f"{model}_{metric}")
    return files


def mean_agreement(rows: list[dict]) -> dict[str, float]:
    """Mean pairwise agreement across resolutions per model, method and metric (MLflow metric names)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("kind") == "resolution" and np.isfinite(row["value"]):
            acc[f"agreement/{row['model']}/{row['method']}/{row['metric']}"].append(row["value"])
    return {k: float(np.mean(v)) for k, v in acc.items()}


def write_rows(rows: list[dict], path: Path) -> Path:
    import pandas as pd

    return write_text(path, pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))
