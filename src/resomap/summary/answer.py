"""The sweep's answer across models: which configuration (model, resolution) to use, and which cheaper configurations
of any model are shown as good within the margin.

1. The configuration to use is chosen on the validation split, not on the test images (so the choice does not
   inflate the test): the highest validation score of the decision metric (each trial's kept epoch or penalty,
   averaged over the model's seeds; the cheaper on a tie). Where the trials' validation records lack the decision
   metric (a class's recall: the validation split keeps no per-image record), the headline score chooses, and the
   record says so.
2. Every cheaper configuration of any model (cost: MACs per image where every configuration has them, else the
   latency at batch 1) is tested for non-inferiority to it at the margin on the same test images, in a fixed
   sequence from the most costly down, stopping at the first that is not shown non-inferior (stats.fixed_sequence:
   the family-wise error stays at alpha for an order fixed before the test images are read; cost is). A
   configuration of the chosen model pairs its seeds with the chosen one's (the seed sets the same initial weights,
   batch order and augmentation at every resolution); another model's seeds are independent replicates of it (each
   pairing of independent replicates is as good as any); a deterministic fit is one replicate (its seed part 0).
   Each test is at the scope of stats.scope.
3. The class that matters: for each configuration the answer names, the recall of the minority class of the test
   split (or of the class stats.metric names) with its interval, and whether the per-class decision of that class
   (summary.per_class) differs from the model's own.

Beside it, each model's own decision (summary.decision: its smallest sufficient resolution) is compared with the
configuration to use on the same test images, descriptively (a paired bootstrap interval and the one-sided sign-flip
p of the per-image differences; outside the family of step 2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.schema import Answer, AnswerStep, ClassDecision, Recommendation
from resomap.summary.aligned import TrialRecord
from resomap.summary.decision import (
    Compared,
    MetricScores,
    by_model,
    class_names,
    decision_scores,
    kept_resolutions,
    scores_by_resolution,
)
from resomap.summary.rows import SummaryRow
from resomap.summary.uncertainty import above_p

Config = tuple[str, int]  # (model, resolution)


def label(config: Config) -> str:
    return f"{config[0]}@{config[1]}"


def cross_model_answer(
    records: Iterable[TrialRecord],
    recs: list[Recommendation],
    rows: list[SummaryRow],
    class_rows: list[ClassDecision],
    cfg: StatsConfig,
) -> Answer:
    """The answer across the sweep's models (module doc); ``available`` False with the reason where there is none
    (one model, models tested on different images, no validation record, no cost)."""
    models = by_model(records)
    answer: Answer = {"available": False, "reason": "", "margin": cfg.margin, "level": cfg.level, "steps": []}
    if len(models) < 2:
        name = next(iter(models), "no model")
        answer["reason"] = f"one model in this sweep ({name}): its own decision is the answer"
        return answer
    found = _scores(models, cfg)
    if isinstance(found, str):
        answer["reason"] = found
        return answer
    cost, costs = _costs(rows)
    if cost is None:
        answer["reason"] = "the configurations' costs are not known (no MACs, no latency): no order to test them in"
        return answer
    val = _validation(models, cfg)
    if isinstance(val, str):
        answer["reason"] = val
        return answer
    chosen_by, val_scores = val
    fixed = {r["model"]: bool(r.get("deterministic")) for r in recs}
    scores, seeds = found
    reference, tie = _choose(val_scores, _validation_losses(models), costs)
    metric = scores[reference].words
    answer.update(
        available=True,
        metric=metric,
        chosen_by=chosen_by,
        tie=tie,
        cost=cost,
        use=label(reference),
        use_model=reference[0],
        use_resolution=reference[1],
        n_configurations=len(val_scores),
        n_images=int(scores[reference].scores[reference[1]].shape[1]),
        scope=cfg.scope,
    )
    steps = _sequence(reference, scores, seeds, fixed, costs, cfg)
    answer["steps"] = _step_rows(steps, reference, scores, val_scores, costs, rows)
    passed = [s for s in answer["steps"] if s["verdict"] == "non-inferior"]
    answer["cheapest"] = passed[-1]["configuration"] if passed else None
    answer["classes"] = _named_recalls(answer, models, class_rows, recs, cfg)

    def classes(model: str, resolution: int) -> dict[str, Any] | None:
        return class_recall(model, resolution, models[model], class_rows, recs, cfg)

    answer["models"] = _model_lines(reference, recs, scores, costs, rows, cfg, classes)
    return answer


def _scores(
    models: Mapping[str, Mapping[int, list[TrialRecord]]], cfg: StatsConfig
) -> tuple[dict[Config, MetricScores], dict[str, list[int]]] | str:
    """Every configuration's decision-metric scores ({(model, res): MetricScores of its model}) and each model's
    seeds (rows of its arrays), on the same test images for every model; or why there are none."""
    out: dict[Config, MetricScores] = {}
    seeds: dict[str, list[int]] = {}
    images: dict[str, tuple[str, np.ndarray]] = {}
    for model, by_res in models.items():
        kept, _ = kept_resolutions(model, by_res, cfg)
        task = next(iter(by_res.values()))[0].task
        found = scores_by_resolution(kept, task) if kept else "every resolution was dropped"
        if isinstance(found, str):
            return f"no cross-model test: {model} has no scores to compare ({found})"
        chosen = decision_scores(found, task, cfg.metric, class_names(kept))
        if isinstance(chosen, str):
            return f"no cross-model test: {model}: {chosen}"
        out |= {(model, res): chosen for res in chosen.scores}
        seeds[model] = list(found.seeds)
        images[model] = (_data_digest(kept), found.common)
    first = next(iter(images.values()))
    other = next((m for m, (digest, common) in images.items() if not _same(first, (digest, common))), None)
    if other is not None:
        return (
            f"no cross-model test: the models were tested on different images ({next(iter(images))}: "
            f"{first[1].size} test images, {other}: {images[other][1].size}); each model's decision stands alone"
        )
    return out, seeds


def _data_digest(by_res: Mapping[int, list[TrialRecord]]) -> str:
    """The digest of the images and splits the model's trials were run on (result.json data.digest), '' unknown."""
    return next((str(m.result.get("data", {}).get("digest") or "") for ms in by_res.values() for m in ms), "")


