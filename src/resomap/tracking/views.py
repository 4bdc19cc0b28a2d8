"""How the MLflow UI opens ResoMap's experiments: the experiment kind (model training, not MLflow 3's GenAI overview)
and the runs table's first columns as a shared view (`resomap ui` prints its link)."""

from __future__ import annotations

# MLflow 3's UI opens an experiment on its GenAI overview unless this tag names the kind; "custom_model_development"
# is the value its UI uses for model training (the runs table with the chart view).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


# The runs table's columns a resolution study reads first, as an MLflow shared view (the UI's own mechanism: an
# experiment tag mlflow.sharedViewState.<key> opened with ?viewStateShareKey=<key>); `resomap ui` prints its link.
VIEW_KEY = "resomap"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
VIEW_COLUMNS = (
    "params.`model`",
    "params.`resolution`",
    "params.`seed`",
    "params.`dataset`",
    "metrics.`test/accuracy`",
    "metrics.`test/macro_f1`",
    "metrics.`convergence/undertrained`",  # 1: the trial's convergence record flags it (its tag says why)
    "metrics.`profile/latency_p50_ms`",
    "metrics.`profile/peak_memory_mb`",
)


def experiment_tags() -> dict[str, str]:
    """The tags every experiment ResoMap logs to carries: its kind (model training) and the runs-table view."""
    import json

    view = {"selectedColumns": list(VIEW_COLUMNS), "orderByKey": "attributes.start_time", "orderByAsc": False}
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG: json.dumps(view)}
