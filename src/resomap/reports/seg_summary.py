"""The segmentation part of a sweep summary: seg_summary.csv / seg_paired_tests.csv / seg_summary.md and the
figures seg_quality_vs_resolution.png (mIoU and boundary F1 against resolution, with intervals) and
seg_pareto.png (mIoU against latency, the Pareto front marked).

Read from each trial's seg_predictions.csv (per test image: pixel accuracy, mIoU, mean Dice, boundary F1 at the
reference resolution; resomap.tasks.seg_metrics) and result.json's test metrics. Per model x resolution:
the dataset-level numbers (pooled pixel counts, mean over seeds), and the mean per-image mIoU / boundary F1
with a bootstrap interval over test images (resomap.stats.bootstrap_scores: BCa, seeds pooled per image). Between
two resolutions of a model, on the same test images and seeds: the mean per-image difference with a paired bootstrap
interval and a sign-flip p-value (resomap.stats.paired_score_test), Holm-adjusted over the model's pairs
(resomap.stats.holm). Settings: the `stats` config section (level, resamples, seed).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.records import SEG_RECORDS_FILE

log = logging.getLogger(__name__)

SEG_SUMMARY_CSV, SEG_PAIRED_CSV, SEG_SUMMARY_MD = "seg_summary.csv", "seg_paired_tests.csv", "seg_summary.md"
ROW_COLUMNS = (
    "model",
    "resolution",
    "n_seeds",
    "test_miou",
    "test_boundary_f1",
    "test_pixel_accuracy",
    "test_mdice",
    "n_test_images",
    "image_miou",
    "image_miou_ci_low",
    "image_miou_ci_high",
    "image_boundary_f1",
    "image_boundary_f1_ci_low",
    "image_boundary_f1_ci_high",
    "reference_resolution",
    "boundary_tolerance_px",
    "latency_ms",
    "gmacs",
    "peak_memory_mb",
)
PAIRED_COLUMNS = (
    "model",
    "metric",
    "resolution_a",
    "resolution_b",
    "effect",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
    "significant",
    "n_images",
)


def read_records(folder: Path) -> dict[int, dict[int, dict[str, float]]]:
    """{test resolution: {image index: {column: value}}} from a trial's seg_predictions.csv ({} when absent)."""
    path = Path(folder) / SEG_RECORDS_FILE
    if not path.is_file():
        return {}
    out: dict[int, dict[int, dict[str, float]]] = defaultdict(dict)
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            values = {
                k: (float(v) if v != "" else math.nan) for k, v in row.items() if k not in ("test_resolution", "index")
            }
            out[int(row["test_resolution"])][int(row["index"])] = values
    return dict(out)


def _scores(members: list[tuple[dict, dict]], resolution: int, column: str) -> dict[int, np.ndarray]:
    """Image index -> the column's value under each seed at test resolution `resolution` (images every seed has;
    an image whose value is not finite under some seed is left out)."""
    tables = [records.get(resolution, {}) for _, records in members]
    common = set.intersection(*(set(t) for t in tables)) if tables else set()
    out = {}
    for idx in sorted(common):
        values = np.array([t[idx][column] for t in tables], dtype=np.float64)
        if np.isfinite(values).all():
            out[idx] = values
    return out


def _interval(scores: dict[int, np.ndarray], settings: dict[str, Any]) -> tuple[float | None, float | None]:
    """The bootstrap interval (resomap.stats.bootstrap_scores, BCa) of the mean per-image score, seeds pooled."""
    from resomap.stats import bootstrap_scores

    if not scores:
        return (None, None)
    found = bootstrap_scores(np.stack(list(scores.values()), axis=1), **settings)
    return (found.low, found.high) if found.available else (None, None)


def _paired(a: dict[int, np.ndarray], b: dict[int, np.ndarray], settings: dict[str, Any]) -> dict[str, Any]:
    """B against A on the images both hold: resomap.stats.paired_score_test (paired bootstrap interval of the
    mean per-image difference, sign-flip p-value)."""
    from resomap.stats import paired_score_test

    common = sorted(set(a) & set(b))
    if not common:
        return {"effect": None, "n_images": 0, "ci_low": None, "ci_high": None, "p_value": None}
    found = paired_score_test(
        np.stack([a[k] for k in common], axis=1), np.stack([b[k] for k in common], axis=1), **settings
    )
    return {
        "effect": found.effect,
        "n_images": len(common),
        "ci_low": found.low,
        "ci_high": found.high,
        "p_value": found.p_value,
    }


