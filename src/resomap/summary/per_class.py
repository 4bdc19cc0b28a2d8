"""Each classification model's decision per class: the recall of each class (stats.metric ``recall:<class>``)
through the summary's own decision (summary.decision: ``decision_scores``, then ``decide``: the same tests, scope,
margin and reference as the model's decision), classes ordered by their number of test images, fewest first (the
minority class first).

The K classes of a model are one family: each class is decided at one-sided alpha / K (Bonferroni; alpha the
model's decision's, 1 - level, or an adaptive sweep's alpha of the look), and every row says so. A class whose
decision cannot be had (fewer than 2 test images of it, no resolutions to compare) gets a row saying "not decided:
<why>"; a model without labels in its records (segmentation) or without class names gets no rows.

Rows are plain dicts of JSON-safe values (results.CLASS_DECISION_COLUMNS, plus ``verdicts``: each resolution's
verdict as the model's decision row holds them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap.config.schema import StatsConfig
from resomap.summary.aligned import TrialRecord, deterministic
from resomap.summary.decision import (
    by_model,
    class_names,
    decide,
    decided_cell,
    decided_fields,
    decision_scores,
    dropped_verdict,
    family_alpha,
    kept_resolutions,
    not_decided_fields,
    scores_by_resolution,
)


def class_decisions(records: Iterable[TrialRecord], cfg: StatsConfig) -> list[dict[str, Any]]:
    """Every classification model's per-class rows (module doc), models by name, each model's classes fewest test
    images first."""
    out: list[dict[str, Any]] = []
    for model, by_res in by_model(records).items():
        out += model_class_decisions(model, by_res, cfg)
    return out


def _labels(by_res: Mapping[int, list[TrialRecord]]) -> np.ndarray | None:
    """The test labels of the model's first trial with per-image labels (None: a task without labels)."""
    for members in by_res.values():
        for m in members:
            if m.own is not None and m.own.label is not None:
                return np.asarray(m.own.label, dtype=np.int64)
    return None


def model_class_decisions(
    model: str, by_res: Mapping[int, list[TrialRecord]], cfg: StatsConfig
) -> list[dict[str, Any]]:
    """One row per class of one model (module doc); [] for a model without labels or class names."""
    names, labels = class_names(by_res), _labels(by_res)
    if not names or labels is None:
        return []
    task = next(iter(by_res.values()))[0].task
    kept, dropped = kept_resolutions(model, by_res, cfg)
    found = scores_by_resolution(kept, task) if kept else "every resolution was dropped"
    first = None if isinstance(found, str) else next(iter(found.aligned.values()))
    if first is not None and first.label is not None:  # the images compared: those every resolution has
        labels = first.label[np.searchsorted(first.index, found.common)]
    counts = {cls: int((labels == k).sum()) for k, cls in enumerate(names)}
    k = len(names)
    alpha = family_alpha(model, cfg, k)
    base = {
        "model": model,
        "n_classes": k,
        "alpha": alpha,
        "level": 1 - alpha,
        "correction": f"Bonferroni over {k} classes",
        "scope": cfg.scope,
        "margin": cfg.margin,
    }
    rows = []
    for rank, cls in enumerate(sorted(names, key=lambda c: (counts[c], names.index(c))), 1):
        row = {**base, "metric": f"recall:{cls}", "class": cls, "rank": rank, "n_images": counts[cls]}
        if isinstance(found, str):
            rows.append(_not_decided(row, found))
            continue
        chosen = decision_scores(found, task, row["metric"], names)
        if isinstance(chosen, str):
            rows.append(_not_decided(row, chosen.removeprefix(f"stats.metric {row['metric']}: ")))
        elif cfg.reference is not None and cfg.reference not in chosen.scores:
            rows.append(_not_decided(row, f"the reference {cfg.reference} px has no per-image records"))
        else:
            rows.append(_decided_row(row, chosen, len(found.seeds), cfg, deterministic(kept)))
        rows[-1]["verdicts"] += [dropped_verdict(r, cfg) for r in dropped]
    return rows


