"""The summary in words: tables of estimates with their intervals, the paired tests and the decision per model (its
smallest sufficient resolution), as plain text (summary.txt, `resomap analyze`) or Markdown (summary.md). Sentences
are joined by one helper (`sentences`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from resomap.stats import TWOWAY_MIN_SEEDS
from resomap.summary.convergence import epochs_cell, lr_cell, monitors, stop_cell, undertrained_cell
from resomap.summary.rows import TWOWAY_WORDS, SummaryRow, baseline_label, baseline_names
from resomap.summary.uncertainty import NO_SUFFICIENT

COST_COLUMNS = (
    ("latency_ms", "latency ms", ".3f"),
    ("throughput_ips", "images/s", ".1f"),
    ("peak_memory_mb", "memory MB", ".1f"),
)
ABOVE_P = "one-sided p"  # the "above" columns' p: the sign-flip test that decides "shown above"


def _ok(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: Any, spec: str = ".4f") -> str:
    return format(value, spec) if _ok(value) else "-"


def fmt_interval(estimate: Any, low: Any, high: Any, spec: str = ".3f") -> str:
    """'0.912 [0.880, 0.940]', or the estimate alone when there is no interval, '-' when there is no estimate."""
    if not _ok(estimate):
        return "-"
    if _ok(low) and _ok(high):
        return f"{estimate:{spec}} [{low:{spec}}, {high:{spec}}]"
    return f"{estimate:{spec}}"


def _above(over: Any, low: Any, high: Any, score: Any, p: Any = None) -> str:
    """'+0.114 [+0.063, +0.167] (0.689; p <0.001)': the difference with its interval, then the compared score and
    the one-sided sign-flip p that decides "shown above" (SummaryRow.shown_above: where the interval and the test
    disagree, the test); '-' when the difference or the score is missing."""
    if not _ok(score) or not _ok(over):
        return "-"
    tested = f"; p {fmt_p(p)}" if _ok(p) else ""
    return f"{fmt_interval(over, low, high, '+.3f')} ({score:.3f}{tested})"


def above_trivial(r: SummaryRow) -> str:
    """The headline score above the task's trivial predictor (the majority class, all background), its score and
    the one-sided p."""
    return _above(r.over_trivial, r.over_trivial_ci_low, r.over_trivial_ci_high, r.trivial_score, r.over_trivial_p)


def trivial_words(rows: list[SummaryRow]) -> str | None:
    """The trivial predictor of the rows in words, None when no row has its score."""
    found = next((r for r in rows if _ok(r.trivial_score)), None)
    return None if found is None else found.words.get("trivial", "the trivial predictor")


def trivial_label(rows: list[SummaryRow]) -> str | None:
    """'the majority class (0.688)': the trivial predictor with its score on the rows' test images (a range where
    they differ: '0.650-0.688'), as the accuracy figure's legend and the first screen name it; None without one."""
    words = trivial_words(rows)
    scores = sorted({round(float(r.trivial_score), 3) for r in rows if _ok(r.trivial_score)})
    if words is None or not scores:
        return None
    return f"{words} ({scores[0]:.3f})" if len(scores) == 1 else f"{words} ({scores[0]:.3f}-{scores[-1]:.3f})"


def above_baseline(r: SummaryRow, name: str | None = None) -> str:
    """The headline score above the classical baseline `name` at this resolution (default: the first by name), the
    baseline's score and the one-sided p; '-' for a classical model itself or where there is none."""
    found = r.compared_baselines().get(name or r.baseline_model or "", {})
    return _above(found.get("over"), found.get("ci_low"), found.get("ci_high"), found.get("score"), found.get("p"))


def twoway_cell(r: SummaryRow) -> str:
    """The headline score's interval over test images and training seeds, or why there is none: fewer than 3 seeds,
    or a deterministic fit (its seeds are one replicate); '-' when the note says why."""
    if _ok(r.twoway_ci_low) and _ok(r.twoway_ci_high):
        return f"[{r.twoway_ci_low:.3f}, {r.twoway_ci_high:.3f}]"
    if r.deterministic:
        return "not available: one replicate (one fit)"
    if int(r.n_seeds or 0) < TWOWAY_MIN_SEEDS:
        return f"not available: needs >= {TWOWAY_MIN_SEEDS} seeds"
    return "-"


