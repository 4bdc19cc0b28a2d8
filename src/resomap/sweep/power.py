"""What a planned sweep can decide, said before training (`resomap sweep --dry-run` and the sweep's first lines): the
power of its design from the planned test-set size, seeds and margin (stats.design.plan_power), what it would need
to show the margin, the power from its finished trials' observed discordance, and whether the explanation
relabelling test can decide at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from resomap.config import Config
from resomap.errors import ConfigError, ResoMapError
from resomap.sweep.plan import check_grid, plan, summary_folder


def power_lines(cfg: Config) -> list[str]:
    """Before training: what the planned design can decide (stats.design.plan_power) from the planned test-set
    size, the seeds and the margin, and whether the explanation relabelling test can reach p < alpha at all."""
    seeds = len(cfg.sweep.seeds)
    resolutions = sorted(set(cfg.sweep.resolutions) | {pair[1] for pair in cfg.sweep.include})
    if cfg.sweep.skip_invalid_resolutions:  # a resolution left out for every model of it is not planned
        left = {r for _, r, _ in check_grid(cfg)} - {t.resolution for t in plan(cfg, check=False)}
        resolutions = [r for r in resolutions if r not in left]
    try:
        n_test, metric_words, unit = _planned_test(cfg)
    except (ResoMapError, OSError) as exc:
        return [f"power: not planned ({exc})"]
    lines = _design_lines(cfg, n_test, seeds, resolutions, metric_words, unit) if n_test >= 2 else []
    if cfg.explainability.enabled and len(resolutions) > 1:
        lines.append(_explanation_line(seeds, len(resolutions), 1 - cfg.stats.level))
        if cfg.explainability.floor == "shift":
            lines.append(map_power_line(cfg))
    return lines


ASSUMED_MAP_SD = 0.15  # the per-image SD of (agreement - floor) the plan assumes before any run of the sweep


def map_power_line(cfg: Config) -> str:
    """What the map decision (explain.evaluation.where) can show with the configured probe size and margin: the
    smallest margin it decides with power 0.8 and the probe images the configured margin needs, from the per-image
    spread of (agreement - floor) in this sweep's last map_decisions.csv (the largest: the method that needs the
    most images), else ASSUMED_MAP_SD."""
    from resomap.stats.margin import detectable_margin, units_needed

    ec, alpha = cfg.explainability, 1 - cfg.stats.level
    sd, where = ASSUMED_MAP_SD, f"assumed {ASSUMED_MAP_SD:g}: no earlier run of this sweep"
    observed = _observed_map_sd(cfg)
    if observed is not None:
        sd, where = observed
    n = int(ec.probe_size)
    shown = detectable_margin(sd, n, alpha, 0.8)
    needed = units_needed(sd, ec.map_margin, alpha, 0.8)
    return (
        f"maps: where it looks is decided per method and step against each map's {ec.floor_shift}-pixel-shift floor "
        f"over {n} probe images (one-sided alpha {alpha:.2g} before Holm): with a per-image SD of (agreement - floor) "
        f"of {sd:.3g} ({where}) it shows margins of {shown:.3g} and larger with power 0.8; the margin "
        f"{ec.map_margin:g} (explainability.map_margin) needs about {needed} probe images (explainability.probe_size)"
    )


def _observed_map_sd(cfg: Config) -> tuple[float, str] | None:
    """(the largest per-image SD of the map decisions of this sweep's last summary, where from) or None."""
    import csv

    path = summary_folder(cfg) / "explanations" / "map_decisions.csv"
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            sds = [float(r["sd"]) for r in csv.DictReader(fh) if r.get("sd") not in (None, "", "nan")]
    except (OSError, ValueError, KeyError):
        return None
    sds = [s for s in sds if s == s]
    if not sds:
        return None
    return max(sds), f"observed: the largest of {len(sds)} decisions in the last {path.name}"


def _planned_test(cfg: Config) -> tuple[int, str, str]:
    """planned_images for the configured dataset's planned test split (opened, not loaded)."""
    import math

    from resomap.data.bundle import data_seed
    from resomap.data.registry import open_dataset

    raw = open_dataset(cfg.data, seed=data_seed(cfg, cfg.experiment.seed))
    n = len(raw) if cfg.data.limit is None else min(cfg.data.limit, len(raw))
    predefined = getattr(raw, "predefined_splits", None)
    n_test = int((predefined == "test").sum()) if predefined is not None else math.ceil(cfg.data.split.test * n)
    return planned_images(cfg.stats.metric, raw, n_test)


def _design_lines(
    cfg: Config, n_test: int, seeds: int, resolutions: list[int], metric_words: str, unit: str
) -> list[str]:
    """The power of the design at the assumed discordance, per step, what it would need, and again at the
    discordance this sweep's finished trials observed."""
    import functools
    import math

    from resomap.stats import plan_power
    from resomap.stats.scope import SCOPE_WORDS

    st, alpha = cfg.stats, 1 - cfg.stats.level
    settings = {
        "margin": st.margin,
        "level": st.level,
        "power": st.power,
        "seed_correlation": st.seed_correlation,
        "seed_sd": st.seed_sd,
        "scope": st.scope,
    }
    plan_at = functools.partial(plan_power, n_test, seeds, **settings)  # at a discordance: assumed, or observed
    found = plan_at(discordance=st.discordance)
    where = SCOPE_WORDS[st.scope]
    seed_words = f", seed sd {st.seed_sd:g} (stats.seed_sd)" if st.scope == "model" else ""
    if math.isinf(found["detectable"]):
        detect = _no_margin(seeds, st.scope, f" at power {st.power:g} (one-sided, alpha {alpha:.2g})")
    else:
        detect = (
            f"a resolution can be shown non-inferior to the reference at margins of {found['detectable']:.3f} and "
            f"larger with power {st.power:g} (one-sided, alpha {alpha:.2g})"
        )
    lines = [f"decided on {metric_words}"] if metric_words else []
    lines.append(
        f"power: about {n_test} {unit} x {seeds} seed(s), decided {where}: {detect}; at the configured margin "
        f"{st.margin:g} the power is {found['power_at_margin']:.2f} "
        f"(assumed: {st.discordance:g} of images change outcome between resolutions, seed correlation "
        f"{st.seed_correlation:g}{seed_words}; stats.discordance, stats.seed_correlation)"
    )
    lines.append(_steps_line(resolutions, st.reference, found, st.margin))
    lines.append(_needs_line(found, st.margin, st.power, n_test, seeds, unit))
    if st.scope == "model" and seeds == 2:
        lines.append(
            "seeds: with 2 the model-scope test is very conservative wherever the seeds differ (its critical value "
            "mixes in t with 1 degree of freedom, and no seed can be flagged or left out): a claim about a model "
            "trained with random seeds wants 3 to 5 (sweep.seeds); deterministic fits (every seed the same "
            "predictions) are one replicate and decide as at checkpoint scope"
        )
    observed = _observed_line(cfg, plan_at, seeds)
    return lines + ([observed] if observed else [])


def _observed_line(cfg: Config, plan_at: Any, seeds: int) -> str:
    """The plan again at the discordance (and, at model scope, the seed sd) this sweep's finished trials observed,
    beside the assumptions; '' before any."""
    import math

    st = cfg.stats
    observed = observed_discordance(cfg)
    if observed is None:
        return ""
    if observed[0] == 0:
        return (
            f"power from this sweep's finished trials ({observed[1]}): no image changed outcome against the "
            "reference, too few to estimate the discordance from: the assumption above stands"
        )
    spread = observed_seed_sd(cfg) if st.scope == "model" else None
    again = plan_at(discordance=observed[0], **({"seed_sd": spread[0]} if spread else {}))
    shown = (
        _no_margin(seeds, st.scope, f" at power {st.power:g}")
        if math.isinf(again["detectable"])
        else f"margins of {again['detectable']:.3f} and larger are shown with power {st.power:g}"
    )
    seen = f"discordance {observed[0]:.3f}" + (f" and seed sd {spread[0]:.3f}" if spread else "")
    assumed = f"assumed above: discordance {st.discordance:g}"
    if st.scope == "model" and spread:
        assumed += f", seed sd {st.seed_sd:g}; seed sd {spread[1]}"
    elif st.scope == "model":
        assumed += (
            f", seed sd {st.seed_sd:g}; the seed sd still assumed: no model x resolution with 2 or more seeds yet"
        )
    return (
        f"power from this sweep's finished trials ({observed[1]}): {seen} observed, so {shown}; at the margin "
        f"{st.margin:g} the power is {again['power_at_margin']:.2f} ({assumed})"
    )


def _no_margin(seeds: int, scope: str, at: str) -> str:
    """What an infinite detectable margin means, in words (`at`: the power it was planned at)."""
    why = ": one seed says nothing of seed-to-seed variation" if seeds < 2 and scope == "model" else ""
    return f"no margin is detectable with this design{at}{why}"


def planned_images(metric: str | None, raw: object, n_test: int) -> tuple[int, str, str]:
    """(the test images the power plan counts for the decision metric, the metric and that count in words ("" for
    the headline score), what the count counts). A class's recall counts that class's test images; balanced
    accuracy the effective number 1 / sum_k 1 / (K^2 n_k) of its stratified variance (each class's images
    changing outcome at the assumed discordance); macro-F1 and AUROC, which no discordance describes, are planned
    as balanced accuracy: a rough guide (the summary plans on the variance it observes). The classes' test counts
    are the data's class shares of the test split (the split is stratified)."""
    import numpy as np

    from resomap.stats.per_image import class_index, parse_metric

    if not metric or metric == "accuracy" or not hasattr(raw, "labels"):
        return n_test, "", "test images"
    try:
        parsed = parse_metric(metric)
    except ConfigError:
        return n_test, "", "test images"  # a task's own per-image score (segmentation): planned on its test images
    labels = np.asarray(raw.labels, dtype=np.int64)
    counts = np.bincount(labels, minlength=len(raw.class_names)).astype(float)
    share = n_test * counts / max(counts.sum(), 1.0)
    if parsed.name == "recall":
        k = class_index(parsed.cls, list(raw.class_names))
        n = max(round(share[k]), 2)
        return n, f"{parsed.words}: {n} test images of {parsed.cls}", f"test images of {parsed.cls}"
    present = share[share > 0]
    n = max(int(1 / np.sum(1 / (len(present) ** 2 * present))), 2)
    rough = "" if parsed.name == "balanced_accuracy" else "; planned as balanced accuracy, a rough guide"
    words = f"{parsed.words}: the power counts {n} effective test images (classes stratified{rough})"
    return n, words, "effective test images"


def _steps_line(resolutions: list[int], reference: int | None, found: dict, margin: float) -> str:
    """The chance to pass each step of the fixed sequence (from the reference down) when no resolution truly
    differs: the power of one step to the k-th (the steps share the reference: a lower bound)."""
    ref = max(resolutions) if reference is None else reference
    below = sorted((r for r in resolutions if r < ref), reverse=True)
    if not below:
        return f"power per step: no resolution below the reference {ref} px to test"
    steps = found["steps"]
    parts = [f"{r} px {steps[min(k, len(steps) - 1)]:.2f}" for k, r in enumerate(below)]
    return (
        f"power per step (the chance the fixed sequence reaches and passes it at margin {margin:g} when no "
        f"resolution truly differs, at least): {', '.join(parts)}"
    )


def _needs_line(found: dict, margin: float, power: float, n_test: int, seeds: int, unit: str = "test images") -> str:
    """What the design would need to show the configured margin with the configured power; ``unit``: what the
    plan counts (test images; a class's test images for its recall)."""
    head = f"to show the margin {margin:g} with power {power:g}:"
    if found["power_at_margin"] >= power:
        return f"{head} this design ({n_test} {unit} x {seeds} seed(s)) suffices"
    options = []
    if found["seeds_needed"] is not None:
        options.append(f"{found['seeds_needed']} seeds on these {n_test} {unit}")
    if found["images_needed"] is not None:
        options.append(f"about {found['images_needed']} {unit} at {seeds} seed(s)")
    if not options and found["joint_needed"] is not None:
        k, n = found["joint_needed"]
        options.append(f"about {n} {unit} x {k} seeds (neither more seeds nor more images alone suffice)")
    return f"{head} {' or '.join(options)}" if options else f"{head} no design up to 64 seeds"


def _last_summary(cfg: Config) -> tuple[Path, dict | None]:
    """(this sweep's summary.json, its content; None when there is none or it does not parse)."""
    path = summary_folder(cfg) / "summary.json"
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path, None


def observed_discordance(cfg: Config) -> tuple[float, str] | None:
    """(share of image-seed pairs whose outcome differs between a resolution and the reference, pooled over the
    models' paired tests, where from) from this sweep's last summary.json; None when there is none. A better
    planning value than the pilot-free stats.discordance once trials of this design have finished."""
    path, data = _last_summary(cfg)
    if data is None:
        return None
    refs = {r["model"]: r.get("reference") for r in data.get("recommendations") or []}
    pairs = discordant = 0
    for row in data.get("paired_tests") or []:
        binary = row.get("metric") in (None, "accuracy")  # outcomes that are right or wrong: discordance applies
        if not binary or row.get("resolution_b") != refs.get(row.get("model")) or not row.get("n_images"):
            continue
        pairs += int(row["n_images"]) * int(row.get("n_seeds") or 1)
        discordant += int(row.get("b01") or 0) + int(row.get("b10") or 0)
    if not pairs:
        return None
    return discordant / pairs, f"{pairs} image-seed pairs against the reference in {path}"


def observed_seed_sd(cfg: Config) -> tuple[float, str] | None:
    """(the seed-to-seed standard deviation of the decision's score, pooled over the models x resolutions of this
    sweep's last summary.json with 2 or more seeds (root mean of their variances), where from); None when none
    has. What the plan's stats.seed_sd assumes, observed."""
    _, data = _last_summary(cfg)
    if data is None:
        return None
    metrics = {r.get("model"): r.get("metric") or "accuracy" for r in data.get("recommendations") or []}
    variances = []
    for row in data.get("rows") or []:
        sd = row.get(f"test_{metrics.get(row.get('model'), 'accuracy')}_std")
        if isinstance(sd, int | float) and (row.get("n_seeds") or 0) >= 2 and sd == sd:
            variances.append(float(sd) ** 2)
    if not variances:
        return None
    return float(sum(variances) / len(variances)) ** 0.5, f"pooled over {len(variances)} model x resolution rows"


def _explanation_line(seeds: int, n_res: int, alpha: float) -> str:
    """Whether the explanation test (resolution labels relabelled within seeds) can decide with these seeds."""
    from resomap.stats import relabel_min_p, relabel_seeds_needed

    min_p, needed = relabel_min_p(seeds, n_res), relabel_seeds_needed(n_res, alpha)
    head = f"explanations: with {seeds} seed(s) x {n_res} resolutions the relabelling test's smallest p is {min_p:.3g}"
    if min_p <= alpha:
        return (
            f"{head}: it can decide at alpha {alpha:.2g} (the summary states the smallest agreement drop these seeds "
            "could show beside each 'not shown')"
        )
    return (
        f"{head}: it cannot reach p <= {alpha:.2g}, so no decision against the cross-seed floor: needs >= {needed} "
        "seeds (sweep.seeds)"
    )
