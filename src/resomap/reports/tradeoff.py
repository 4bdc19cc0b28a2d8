"""The three-way trade-off per model: which resolutions are on the front of score x cost x explanation quality,
each coordinate with its interval, a resolution dropped only on evidence (resomap.stats.uncertain_front: another
resolution is shown better on one axis and worse on none).

The axes of a model, each from what the summary already holds:

- score: the headline score pooled over seeds (SummaryRow.score), with its interval over test images and training
  seeds where every resolution has one (>= 3 seeds), else its interval over test images; higher is better;
- cost: inference latency at batch 1 (the seeds' mean, with the Student-t interval over seeds from its std:
  stats.spread_interval; one seed: no interval), else GMACs where a resolution lacks a latency (a count: no
  interval); lower is better;
- quality: an explanation score's excess over random maps (explanations/quality.csv: pooled over seeds with its
  bootstrap interval over the probe images; > 0 = better than random maps) of the first method (by name) that has
  one with its interval at every resolution of the model, the first score of QUALITY_SCORES it has; higher is
  better. Without an interval (fewer than 10 probe images) the axis is left out, not compared by its estimates.

An axis that a resolution of the model lacks is left out, and the model's note says so. The result (`tradeoffs`)
is plain JSON, summary.json's ``front3``; the table (`tradeoff_cells`), the words (`tradeoff_lines`) and the figure
(`tradeoff_figure`, figures/tradeoff_score_cost_quality) are drawn from it, never recomputed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from resomap.reports.explain_figures import QUALITY_SCORES
from resomap.reports.rows import TWOWAY_WORDS, SummaryRow
from resomap.stats import Axis, Coordinate, spread_interval, uncertain_front

FIGURE_STEM = "tradeoff_score_cost_quality"
AXES = ("score", "cost", "quality")
ON_FRONT = "on the front"
RULE = (
    "A resolution is dropped from a model's front only when another resolution is shown better on at least one"
    " axis and worse on none. Shown better: their intervals do not overlap (a conservative test: two separate"
    " {level} intervals apart); on an axis where one of the two has no interval, the estimates are compared and the"
    " reason says so. An axis a resolution lacks gives no evidence, so it keeps the resolution."
)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _coordinate(estimate: Any, low: Any = None, high: Any = None) -> Coordinate:
    bounds = (float(low), float(high)) if _finite(low) and _finite(high) else (None, None)
    return Coordinate(float(estimate) if _finite(estimate) else None, *bounds)


def _score_axis(rs: list[SummaryRow]) -> tuple[dict[str, Any], dict[int, Coordinate]] | None:
    """The headline score with the widest interval every resolution has; None when a resolution has no score."""
    first = rs[0]
    found = {r.resolution: r.score(r.headline) for r in rs}
    if not all(_finite(v[0]) for v in found.values()):
        return None
    if all(_finite(r.twoway_ci_low) and _finite(r.twoway_ci_high) for r in rs):
        coords = {r.resolution: _coordinate(found[r.resolution][0], r.twoway_ci_low, r.twoway_ci_high) for r in rs}
        interval = TWOWAY_WORDS
    else:
        coords = {res: _coordinate(*v) for res, v in found.items()}
        interval = "interval over test images" if any(c.has_interval for c in coords.values()) else "no interval"
    return {"name": "score", "words": first.say(first.headline), "interval": interval}, coords


def _cost_axis(rs: list[SummaryRow], level: float) -> tuple[dict[str, Any], dict[int, Coordinate]] | str:
    """Latency with its t-interval over seeds, else GMACs (no interval); the reason when neither is everywhere."""
    if all(_finite(r.latency_ms) for r in rs):
        coords = {}
        for r in rs:
            coords[r.resolution] = _coordinate(r.latency_ms, *spread_interval(r.latency_ms, r.latency_ms_std,
                                                                              r.n_seeds, level))  # fmt: skip
        spread = any(c.has_interval for c in coords.values())
        interval = "Student-t interval over seeds" if spread else "one seed: no interval"
        return {"name": "cost", "words": "latency, batch 1 (ms)", "column": "latency_ms", "interval": interval}, coords
    if all(_finite(r.gmacs) for r in rs):
        coords = {r.resolution: _coordinate(r.gmacs) for r in rs}
        axis = {"name": "cost", "words": "GMACs", "column": "gmacs", "interval": "a count: no interval"}
        return axis | {"why": "latency missing at some resolution: GMACs instead"}, coords
    return "no cost: latency and GMACs missing at some resolution"


def _quality_axis(
    model: str, resolutions: list[int], quality_rows: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[int, Coordinate]] | str:
    """The excess over random maps of the first method (by name) that has a score of QUALITY_SCORES with its
    interval at every resolution (its first such score); the reason when none has. A quality score without an
    interval (too few probe images to bootstrap) is left out rather than compared by its estimate: unlike a count
    of MACs it is a noisy measurement, and comparing its bare estimates would drop resolutions on noise."""
    found: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for row in quality_rows:
        if row.get("model") == model and row.get("score") in QUALITY_SCORES and _finite(row.get("estimate")):
            found[(str(row["method"]), str(row["score"]))][int(row["resolution"])] = row
    no_interval = None
    for method in sorted({m for m, _ in found}):
        for score in QUALITY_SCORES:
            at = found.get((method, score), {})
            if not set(resolutions) <= set(at):
                continue
            coords = {r: _coordinate(at[r]["estimate"], at[r].get("low"), at[r].get("high")) for r in resolutions}
            if not all(c.has_interval for c in coords.values()):
                why = next((str(at[r].get("reason")) for r in resolutions if at[r].get("reason")), "")
                no_interval = no_interval or f"{QUALITY_SCORES[score]} ({method}) has no interval" + (
                    f" ({why})" if why else ""
                )
                continue
            axis = {"name": "quality", "words": f"{QUALITY_SCORES[score]} ({method})", "method": method}
            axis |= {"score": score, "interval": "interval over probe images and seeds"}
            return axis | {"why": f"quality of {method}: the first method with one at every resolution"}, coords
    if not found:
        return "no explanation quality for this model"
    if no_interval:
        return f"explanation quality not compared: {no_interval}"
    return "no explanation method has a quality score at every resolution of this model"


def tradeoffs(rows: Iterable[SummaryRow], quality_rows: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """summary.json's ``front3``: per model with a headline score at every resolution, its axes (name, words,
    interval, why), a note naming any axis left out and why, and per resolution its coordinates ([estimate, low,
    high]) and standing on the front (stats.uncertain_front) in words."""
    by_model: dict[str, list[SummaryRow]] = defaultdict(list)
    for row in rows:
        by_model[row.model].append(row)
    quality = list(quality_rows)
    return [f for f in (_model_front(m, sorted(rs, key=lambda r: r.resolution), quality) for m, rs in
                        sorted(by_model.items())) if f]  # fmt: skip


def _model_front(model: str, rs: list[SummaryRow], quality: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    score = _score_axis(rs)
    if score is None:
        return None
    level = next((float(r.ci_level) for r in rs if _finite(r.ci_level)), 0.95)
    resolutions = [r.resolution for r in rs]
    axes, coords, missing = [score[0]], {"score": score[1]}, []
    for name, found in (("cost", _cost_axis(rs, level)), ("quality", _quality_axis(model, resolutions, quality))):
        if isinstance(found, str):
            missing.append(f"{found}: {name} left out")
        else:
            axes.append(found[0])
            coords[name] = found[1]
    names = [a["name"] for a in axes]
    points = [(str(res), [coords[n][res] for n in names]) for res in resolutions]
    spec = [Axis(n, higher_is_better=n != "cost") for n in names]
    words = {a["name"]: a["words"] for a in axes}
    out = []
    for res, standing in zip(resolutions, uncertain_front(points, spec), strict=True):
        point: dict[str, Any] = {"resolution": res, "on_front": standing.on_front}
        point |= {n: list(_triple(coords[n][res])) if n in coords else None for n in AXES}
        point |= {"dropped_by": int(standing.dropped_by) if standing.dropped_by else None}
        point |= {"better_on": list(standing.better_on), "by_estimate": list(standing.by_estimate)}
        point["standing"] = _standing_words(standing.dropped_by, standing.better_on, standing.by_estimate, words)
        out.append(point)
    notes = [a["why"] for a in axes if a.get("why")] + missing
    return {"model": model, "level": level, "axes": axes, "note": "; ".join(notes), "points": out}


def _triple(c: Coordinate) -> tuple[float | None, float | None, float | None]:
    return c.estimate, c.low, c.high


def _standing_words(by: str | None, better: Sequence[str], by_estimate: Sequence[str], words: dict[str, str]) -> str:
    """'on the front', or 'dropped: 64 px is shown better on accuracy and latency (estimates: no interval) and worse
    on none'."""
    if by is None:
        return ON_FRONT
    said = [f"{words[a]}{' (estimates: no interval)' if a in by_estimate else ''}" for a in better]
    listed = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return f"dropped: {by} px is shown better on {listed} and worse on none"