def _same(a: tuple[str, np.ndarray], b: tuple[str, np.ndarray]) -> bool:
    return a[0] == b[0] and a[1].shape == b[1].shape and bool(np.array_equal(a[1], b[1]))


def _costs(rows: list[SummaryRow]) -> tuple[str | None, dict[Config, float]]:
    """('MACs' with each configuration's MACs per image, or 'latency' with its latency at batch 1 where some
    configuration lacks MACs; None where neither is known everywhere)."""
    for name, column in (("MACs", "gmacs"), ("latency", "latency_ms")):
        found = {(r.model, int(r.resolution)): getattr(r, column) for r in rows}
        if all(v is not None and math.isfinite(v) and v > 0 for v in found.values()):
            return name, {c: float(v) for c, v in found.items()}
    return None, {}


def _validation(
    models: Mapping[str, Mapping[int, list[TrialRecord]]], cfg: StatsConfig
) -> tuple[str, dict[Config, float]] | str:
    """(what chose, in words; each configuration's validation score, mean over its seeds) or why there is none."""
    task = next(iter(next(iter(models.values())).values()))[0].task
    headline = task.scores[0]
    wanted = [f"val/{cfg.metric}"] if cfg.metric else []
    for key in [*wanted, f"val/{headline.name}"]:
        found: dict[Config, float] = {}
        for model, by_res in models.items():
            for res, members in by_res.items():
                values = [_kept_value(m.result, key) for m in members]
                values = [v for v in values if v is not None]
                if values:
                    found[(model, int(res))] = float(np.mean(values))
        if len(found) == sum(len(b) for b in models.values()):
            words = headline.words if key == f"val/{headline.name}" else str(cfg.metric)
            why = ""
            if cfg.metric and key != wanted[0]:
                why = f" (the validation records keep no {cfg.metric}: the headline score chose)"
            return f"validation {words}{why}", found
    return "no cross-model answer: the trials keep no validation score to choose the configuration with"


def _validation_losses(models: Mapping[str, Mapping[int, list[TrialRecord]]]) -> dict[Config, float]:
    """Each configuration's validation loss of the kept fit, mean over seeds (where every seed has one)."""
    found = {}
    for model, by_res in models.items():
        for res, members in by_res.items():
            values = [_kept_value(m.result, "val/loss") for m in members]
            if values and all(v is not None for v in values):
                found[(model, int(res))] = float(np.mean(values))
    return found


def _choose(val: Mapping[Config, float], losses: Mapping[Config, float], costs: Mapping[Config, float]) -> tuple:
    """(the configuration with the highest validation score, '' or how a tie was broken). The decision metric on
    a validation split of a few hundred images ties often (the same count right); a tie goes to the lower
    validation loss (the criterion the fit itself was kept by: finer than a count), then to the cheaper."""
    top = max(val.values())
    tied = sorted((c for c, v in val.items() if abs(v - top) < 1e-9), key=lambda c: (costs.get(c, math.inf), c))
    if len(tied) == 1:
        return tied[0], ""
    others = ", ".join(label(c) for c in tied[1:])
    if all(c in losses for c in tied):
        best = min(tied, key=lambda c: (round(losses[c], 12), costs.get(c, math.inf)))
        others = ", ".join(label(c) for c in tied if c != best)
        return best, f"tied with {others}, its validation loss lower ({losses[best]:.3f})"
    return tied[0], f"tied with {others}, the cheaper"