def _mean(members: list[tuple[dict, dict]], path: tuple[str, ...]) -> float | None:
    """The mean over the trials of result.json's number at `path` (None when no trial has it)."""
    vals = []
    for trial, _ in members:
        node: Any = trial
        for key in path:
            node = (node or {}).get(key) if isinstance(node, Mapping) else None
        if isinstance(node, int | float) and math.isfinite(node):
            vals.append(float(node))
    return float(np.mean(vals)) if vals else None


ROW_SOURCES = (
    ("test_miou", ("test", "test/miou")),
    ("test_boundary_f1", ("test", "test/boundary_f1")),
    ("test_pixel_accuracy", ("test", "test/accuracy")),
    ("test_mdice", ("test", "test/mdice")),
    ("reference_resolution", ("test", "test/reference_resolution")),
    ("boundary_tolerance_px", ("test", "test/boundary_tolerance_px")),
    ("latency_ms", ("profile", "latency_median_ms")),
    ("gmacs", ("profile", "gmacs")),
    ("peak_memory_mb", ("profile", "peak_memory_mb")),
)
TESTED = (("miou", "image_miou"), ("boundary_f1", "image_boundary_f1"))  # per-image columns with intervals and tests


def _groups(trials: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], list[tuple[dict, dict]]]:
    groups: dict[tuple[str, int], list[tuple[dict, dict]]] = defaultdict(list)
    for trial in trials:
        if trial.get("status") != "FINISHED" or not trial.get("folder"):
            continue
        records = read_records(Path(trial["folder"]))
        if records:
            groups[(str(trial["model"]), int(trial["resolution"]))].append((dict(trial), records))
    return groups


def _model_tests(model: str, by_res: dict[int, dict[str, dict]], settings: dict[str, Any]) -> list[dict]:
    """Every pair of the model's resolutions on each tested column, Holm-adjusted over the model's pairs."""
    from resomap.stats import holm

    found = []
    resolutions = sorted(by_res)
    for column, _ in TESTED:
        for i, ra in enumerate(resolutions):
            for rb in resolutions[i + 1 :]:
                test = _paired(by_res[ra][column], by_res[rb][column], settings)
                found.append({"model": model, "metric": column, "resolution_a": ra, "resolution_b": rb, **test})
    pvals = [f["p_value"] if f["p_value"] is not None else 1.0 for f in found]
    for f, p in zip(found, holm(pvals) if found else []):
        f["p_adjusted"] = float(p)
        f["significant"] = bool(f["p_value"] is not None and p <= 1 - settings["level"])
    return found


def seg_summary(trials: Iterable[Mapping[str, Any]], stats_cfg: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    """(rows, paired tests) from the summary's trials (result.json trees with their "folder")."""
    settings = {
        "level": float(stats_cfg.get("level", 0.95)),
        "resamples": int(stats_cfg.get("resamples", 2000)),
        "seed": int(stats_cfg.get("seed", 0)),
    }
    rows = []
    per_model: dict[str, dict[int, dict[str, dict]]] = defaultdict(dict)
    for (model, res), members in sorted(_groups(trials).items()):
        row: dict[str, Any] = {"model": model, "resolution": res, "n_seeds": len(members)}
        row.update({name: _mean(members, path) for name, path in ROW_SOURCES})
        per_model[model][res] = {}
        for column, name in TESTED:
            scores = per_model[model][res][column] = _scores(members, res, column)
            row["n_test_images"] = len(scores)
            row[name] = float(np.mean([v.mean() for v in scores.values()])) if scores else None
            row[f"{name}_ci_low"], row[f"{name}_ci_high"] = _interval(scores, settings)
        rows.append(row)
    paired = [t for model, by_res in per_model.items() for t in _model_tests(model, by_res, settings)]
    return rows, paired


def _csv(rows: list[dict], columns: Iterable[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)) for k, v in row.items()})
    return buf.getvalue()


