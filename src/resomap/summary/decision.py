"""Each model's resolutions compared on the same test images and seeds, whatever the task: the paired tests between
its resolutions of every per-image score (``stats.compare_resolutions``: McNemar, clustered over images with several
seeds, or a paired bootstrap for a 0/1 score, the paired bootstrap with a sign-flip test for any other;
descriptive) and, on the decision metric (the headline score, or stats.metric), the decision: each resolution
against the reference at the margin, and the decided resolution (``stats.noninferiority``). Whether the decided
resolution is recommended is summary.uncertainty.recommendation.

Rows are plain dicts of JSON-safe values (results.PAIRED_COLUMNS, results.RECOMMENDATION_COLUMNS), with a
``reason`` in words wherever something is missing."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.summary.aligned import (
    Aligned,
    TrialRecord,
    align,
    deterministic,
    group_records,
    no_records,
    spec_contradicted,
)
from resomap.tasks import Score, Task

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Compared:
    """A model's resolutions on the seeds and test images every one of them has: ``arrays`` {score name:
    {resolution: [S, N]}} (a score's images where some resolution or seed has none are left out of that score),
    ``aligned`` each resolution's Aligned records and ``common`` the shared image indices."""

    arrays: dict[str, dict[int, np.ndarray]]
    seeds: list[int]
    n_images: int
    notes: list[str]
    aligned: dict[int, Aligned]
    common: np.ndarray


def scores_by_resolution(by_res: Mapping[int, list[TrialRecord]], task: Task) -> Compared | str:
    """The resolutions' scores on the seeds and images every compared resolution has (Compared); or a reason."""
    return compared({r: {m.id[2]: m.own for m in ms if m.own is not None} for r, ms in by_res.items()}, task)


def scores_by_test_resolution(members: list[TrialRecord], task: Task, lowest: int = 0) -> Compared | str:
    """One trained resolution's seeds (`members`) tested at every resolution from `lowest` up they were tested at,
    keyed by the test resolution, on the seeds and images every one of those has (Compared); or a reason."""
    tested = sorted(
        {t for m in members if m.own is not None for t, table in m.tables.items() if t >= lowest and len(table.index)}
    )
    return compared(
        {t: {m.id[2]: m.tables[t] for m in members if m.own is not None and t in m.tables} for t in tested}, task
    )


def compared(usable: Mapping[int, Mapping[int, Any]], task: Task) -> Compared | str:
    """{resolution: {seed: ScoreTable}} on the seeds and images every resolution has (Compared); or a reason."""
    notes: list[str] = []
    skipped = sorted(r for r, p in usable.items() if not p)
    usable = {r: p for r, p in usable.items() if p}
    if not usable:
        return f"no resolution has per-image predictions ({no_records(task)})"
    if skipped:
        notes.append(f"not compared ({no_records(task)}): {', '.join(f'{r} px' for r in skipped)}")
    if len(usable) < 2:
        only = next(iter(usable))
        return "; ".join([f"only {only} px has per-image predictions: nothing to compare it with", *notes])
    seeds = sorted(set.intersection(*(set(p) for p in usable.values())))
    if not seeds:
        return "; ".join(["no seed was tested at every resolution", *notes])
    if any(len(p) != len(seeds) for p in usable.values()):
        notes.append(f"compared on the seeds every resolution has: {seeds}")
    aligned = {r: align({s: p[s] for s in seeds}, task) for r, p in usable.items()}
    bad = next((f"{r} px: {a}" for r, a in aligned.items() if isinstance(a, str)), None)
    if bad:
        return bad
    common = np.array(sorted(set.intersection(*(set(a.index.tolist()) for a in aligned.values()))), dtype=np.int64)
    if common.size == 0:
        return "the resolutions were tested on different images (no image in common)"
    if any(a.index.size != common.size for a in aligned.values()):
        notes.append(f"compared on the {common.size} test images every resolution has")
    out: dict[str, dict[int, np.ndarray]] = {}
    for sc in task.scores:
        arrays = {r: a.scores[sc.name][:, np.searchsorted(a.index, common)] for r, a in aligned.items()}
        if not sc.binary:
            scored = np.logical_and.reduce([np.isfinite(v).all(axis=0) for v in arrays.values()])
            if not scored.all():
                notes.append(f"{sc.column}: compared on the {int(scored.sum())} images scored everywhere")
            arrays = {r: v[:, scored] for r, v in arrays.items()}
        out[sc.name] = arrays
    return Compared(out, seeds, int(common.size), notes, aligned, common)


@dataclasses.dataclass(frozen=True)
class MetricScores:
    """The decision metric's per-image values {resolution: [S, N']}, its words, whether they are 0/1 and what its
    images are in words (a class's recall counts that class's test images)."""

    scores: dict[int, np.ndarray]
    words: str
    binary: bool
    images: str = "test images"


def decide(
    scores: Mapping[int, Any],
    cfg: StatsConfig,
    *,
    alpha: float | None = None,
    binary: bool | None = None,
    words: str = "accuracy",
    images: str = "test images",
    deterministic: bool = False,
) -> stats.Decision:
    """The non-inferiority decision (stats.noninferiority) of ``scores`` {resolution: [S, N]} with the settings of
    stats (margin, reference, level, power, scope, seed_sd); ``alpha``: a look's one-sided alpha (else 1 - level);
    ``deterministic``: the model's seeds are one fit (summary.aligned.deterministic), one seed deciding as several.
    The one call of the decision: the summary and each look of an adaptive sweep."""
    return stats.noninferiority(
        scores,
        margin=cfg.margin,
        reference=cfg.reference,
        level=cfg.level,
        power=cfg.power,
        metric=words,
        alpha=alpha,
        scope=cfg.scope,
        binary=binary,
        seed_sd=cfg.seed_sd,
        images=images,
        deterministic=deterministic,
    )


def decision_scores(
    found: Compared, task: Task, metric: str | None, class_names: list[str] | None
) -> MetricScores | str:
    """The per-image values of the decision metric ``metric`` (stats.metric; None: the task's headline score), or
    why they cannot be had.
    A metric the task scores per image is read as it is; a classification metric (balanced accuracy, macro-F1, a
    class's recall, AUROC) is built from the labels, predictions and probabilities by resomap.stats.per_image."""
    from resomap.errors import ConfigError
    from resomap.stats import per_image

    named = next((sc for sc in task.scores if sc.name == (metric or task.scores[0].name)), None)
    if named is not None:
        return MetricScores(found.arrays[named.name], named.words, named.binary)
    try:
        parsed = per_image.parse_metric(str(metric))
        out = {}
        for res, a in found.aligned.items():
            if a.label is None or a.prediction is None:
                return f"{parsed.words} needs labels and predictions; the {task.name} records have none"
            pos = np.searchsorted(a.index, found.common)
            positive = None if a.positive is None else a.positive[:, pos]
            out[res] = per_image.values(parsed, a.label[pos], a.prediction[:, pos], positive, class_names)
    except ConfigError as exc:
        return f"stats.metric {metric}: {exc}"
    return MetricScores(out, parsed.words, parsed.binary, parsed.images)


def _pair_row(model: str, metric: str, row: stats.PairComparison) -> dict[str, Any]:
    t = row.test
    return {
        "model": model,
        "metric": metric,  # the score compared; accuracy_a / accuracy_b are its means
        "resolution_a": row.resolution_a,
        "resolution_b": row.resolution_b,
        "accuracy_a": t.accuracy_a,
        "accuracy_b": t.accuracy_b,
        "effect": t.effect,  # accuracy(b) - accuracy(a)
        "ci_low": t.low,
        "ci_high": t.high,
        "p_value": t.p_value,
        "p_adjusted": row.p_adjusted,
        "significant": bool(row.significant),
        "level": t.level,
        "method": t.method,
        "correction": row.correction,
        "n_images": t.n_images,
        "n_seeds": t.n_seeds,
        "b01": t.b01,
        "b10": t.b10,
        "available": bool(t.available),
        "reason": t.reason or "",
    }


def _method(score: Score, cfg: StatsConfig) -> str:
    """The paired test of a score: the configured one for a 0/1 score; the paired bootstrap (sign-flip) for any
    other (McNemar's test needs 0/1 outcomes)."""
    return cfg.paired_test if score.binary else "bootstrap"


def compare_model(
    model: str, by_res: Mapping[int, list[TrialRecord]], cfg: StatsConfig
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(paired test rows of every score, descriptive; the decision on the headline score: every resolution against
    the reference at the margin, stats.decide.noninferiority) of one model's resolutions."""
    task = next(iter(by_res.values()))[0].task
    headline = task.scores[0]
    rec_row = _empty_recommendation(model, cfg.metric or headline.name, cfg)
    rec_row["deterministic"] = deterministic(by_res)  # its seeds are one fit: their variance is exactly zero
    contradicted = spec_contradicted(by_res)
    if contradicted:
        log.warning("%s: %s", model, contradicted)
        rec_row["note"] = f"{model}: {contradicted}"
    by_res, dropped = kept_resolutions(model, by_res, cfg)
    if dropped:
        rec_row["verdicts"] = [dropped_verdict(r, cfg) for r in dropped]
    if not by_res:
        rec_row.update(
            reason="every resolution was dropped", sentence=f"{model}: no decision: every resolution dropped"
        )
        return [], rec_row
    found = scores_by_resolution(by_res, task)
    if isinstance(found, str):
        rec_row["reason"] = found
        rec_row["sentence"] = f"{model}: no decision: {found}"
        return [], rec_row
    settings = {"level": cfg.level, "correction": cfg.correction, "resamples": cfg.resamples, "seed": cfg.seed}
    rows = []
    for sc in task.scores:  # each score: its own family of pairs, adjusted on its own (descriptive)
        found_rows = stats.compare_resolutions(found.arrays[sc.name], method=_method(sc, cfg), **settings)
        rows += [_pair_row(model, sc.name, row) for row in found_rows]
    chosen = decision_scores(found, task, cfg.metric, class_names(by_res))
    if isinstance(chosen, str):
        rec_row.update(reason=chosen, sentence=f"{model}: no decision: {chosen}", note="; ".join(found.notes))
        return rows, rec_row
    if _decided(model, chosen, found, cfg, rec_row) and dropped:
        rec_row["note"] = "; ".join(
            filter(None, [rec_row["note"], f"dropped earlier: {', '.join(map(str, dropped))} px"])
        )
    return rows, rec_row


def kept_resolutions(
    model: str, by_res: Mapping[int, list[TrialRecord]], cfg: StatsConfig
) -> tuple[dict[int, list[TrialRecord]], list[int]]:
    """(the resolutions compared, those an adaptive sweep dropped: stats.dropped, fewer seeds, left out of the
    comparisons)."""
    dropped = sorted(r for r in cfg.dropped.get(model, []) if r in by_res)
    return {r: ms for r, ms in by_res.items() if r not in dropped}, dropped


def decision_alpha(model: str, cfg: StatsConfig) -> float | None:
    """The one-sided alpha of a model's decision: an adaptive sweep's alpha of this look (stats.spending); None:
    1 - level."""
    return cfg.look_alpha.get(model)


# a model's decisions on subsets of its test images (summary.per_class: each class; summary.groups: each group
# value), one family per model: what their rows share

NOT_DECIDED = "not decided"


def family_alpha(model: str, cfg: StatsConfig, members: int) -> float:
    """The one-sided alpha of each of a model's `members` decisions in one family (Bonferroni): the model
    decision's alpha (decision_alpha, else 1 - level) / members."""
    whole = decision_alpha(model, cfg)
    return (1 - cfg.level if whole is None else whole) / members


def decided_fields(decision: stats.Decision, n_seeds: int) -> dict[str, Any]:
    """A subset decision's row fields: its seeds, reference, decided resolution, reason and verdicts."""
    return {
        "n_seeds": n_seeds,
        "reference": decision.reference,
        "resolution": decision.resolution,
        "decided": bool(decision.decided),
        "available": True,
        "reason": decision.reason,
        "verdicts": [v.to_dict() for v in decision.verdicts],
    }


def not_decided_fields(why: str) -> dict[str, Any]:
    """The same fields for a subset without a decision: the reason "not decided: <why>"."""
    return {
        "n_seeds": None,
        "reference": None,
        "resolution": None,
        "decided": False,
        "available": False,
        "reason": f"{NOT_DECIDED}: {why}",
        "verdicts": [],
    }


def decided_cell(row: Mapping[str, Any]) -> str:
    """A subset row's decision in a table cell: the decided resolution, "undecided", or "not decided: <why>"."""
    if not row.get("available"):
        return str(row.get("reason") or NOT_DECIDED)
    return f"{row['resolution']} px" if row.get("decided") else "undecided"


def _decided(model: str, chosen: MetricScores, found: Compared, cfg: StatsConfig, rec_row: dict[str, Any]) -> bool:
    """The decision on the decision metric's scores (`chosen`) into ``rec_row``, True; or why there is none, False."""
    scores, notes = chosen.scores, "; ".join(filter(None, [rec_row.get("note"), *found.notes]))
    fixed = bool(rec_row.get("deterministic"))  # one fit: one seed decides as several
    if cfg.reference is not None and cfg.reference not in scores:
        why = f"the reference {cfg.reference} px has no per-image records to compare with"
        rec_row.update(reason=why, sentence=f"{model}: no decision: {why}", note=notes)
        return False
    decision = decide(
        scores,
        cfg,
        alpha=decision_alpha(model, cfg),
        binary=chosen.binary,
        words=chosen.words,
        images=chosen.images,
        deterministic=fixed,
    )
    means = {r: float(np.asarray(v, dtype=float).mean()) for r, v in scores.items()}
    rec_row.update(
        resolution=decision.resolution,
        reference=decision.reference,
        decided=decision.decided,
        accuracy=means[decision.resolution],
        reference_accuracy=means[decision.reference],
        detectable=_detectable(decision),
        n_seeds=len(found.seeds),
        n_images=int(next(iter(scores.values())).shape[1]),  # a class's recall: that class's test images
        scope=decision.scope,
        available=True,
        reason=decision.reason,
        sentence=f"{model}: {decision.reason}",
        note=notes,
        verdicts=[v.to_dict() for v in decision.verdicts] + rec_row.get("verdicts", []),
    )
    if decision.scope == "model" and len(found.seeds) > 1 and not fixed:  # a deterministic fit's seeds are one

        def again(kept: dict[int, np.ndarray]) -> stats.Decision:
            kw = {"binary": chosen.binary, "words": chosen.words, "images": chosen.images}
            return decide(kept, cfg, alpha=decision_alpha(model, cfg), **kw)

        evidence = seed_evidence(scores, decision, found.seeds, again, fixed)
        rec_row["seeds"] = evidence
    return True


def seed_evidence(
    scores: Mapping[int, Any], decision: stats.Decision, seeds: list[int], again: Any, deterministic: bool
) -> dict[str, Any]:
    """The training seeds as evidence beside a model-scope decision (resomap.stats.seeds): each seed's mean
    difference at every tested step (`differences` {res: {seed: value}}), the seeds flagged outlying there
    (`outlying` {res: [seed]}; the seeds x the steps checked are one family: stats.seeds.outlying_seeds), the
    decision without each seed (`without` {seed: its decided resolution, None when undecided}; 3 or more seeds)
    and all of it in `words` for the decision's sentence: the decided step's seeds, each flag, what leaving a seed
    out changes, and with 2 seeds that differ, that a claim needs more."""
    from resomap.stats import seeds as seed_stats

    tested = [
        v for v in decision.verdicts if v.verdict not in ("reference", "above reference") and v.resolution in scores
    ]
    differences, flagged, words = {}, {}, []
    checked = seed_stats.outlying_seeds(scores, [v.resolution for v in tested], decision.reference)
    over = f"Bonferroni over {len(seeds)} seeds x {len(tested)} step{'' if len(tested) == 1 else 's'}"
    for res, (diffs, p) in checked.items():
        differences[res] = {seed: float(x) for seed, x in zip(seeds, diffs, strict=True)}
        out = [int(i) for i in np.flatnonzero(p < seed_stats.OUTLIER_ALPHA)]
        if out:
            flagged[res] = [seeds[i] for i in out]
            words += [
                f"seed {seeds[i]} is outlying at {res} px ({diffs[i]:+.3f} against the other seeds; "
                f"deleted-residual p {p[i]:.2g}, {over})"
                for i in out
            ]
    step = decision.resolution if decision.decided and decision.resolution in differences else None
    if step is None and tested:
        step = tested[0].resolution
    if step is not None and not deterministic:
        each = ", ".join(f"{seed} {x:+.3f}" for seed, x in differences[step].items())
        words.insert(0, f"per seed at {step} px against {decision.reference} px: {each}")
    without = {seeds[i]: (d.resolution if d.decided else None) for i, d in seed_stats.without_each_seed(scores, again)}
    mine = decision.resolution if decision.decided else None
    changed = {seed: res for seed, res in without.items() if res != mine}
    if changed:
        words += [f"without seed {seed} the decision is {_decided_words(res)}" for seed, res in changed.items()]
    elif without:
        words.append(f"without any one seed the decision stays {_decided_words(mine)}")
    if len(seeds) == 2 and not deterministic:
        words.append(
            "with 2 seeds that differ the model-scope test is very conservative (its critical value mixes in t with "
            "1 degree of freedom): a claim about the model wants 3 to 5 seeds"
        )
    return {"differences": differences, "outlying": flagged, "without": without, "words": "; ".join(words)}


def _decided_words(resolution: int | None) -> str:
    return "undecided" if resolution is None else f"{resolution} px"


def dropped_verdict(resolution: int, cfg: StatsConfig) -> dict[str, Any]:
    """The verdict of a resolution an adaptive sweep showed inferior at an earlier look (its summary.md section
    says when and with which bounds); not tested again on the later seeds, which it does not have."""
    return {
        "resolution": resolution,
        "reference": cfg.reference,
        "verdict": "inferior",
        "margin": cfg.margin,
        "level": cfg.level,
        "difference": None,
        "low": None,
        "high": None,
        "p_value": None,
        "detectable": None,
        "n_images": 0,
        "n_seeds": 0,
        "reason": "shown inferior at an earlier look of the adaptive sweep (or below one that was); not run further",
    }


def _empty_recommendation(model: str, metric: str, cfg: StatsConfig) -> dict[str, Any]:
    """A recommendation row before (or without) a decision: RECOMMENDATION_COLUMNS with what is known."""
    return {
        "model": model,
        "metric": metric,
        "resolution": None,
        "sufficient": False,  # set by build_summary from `sufficiency` (the evidence beside the decision)
        "reference": None,
        "decided": False,
        "scope": cfg.scope,
        "accuracy": None,
        "reference_accuracy": None,
        "level": cfg.level,
        "margin": cfg.margin,
        "detectable": None,
        "power": cfg.power,
        "n_seeds": None,
        "n_images": None,
        "deterministic": False,
        "available": False,
        "reason": "",
        "sufficiency": "",
        "sentence": "",
        "note": "",
    }


def metric_scores(by_res: Mapping[int, list[TrialRecord]], metric: str | None = None) -> MetricScores | str:
    """The decision metric (stats.metric; None: the task's headline score) of a model's resolutions as the decision
    compares them; or the reason why not."""
    task = next(iter(by_res.values()))[0].task
    found = scores_by_resolution(by_res, task)
    if isinstance(found, str):
        return found
    return decision_scores(found, task, metric, class_names(by_res))


def class_names(by_res: Mapping[int, list[TrialRecord]]) -> list[str] | None:
    """The class names the model's trials recorded (result.json's data.classes), None when none did."""
    for members in by_res.values():
        for m in members:
            found = (m.result.get("data") or {}).get("classes")
            if found:
                return [str(c) for c in found]
    return None


def _detectable(decision: stats.Decision) -> float | None:
    """The detectable margin of the decided step (the decided resolution's verdict); with no smaller resolution
    decided, of the first step tested, where the sequence stopped."""
    found = {v.resolution: v.detectable for v in decision.verdicts if v.detectable is not None}
    return found.get(decision.resolution, next(iter(found.values()), None))


def compare_models(records: Iterable[TrialRecord], cfg: StatsConfig) -> tuple[list[dict], list[dict]]:
    """(every model's paired test rows, one recommendation per model)."""
    paired, recs = [], []
    for model, by_res in by_model(records).items():
        rows, rec = compare_model(model, by_res, cfg)
        paired += rows
        recs.append(rec)
    return paired, recs


def by_model(records: Iterable[TrialRecord]) -> dict[str, dict[int, list[TrialRecord]]]:
    """{model: {resolution: its trials}}, models by name."""
    out: dict[str, dict[int, list[TrialRecord]]] = defaultdict(dict)
    for (model, res), members in group_records(records).items():
        out[model][res] = members
    return dict(sorted(out.items()))
