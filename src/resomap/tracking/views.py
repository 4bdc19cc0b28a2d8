"""How the MLflow UI opens ResoMap's experiments: the experiment kind (model training, not MLflow 3's GenAI overview)
and the sweep view `resomap ui` links to: the runs grouped by model and sorted by resolution, with score and latency
as sortable metric columns, and charts against resolution per model (`view_charts`: the score with its interval,
latency, map agreement with its chance level, the costs); and a second view of the same runs ungrouped, on a
parallel-coordinates chart of model, resolution, seed -> score, latency.

The view is MLflow's own shared-view mechanism: an experiment tag mlflow.sharedViewState.<key> (JSON of the runs
page's state: columns, grouping, sort, chart cards) that the UI loads from ?viewStateShareKey=<key>. MLflow 3.17's
chart cards are plotly charts the UI builds from that state; a line card whose x axis is a metric
(`xAxisKey: "metric"`) draws each group of runs at that metric's values, averaged over the group (band: min to
max), so a `resolution` metric on every trial run puts resolution on the x axis (MLflow's x axis is otherwise the
step, titled "Step"). Once a summary is made, each line card gets a y range with room above its values
(`chart_ranges`, resomap.tracking.sweep_run.fit_view_ranges), as plotly's toolbar covers the top of a chart; the
models' colours are the UI app's (`model_colors`, resomap.tracking.ui_app)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# MLflow 3's UI opens an experiment on its GenAI overview unless this tag names the kind; "custom_model_development"
# is the value its UI uses for model training (the runs table with the chart view).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

# metrics every trial run carries for the table and the charts (resomap.tracking.publish.metric_points, and
# tracking.sweep_run.child_metrics for the pooled interval and the agreement, known once the summary is made)
RESOLUTION_METRIC = "resolution"  # the trial's input resolution (px): the charts' x axis
SCORE_METRIC = "score"  # the trial's headline test score (accuracy, mIoU), 3 decimals; on the parent: the recommended
SCORE_LOW, SCORE_HIGH = "score_low", "score_high"  # its model @ resolution's interval, pooled over the seeds
LATENCY_METRIC = "latency_ms"  # the trial's median latency, 3 significant digits
TRAIN_TIME_METRIC = "train_time_s"  # the trial's training seconds, 3 significant digits
AGREEMENT_METRIC = "agreement/"  # + method: mean Spearman of the model's maps here with those at its other resolutions
AGREEMENT_CHANCE = "agreement_chance/"  # + method: that agreement's chance level (maps of different probe images)
AGREEMENT_FLOOR = "agreement_shift_floor/"  # + method: its floor here (the maps against their shifted-and-undone maps)
RECOMMENDED_TAG = "recommended"  # the parent's one "best": the report's recommendation, or "no recommendation: ..."

VIEW_KEY = "resomap"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
# MLflow's parallel-coordinates card refuses grouped runs ("does not support aggregated string values"), so it has
# a view of its own: the same runs, one line each
PARALLEL_KEY = "resomap-parallel"
PARALLEL_TAG = f"mlflow.sharedViewState.{PARALLEL_KEY}"
VIEW_COLUMNS = (
    "params.`model`",
    "params.`resolution`",
    "params.`seed`",
    f"metrics.`{SCORE_METRIC}`",
    f"metrics.`{SCORE_LOW}`",
    f"metrics.`{SCORE_HIGH}`",
    "metrics.`convergence/undertrained`",  # 1: the trial's convergence record flags it (its tag says why)
    f"metrics.`{LATENCY_METRIC}`",
    f"tags.`{RECOMMENDED_TAG}`",
)
GROUP_BY = {"aggregateFunction": "average", "groupByKeys": [{"mode": "param", "groupByData": "model"}]}
SECTION = "against resolution"  # the chart section the view opens on


def _line(uuid: str, metrics: Sequence[str], title: str) -> dict[str, Any]:
    """A line card of `metrics` against the resolution metric, per group (model): mean over seeds, band min-max;
    MLflow draws the first metric solid and each further one dashed, then dotted, in the group's colour."""
    return {
        "uuid": uuid,
        "type": "LINE",
        "metricSectionId": SECTION,
        "deleted": False,
        "isGenerated": False,
        "displayName": title,
        "runsCountToCompare": 100,
        "metricKey": metrics[0],
        "selectedMetricKeys": list(metrics),
        "lineSmoothness": 0,
        "xAxisScaleType": "linear",
        "scaleType": "linear",
        "xAxisKey": "metric",
        "selectedXAxisMetricKey": RESOLUTION_METRIC,
        "useGlobalXaxisKey": False,
        "useGlobalLineSmoothing": False,
        "displayPoints": True,
        "range": {},
    }


