"""Learning curves: did each model learn, and when did it stop improving?

One figure per model (`learning_curves_<model>.png` + pdf): a column of panels per training resolution, the top
panel train and validation loss by epoch, the bottom one the validation score the checkpoint is chosen by (its
monitor; the task's macro-F1 or accuracy when the monitor is the validation loss, which the top panel shows). Seeds
are overlaid: one colour per resolution, one line style per seed; each seed's best epoch (the kept checkpoint, from
its convergence record) is starred on the monitored curve, and a column whose seed is flagged undertrained says so
in its title. Drawn from the trials' result.json trees (their per-epoch `history` and `convergence`), so a summary
rebuilt without training draws the same figures.

Closed-form models (the classical baseline, fitted once per penalty of a grid) get no curve: they have no epochs
to plot; the summary's training table shows the penalty each seed chose.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from resomap.plotstyle import MATRIX_CMAP, fit_text, save_figure
from resomap.plotstyle import STYLE as BASE_STYLE
from resomap.summary.convergence import CURVES_STEM, PENALTY_KEY

STYLE = {**BASE_STYLE, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False}
SEED_STYLES = ("-", "--", ":", "-.")
FALLBACK_SCORES = ("val/macro_f1", "val/accuracy")  # the bottom panel when the monitor is the validation loss


def _closed_form(trial: Mapping[str, Any]) -> bool:
    return trial.get("family") == "classical" or any(PENALTY_KEY in h for h in trial.get("history") or [])


def curve_trials(trials: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, list[Mapping[str, Any]]]]:
    """model -> resolution -> its finished trials with a per-epoch history (seeds in order); closed-form fits and
    trials without history (`resomap analyze`, results from before histories were kept) left out."""
    out: dict[str, dict[int, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for t in sorted(trials, key=lambda t: int(t.get("seed") or 0)):
        if t.get("status") == "FINISHED" and t.get("history") and not _closed_form(t):
            out[str(t["model"])][int(t["resolution"])].append(t)
    return {m: dict(sorted(per.items())) for m, per in sorted(out.items())}


def _series(history: list[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(epochs, values) of a history key, finite values only."""
    xs, ys = [], []
    for i, row in enumerate(history):
        try:
            value = float(row.get(key))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            xs.append(int(row.get("epoch", i)))
            ys.append(value)
    return xs, ys


@dataclass(frozen=True)
class _Curves:
    """What every panel of a model's figure shares: the score drawn, the checkpoint monitor, each seed's style."""

    score: str | None
    monitor: str | None
    styles: dict[int, str]