def _kept_value(result: Mapping[str, Any], key: str) -> float | None:
    """The validation value `key` of the trial's kept epoch or penalty (its convergence record's best epoch; the
    last epoch without one)."""
    history = result.get("history") or []
    if not history:
        return None
    best = (result.get("convergence") or {}).get("best_epoch")
    entry = next((h for h in history if best is not None and int(h.get("epoch", -1)) == int(best)), history[-1])
    value = entry.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _sequence(
    reference: Config,
    scores: Mapping[Config, MetricScores],
    seeds: Mapping[str, list[int]],
    fixed: Mapping[str, bool],
    costs: Mapping[Config, float],
    cfg: StatsConfig,
) -> list[stats.Verdict]:
    """The fixed sequence of every configuration cheaper than the reference, the most costly first."""
    ref = scores[reference].scores[reference[1]]
    cheaper = sorted(
        (c for c in scores if c != reference and costs[c] <= costs[reference]),
        key=lambda c: (-costs[c], c),
    )
    steps = []
    for config in cheaper:
        mine = scores[config].scores[config[1]]
        d, one = stats.replicate_differences(
            mine.astype(float),
            ref.astype(float),
            paired=config[0] == reference[0],
            a_fixed=fixed.get(config[0], False),
            b_fixed=fixed.get(reference[0], False),
        )
        steps.append(stats.Step(config, d, one))
    chosen = scores[reference]
    settings = stats.Settings(
        cfg.margin, cfg.level, cfg.power, chosen.words, cfg.scope, chosen.binary, cfg.seed_sd, chosen.images
    )
    return stats.fixed_sequence(steps, reference, settings, label=label)


def _step_rows(
    verdicts: list[stats.Verdict],
    reference: Config,
    scores: Mapping[Config, MetricScores],
    val: Mapping[Config, float],
    costs: Mapping[Config, float],
    rows: list[SummaryRow],
) -> list[AnswerStep]:
    """answer.csv's rows: the reference, then each step in the order tested, then the configurations above it."""
    by_config = {(r.model, int(r.resolution)): r for r in rows}
    above = sorted((c for c in scores if costs[c] > costs[reference]), key=lambda c: (costs[c], c))
    out = [_step_row(reference, None, reference, scores, val, costs, by_config)]
    out += [_step_row(v.resolution, v, reference, scores, val, costs, by_config) for v in verdicts]
    out += [_step_row(c, None, reference, scores, val, costs, by_config, "above reference") for c in above]
    return out


def _step_row(
    config: Config,
    verdict: stats.Verdict | None,
    reference: Config,
    scores: Mapping[Config, MetricScores],
    val: Mapping[Config, float],
    costs: Mapping[Config, float],
    by_config: Mapping[Config, SummaryRow],
    said: str = "reference",
) -> AnswerStep:
    values = scores[config].scores[config[1]]
    row = by_config.get(config)
    v = verdict
    return {
        "configuration": label(config),
        "model": config[0],
        "resolution": config[1],
        "cost": costs[config],
        "cost_ratio": costs[reference] / costs[config],
        "latency_ms": row.latency_ms if row is not None else None,
        "val_score": val.get(config),
        "score": float(np.asarray(values, dtype=float).mean()),
        "verdict": v.verdict if v is not None else ("reference" if config == reference else said),
        "difference": v.difference if v is not None else None,
        "low": v.low if v is not None else None,
        "high": v.high if v is not None else None,
        "p_value": v.p_value if v is not None else None,
        "detectable": v.detectable if v is not None else None,
        "n_seeds": int(values.shape[0]),
        "reason": v.reason if v is not None else "",
    }


def _named_recalls(
    answer: Answer,
    models: Mapping[str, Mapping[int, list[TrialRecord]]],
    class_rows: list[ClassDecision],
    recs: list[Recommendation],
    cfg: StatsConfig,
) -> list[dict[str, Any]]:
    """The recall of the class that matters (stats.metric's class, else the class with the fewest test images) at
    each configuration the answer names (the one to use; the cheapest shown as good), with its image-bootstrap
    interval (seeds pooled), and where the per-class decision of that class differs from the model's own."""
    named = [str(answer["use"])] + ([str(answer["cheapest"])] if answer.get("cheapest") else [])
    out = []
    for config in named:
        model, res = config.rsplit("@", 1)
        found = class_recall(model, int(res), models[model], class_rows, recs, cfg)
        if found:
            out.append({"configuration": config, **found})
    return out


