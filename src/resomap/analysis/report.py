"""Text and JSON of an analysis: report.json, summary.txt and the quality table."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.stages import Comparison
from resomap.training import write_json_atomic

REPORT_FILE = "report.json"
SUMMARY_FILE = "summary.txt"
_SUMMARY_COLUMNS = (
    ("test_accuracy", "accuracy", ".4f"),
    ("test_macro_precision", "precision", ".4f"),
    ("test_macro_recall", "recall", ".4f"),
    ("test_macro_f1", "macro-F1", ".4f"),
    ("latency_ms", "latency ms", ".3f"),
    ("throughput_ips", "images/s", ".1f"),
    ("peak_memory_mb", "memory MB", ".1f"),
    ("gmacs", "GMACs", ".4f"),
)


def clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy -> Python, tuples -> lists (recursively)."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return clean(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=False)) for line in [header, *rows]]
    return "\n".join(lines) + "\n"


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def quality_table(quality: Mapping[str, Mapping[str, float]]) -> str:
    """method x metric table of explanation quality scores."""
    metrics = sorted({k for scores in quality.values() for k in scores})
    rows = [[method] + [_fmt(scores.get(k), ".4f") for k in metrics] for method, scores in quality.items()]
    return format_table(["method", *metrics], rows)


def summary_text(rows: list[dict[str, Any]], agreement: Mapping[str, float], failed: Mapping[str, str]) -> str:
    header = ["model", "res", "seeds"] + [title for _, title, _ in _SUMMARY_COLUMNS]
    table = [
        [r["model"], str(r["resolution"]), str(r["seeds"])] + [_fmt(r.get(k), spec) for k, _, spec in _SUMMARY_COLUMNS]
        for r in rows
    ]
    text = "Trained checkpoints, tested on their test split (mean over seeds)\n" + format_table(header, table)
    if agreement:
        text += "\nMean explanation agreement across resolutions\n"
        text += format_table(["model/method/metric", "mean"], [[k[10:], f"{v:.4f}"] for k, v in agreement.items()])
    for path, reason in failed.items():
        text += f"\nnot analysed: {path}: {reason}"
    return text + ("\n" if failed else "")


def write_report(
    out_dir: Path,
    models: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    comparison: Comparison,
    failed: Mapping[str, str],
) -> tuple[Path, Path]:
    """report.json (every checkpoint's result, the summary rows, agreement) and summary.txt, atomically."""
    agreement = comparison.agreement
    payload = {
        "models": models,
        "summary": rows,
        "agreement": {"mean": agreement, "matrices": comparison.matrices, "pairs": comparison.rows},
        "failed": dict(failed),
    }
    report = write_json_atomic(out_dir / REPORT_FILE, json.loads(json.dumps(clean(payload), default=str)))
    summary = out_dir / SUMMARY_FILE
    write_text(summary, summary_text(rows, agreement, failed))
    return report, summary
