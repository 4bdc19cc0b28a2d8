"""Text and JSON of an analysis: report.json, summary.txt and the quality table.

The summary is the sweep's (resomap.summary.build_summary): intervals from each analysed checkpoint's
predictions.csv, paired tests between resolutions and the decision per model (recommended only with the evidence), at
the default `stats` settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.layout import trial_part
from resomap.stages import Comparison
from resomap.training import write_json_atomic

REPORT_FILE = "report.json"
SUMMARY_FILE = "summary.txt"
# resomap.reports (matplotlib) is imported inside the functions: `import resomap.analysis` stays light.


def clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy -> Python, tuples -> lists (recursively)."""
    from resomap.summary.build import json_safe

    return json_safe(value)


def format_table(header: list[str], rows: list[list[str]]) -> str:
    from resomap.blocks import plain_table

    return plain_table(header, rows)


def quality_table(quality: Mapping[str, Mapping[str, float]]) -> str:
    """method x metric table of explanation quality scores."""
    from resomap.summary.text import fmt as _fmt

    metrics = sorted({k for scores in quality.values() for k in scores})
    rows = [[method] + [_fmt(scores.get(k), ".4f") for k in metrics] for method, scores in quality.items()]
    return format_table(["method", *metrics], rows)


def summary_text(
    summary: Any, agreement: Mapping[str, float], failed: Mapping[str, str], statements: list[str] = ()
) -> str:
    """The summary's sections (resomap.summary.sections: the answer first, the methods last, as in a sweep's
    summary.txt), then the mean explanation agreement, each explanation statement in full and the checkpoints that
    could not be analysed. ``summary``: a SweepSummary, or summary rows."""
    from resomap.blocks import render
    from resomap.summary import SweepSummary
    from resomap.summary.build import assemble

    if not isinstance(summary, SweepSummary):
        summary = assemble(rows=list(summary), paired_tests=[], recommendations=[], trials=[], stats={})
    elif summary.sections is None:
        summary = assemble(**summary.parts())
    heading = "Trained checkpoints, tested on their test split (estimates pooled over seeds, with intervals)"
    text = render(summary.sections, markdown=False, heading=heading)
    if agreement:
        text += "\nMean explanation agreement across resolutions, with its references (floor: across seeds at one "
        text += "resolution; chance: maps of other images; model_free: an edge map of the same images)\n"
        text += format_table(["measure/model/method/metric", "mean"], [[k, f"{v:.4f}"] for k, v in agreement.items()])
    if statements:
        text += "\nResolution effect on the explanations\n" + "".join(f"{s}\n" for s in statements)
    for path, reason in failed.items():
        text += f"\nnot analysed: {path}: {reason}"
    return text + ("\n" if failed else "")


def analysis_folders(out_dir: Path, models: list[dict[str, Any]]) -> dict[tuple[str, int, int], Path]:
    """{(model, resolution, seed): the folder `resomap analyze` wrote that checkpoint's results to}."""
    folders = {}
    for m in models:
        seeded = out_dir / "models" / trial_part(str(m["model"]), int(m["resolution"]), int(m.get("seed") or 0))
        base = seeded.parent
        folders[(str(m["model"]), int(m["resolution"]), int(m.get("seed") or 0))] = seeded if seeded.is_dir() else base
    return folders


def write_report(
    out_dir: Path,
    models: list[dict[str, Any]],
    summary: Any,
    comparison: Comparison,
    failed: Mapping[str, str],
) -> tuple[Path, Path]:
    """report.json (every checkpoint's result, the summary rows with intervals, paired tests, recommendations,
    agreement with its references and statements) and summary.txt, atomically."""
    from resomap.blocks import section_to_dict

    agreement = comparison.agreement
    payload = {
        "models": models,
        "summary": [row.to_dict() for row in summary.rows],
        "paired_tests": summary.paired_tests,
        "recommendations": summary.recommendations,
        "stats": summary.stats,
        "front3": getattr(summary, "front3", []),  # summary.front: the three-way front per model
        "answer": getattr(summary, "answer", None),  # summary.answer: the answer across models
        "sections": [section_to_dict(x) for x in summary.sections or []],  # what summary.txt shows, in its order
        "agreement": {
            "mean": agreement,
            "statements": comparison.statements,
            "matrices": comparison.matrices,
            "pairs": comparison.rows,
        },
        "failed": dict(failed),
    }
    report = write_json_atomic(out_dir / REPORT_FILE, json.loads(json.dumps(clean(payload), default=str)))
    summary_path = out_dir / SUMMARY_FILE
    write_text(summary_path, summary_text(summary, agreement, failed, comparison.statements))
    return report, summary_path