def class_recall(
    model: str,
    resolution: int,
    by_res: Mapping[int, list[TrialRecord]],
    class_rows: list[ClassDecision],
    recs: list[Recommendation],
    cfg: StatsConfig,
) -> dict[str, Any] | None:
    """{"class", "recall", "recall_low", "recall_high", "class_images", "differs"} of the class that matters at
    model @ resolution; None for a task without classes (segmentation) or a class without images."""
    mine = [r for r in class_rows if r["model"] == model]
    if not mine:
        return None
    wanted = str(cfg.metric).partition(":")[2].strip() if str(cfg.metric or "").startswith("recall:") else ""
    row = next((r for r in mine if r["class"] == wanted), None) or min(mine, key=lambda r: r["rank"])
    kept, _ = kept_resolutions(model, by_res, cfg)
    task = next(iter(by_res.values()))[0].task
    found = scores_by_resolution(kept, task) if kept else None
    if not isinstance(found, Compared):
        return None
    chosen = decision_scores(found, task, f"recall:{row['class']}", class_names(kept))
    if isinstance(chosen, str) or resolution not in chosen.scores:
        return None
    values = np.asarray(chosen.scores[resolution], dtype=float)
    iv = stats.bootstrap_scores(values, level=cfg.level, resamples=cfg.resamples, seed=cfg.seed)
    rec = next((r for r in recs if r["model"] == model), None)
    return {
        "class": row["class"],
        "recall": iv.estimate,
        "recall_low": iv.low,
        "recall_high": iv.high,
        "class_images": int(values.shape[1]),
        "differs": _differs(row, rec) if rec is not None else "",
    }


def _differs(row: ClassDecision, rec: Recommendation) -> str:
    """Where the class's own decision differs from the model's, in words ('' where they agree or either is
    missing): 'for the defective class no smaller resolution is shown within 0.02 of 128 px (96 px undecided)'."""
    if not row.get("available") or not rec.get("available"):
        return ""
    theirs = row["resolution"] if row.get("decided") else None
    ours = rec["resolution"] if rec.get("decided") else None
    if theirs == ours:
        return ""
    name, ref, margin = row["class"], row.get("reference"), float(row.get("margin") or 0.0)
    if theirs is None or theirs == ref:
        tested = [v for v in row.get("verdicts") or [] if v["verdict"] not in ("reference", "above reference")]
        first = tested[0] if tested else None
        step = f" ({first['resolution']} px {first['verdict']})" if first else ""
        return f"for the {name} class no smaller resolution is shown within {margin:g} of {ref} px{step}"
    return f"for the {name} class {theirs} px is shown within {margin:g} of {ref} px"


def _model_lines(
    reference: Config,
    recs: list[Recommendation],
    scores: Mapping[Config, MetricScores],
    costs: Mapping[Config, float],
    rows: list[SummaryRow],
    cfg: StatsConfig,
    classes: Any = None,
) -> list[dict[str, Any]]:
    """Per model, at its own decided resolution: the class that matters (`classes(model, resolution)`,
    class_recall's record) and, against the configuration to use, descriptively: the difference of the decision
    metric on the same test images (each side's seeds averaged per image) with a paired bootstrap interval, the
    one-sided sign-flip p of "below it", and the cost ratio."""
    ref = np.asarray(scores[reference].scores[reference[1]], dtype=float).mean(axis=0)
    by_config = {(r.model, int(r.resolution)): r for r in rows}
    out = []
    for rec in recs:
        res = rec.get("resolution")
        config = (rec["model"], int(res)) if res is not None else None
        if config is None or config not in scores:
            continue
        entry: dict[str, Any] = {"configuration": label(config), "model": config[0], "resolution": config[1]}
        entry |= (classes(*config) if classes is not None else None) or {}
        if config != reference:
            entry |= _against(config, reference, ref, scores, costs, by_config, cfg)
        out.append(entry)
    return out


def _against(
    config: Config,
    reference: Config,
    ref: np.ndarray,
    scores: Mapping[Config, MetricScores],
    costs: Mapping[Config, float],
    by_config: Mapping[Config, SummaryRow],
    cfg: StatsConfig,
) -> dict[str, Any]:
    """One configuration against the one to use (`ref`: its per-image scores, seeds averaged), descriptively."""
    mine = np.asarray(scores[config].scores[config[1]], dtype=float)
    diff = mine.mean(axis=0) - ref
    iv = stats.bootstrap_scores(diff, level=cfg.level, resamples=cfg.resamples, seed=cfg.seed)
    lattice = math.lcm(mine.shape[0], scores[reference].scores[reference[1]].shape[0])
    row, ref_row = by_config.get(config), by_config.get(reference)
    latency = (row.latency_ms, ref_row.latency_ms) if row is not None and ref_row is not None else (None, None)
    return {
        "difference": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "p_below": above_p(-diff, cfg.resamples, lattice),
        "cost_ratio": costs[reference] / costs[config],
        "latency_ms": latency[0],
        "reference_latency_ms": latency[1],
    }