def _fmt(v: Any) -> str:
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def _markdown(rows: list[dict], paired: list[dict], level: float) -> str:
    lines = [
        "# Segmentation summary",
        "",
        "Metrics on the reference masks (logits resampled bilinearly to them, masks nearest-neighbour); "
        f"per-image intervals: bootstrap BCa at level {level} over test images; paired tests: sign-flip "
        "permutation of the per-image differences, Holm-adjusted per model.",
        "",
        "| model | res | seeds | mIoU | boundary F1 | pixel acc | image mIoU [CI] | image boundary F1 [CI] | "
        "ref px | tol px | latency ms | GMACs |",
        "|" + " --- |" * 12,
    ]
    for r in rows:
        ci = lambda name, r=r: f"{_fmt(r[name])} [{_fmt(r[name + '_ci_low'])}, {_fmt(r[name + '_ci_high'])}]"  # noqa: E731
        lines.append(
            f"| {r['model']} | {r['resolution']} | {r['n_seeds']} | {_fmt(r['test_miou'])} | "
            f"{_fmt(r['test_boundary_f1'])} | {_fmt(r['test_pixel_accuracy'])} | {ci('image_miou')} | "
            f"{ci('image_boundary_f1')} | {_fmt(r['reference_resolution'])} | "
            f"{_fmt(r['boundary_tolerance_px'])} | {_fmt(r['latency_ms'])} | {_fmt(r['gmacs'])} |"
        )
    if paired:
        lines += [
            "",
            "## Paired tests between resolutions (effect = b - a)",
            "",
            "| model | metric | a | b | effect [CI] | p (Holm) | significant |",
            "|" + " --- |" * 7,
        ]
        for p in paired:
            lines.append(
                f"| {p['model']} | {p['metric']} | {p['resolution_a']} | {p['resolution_b']} | "
                f"{_fmt(p['effect'])} [{_fmt(p['ci_low'])}, {_fmt(p['ci_high'])}] | "
                f"{_fmt(p.get('p_adjusted'))} | {p.get('significant')} |"
            )
    return "\n".join(lines) + "\n"


def seg_figures(rows: list[dict], out_dir: Path) -> list[Path]:
    """seg_quality_vs_resolution.png and seg_pareto.png in out_dir from seg_summary's rows (also the HTML report's,
    when a sweep folder lacks them)."""
    from matplotlib.figure import Figure

    out_dir.mkdir(parents=True, exist_ok=True)
    models = sorted({r["model"] for r in rows})
    fig = Figure(figsize=(10, 4), layout="constrained")
    for ax, (name, title) in zip(fig.subplots(1, 2), (("image_miou", "mIoU"), ("image_boundary_f1", "boundary F1"))):
        for model in models:
            mine = sorted(
                (r for r in rows if r["model"] == model and r[name] is not None), key=lambda r: r["resolution"]
            )
            if not mine:
                continue
            x = [r["resolution"] for r in mine]
            y = [r[name] for r in mine]
            low = [r[name] - r[f"{name}_ci_low"] if r[f"{name}_ci_low"] is not None else 0 for r in mine]
            high = [r[f"{name}_ci_high"] - r[name] if r[f"{name}_ci_high"] is not None else 0 for r in mine]
            ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=model)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training resolution (px)")
        ax.set_ylabel(f"{title} per test image (reference masks)")
        ax.legend(fontsize=8)
    paths = [out_dir / "seg_quality_vs_resolution.png"]
    fig.savefig(paths[0], dpi=120)
    pts = [
        (r["latency_ms"], r["test_miou"], f"{r['model']}@{r['resolution']}")
        for r in rows
        if r["latency_ms"] is not None and r["test_miou"] is not None
    ]
    if pts:
        from resomap.stats import pareto_indices

        front = set(pareto_indices([(c, s) for c, s, _ in pts]))
        fig = Figure(figsize=(5, 4), layout="constrained")
        ax = fig.add_subplot()
        for i, (c, s, label) in enumerate(pts):
            ax.scatter([c], [s], color="C3" if i in front else "C0")
            ax.annotate(label, (c, s), fontsize=7)
        ax.set_xlabel("latency (ms, median)")
        ax.set_ylabel("test mIoU")
        ax.set_title("mIoU vs cost (red: Pareto front)")
        paths.append(out_dir / "seg_pareto.png")
        fig.savefig(paths[-1], dpi=120)
    return paths


def write_seg_summary(trials: Iterable[Mapping[str, Any]], stats_cfg: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The segmentation tables and figures; [] when no trial has seg_predictions.csv (classification sweeps)."""
    trials = list(trials)
    rows, paired = seg_summary(trials, stats_cfg)
    if not rows:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    level = float(stats_cfg.get("level", 0.95))
    files = {
        SEG_SUMMARY_CSV: _csv(rows, ROW_COLUMNS),
        SEG_PAIRED_CSV: _csv(paired, PAIRED_COLUMNS),
        SEG_SUMMARY_MD: _markdown(rows, paired, level),
    }
    paths = []
    for name, text in files.items():
        write_text(out_dir / name, text)
        paths.append(out_dir / name)
    try:
        paths += seg_figures(rows, out_dir / "figures")
    except Exception as exc:  # a figure must not lose the tables (matplotlib errors are many)
        log.warning("segmentation figures failed: %s", exc)
    return paths
