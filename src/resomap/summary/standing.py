"""Where each model stands, in two lines a reader sees beside its decision (the report's first screen, summary.md,
the parent run's description): how it trained (undertrained at which resolutions, its best epochs) and whether it
is shown above the task's trivial predictor and each classical baseline, resolution by resolution. Read from the
summary rows; nothing is recomputed."""

from __future__ import annotations

import re
from collections import defaultdict

from resomap.summary.rows import SummaryRow, baseline_label, baseline_names
from resomap.summary.text import trivial_label

__all__ = ["baseline_words", "standing", "training_words"]


def standing(rows: list[SummaryRow]) -> dict[str, list[str]]:
    """model -> ["training: ...", "baselines: ..."] (the second only where something was compared)."""
    by_model: dict[str, list[SummaryRow]] = defaultdict(list)
    for r in rows:
        by_model[str(r.model)].append(r)
    out = {}
    for model, mine in sorted(by_model.items()):
        mine.sort(key=lambda r: int(r.resolution))
        lines = [f"training: {training_words(mine)}"]
        against = baseline_words(mine, rows)
        if against:
            lines.append(f"baselines: {against}")
        out[model] = lines
    return out


def _px(resolutions: list[int]) -> str:
    names = [str(r) for r in resolutions]
    return (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]) + " px"


def training_words(rows: list[SummaryRow]) -> str:
    """'undertrained at 32 and 64 px (3 of 4 trials: <why>); best epoch 11 of 12' or 'not flagged undertrained
    at any resolution; best epoch 2 of 5' (one model's rows); a closed-form fit the penalties it chose ('...;
    penalty chosen on validation: C = 0.001, 0.01'); 'no convergence records' without them."""
    records = [c for r in rows for c in r.convergence or []]
    if not records or all(r.undertrained is None for r in rows):
        return "no convergence records (a summary from before they were kept)"
    flagged = [r for r in rows if r.undertrained]
    seeds = [c for c in records if c.get("undertrained")]
    if flagged:
        why = sorted({re.sub(r"^seed \d+: ", "", str(c.get("undertrained_reason") or "")) for c in seeds} - {""})
        said = f"undertrained at {_px([int(r.resolution) for r in flagged])} ({len(seeds)} of {len(records)} trials"
        said += f": {'; '.join(why)})" if why else ")"
    else:
        said = "not flagged undertrained at any resolution"
    penalties = sorted({float(c["penalty"]) for c in records if isinstance(c.get("penalty"), int | float)})
    if penalties:  # a closed-form fit: one fit per penalty of a grid, no epochs; its choice on validation
        return said + f"; penalty chosen on validation: C = {', '.join(f'{p:g}' for p in penalties)}"
    best = [(c.get("best_epoch"), c.get("epochs_run")) for c in records]
    best = [(b, n) for b, n in best if isinstance(b, int) and isinstance(n, int)]
    if best:
        low, high = min(b for b, _ in best), max(b for b, _ in best)
        runs = sorted({n for _, n in best})
        epochs = str(low) if low == high else f"{low}-{high}"
        ran = str(runs[0]) if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
        said += f"; best epoch {epochs} of {ran} (counted from 0)"
    return said


def baseline_words(mine: list[SummaryRow], rows: list[SummaryRow]) -> str:
    """Whether one model (`mine`) is shown above the trivial predictor and each classical baseline of the sweep
    (`rows`) at each resolution: 'shown above the majority class (0.688) at 32, 64 and 128 px; not shown above
    pixel_logreg at 32 px'. A classical model is not compared with the baselines."""
    parts = []
    trivial = trivial_label(mine)
    if trivial is not None:
        parts.append(_shown(trivial, mine, None))
    for name in baseline_names(rows):
        if name != mine[0].model and any(name in r.compared_baselines() for r in mine):
            parts.append(_shown(baseline_label(mine, name), mine, name))
    return "; ".join(p for p in parts if p)


def _shown(name: str, mine: list[SummaryRow], baseline: str | None) -> str:
    """'shown above <name> at ...; not shown above <name> at ...; not compared at ...' for one model's rows."""
    found = {int(r.resolution): r.shown_above(baseline) for r in mine}
    parts = []
    for verdict, words in ((True, f"shown above {name}"), (False, f"not shown above {name}")):
        at = [res for res, v in found.items() if v is verdict]
        if at:
            parts.append(f"{words} at {_px(at)}")
    missing = [res for res, v in found.items() if v is None]
    if missing and parts:
        parts.append(f"not compared at {_px(missing)}")
    return "; ".join(parts)
