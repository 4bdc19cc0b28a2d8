"""The figures of a sweep's explanation comparison (resomap.explain.evaluation.crossres.compare_sweep gives what
they are drawn from): agreement matrices across resolutions and across methods, probe grids (methods x
resolutions per probe image, models x resolutions per method) and explanation quality against resolution."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from resomap.explain.evaluation.compare import NO_FLOOR
from resomap.explain.evaluation.measures import METRICS
from resomap.explain.evaluation.references import fmt_value
from resomap.explain.methods.registry import per_map_scaled
from resomap.plotstyle import class_labels, save_drawn
from resomap.reports.explain_figures import (
    QUALITY_SCORES,
    Verdict,
    agreement_matrices,
    probe_grid,
    quality_vs_resolution,
)
from resomap.reports.where_figures import where_figures

__all__ = ["PROBE_FORMATS", "draw_comparison", "verdicts_of"]


def draw_comparison(comparison: Any, max_probe_figures: int = 4) -> list[Path]:
    """Draw the figures of a comparison (resomap.stages.Comparison, whose `figure_data` is crossres's
    ComparisonData) under its folder: agreement/, probes/ (the first `max_probe_figures` probe images),
    quality/ and where/ (the mean maps per model with each step's verdict: reports.where_figures); adds them to
    `comparison.files` and returns them. A comparison with nothing compared draws nothing."""
    data = getattr(comparison, "figure_data", None)
    if data is None:
        return []
    out_dir = data.out_dir
    files = _agreement_figures(data.study, out_dir / "agreement")
    images = defaultdict(dict, data.images)
    files += _probe_figures(data.maps, images, out_dir / "probes", max_probe_figures, data.metas)
    files += _quality_figures(data.quality_rows, out_dir / "quality")
    files += where_figures(data.placements, data.study.map_rows, out_dir / "where")
    comparison.files.extend(files)
    comparison.figure_data = None  # the maps are not kept once drawn
    return files


def _agreement_figures(found: Any, out_dir: Path) -> list[Path]:
    """Per model x method its measures' matrices across resolutions, side by side (the cross-seed floor on their
    diagonals): <model>_<method>_agreement; per model the Spearman matrix across methods at each resolution:
    <model>_methods_spearman."""
    files: list[Path] = []
    for (model, method), entry in sorted(found.matrices.items()):
        if len(entry["resolutions"]) < 2:  # one resolution: nothing across resolutions (agreement.txt says so)
            continue
        floor = entry["floor_on_diagonal"]
        no_floor = f"{NO_FLOOR} (one fit)" if entry.get("deterministic") else "one seed: no noise floor"
        note = "diagonal: cross-seed floor" if floor else f"{no_floor} (diagonal = 1, self)"
        panels = [(entry[m], m, f"{m} (chance {fmt_value(entry['chance'][m])})") for m in METRICS]
        args = (entry["resolutions"], panels, f"{model} / {method} across resolutions (grid {found.grid}); {note}")
        files += save_drawn(agreement_matrices, args, out_dir, f"{model}_{method}_agreement", floor_diagonal=floor)
    by_model: dict[str, dict[int, Any]] = defaultdict(dict)
    for (model, res), agg in found.method_matrices.items():
        by_model[model][int(res)] = agg
    for model, at in sorted(by_model.items()):
        labels = [list(agg.labels) for agg in at.values()]
        if all(found_labels == labels[0] for found_labels in labels):  # the same methods at every resolution
            panels = [(at[res].matrices["spearman"], "spearman", f"at {res} px") for res in sorted(at)]
            args = (labels[0], panels, f"{model}: Spearman agreement between methods")
            files += save_drawn(agreement_matrices, args, out_dir, f"{model}_methods_spearman")
            continue
        for res in sorted(at):  # a method missing at some resolution: one figure each
            args = (at[res].labels, [(at[res].matrices["spearman"], "spearman", "")], f"{model} @ {res}px: methods")
            files += save_drawn(agreement_matrices, args, out_dir, f"{model}_{res}_methods_spearman")
    return files


def verdicts_of(meta_by_res: dict, i: int) -> dict[int, Verdict]:
    """resolution -> what the model said about probe image i (from the npz metas; absent in older files)."""
    out = {}
    for res, meta in meta_by_res.items():
        names, targets, preds, probs = (meta.get(k) or [] for k in ("class_names", "targets", "pred", "prob"))
        names = class_labels(names)  # by index where no installed font draws one
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
            args = (imgs, grid, f"{model}: probe image {i}")
            files += save_drawn(probe_grid, args, out_dir, f"{model}_probe{i}", PROBE_FORMATS, verdicts=verdicts,
                                shared=shared)  # fmt: skip
    models = sorted(maps)
    shown = min((len(v) for mo in models for v in images[mo].values()), default=0)  # a probe set of 1: one image
    for method in sorted({m for pr in maps.values() for pm in pr.values() for m in pm}):
        for i in range(min(limit, 2, shown)):  # per method: models x resolutions (rows are models)
            rows = {mo: {r: maps[mo][r][method][i] for r in maps[mo] if method in maps[mo][r]} for mo in models}
            imgs = next((dict((r, images[mo][r][i]) for r in images[mo]) for mo in models if images[mo]), {})
            all_res = sorted({r for mo in models for r in maps[mo]})
            if imgs and set(all_res) <= set(imgs):
                verdicts = {mo: verdicts_of(metas.get(mo, {}), i) for mo in models}
                shared = [] if per_map_scaled(method) else models
                title = f"{method}: models x resolutions, probe image {i}"
                files += save_drawn(probe_grid, (imgs, rows, title), out_dir, f"{method}_models_probe{i}",
                                    PROBE_FORMATS, verdicts=verdicts, shared=shared)  # fmt: skip
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
            files += save_drawn(quality_vs_resolution, (mine, title, resolutions), out_dir, f"{model}_quality")
    return files
