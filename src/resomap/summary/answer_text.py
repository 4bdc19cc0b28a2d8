"""The answer in words (summary.answer's record, the rows and each model's decision): its first line (the
configuration to use, how it was chosen, its score and the class that matters, and the cheapest configuration shown
as good within the margin with its cost ratio, or that none is), then a line per model (its own smallest sufficient
resolution, never "best" or "use"), and the short forms the MLflow parent shows (its description's first line and
its tags)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resomap.schema import Answer, Recommendation
from resomap.summary.rows import SummaryRow, baseline_label, baseline_names
from resomap.summary.text import fmt_interval, sentences, trivial_label


def ratio_words(ratio: Any, cost: str) -> str:
    """'15,552x fewer MACs', '1.8x lower latency', 'the same MACs'."""
    if ratio is None:
        return ""
    ratio = float(ratio)
    if abs(ratio - 1.0) < 0.005:
        return f"the same {'MACs' if cost == 'MACs' else 'latency'}"
    what = (
        ("fewer MACs" if cost == "MACs" else "lower latency")
        if ratio > 1
        else ("more MACs" if cost == "MACs" else "higher latency")
    )
    ratio = ratio if ratio > 1 else 1 / ratio
    return f"{ratio:,.0f}x {what}" if ratio >= 10 else f"{ratio:.2g}x {what}"


def _row(rows: list[SummaryRow], model: str, resolution: Any) -> SummaryRow | None:
    return next((r for r in rows if r.model == model and r.resolution == resolution), None)


def _recall(answer: Answer, config: str) -> str:
    """'defective recall 0.702 [0.638, 0.765] (205 test images)' at a named configuration; '' without one."""
    found = next((c for c in answer.get("classes") or [] if c["configuration"] == config), None)
    if not found or found.get("recall") is None:
        return ""
    cell = fmt_interval(found["recall"], found.get("recall_low"), found.get("recall_high"))
    return f"{found['class']} recall {cell} ({found['class_images']} test images)"


def _step_words(step: Mapping[str, Any], cost: str) -> str:
    """'lite0_linear@96 (1.8x fewer MACs): -0.014, one-sided bounds [-0.031, +0.002], undecided'."""
    parts = [f"{step['configuration']} ({ratio_words(step.get('cost_ratio'), cost)})"]
    if step.get("difference") is not None and step.get("low") is not None:
        parts.append(f"{step['difference']:+.3f}, one-sided bounds [{step['low']:+.3f}, {step['high']:+.3f}]")
    return f"{parts[0]}: {', '.join([*parts[1:], str(step['verdict'])])}"


def answer_line(answer: Answer, rows: list[SummaryRow]) -> str:
    """The answer's first line (module doc); where there is no answer across models, why, in one sentence."""
    if not answer.get("available"):
        return sentences(f"No answer across models: {answer.get('reason') or 'not computed'}")
    use, model, res = str(answer["use"]), str(answer["use_model"]), answer["use_resolution"]
    steps = answer.get("steps") or []
    top = next((s for s in steps if s["configuration"] == use), None)
    row = _row(rows, model, res)
    said = row.say(row.headline) if row is not None else str(answer.get("metric"))
    val = f" {top['val_score']:.3f}" if top and top.get("val_score") is not None else ""
    tie = f"; {answer['tie']}" if answer.get("tie") else ""
    chosen = f"chosen on validation ({answer.get('chosen_by')}:{val}, the highest of "
    chosen += f"{answer.get('n_configurations')} configurations{tie})"
    score = fmt_interval(*row.score(row.headline)) if row is not None else "-"
    recall = _recall(answer, use)
    first = f"Use {model} at {res} px, {chosen}: test {said} {score} on {answer.get('n_images')} images"
    first += f", {recall}" if recall else ""
    margin, cost = float(answer.get("margin") or 0.0), str(answer.get("cost") or "MACs")
    cheapest = answer.get("cheapest")
    tested = [s for s in steps if s["verdict"] not in ("reference", "above reference", "not reached")]
    if cheapest:
        step = next(s for s in steps if s["configuration"] == cheapest)
        there = _recall(answer, str(cheapest))
        second = f"The cheapest configuration shown non-inferior within {margin:g}: {_step_words(step, cost)}"
        second += f" (p {step['p_value']:.2g})" if step.get("p_value") is not None else ""
        second += f"; {there}" if there else ""
    elif tested:
        second = (
            f"No cheaper configuration is shown non-inferior within {margin:g}: the sequence by {cost} stopped at "
            f"{_step_words(tested[0], cost)}"
        )
    else:
        second = "No configuration is cheaper than it"
    return sentences(first, second)