def fmt_spread(mean: Any, std: Any, spec: str = ".3f") -> str:
    if not _ok(mean):
        return "-"
    return f"{mean:{spec}} ± {std:{spec}}" if _ok(std) else f"{mean:{spec}}"


def fmt_p(p: Any) -> str:
    if not _ok(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3g}"


def headline_cells(
    rows: list[SummaryRow], recommendations: Iterable[Mapping[str, Any]] = ()
) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the first results table, one line per model x resolution: the headline score pooled over
    seeds with its image-bootstrap interval, above the trivial predictor and above each classical baseline (a
    column each: the difference with its interval, the compared score and the one-sided p), whether any seed is
    undertrained, the latency, the verdict against the reference and whether it is the model's smallest sufficient
    resolution: 'yes' (the row's mark), or 'not shown' at a model's decided resolution that lacks the evidence
    (``recommendations``: the decision's row says why). The rest is `detail_cells`'."""
    withheld = {(r["model"], r.get("resolution")) for r in recommendations if not r.get("sufficient")}
    pct = f"{next((r.ci_level for r in rows if _ok(r.ci_level)), 0.95):.0%}"
    first = rows[0] if rows else SummaryRow("", "", 0, 0)
    trivial = trivial_words(rows)
    named = baseline_names(rows)
    said = first.say(first.headline)
    timed = any(_ok(r.latency_ms_ci_low) for r in rows)
    header = [
        "model",
        "px",
        f"{said} [{pct} CI]",
        *([f"above {trivial} [{pct} CI] (its {said}; {ABOVE_P})"] if trivial else []),
        *(f"above {baseline_label(rows, n)} [{pct} CI] (its {said}; {ABOVE_P})" for n in named),
        "undertrained",
        f"latency ms [{pct} CI]" if timed else "latency ms",
        "vs reference",
        "smallest sufficient",
    ]
    body = [
        [
            str(r.model),
            str(r.resolution),
            fmt_interval(*r.score(first.headline)),
            *([above_trivial(r)] if trivial else []),
            *(above_baseline(r, name) for name in named),
            undertrained_cell(r.undertrained),
            latency_cell(r, timed),
            r.verdict or "-",
            _mark(r, withheld) or "-",
        ]
        for r in rows
    ]
    return header, body


def latency_cell(r: SummaryRow, timed: bool) -> str:
    """The latency over seeds: with its interval from the trials' timed calls where the table has them (``timed``:
    '2.104 [1.998, 2.230]', the estimate alone where this row lacks one), else the mean ± std across seeds."""
    if timed:
        return fmt_interval(r.latency_ms, r.latency_ms_ci_low, r.latency_ms_ci_high)
    return fmt_spread(r.latency_ms, r.latency_ms_std)


def detail_cells(rows: list[SummaryRow]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the results in detail: seeds, test images, each per-image score besides the headline and
    macro-F1 with their intervals, the headline test metric over seeds (mean ± std), the headline score's interval
    over test images and training seeds (two-way bootstrap, >= 3 seeds), throughput and memory (mean ± std over
    seeds) and each seed's best epoch / epochs run."""
    pct = f"{next((r.ci_level for r in rows if _ok(r.ci_level)), 0.95):.0%}"
    first = rows[0] if rows else SummaryRow("", "", 0, 0)
    scores = [c for c in [*first.score_columns, "test_macro_f1"] if c != first.headline]
    seed_column = first.seed_column
    header = [
        "model",
        "px",
        "seeds",
        "images",
        *(f"{first.say(c)} [{pct} CI]" for c in scores),
        f"{first.say(seed_column)} over seeds",
        f"{first.say(first.headline)} {TWOWAY_WORDS.removeprefix('interval ')} [{pct} CI]",
        *(title for key, title, _ in COST_COLUMNS if key != "latency_ms"),
        EPOCHS_TITLE,
    ]
    body = [
        [
            str(r.model),
            str(r.resolution),
            str(r.n_seeds),
            str(r.n_test_images or "-"),
            *(fmt_interval(*r.score(c)) for c in scores),
            fmt_spread(r.value(seed_column), r.value(f"{seed_column}_std")),
            twoway_cell(r),
            *(fmt_spread(r.value(k), r.value(f"{k}_std"), spec) for k, _, spec in COST_COLUMNS if k != "latency_ms"),
            epochs_cell(r.convergence),
        ]
        for r in rows
    ]
    return header, body


def _mark(r: SummaryRow, withheld: set[tuple[str, Any]]) -> str:
    if r.sufficient:
        return "yes"
    return "not shown" if (r.model, r.resolution) in withheld else ""


EPOCHS_TITLE = "best epoch / epochs run (seeds)"


def training_cells(rows: list[SummaryRow]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the training table: per model x resolution each seed's best epoch / epochs run (a
    closed-form fit: its chosen penalty), why it stopped, the learning rate found, undertrained and why."""
    header = ["model", "res", EPOCHS_TITLE, "stopped (seeds)", "lr found (seeds)", "undertrained"]
    body = []
    for r in rows:
        flag = undertrained_cell(r.undertrained)
        if r.undertrained and r.undertrained_reason:
            flag = f"yes: {r.undertrained_reason}"
        seeds = r.convergence
        body.append([str(r.model), str(r.resolution), epochs_cell(seeds), stop_cell(seeds), lr_cell(seeds), flag])
    return header, body


def training_note(rows: list[SummaryRow]) -> str:
    """What the training table's numbers mean, in words."""
    chosen = ", ".join(monitors(rec for r in rows for rec in r.convergence)) or "the checkpoint monitor"
    return (
        f"Best epoch: the epoch of the kept checkpoint by {chosen}, counted from 0 (16/17: the last of 17 epochs). "
        "Undertrained: the trial's convergence record flags it (its reason beside it). A closed-form model (C=...) "
        "is fitted once per penalty of a grid and shows the penalty chosen on validation."
    )


def paired_cells(paired: list[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the paired tests; a `metric` column when more than one score was compared (segmentation:
    mIoU and boundary F1 per image)."""
    metrics = len({p.get("metric") for p in paired}) > 1
    header = ["model", "A px", "B px", "acc A", "acc B", "B - A [CI]", "p", "p adjusted", "significant", "note"]
    if metrics:
        header = ["model", "metric", "A px", "B px", "A", "B", *header[5:]]
    body = [
        [
            str(p["model"]),
            *([str(p.get("metric") or "")] if metrics else []),
            str(p["resolution_a"]),
            str(p["resolution_b"]),
            fmt(p.get("accuracy_a"), ".3f"),
            fmt(p.get("accuracy_b"), ".3f"),
            fmt_interval(p.get("effect"), p.get("ci_low"), p.get("ci_high"), "+.3f"),
            fmt_p(p.get("p_value")),
            fmt_p(p.get("p_adjusted")),
            "yes" if p.get("significant") else "no",
            str(p.get("reason") or ""),
        ]
        for p in paired
    ]
    return header, body


SUFFICIENT_RULE = (
    "Smallest sufficient resolution: a model's decided resolution only where the decision is about the model (model "
    "scope, not only these trained checkpoints), its reference is neither undertrained nor shown below a smaller "
    "resolution by the paired tests, the model is shown above the trivial predictor and above each classical "
    "baseline of the sweep at that resolution and each model of stats.baselines at its best resolution (by the "
    "one-sided sign-flip test above: on the images with the seeds averaged, so for these checkpoints), and none of "
    "its trials there is undertrained; otherwise 'no sufficient resolution shown' with the first of these that is "
    "missing. Which configuration to use across models is the answer's, not this."
)


def recommendation_lines(
    recommendations: list[Mapping[str, Any]], verdicts: bool = False, standing: Mapping[str, list[str]] | None = None
) -> list[str]:
    """Each model's decision in words; after it (indented) its `standing` lines (how it trained, where it stands
    against the baselines: summary.standing) and, with ``verdicts``, each tested resolution's verdict."""
    lines = []
    for rec in recommendations:
        line = str(rec.get("sentence") or f"{rec['model']}: {rec.get('reason', '')}")
        if rec.get("note"):
            line += f" [{rec['note']}]"
        lines.append(line)
        lines += [f"  {x}" for x in (standing or {}).get(str(rec["model"]), [])]
        if verdicts:
            lines += [f"  {v['reason']}" for v in rec.get("verdicts") or [] if v.get("p_value") is not None]
    return lines


def notes_lines(rows: list[SummaryRow]) -> list[str]:
    """Each row's notes, a note said once with the model x resolutions it holds for: 'interval ... not available:
    one replicate (deterministic fit): lite0_linear at 64, 96, 128 px; pixel_logreg at 64 px'."""
    where: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        for part in str(r.note or "").split(";"):
            if part.strip():
                where.setdefault(part.strip(), {}).setdefault(str(r.model), []).append(str(r.resolution))
    return [
        f"{note}: " + "; ".join(f"{model} at {', '.join(res)} px" for model, res in models.items())
        for note, models in where.items()
    ]


def describe_stats(stats: Mapping[str, Any], paired: list[Mapping[str, Any]] = ()) -> str:
    """The statistics settings in words; the test named is the one the paired rows used, else the configured one
    (a score that is not 0/1 per image is always compared with the paired bootstrap)."""
    methods = {str(p.get("method") or "") for p in paired}
    if not methods:
        methods = {"McNemar" if stats.get("paired_test") == "mcnemar" else "bootstrap"}
    words = []
    if any(m.startswith("McNemar") for m in methods):
        words.append("McNemar's exact test (one seed)")
    if any(m.startswith("clustered McNemar") for m in methods):
        words.append(
            "the clustered McNemar test (each image one unit with its seeds inside: an exact sign-flip test of the "
            "per-image differences, with a paired image-bootstrap interval)"
        )
    if any(m.startswith("paired bootstrap") for m in methods):
        words.append(
            "a paired image bootstrap with a sign-flip test (exact on 0/1 outcomes, else random flips with a "
            "Monte-Carlo standard error of at most 0.002)"
        )
    test = " / ".join(words) or "a paired test"
    correction = "Holm-adjusted over each model's pairs" if stats.get("correction") == "holm" else "not adjusted"
    level = stats.get("level", 0.95)
    reference = f"{stats['reference']} px" if stats.get("reference") else "the largest resolution"
    scope = stats.get("scope", "checkpoint")  # a summary from before scopes decided about the checkpoints
    how = (
        "at model scope: the training seed is a replicate beside the test image (seeds x images crossed; a score "
        "test for 0/1 outcomes, the t-test otherwise, with a critical value between the normal's and Student's t "
        "with seeds - 1 degrees of freedom by the seeds' share of the variance; one seed decides nothing, but for a "
        "closed-form fit on fixed features, whose seed part is known to be 0; seed s at "
        "one resolution is paired with seed s at the reference: the seed sets the initial weights, the batch order "
        "and the augmentation draws at every resolution)"
        if scope == "model"
        else "for these trained checkpoints (checkpoint scope): the test images the only source of variation, each "
        "image's seeds averaged (a score test for 0/1 outcomes, the t-test otherwise)"
    )
    decision = (
        f" Decision: each resolution against the reference ({reference}, fixed before testing) on "
        f"{decided_on(stats.get('metric'))}, non-inferior when shown no more than {stats.get('margin', 0.02):g} "
        f"below it, {how}, one-sided "
        f"alpha {1 - level:.2g}, tested in a fixed sequence from the reference down; 'undecided' is not 'the same': "
        f"the detectable margin and what the margin would need (seeds, test images) beside it say what the design "
        f"could show at power {stats.get('power', 0.8):g}."
    )
    return (
        f"Intervals at level {level:g}: bootstrap over test images ({stats.get('resamples')} resamples, seeds "
        f"pooled) and, for the headline score with {TWOWAY_MIN_SEEDS} or more seeds, a two-way bootstrap over test "
        f"images and training seeds (both resampled: the test set's size and the seed-to-seed spread; with fewer "
        f"seeds, or for a fit whose seeds are one replicate, not available). Pairs of resolutions are "
        f"compared on the same test images with {test} (p {correction}; descriptive). A model is shown above the "
        f"trivial predictor or a baseline (a classical model at the same resolution; a model of stats.baselines at "
        f"its best resolution, chosen on these test images) when the one-sided sign-flip test of its per-image "
        f"differences (seeds averaged) gives p <= {(1 - level) / 2:.2g} (exact on 0/1 outcomes), the one-sided "
        f"share of the two-sided interval beside it, which is descriptive; "
        f"where the two disagree the test decides." + decision
    )


def decided_on(metric: Any) -> str:
    """The decision metric (stats.metric) in words, with how its per-image values are built."""
    from resomap.errors import ConfigError
    from resomap.stats.per_image import parse_metric

    if not metric:
        return "the headline score"
    try:
        parsed = parse_metric(str(metric))
    except ConfigError:
        return f"{metric} (stats.metric)"
    how = {
        "accuracy": "0/1 per image",
        "recall": "0/1 on the test images of that class",
        "balanced_accuracy": "per-image values stratified by class, whose mean it is",
        "macro_f1": "per-image values by the delta method, whose mean it is",
        "auroc": "DeLong's placement values per image, a paired DeLong test",
    }[parsed.name]
    return f"{parsed.words} (stats.metric; {how})"


def recipe_line(trials: list[Mapping[str, Any]]) -> str:
    """The deep models' training recipe in words (result.json data.recipe: class imbalance, learning rate, the
    weights evaluated, stopping, test-time augmentation), from the first trial that records it; several recipes in
    one sweep are each named with their models."""
    seen: dict[str, list[str]] = {}
    for t in trials:
        recipe = (t.get("data") or {}).get("recipe")
        if not recipe or t.get("family") == "classical":
            continue
        words = (
            f"class imbalance: {recipe['class_imbalance']}; learning rate: {recipe['learning_rate']} "
            f"({recipe['schedule']} schedule); weights evaluated: {recipe['weights_evaluated']}; stopping: "
            f"{recipe['stopping']}; test-time augmentation: {recipe['tta']}"
        )
        if recipe["tta"] != "none":
            words += " (reported as test_tta beside the plain score, never instead of it)"
        models = seen.setdefault(words, [])
        if t["model"] not in models:
            models.append(t["model"])
    if len(seen) == 1:
        words = next(iter(seen))
        return words[0].upper() + words[1:] + "."
    return " ".join(f"{', '.join(models)}: {words}." for words, models in seen.items())


def _plan_words(needed: int | None, had: int | None) -> str:
    """What the power plan asked of a model's next round (the round record's "added")."""
    if needed is None:
        return ""
    if had is not None and needed <= had:
        return f" (its {had} seeds meet the plan's {needed} but did not decide: one more)"
    return f" (the plan asks {needed})"


def adaptive_lines(record: Mapping[str, Any]) -> list[str]:
    """The adaptive record (sweep.adaptive) in words: summary.md's last section and the report's paragraph."""
    alphas = ", ".join(f"look {i}: {a:.4g}" for i, a in enumerate(record["look_alphas"], 1))
    lines = [
        f"Alpha {record['alpha']:.2g} (one-sided) spent over {record['planned_looks']} planned looks by the "
        f"{record['spending']} rule; each look tests at the increment of the spending function ({alphas}), so "
        "the chance of any false 'non-inferior' over all looks is at most alpha (union bound).",
        f"Stopped: {record['stopped']}. Trials used: {record['trials_used']}; the full grid with every planned "
        f"seed: {record['full_grid_trials']} (with the seeds reached: {record['full_grid_trials_seeds_reached']}).",
        "",
    ]
    for r in record["rounds"]:
        decided = ", ".join(r.get("decided") or []) or "none"
        had = r.get("seeds_by_model") or {}
        added = ", ".join(
            f"{model} +{a['add']}" + _plan_words(a.get("seeds_needed"), had.get(model))
            for model, a in (r.get("added") or {}).items()
        )
        lines.append(
            f"- round {r['look']} (alpha {r['alpha']:.4g}): models {', '.join(r['models'])}, seeds {r['seeds']}, "
            f"{r['new_trials']} new of {r['trials']} trials"
            + (f" in {r['seconds'] / 60:.1f} min" if r.get("seconds") is not None else "")
            + f"; decided: {decided}"
            + (f"; out of reach: {', '.join(r['stopped'])}" if r.get("stopped") else "")
            + (f"; seeds for the next round: {added}" if added else "")
        )
    for model, m in record["models"].items():
        at = f"decided at look {m['decided_at']} (alpha {m['alpha']:.4g})" if m["decided_at"] else "undecided"
        stop = f"{m['stopped']} (look {m['stopped_at']}); " if m.get("stopped") else ""
        lines.append(f"- {model}: {at}, seeds {m['seeds']}; {stop}{m['sentence']}")
        lines += [f"  - {res} px dropped: {why}" for res, why in sorted(m["dropped"].items(), reverse=True)]
    return lines


def sentences(*parts: str) -> str:
    """Clauses or sentences as sentences: each part ends with one period (a trailing one is not doubled) and empty
    parts are left out; the one way the summary joins sentences."""
    kept = [p.strip() for p in parts if p and p.strip()]
    return " ".join(p if p.endswith((".", "!", "?")) else f"{p}." for p in kept)


def decision_sentence(rec: Mapping[str, Any], rows: list[SummaryRow]) -> str:
    """A model's decision in words, each reason once: the decision (with its seeds as evidence), then what shows the
    decided resolution is its smallest sufficient one, or what is missing (where the decision does not already say
    it), the reference's flaw, and where it is not shown above a baseline. (That a deterministic fit's seeds are one
    replicate is said once, in the answer.)"""
    model = str(rec["model"])
    decision = str(rec.get("reason") or "no decision")
    if not rec.get("available") and not decision.startswith(("no decision", NO_SUFFICIENT)):
        decision = f"no decision: {decision}"
    seeds = str((rec.get("seeds") or {}).get("words") or "")
    said = f"{decision}. {seeds}"
    found = str(rec.get("sufficiency") or "")
    detail = found.split(": ", 1)[1] if found.startswith(NO_SUFFICIENT + ":") else ""
    extra = ""
    if rec.get("sufficient") and rec.get("evidence"):
        extra = f"The evidence that it suffices: {rec['evidence']}"
    elif detail and detail not in said and rec.get("decided"):
        extra = f"Not shown to be its smallest sufficient resolution: {detail}"
    flaw = str(rec.get("reference_flaw") or "")
    flawed = f"Read with care: {flaw}" if flaw and flaw not in f"{said} {extra}" else ""
    return f"{model}: " + sentences(decision, seeds, extra, flawed, baseline_caveat(rows))


def baseline_caveat(rows: list[SummaryRow]) -> str:
    """What a model's decision should be read with: the resolutions where it is not shown above the task's trivial
    predictor (the majority class, all background) or one of the sweep's classical baselines; '' when it is shown
    above them everywhere (or there is nothing to compare with). "Shown above" is the one-sided sign-flip test of
    the per-image differences at alpha = 1 - level (:meth:`SummaryRow.shown_above`; exact on 0/1 outcomes, so no
    bootstrap seed changes it), not the lower bound of the interval beside it (that only for a summary from
    before the test)."""
    trivial = next((r.words.get("trivial") for r in rows if r.words.get("trivial")), "the trivial predictor")
    compared: list[tuple[str, str | None]] = [(trivial, None)]
    for name in baseline_names(rows):
        label = baseline_label(rows, name)
        kind = "the baseline" if label != name else "the classical baseline"  # a named one: stats.baselines
        compared.append((f"{kind} {label}", name))
    parts = []
    for label, baseline in compared:
        shown = {r.resolution: r.shown_above(baseline) for r in rows}
        shown = {res: v for res, v in shown.items() if v is not None}
        below = sorted(res for res, v in shown.items() if not v)
        if below:
            where = "any resolution" if len(below) == len(shown) else ", ".join(f"{res} px" for res in below)
            parts.append(f"not shown above {label} at {where}")
    return f"Read with care: {'; '.join(parts)}." if parts else ""
