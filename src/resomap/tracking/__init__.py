"""MLflow tracking: runs by explicit id, retries, per-epoch callback."""

from resomap.tracking.mlflow_store import MlflowCallback, Tracker, artifact_root, default_tracking_uri

__all__ = ["MlflowCallback", "Tracker", "artifact_root", "default_tracking_uri"]
