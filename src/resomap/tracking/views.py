"""How the MLflow UI opens ResoMap's experiments: the experiment kind (model training, not MLflow 3's GenAI overview)
and the runs table's first columns as a shared view (`resomap ui` prints its link)."""

from __future__ import annotations

# MLflow 3's UI opens an experiment on its GenAI overview unless this tag names the kind; "custom_model_development"
# is the value its UI uses for model training (the runs table with the chart view).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


# The runs table's columns a resolution study reads first, as an MLflow shared view (the UI's own mechanism: an
# experiment tag mlflow.sharedViewState.<key> opened with ?viewStateShareKey=<key>); `resomap ui` prints its link.
# the runs table's rounded columns, tags set by tracking.sweep_run.table_tags (MLflow's table prints a metric with
# every digit it holds): the trial's test score, its model @ resolution's interval pooled over the seeds, its median
# latency; on the parent row the sweep's best score and where
SCORE_TAG, INTERVAL_TAG, LATENCY_TAG = "score", "score interval", "latency ms"
VIEW_KEY = "resomap"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
VIEW_COLUMNS = (
    "params.`model`",
    "params.`resolution`",
    "params.`seed`",
    f"tags.`{SCORE_TAG}`",
    f"tags.`{INTERVAL_TAG}`",
    "metrics.`convergence/undertrained`",  # 1: the trial's convergence record flags it (its tag says why)
    f"tags.`{LATENCY_TAG}`",
    "params.`dataset`",
)


def experiment_tags() -> dict[str, str]:
    """The tags every experiment ResoMap logs to carries: its kind (model training) and the runs-table view."""
    import json

    # the order and widths of those columns (MLflow's table keeps its Metrics / Parameters / Tags groups, and draws
    # only the columns in view): all of them within a 1600 px window, "best 0.811: small_resnet10@128" and
    # "[0.781, 0.830] over 3 seeds" whole
    widths = {
        "params.`model`": 130,
        "params.`resolution`": 90,
        "params.`seed`": 60,
        f"tags.`{SCORE_TAG}`": 215,
        f"tags.`{INTERVAL_TAG}`": 185,
        "metrics.`convergence/undertrained`": 110,
        f"tags.`{LATENCY_TAG}`": 90,
        "params.`dataset`": 90,
    }
    view = {
        "selectedColumns": list(VIEW_COLUMNS),
        "columnOrder": list(VIEW_COLUMNS),
        "columnWidths": widths,
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
    }
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG: json.dumps(view)}