def _score_key(trials: list[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """(key drawn in the bottom panel, the checkpoint monitor): the monitor unless it is the validation loss (then
    the task's macro-F1 or accuracy); None when the histories hold neither."""
    monitor = next((str(c) for t in trials if (c := (t.get("convergence") or {}).get("monitor"))), None)
    held = {k for t in trials for h in t.get("history") or [] for k in h}
    candidates = ([monitor] if monitor and monitor != "val/loss" else []) + list(FALLBACK_SCORES)
    return next((k for k in candidates if k in held), None), monitor


def _colours(resolutions: list[int]) -> dict[int, Any]:
    """One colour per resolution, from the matrix colour map (small to large: dark to light, yellow left out)."""
    cmap = plt.get_cmap(MATRIX_CMAP)
    n = len(resolutions)
    return {r: cmap(0.1 + 0.7 * (i / (n - 1) if n > 1 else 0.5)) for i, r in enumerate(resolutions)}


def _seed_styles(trials: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """One line style per seed of the model, the same in every panel and the legend."""
    seeds = sorted({int(t.get("seed") or 0) for t in trials})
    return {s: SEED_STYLES[j % len(SEED_STYLES)] for j, s in enumerate(seeds)}


def _column(axes: Any, trials: list[Mapping[str, Any]], colour: Any, curves: _Curves) -> None:
    """One resolution's two panels: losses (train light, validation with markers) and the score, per seed."""
    score, monitor = curves.score, curves.monitor
    for t in trials:
        style = curves.styles[int(t.get("seed") or 0)]
        history = t.get("history") or []
        axes[0].plot(*_series(history, "train/loss"), ls=style, color=colour, lw=1.0, alpha=0.6, marker=".", ms=3)
        axes[0].plot(*_series(history, "val/loss"), ls=style, color=colour, lw=1.6, marker="o", ms=3)
        if score is not None:
            axes[1].plot(*_series(history, score), ls=style, color=colour, lw=1.6, marker="o", ms=3)
        conv = t.get("convergence") or {}
        best, value = conv.get("best_epoch"), conv.get("best_value")
        if best is not None and value is not None and monitor in ("val/loss", score):
            panel = axes[0] if monitor == "val/loss" else axes[1]
            panel.plot([best], [value], ls="none", marker="*", ms=11, color=colour, mec="black", mew=0.6, zorder=4)


def _title(resolution: int, trials: list[Mapping[str, Any]]) -> str:
    flagged = [str(t.get("seed")) for t in trials if (t.get("convergence") or {}).get("undertrained")]
    return f"{resolution} px" + (f"\nundertrained: seed {', '.join(flagged)}" if flagged else "")


def learning_curves(model: str, per_resolution: Mapping[int, list[Mapping[str, Any]]]) -> plt.Figure | None:
    """The figure of one model (see the module docstring); None when no trial has a history."""
    if not per_resolution:
        return None
    everyone = [t for ts in per_resolution.values() for t in ts]
    curves = _Curves(*_score_key(everyone), _seed_styles(everyone))
    resolutions = sorted(per_resolution)
    colours = _colours(resolutions)
    width = 0.6 + 2.5 * len(resolutions)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2, len(resolutions), figsize=(width + 1.7, 4.6), squeeze=False, sharey="row")
        for i, res in enumerate(resolutions):
            column = axes[:, i]
            _column(column, per_resolution[res], colours[res], curves)
            column[0].set_title(_title(res, per_resolution[res]))
            for ax in column:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                low, high = ax.get_xlim()
                if high - low < 1:  # one epoch: an axis a whole epoch wide, ticked at it
                    ax.set_xlim(round(low) - 0.5, round(high) + 0.5)
            column[1].set_xlabel("epoch (from 0)")
        axes[0][0].set_ylabel("loss")
        axes[1][0].set_ylabel(curves.score or "no validation score")
        fig.legend(handles=_legend(curves), loc="outside right upper", frameon=False)
        fig.suptitle(fit_text(f"{model}: learning curves by training resolution", width + 1.7, 10))
    return fig


def _legend(curves: _Curves) -> list[Line2D]:
    grey = "0.35"
    handles = [Line2D([], [], color=grey, lw=1.0, alpha=0.6, marker=".", ms=3, label="train loss")]
    handles.append(Line2D([], [], color=grey, lw=1.6, marker="o", ms=3, label="validation"))
    handles += [Line2D([], [], color=grey, ls=ls, lw=1.2, label=f"seed {s}") for s, ls in curves.styles.items()]
    monitor = curves.monitor
    star = f"best epoch\n(kept checkpoint,\nby {monitor})" if monitor else "best epoch"
    handles.append(Line2D([], [], ls="none", marker="*", ms=10, color=grey, mec="black", mew=0.6, label=star))
    return handles


def learning_curve_figures(trials: Iterable[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """`learning_curves_<model>.png` + pdf under out_dir for every model with per-epoch histories."""
    written: list[Path] = []
    for model, per_resolution in curve_trials(trials).items():
        fig = learning_curves(model, per_resolution)
        if fig is not None:
            written += save_figure(fig, out_dir, f"{CURVES_STEM}_{model}")
    return written