def _decided_row(row: dict[str, Any], chosen: Any, n_seeds: int, cfg: StatsConfig, fixed: bool) -> dict[str, Any]:
    """The class's decision at the row's Bonferroni alpha, through the summary's one call (summary.decision.decide);
    `fixed`: the model's seeds are one fit."""
    kw = {"binary": chosen.binary, "words": chosen.words, "images": chosen.images, "deterministic": fixed}
    decision = decide(chosen.scores, cfg, alpha=row["alpha"], **kw)
    means = {r: float(np.asarray(v, dtype=float).mean()) for r, v in chosen.scores.items()}
    said = (
        f"{row['model']}, {chosen.words} ({row['n_images']} {chosen.images}; {row['correction']}, one-sided alpha "
        f"{row['alpha']:.3g}): {decision.reason}"
    )
    return {
        **row,
        **decided_fields(decision, n_seeds),
        "recall": means[decision.resolution],
        "reference_recall": means[decision.reference],
        "sentence": said,
    }


def _not_decided(row: dict[str, Any], why: str) -> dict[str, Any]:
    """A class without a decision: the row says why ("not decided: <why>")."""
    fields = not_decided_fields(why)
    said = f"{row['model']}, recall of {row['class']} ({_images(row['n_images'])}): {fields['reason']}"
    return {**row, **fields, "recall": None, "reference_recall": None, "sentence": said}


def _images(n: int | None) -> str:
    return "test images unknown" if n is None else f"{n} test image{'' if n == 1 else 's'}"


# ------------------------------------------------------------------------------------------------ in words


def class_cells(rows: list[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the per-class table (summary.md/txt and report.html): model, class (its test images), the
    class's one-sided alpha, the decided resolution ("undecided", or "not decided: <why>") and each resolution's
    verdict with the recall difference to the reference and its one-sided bounds, largest resolution first."""
    resolutions = sorted({int(v["resolution"]) for r in rows for v in r.get("verdicts") or []}, reverse=True)
    header = ["model", "class (test images)", "one-sided alpha", "decided", *(f"{res} px" for res in resolutions)]
    body = []
    for r in rows:
        by_res = {int(v["resolution"]): v for v in r.get("verdicts") or []}
        body.append(
            [
                str(r["model"]),
                f"{r['class']} ({r['n_images'] if r.get('n_images') is not None else '-'})",
                f"{r['alpha']:.3g}",
                decided_cell(r),
                *(_verdict_cell(by_res.get(res)) for res in resolutions),
            ]
        )
    return header, body


def _verdict_cell(verdict: Mapping[str, Any] | None) -> str:
    """'non-inferior -0.010 [-0.041, +0.020]': the verdict, the recall difference and its one-sided bounds."""
    if verdict is None:
        return "-"
    if verdict.get("difference") is None or verdict.get("low") is None or verdict.get("high") is None:
        return str(verdict["verdict"])
    return f"{verdict['verdict']} {verdict['difference']:+.3f} [{verdict['low']:+.3f}, {verdict['high']:+.3f}]"


def class_note(rows: list[Mapping[str, Any]]) -> str:
    """What the per-class table says, in words."""
    margin = next((r["margin"] for r in rows if r.get("margin") is not None), None)
    at = f" at margin {margin:g}" if margin is not None else ""
    return (
        f"Each class's recall (on that class's test images) against the reference{at}, by the model's own decision "
        "(the same tests, scope, reference and fixed sequence), classes with the fewest test images first. A "
        "model's K classes are one family: each class is decided at one-sided alpha / K (Bonferroni over K "
        "classes; alpha the model's decision's, 1 - level or an adaptive sweep's alpha of the look). Cells: the "
        "verdict, the recall difference to the reference and its one-sided bounds at that alpha; 'undecided' is "
        "not 'the same'."
    )
