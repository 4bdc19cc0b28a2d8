"""How the MLflow UI opens ResoMap's experiments: the experiment kind (model training, not MLflow 3's GenAI overview)
and the sweep view `resomap ui` links to: the runs grouped by model and sorted by resolution, with score and latency
as sortable metric columns, and charts of score, latency and map agreement against resolution per model; and a
second view of the same runs ungrouped, on a parallel-coordinates chart of model, resolution, seed -> score, latency.

The view is MLflow's own shared-view mechanism: an experiment tag mlflow.sharedViewState.<key> (JSON of the runs
page's state: columns, grouping, sort, chart cards) that the UI loads from ?viewStateShareKey=<key>. MLflow 3.17's
chart cards are plotly charts the UI builds from that state; a line card whose x axis is a metric
(`xAxisKey: "metric"`) draws each group of runs at that metric's values, averaged over the group (band: min to
max), so a `resolution` metric on every trial run puts resolution on the x axis (MLflow's x axis is otherwise the
step, titled "Step")."""

from __future__ import annotations

import json
from collections.abc import Sequence
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
AGREEMENT_METRIC = "agreement/"  # + method: mean Spearman of the model's maps here with those at its other resolutions
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


def _line(uuid: str, metric: str, title: str) -> dict[str, Any]:
    """A line card of `metric` against the resolution metric, per group (model): mean over seeds, band min-max."""
    return {
        "uuid": uuid,
        "type": "LINE",
        "metricSectionId": SECTION,
        "deleted": False,
        "isGenerated": False,
        "displayName": title,
        "runsCountToCompare": 100,
        "metricKey": metric,
        "selectedMetricKeys": [metric],
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


def view_charts(methods: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The sweep view's chart cards, in order: test score, latency and each method's map agreement against
    resolution."""
    return [
        _line("resomap-score", SCORE_METRIC, "test score against resolution (px)"),
        _line("resomap-latency", LATENCY_METRIC, "latency (ms) against resolution (px)"),
        *(
            _line(f"resomap-agreement-{m}", AGREEMENT_METRIC + m, f"{m} map agreement against resolution (px)")
            for m in methods
        ),
    ]


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


def experiment_tags(methods: Sequence[str] = ()) -> dict[str, str]:
    """The tags every experiment ResoMap logs to carries: its kind (model training), the sweep view (with a chart of
    the map agreement of each of `methods`) and the parallel-coordinates view."""
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
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG: json.dumps(view), PARALLEL_TAG: json.dumps(parallel)}


def config_view_tags(cfg: Any) -> dict[str, str]:
    """`experiment_tags` for a config: its explanation methods when it explains."""
    explain = cfg.explainability
    return experiment_tags(explain.methods if explain.enabled else ())