# ------------------------------------------------------------------------------------------------ table and words


def _cell(value: Any, spec: str) -> str:
    """'0.912 [0.880, 0.940]', the estimate alone without an interval, '-' when the axis is left out."""
    if not value or not _finite(value[0]):
        return "-"
    estimate, low, high = value
    text = f"{estimate:{spec}}"
    return f"{text} [{low:{spec}}, {high:{spec}}]" if _finite(low) and _finite(high) else text


def tradeoff_cells(front3: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[tuple[list[str], bool]]]:
    """The table of every model's front: (header, [(cells, on the front)]); each model's axes in words are in
    `tradeoff_lines`."""
    head = ["model", "px", "score [interval]", "cost [interval]", "quality [interval]", "standing"]
    body = []
    for entry in front3:
        for p in entry["points"]:
            cells = [str(entry["model"]), str(p["resolution"]), _cell(p.get("score"), ".3f")]
            cells += [_cell(p.get("cost"), "#.3g"), _cell(p.get("quality"), "+.3f"), str(p["standing"])]
            body.append((cells, bool(p["on_front"])))
    return head, body


def tradeoff_lines(front3: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rule in words, then per model what each axis is (its interval) and what was left out and why."""
    if not front3:
        return []
    lines = [RULE.format(level=f"{float(front3[0].get('level') or 0.95):.0%}")]
    for entry in front3:
        axes = "; ".join(f"{a['name']} = {a['words']} ({a['interval']})" for a in entry["axes"])
        on = [str(p["resolution"]) for p in entry["points"] if p["on_front"]]
        note = f" ({entry['note']})" if entry.get("note") else ""
        lines.append(f"{entry['model']}: on the front {', '.join(on)} px; {axes}{note}.")
    return lines


# ------------------------------------------------------------------------------------------------ the figure


def tradeoff_figure(front3: Sequence[Mapping[str, Any]]) -> Any:
    """A panel per model: score against cost, each point with its intervals as error bars, coloured by its
    explanation quality (a colour bar per panel names it; grey where the model has none), on the front filled and
    dropped hollow, labelled with its resolution. None when no model has a front."""
    entries = [e for e in front3 if any(p.get("cost") for p in e["points"])]
    if not entries:
        return None
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from resomap.plotstyle import STYLE, fit_text, label_points

    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(entries), figsize=(4.2 * len(entries), 3.4), squeeze=False)
        labels = [_tradeoff_panel(ax, entry, fig, fit_text) for ax, entry in zip(axes[0], entries, strict=True)]
        level = float(entries[0].get("level") or 0.95)
        dropped = "dropped: shown worse on one axis and better on none"
        handles = [
            Line2D([], [], ls="none", marker="o", ms=6, color="0.3", label=ON_FRONT),
            Line2D([], [], ls="none", marker="o", ms=6, mfc="none", mec="0.3", label=dropped),
            Line2D([], [], color="0.3", marker="|", ms=8, lw=1, label=f"{level:.0%} intervals (none: one value)"),
        ]
        width = fig.get_figwidth()
        fig.legend(handles=handles, loc="outside lower center", ncol=3 if len(entries) > 1 else 1, frameon=False,
                   fontsize=7)  # fmt: skip
        title = "score x cost x explanation quality per model (labels: resolution in px)"
        fig.suptitle(fit_text(title, width - 0.3, float(STYLE.get("figure.titlesize", 10))))
        for ax, found in zip(axes[0], labels, strict=True):
            label_points(ax, found)  # last, where the layout puts the axes
    return fig


def _tradeoff_panel(ax: Any, entry: Mapping[str, Any], fig: Any, fit_text: Any) -> list[tuple[str, float, float, str]]:
    """One model's points (error bars, quality as colour, front filled and dropped hollow); returns their labels."""
    import matplotlib as mpl

    axes = {a["name"]: a for a in entry["axes"]}
    points = [p for p in entry["points"] if p.get("cost")]
    quality = [p["quality"][0] if p.get("quality") else math.nan for p in points]
    finite = [q for q in quality if _finite(q)]
    norm = mpl.colors.Normalize(min(finite), max(finite)) if finite else None
    if norm is not None and norm.vmin == norm.vmax:
        norm = mpl.colors.Normalize(norm.vmin - 0.5, norm.vmax + 0.5)
    cmap = mpl.colormaps["viridis"]
    labels = []
    for p, q in zip(points, quality, strict=True):
        colour = cmap(norm(q)) if norm is not None and _finite(q) else (0.5, 0.5, 0.5, 1.0)
        (x, xlo, xhi), (y, ylo, yhi) = p["cost"], p["score"]
        xerr = [[x - xlo], [xhi - x]] if _finite(xlo) and _finite(xhi) else None
        yerr = [[y - ylo], [yhi - y]] if _finite(ylo) and _finite(yhi) else None
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor=colour, capsize=2, lw=1, zorder=2)
        face = colour if p["on_front"] else "none"
        ax.scatter([x], [y], s=36, facecolors=[face], edgecolors=[colour], linewidths=1.4, zorder=3,
                   gid="front" if p["on_front"] else "dropped")  # fmt: skip
        labels.append((str(p["resolution"]), x, y, "0.2"))
    if norm is not None:
        bar = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.85)
        bar.set_label(fit_text(f"quality: {axes['quality']['words']}", 2.6, 7), fontsize=7)
    ax.set_xlabel(axes["cost"]["words"])
    ax.set_ylabel(f"test {axes['score']['words']}")
    ax.set_title(entry["model"] if norm is not None else f"{entry['model']} (no explanation quality: grey)")
    return labels


def tradeoff_files(front3: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """figures/tradeoff_score_cost_quality.png/.pdf (plotstyle.save_figure); nothing when no model has a front."""
    if not any(p.get("cost") for e in front3 for p in e["points"]):  # tradeoff_figure's None
        return []
    from resomap.plotstyle import save_drawn

    return save_drawn(tradeoff_figure, (list(front3),), out_dir, FIGURE_STEM)  # drawn by a worker when in parallel