# the trial runs' metrics the sweep parent's by_resolution charts hold pooled over the seeds (its run page can only
# draw them against "Step"): here against the resolution axis, each model's mean over its seeds
COST_CHARTS = (
    ("resomap-macro-f1", "test/macro_f1", "test macro-F1"),
    ("resomap-memory", "profile/peak_memory_mb", "peak memory (MB)"),
    ("resomap-gmacs", "profile/gmacs", "GMACs"),
    ("resomap-train-time", TRAIN_TIME_METRIC, "training time (s)"),
)


def view_charts(methods: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The sweep view's chart cards, in order, each against resolution: test score with its interval (pooled over
    the seeds: score_low dashed, score_high dotted; MLflow's own band is the spread of a group's runs, its seeds),
    latency, each method's map agreement with its shift floor (dashed) and chance level (dotted), then macro-F1,
    memory, GMACs, training time and the methods' explanation seconds (a card with no values is hidden:
    `hideEmptyCharts`)."""
    charts = [
        _line("resomap-score", (SCORE_METRIC, SCORE_LOW, SCORE_HIGH), "test score and its 95% interval"),
        _line("resomap-latency", (LATENCY_METRIC,), "latency (ms)"),
        *(
            _line(
                f"resomap-agreement-{m}",
                (AGREEMENT_METRIC + m, AGREEMENT_FLOOR + m, AGREEMENT_CHANCE + m),
                f"{m} map agreement, its shift floor (dashed) and chance (dotted)",
            )
            for m in methods
        ),
        *(_line(uuid, (metric,), title) for uuid, metric, title in COST_CHARTS),
    ]
    if methods:  # one card for them all: one per method would take the view past MLflow's 20000-character tag
        charts.append(_line("resomap-explain-seconds", [f"explain/{m}/seconds" for m in methods], "explain seconds"))
    return charts


HEADROOM = 0.3  # of the values' span above the highest: plotly's toolbar sits over the top of a chart's plot area
FOOTROOM = 0.08  # below the lowest


def chart_ranges(runs: Iterable[Mapping[str, float]], charts: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    """Card uuid -> MLflow's y range ({"yMin", "yMax"}) of each line card of `charts` that has values in `runs`
    (each run's metrics: key -> latest value): from below its lowest value to HEADROOM of the span above its highest,
    so that no point lies under plotly's toolbar (it shows over the top of the plot when the pointer is on the
    chart) and every point can be hovered. Rounded outward to a tenth of the span's order of magnitude."""
    runs = list(runs)
    out: dict[str, dict] = {}
    for card in charts:
        if card.get("type") != "LINE":
            continue
        values = [
            float(r[k]) for r in runs for k in card["selectedMetricKeys"] if k in r and math.isfinite(float(r[k]))
        ]
        if not values:
            continue
        low, high = min(values), max(values)
        span = high - low or abs(high) * 0.1 or 0.1
        step = 10 ** math.floor(math.log10(span)) / 10
        y_min = math.floor((low - FOOTROOM * span) / step) * step
        y_min = max(y_min, 0.0) if low >= 0 else y_min  # a latency, a score: no room below zero
        y_max = math.ceil((high + HEADROOM * span) / step) * step
        out[card["uuid"]] = {"yMin": float(f"{y_min:.6g}"), "yMax": float(f"{y_max:.6g}")}
    return out


def with_ranges(view_json: str, ranges: Mapping[str, Mapping[str, float]]) -> str:
    """A saved view (VIEW_TAG's JSON) with its line cards' y ranges set from `ranges` (card uuid -> range); a
    card not in `ranges` keeps its own."""
    view = json.loads(view_json)
    for card in view.get("compareRunCharts") or []:
        if card.get("uuid") in ranges:
            card["range"] = {**(card.get("range") or {}), **ranges[card["uuid"]]}
    return json.dumps(view)


def view_ranges(view_json: str | None) -> dict[str, dict]:
    """Card uuid -> the y range a saved view's line cards hold (empty for none, or no view)."""
    try:
        cards = json.loads(view_json or "{}").get("compareRunCharts") or []
    except ValueError:
        return {}
    return {c["uuid"]: c["range"] for c in cards if isinstance(c.get("range"), dict) and "yMax" in c["range"]}


def parallel_chart() -> dict[str, Any]:
    """The parallel-coordinates card of the runs: model, resolution, seed -> score, latency."""
    return {
        "uuid": "resomap-parallel",
        "type": "PARALLEL",
        "metricSectionId": SECTION,
        "deleted": False,
        "isGenerated": False,
        "displayName": "model, resolution, seed -> score, latency",
        "runsCountToCompare": 100,
        "selectedParams": ["model", "resolution", "seed"],
        "selectedMetrics": [SCORE_METRIC, LATENCY_METRIC],
        "showAllRuns": True,
    }


