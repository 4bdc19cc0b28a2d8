"""Training: Trainer, callbacks (top-k checkpoint, early stopping), checkpoint io, metrics."""

from resomap.tasks.metrics import classification_metrics, confusion_matrix_figure
from resomap.training.callbacks import EarlyStopping, TopKCheckpoint, default_callbacks
from resomap.training.checkpoint import FORMAT, load_checkpoint, save_checkpoint, write_json_atomic
from resomap.training.fit_result import FitResult
from resomap.training.trainer import Trainer

__all__ = [
    "FORMAT",
    "EarlyStopping",
    "FitResult",
    "TopKCheckpoint",
    "Trainer",
    "classification_metrics",
    "confusion_matrix_figure",
    "default_callbacks",
    "load_checkpoint",
    "save_checkpoint",
    "write_json_atomic",
]