def model_line(rec: Recommendation, rows: list[SummaryRow], answer: Answer | None) -> str:
    """One model's own result: its smallest sufficient resolution (or why none is shown), its score there (unless
    it is the configuration to use, said above), how far it is from the configuration to use and at what cost
    (descriptive), the class that matters there and where its decision differs, whether it learned, and that a
    deterministic fit's seeds are one replicate."""
    model = str(rec["model"])
    mine = [r for r in rows if r.model == model]
    row = _row(rows, model, rec.get("resolution"))
    first, parts = f"{model}: {own_words(rec)}", []
    if row is not None and (answer or {}).get("use") != f"{model}@{row.resolution}":
        cell = fmt_interval(*row.score(row.headline))
        score = f"{row.say(row.headline)} {cell} at {row.resolution} px" if cell != "-" else ""
        parts.append(", ".join(filter(None, [score, _against(answer, model, row)])))
    found = next((m for m in (answer or {}).get("models") or [] if m["model"] == model), None)
    said_above = (answer or {}).get("use") == (found or {}).get("configuration")  # its recall is in the answer
    if found and found.get("class") and (found.get("differs") or not said_above):
        recall = f"{found['class']} recall {fmt_interval(found['recall'], found['recall_low'], found['recall_high'])}"
        parts.append(f"{recall}: {found['differs']}" if found.get("differs") else recall)
    parts.append(_learned(row, rows) if row is not None else "")
    if rec.get("deterministic"):
        seeds = max((int(r.n_seeds or 0) for r in mine), default=0)
        parts.append(f"deterministic: its {seeds} seed{'s are' if seeds != 1 else ' is'} one replicate")
    elif 0 < int(rec.get("n_seeds") or 0) < 3 and rec.get("scope") == "model":
        parts.append(f"{rec['n_seeds']} seed(s): a claim about the model wants 3 to 5")
    rest = "; ".join(p for p in parts if p)
    return sentences(first, rest[:1].upper() + rest[1:] if rest else "")


def own_words(rec: Recommendation) -> str:
    """'64 px is enough, within 0.02 of 128 px', 'needs 128 px: 96 px is shown more than 0.02 below it',
    '128 px until shown otherwise: no smaller resolution shown within 0.02 (96 px undecided, ...)', 'no decision:
    <why>'; with the missing evidence where the decision has it ('..., but 64 px is not shown above ...')."""
    if not rec.get("available") or rec.get("resolution") is None:
        return f"no decision: {rec.get('reason') or 'no per-image records'}"
    res, ref, margin = rec["resolution"], rec.get("reference"), float(rec.get("margin") or 0.0)
    tested = [v for v in rec.get("verdicts") or [] if v.get("verdict") not in ("reference", "above reference")]
    first = tested[0] if tested else None
    if not rec.get("decided"):
        if first is None:
            return f"{ref} px: no smaller resolution to test"
        step = f"{first['resolution']} px {first['verdict']}"
        if first.get("difference") is not None and first.get("low") is not None:
            step += f": {first['difference']:+.3f}, one-sided bounds [{first['low']:+.3f}, {first['high']:+.3f}]"
        if rec.get("detectable") is not None:
            step += f"; this design detects {float(rec['detectable']):.3f} and larger"
        return f"{ref} px until shown otherwise: no smaller resolution shown within {margin:g} ({step})"
    missing = str(rec.get("sufficiency") or "")
    if not rec.get("sufficient") and ": " in missing:  # decided, but the evidence of enough pixels is missing
        within = f"{res} px is within {margin:g} of {ref} px" if res != ref else f"{ref} px is the reference"
        return f"{within}, but {missing.split(': ', 1)[1]}"
    said = f"{res} px is enough, within {margin:g} of {ref} px" if res != ref else f"needs {ref} px"
    if res == ref and first is not None:
        said += f": {first['resolution']} px is shown more than {margin:g} below it"
    return said


def _against(answer: Answer | None, model: str, row: SummaryRow) -> str:
    """'-0.041 [-0.070, -0.012] against lite0_linear@128 (one-sided p 0.003 of being below it; descriptive), 15,552x
    fewer MACs, latency 0.09 ms against 10.2 ms'; '' for the configuration to use itself or without an answer."""
    if not answer or not answer.get("available"):
        return ""
    found = next((m for m in answer.get("models") or [] if m["configuration"] == f"{model}@{row.resolution}"), None)
    if found is None or found.get("difference") is None:
        return ""
    text = f"{found['difference']:+.3f}"
    if found.get("low") is not None and found.get("high") is not None:
        text += f" [{found['low']:+.3f}, {found['high']:+.3f}]"
    text += f" against {answer['use']}"
    if found.get("p_below") is not None:
        text += f" (one-sided p {found['p_below']:.2g}; descriptive)"
    text += f" at {ratio_words(found['cost_ratio'], str(answer.get('cost')))}"
    if found.get("latency_ms") is not None and found.get("reference_latency_ms") is not None:
        text += f" (latency {found['latency_ms']:.2g} against {found['reference_latency_ms']:.3g} ms)"
    return text


