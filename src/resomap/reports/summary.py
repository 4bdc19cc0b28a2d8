"""Sweep summary: a table (CSV + JSON) with mean and std over seeds, and the figures drawn from it.

Takes TrialResults (anything with to_dict()) or their dicts, so it never touches models or training code.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text

log = logging.getLogger(__name__)

# Columns of the summary table: (name in the table, where it comes from in a result dict)
COLUMNS = (
    ("test_accuracy", ("test", "test/accuracy")),
    ("test_macro_f1", ("test", "test/macro_f1")),
    ("test_macro_precision", ("test", "test/macro_precision")),
    ("test_macro_recall", ("test", "test/macro_recall")),
    ("latency_ms", ("profile", "latency_median_ms")),
    ("throughput_ips", ("profile", "throughput_inference_ips")),
    ("train_throughput_ips", ("profile", "throughput_train_ips")),
    ("peak_memory_mb", ("profile", "peak_memory_mb")),
    ("gmacs", ("profile", "gmacs")),
    ("params_m", ("profile", "params_m")),
    ("train_time_s", ("train_time_s",)),
    ("epochs_run", ("epochs_run",)),
)


def _get(result: Mapping[str, Any], path: tuple[str, ...]) -> float:
    value: Any = result
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return math.nan
        value = value[part]
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def summary_rows(results: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per (model, resolution): mean and std over seeds of every column, and the seed count."""
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for r in (r if isinstance(r, Mapping) else r.to_dict() for r in results):
        if r.get("status") == "FINISHED":
            groups[(r["model"], int(r["resolution"]))].append(r)
    rows = []
    for (model, res), members in sorted(groups.items()):
        row: dict[str, Any] = {"model": model, "family": members[0].get("family", ""), "resolution": res}
        row["seeds"] = len(members)
        for name, path in COLUMNS:
            values = np.array([_get(m, path) for m in members], dtype=float)
            finite = values[np.isfinite(values)]
            row[name] = float(finite.mean()) if finite.size else math.nan
            row[f"{name}_std"] = float(finite.std(ddof=1)) if finite.size > 1 else 0.0
        row["cross_resolution"] = _mean_cross(members)
        rows.append(row)
    return rows


def _mean_cross(members: list[Mapping[str, Any]]) -> dict[str, float]:
    acc: dict[str, list[float]] = defaultdict(list)
    for m in members:
        for res, metrics in (m.get("cross_resolution") or {}).items():
            acc[str(res)].append(float(metrics.get("accuracy", math.nan)))
    return {res: float(np.nanmean(vals)) for res, vals in acc.items()}


def write_tables(rows: list[dict[str, Any]], results: list[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """summary.csv (one line per model x resolution) and summary.json (rows + every trial), atomically."""
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    flat = [{k: v for k, v in row.items() if k != "cross_resolution"} for row in rows]
    csv_path, json_path = out_dir / "summary.csv", out_dir / "summary.json"
    frame = pd.DataFrame(flat)
    write_text(csv_path, frame.to_csv(index=False, float_format="%.6g"))
    payload = {"rows": rows, "trials": list(results)}
    write_text(json_path, json.dumps(payload, indent=2, default=_json_default))
    return [csv_path, json_path]


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated in (lower cost, higher score)."""
    front = []
    for i, (cost, score) in enumerate(points):
        if not (math.isfinite(cost) and math.isfinite(score)):
            continue
        dominated = any(
            c <= cost and s >= score and (c < cost or s > score)
            for j, (c, s) in enumerate(points)
            if j != i and math.isfinite(c) and math.isfinite(s)
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])
