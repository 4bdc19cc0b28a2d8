"""One-off analysis of trained checkpoints: explain one (`resomap explain`), analyse all (`resomap analyze`)."""

from resomap.analysis.analyze import AnalysisReport, AnalyzeRequest, analyze_checkpoints
from resomap.analysis.checkpoints import (
    CheckpointSource,
    TrainedModel,
    best_checkpoint,
    find_checkpoints,
    load_trained,
)
from resomap.analysis.explain_one import ExplainReport, ExplainRequest, explain_checkpoint
from resomap.analysis.report import quality_table

__all__ = [
    "AnalysisReport",
    "AnalyzeRequest",
    "CheckpointSource",
    "ExplainReport",
    "ExplainRequest",
    "TrainedModel",
    "analyze_checkpoints",
    "best_checkpoint",
    "explain_checkpoint",
    "find_checkpoints",
    "load_trained",
    "quality_table",
]