def _learned(row: SummaryRow, rows: list[SummaryRow]) -> str:
    """'shown above the majority class and pixel_logreg, not undertrained' (or 'not shown above ...')."""
    above, not_above = [], []
    names = [(trivial_label([row]), None)] + [
        (baseline_label(rows, n), n) for n in baseline_names(rows) if n != row.model
    ]
    for label, name in names:
        shown = row.shown_above(name) if label else None
        (above if shown else not_above if shown is False else []).append(label)
    parts = [f"shown above {' and '.join(above)}"] if above else []
    parts += [f"not shown above {' and '.join(not_above)}"] if not_above else []
    parts += [{True: "undertrained", False: "not undertrained", None: ""}[row.undertrained]]
    return ", ".join(p for p in parts if p)


def short_answer(answer: Answer | None, rows: list[SummaryRow], recs: list[Recommendation] = ()) -> str:
    """The answer in one short line (the MLflow parent's first line and `recommended` tag): 'use lite0_linear@128
    (accuracy 0.846 [0.819, 0.872], chosen on validation); no cheaper configuration shown within 0.02'; a sweep of
    one model: that model's own result ('one model, m: 64 px is enough, within 0.02 of 128 px')."""
    if len(recs) == 1 and not (answer or {}).get("available"):
        return f"one model, {recs[0]['model']}: {own_words(recs[0])}"
    if not answer or not answer.get("available"):
        return f"no answer across models: {(answer or {}).get('reason') or 'not computed'}"
    row = _row(rows, str(answer["use_model"]), answer["use_resolution"])
    score = f"{row.say(row.headline)} {fmt_interval(*row.score(row.headline))}, " if row is not None else ""
    line = f"use {answer['use']} ({score}chosen on validation)"
    cheapest, margin = answer.get("cheapest"), float(answer.get("margin") or 0.0)
    if cheapest:
        step = next(s for s in answer.get("steps") or [] if s["configuration"] == cheapest)
        ratio = ratio_words(step.get("cost_ratio"), str(answer.get("cost")))
        return f"{line}; {cheapest} shown non-inferior within {margin:g} ({ratio})"
    return f"{line}; no cheaper configuration shown within {margin:g}"


ANSWER_METHOD = (
    "The answer across models: the configuration to use is chosen on the validation split (the highest validation "
    "score of the decision metric, each trial's kept fit, mean over seeds; a tie goes to the lower validation loss, "
    "then to the cheaper), so the choice reads no test image. Then every cheaper configuration of any model (by MACs "
    "per image, else by latency) is tested for non-inferiority to it on the same test images, at the same margin "
    "and scope, in a fixed sequence from the most costly down that stops at the first not shown non-inferior (the "
    "family-wise error stays at alpha; the order is fixed by cost before the test images are read). A configuration "
    "of the chosen model pairs its seeds with the chosen one's; another model's seeds are independent replicates; "
    "a closed-form fit on fixed features is one replicate. Each model's line compares its own decided resolution "
    "with the configuration to use descriptively (paired image bootstrap interval and one-sided sign-flip p, "
    "outside that family), and gives the recall of the class with the fewest test images (or of stats.metric's class)."
)


MAP_METHOD = (
    "Where it looks: per model, method and resolution against the reference, probe images are the unit, every "
    "agreement the share of |map| mass in the same cells of an explainability.map_grid grid (1 - the total variation "
    "distance of the maps scaled to mass 1). For one fit (a model whose seeds give one fit, or one seed) the floor "
    "is each map against the map of the same image moved explainability.floor_shift pixels and moved back, at both "
    "resolutions (the shift floor), and the agreement across resolutions pairs each map with the other resolution's "
    "shifted map, so both hold the same nuisance; for a model trained per resolution with 2 or more seeds the floor "
    "is two seeds' maps of the image at one resolution and the agreement pairs the same two seeds across resolutions "
    "(the cross-seed floor, over disjoint pairs of seeds). 'Looks at the same places' when the mean difference is "
    "shown above minus explainability.map_margin, 'elsewhere' when shown below it, else 'undecided' with the "
    "one-sided bounds of the difference (the smallest margin these images show it within); one-sided sign-flip "
    "tests over the images, Holm over each model's methods and steps (a seeded simulation holds them at alpha: "
    "tests/test_where.py). First, a map must be shown to agree with its floor map more than with other images' maps, "
    "else 'at chance': its maps do not follow the image and nothing is said of where it looks. Maps that cannot be "
    "ranked (constant, non-finite) are counted and left out. Beside each verdict: the share of map mass in the "
    "object mask (the central quarter where the data has no masks), how far the maps' centre of mass moved, and "
    "whether the maps at that resolution are shown more faithful than random maps (deletion, insertion; Holm over "
    "the model's methods, resolutions and both). A verdict is about this fit (or these seeds) on these probe "
    "images, not about the model on other images."
)
