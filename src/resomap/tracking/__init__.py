"""MLflow tracking: runs by explicit id, retries, per-epoch callback, and publishing a trial's results."""

from resomap.tracking.live import MlflowCallback
from resomap.tracking.mlflow_store import (
    NullTracker,
    Tracker,
    artifact_root,
    default_tracking_uri,
    make_tracker,
)

__all__ = ["MlflowCallback", "NullTracker", "Tracker", "artifact_root", "default_tracking_uri", "make_tracker"]