def _sections() -> list[dict[str, Any]]:
    """The chart sections: ResoMap's first and open, then MLflow's own two (every other metric's charts), closed."""
    return [
        {"uuid": SECTION, "name": SECTION, "display": True, "isReordered": True},
        {"uuid": "resomap-model-metrics", "name": "Model metrics", "display": False, "isReordered": False},
        {"uuid": "resomap-system-metrics", "name": "System metrics", "display": False, "isReordered": False},
    ]


def experiment_tags(
    methods: Sequence[str] = (), models: Sequence[str] = (), held: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The tags every experiment ResoMap logs to carries: its kind (model training), the sweep view (with a chart of
    the map agreement of each of `methods`), the parallel-coordinates view and its models (MODELS_TAG: `models`
    after those it names already, the order their colours follow). `held`: the experiment's tags, whose view's y
    ranges (set from its runs' values once a summary is made, `chart_ranges`) and models are kept."""
    # the order and widths of the columns (MLflow's table keeps its Metrics / Parameters / Tags groups, and draws
    # only the columns in view): all of them within a 1440 px window; the dataset and the rest are a click away
    widths = dict(zip(VIEW_COLUMNS, (100, 80, 45, 65, 80, 80, 90, 85, 200), strict=True))
    view = {
        "selectedColumns": list(VIEW_COLUMNS),
        "columnOrder": list(VIEW_COLUMNS),
        "columnWidths": widths,
        "orderByKey": f"metrics.`{RESOLUTION_METRIC}`",
        "orderByAsc": True,
        "groupBy": GROUP_BY,
        # MLflow 3.17 opens each model's group by itself; its group of the runs without a model (the sweep's parent
        # run, "Additional runs") only when asked
        "groupsExpanded": {"param.model": True},
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "runsHiddenMode": "SHOW_ALL",  # MLflow's charts otherwise draw the first 10 runs or groups only
        "compareRunCharts": view_charts(methods),
        "compareRunSections": _sections(),
        "isAccordionReordered": True,
    }
    held = held or {}
    view_json = with_ranges(json.dumps(view), view_ranges(held.get(VIEW_TAG)))
    parallel = {
        "selectedColumns": list(VIEW_COLUMNS),
        "orderByKey": f"metrics.`{RESOLUTION_METRIC}`",
        "orderByAsc": True,
        "groupBy": None,
        "compareRunCharts": [parallel_chart()],
        "compareRunSections": _sections(),
        "isAccordionReordered": True,
        "runsHiddenMode": "SHOW_ALL",
    }
    tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG: view_json, PARALLEL_TAG: json.dumps(parallel)}
    named = held_models(held.get(MODELS_TAG))
    named += [m for m in models if m not in named]
    if named:
        tags[MODELS_TAG] = json.dumps(named)
    return tags


def config_view_tags(cfg: Any, held: Mapping[str, str] | None = None) -> dict[str, str]:
    """`experiment_tags` for a config: its explanation methods when it explains, its sweep's models."""
    explain = cfg.explainability
    return experiment_tags(explain.methods if explain.enabled else (), cfg.sweep.models, held)


# ---------------------------------------------------------------- the models' colours

# MLflow draws a group of runs in the colour the browser keeps for the group (localStorage "experimentRunColors",
# group id -> colour), else in one picked by a hash of the group's id from its palette, so two models can come out
# in near hues (two pinks). resomap's UI app (resomap.tracking.ui_app) gives each model's group a colour of
# Okabe and Ito's palette for colour-blind readers (https://jfly.uni-koeln.de/color/), the models of an experiment
# each their own, from the experiments' MODELS_TAG (`model_colors`).
MODELS_TAG = "resomap.models"  # JSON list: the experiment's models, in the order its sweeps named them
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442")


def held_models(tag: str | None) -> list[str]:
    """The models a MODELS_TAG names (none for no tag or a damaged one)."""
    try:
        found = json.loads(tag or "[]")
    except ValueError:
        return []
    return [str(m) for m in found] if isinstance(found, list) else []


def group_id(model: str) -> str:
    """MLflow's id of a model's group of runs in the sweep view (GROUP_BY: by the `model` param)."""
    return f"param.model.{model}"


def model_colors(experiments: Iterable[Sequence[str]]) -> dict[str, str]:
    """Model -> colour over the experiments' model lists, the most recent first: a model keeps the colour it got
    first, and a model not coloured yet gets the first colour of PALETTE that no other model of its experiment has,
    so the models of an experiment differ in hue (up to len(PALETTE) models; the palette repeats beyond)."""
    colors: dict[str, str] = {}
    for models in experiments:
        for i, model in enumerate(models):
            if model in colors:
                continue
            taken = {colors[m] for m in models if m in colors}
            free = [c for c in PALETTE if c not in taken]
            colors[model] = free[0] if free else PALETTE[i % len(PALETTE)]
    return colors
