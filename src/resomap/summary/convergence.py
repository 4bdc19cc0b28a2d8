"""Did the models train enough: each summary row's convergence records (resomap.training.convergence, one per seed,
read from the trials' result.json) and how the tables say them.

A row keeps every seed's record whole (summary.json's ``convergence`` list; summary.csv's ``convergence/<key>``
columns, each a JSON list of the seeds' values), plus ``undertrained`` (any seed flagged) and its reasons. Fields a
record may lack (written before them: ``lr_found`` of the LR range test, new stop reasons) are read with ``.get``
and are None. A closed-form fit (the classical baseline: one solver fit per penalty of a grid, each an "epoch")
records the penalty it chose, read from its history (``train/penalty_C`` at the best epoch), and the tables show
that choice instead of epochs. Pure Python: no plotting, no training code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# the keys of a seed's record, in order (a record's other keys follow, sorted)
RECORD_KEYS = (
    "seed",
    "monitor",
    "mode",
    "best_epoch",
    "best_value",
    "last_epoch",
    "epochs_run",
    "epochs_planned",
    "still_improving",
    "stop_reason",
    "stop_detail",
    "undertrained",
    "undertrained_reason",
    "lr_found",  # the LR range test's learning rate, when it ran
    "penalty",  # closed-form fits: the penalty C chosen on validation
)
PENALTY_KEY = "train/penalty_C"  # a closed-form fit's history: the penalty of each "epoch"
CURVES_STEM = "learning_curves"  # the summary's figures learning_curves_<model>.png (reports.curves)


def chosen_penalty(history: Sequence[Mapping[str, Any]], best_epoch: Any) -> float | None:
    """The penalty of the history's row at ``best_epoch`` (a closed-form fit), None when there is none."""
    if best_epoch is None:
        return None
    for i, row in enumerate(history or []):
        if row.get("epoch", i) == best_epoch and PENALTY_KEY in row:
            return float(row[PENALTY_KEY])
    return None


def seed_record(result: Mapping[str, Any]) -> dict[str, Any]:
    """One trial's convergence record with its seed, every RECORD_KEYS key present (None where absent)."""
    conv = dict(result.get("convergence") or {})
    record = {key: conv.get(key) for key in RECORD_KEYS}
    record["seed"] = int(result.get("seed") or 0)
    record["penalty"] = chosen_penalty(result.get("history") or [], conv.get("best_epoch"))
    record.update({k: v for k, v in sorted(conv.items()) if k not in record})
    return record


def convergence_columns(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A summary row's convergence fields from its trials (seeds in order): ``convergence`` (the records),
    ``undertrained`` (any seed flagged; None when no seed has a record) and ``undertrained_reason``."""
    records = sorted((seed_record(r) for r in results), key=lambda r: r["seed"])
    known = [r for r in records if r.get("undertrained") is not None]
    flagged = [r for r in known if r["undertrained"]]
    by_reason: dict[str, list[str]] = {}  # a reason said once, with the seeds it holds for
    for r in flagged:
        by_reason.setdefault(str(r.get("undertrained_reason") or "flagged"), []).append(str(r["seed"]))
    reasons = "; ".join(
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}: {why}" for why, seeds in by_reason.items()
    )
    return {
        "convergence": records,
        "undertrained": bool(flagged) if known else None,
        "undertrained_reason": reasons or None,
    }


def _ok(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def epochs_cell(records: Sequence[Mapping[str, Any]]) -> str:
    """'8/17, 5/14': each seed's best epoch (from 0) / epochs run; a closed-form fit's chosen penalty ('C=0.01');
    '-' without records."""
    cells = []
    for r in records:
        if _ok(r.get("penalty")):
            cells.append(f"C={r['penalty']:g}")
        elif r.get("epochs_run") is not None:
            best = r.get("best_epoch")
            cells.append(f"{best if best is not None else '-'}/{r['epochs_run']}")
    return ", ".join(cells) or "-"


def stop_cell(records: Sequence[Mapping[str, Any]]) -> str:
    """Each seed's stop reason ('early_stopping, epoch_budget'); a closed-form fit says 'penalty grid'."""
    cells = ["penalty grid" if _ok(r.get("penalty")) else str(r.get("stop_reason") or "-") for r in records]
    return ", ".join(cells) or "-"


def lr_cell(records: Sequence[Mapping[str, Any]]) -> str:
    """Each seed's learning rate found by the LR range test ('0.0031, 0.0025'); '-' where none ran."""
    if not any(_ok(r.get("lr_found")) for r in records):
        return "-"
    return ", ".join(f"{r['lr_found']:.3g}" if _ok(r.get("lr_found")) else "-" for r in records)


def undertrained_cell(undertrained: bool | None) -> str:
    return "-" if undertrained is None else ("yes" if undertrained else "no")


def monitors(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The metrics the seeds' best checkpoints were chosen by (closed-form fits included), in first-seen order."""
    return list(dict.fromkeys(str(r["monitor"]) for r in records if r.get("monitor")))
