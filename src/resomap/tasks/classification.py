"""Classification: logits [B, K], one label per image, cross-entropy, a label and a prediction per test image.

torch is imported where it is used: reading a trial's scores (the summary, the report) needs no torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from resomap.atomic import save_atomic
from resomap.tasks.base import EvalContext, Evaluation, Loss, Task, register_task
from resomap.tasks.metrics import classification_metrics

if TYPE_CHECKING:
    import torch

    from resomap.config.schema import Config
    from resomap.data.bundle import DataBundle
    from resomap.tasks.evaluation import EvalResult


def class_weights(labels: np.ndarray, num_classes: int) -> torch.Tensor:
    """sklearn 'balanced' weights; classes absent from the training labels get weight 1."""
    import torch
    from sklearn.utils.class_weight import compute_class_weight

    labels = np.asarray(labels, dtype=np.int64)
    present = np.unique(labels)
    weights = np.ones(num_classes, dtype=np.float64)
    weights[present] = compute_class_weight("balanced", classes=present, y=labels)
    return torch.tensor(weights, dtype=torch.float32)


def evaluate_labels(ctx: EvalContext, loader: Iterable) -> tuple[torch.Tensor, list, list, list]:
    """(summed cross-entropy, predictions per batch, labels per batch, the probability of class 1 per batch: empty
    unless the logits have two classes) of ctx.model over the loader, in eval mode (its train/eval mode restored)."""
    import torch

    loss_sum = torch.zeros((), device=ctx.device)
    preds, targets, positive = [], [], []
    with ctx.evaluating():
        for x, y in loader:
            out = ctx.logits(x)
            loss_sum += torch.nn.functional.cross_entropy(out.float(), y, reduction="sum")
            preds.append(out.argmax(1))
            targets.append(y)
            if out.shape[1] == 2:  # what AUROC ranks (stats.metric: auroc)
                positive.append(out.float().softmax(1)[:, 1])
    return loss_sum, preds, targets, positive


@register_task("classification")
class ClassificationTask(Task):
    """One class per image; cross-entropy (class weights and label smoothing from cfg.training)."""

    def check_metric(self, metric: str, classes: list[str] | None) -> str | None:
        """accuracy, balanced_accuracy, macro_f1, recall:<class> (a class of the data) or auroc (two classes)."""
        from resomap.errors import ConfigError
        from resomap.stats.per_image import class_index, parse_metric

        kinds = "accuracy, balanced_accuracy, macro_f1, recall:<class name> or auroc (two classes)"
        try:
            parsed = parse_metric(metric)
        except ConfigError:
            return kinds
        if parsed.name == "auroc" and classes is not None and len(classes) != 2:
            return f"a metric of this {len(classes)}-class data: AUROC needs two classes ({', '.join(classes)})"
        if parsed.name == "recall" and classes is not None:
            try:
                class_index(parsed.cls, classes)
            except ConfigError:
                return f"recall of a class of the data: recall:{' or recall:'.join(classes)}"
        return None

    def criterion(self, cfg: Config, data: DataBundle, device: torch.device) -> torch.nn.Module:
        from torch import nn

        weight = None
        if cfg.training.class_weights == "balanced":
            weight = class_weights(data.train_labels, int(data.num_classes)).to(device)
        if cfg.training.sample_weights != "none":
            from resomap.tasks.losses import SampleWeightedCrossEntropy

            return SampleWeightedCrossEntropy(weight, cfg.training.label_smoothing)
        return nn.CrossEntropyLoss(weight=weight, label_smoothing=cfg.training.label_smoothing)

    def evaluate(self, ctx: EvalContext, loader: Iterable, prefix: str) -> Evaluation:
        import torch

        loss_sum, preds, targets, positive = evaluate_labels(ctx, loader)
        y_pred = torch.cat(preds).cpu().numpy() if preds else np.zeros(0, np.int64)
        y_true = torch.cat(targets).cpu().numpy() if targets else np.zeros(0, np.int64)
        score = torch.cat(positive).cpu().numpy().astype(np.float64) if positive else None
        n = len(y_true)
        num_classes = ctx.num_classes or int(max(y_true.max(initial=0), y_pred.max(initial=0)) + 1)
        metrics = {f"{prefix}/loss": float(loss_sum.item() / n) if n else float("nan")}
        metrics.update(classification_metrics(y_true, y_pred, num_classes, prefix))
        return metrics, y_true, y_pred, score

    def test_outputs(self, found: EvalResult, ctx: EvalContext, bundle: DataBundle, title: str, out_dir: Path) -> None:
        from resomap.plotstyle import STYLE  # every figure printed at one dpi
        from resomap.tasks.metrics import confusion_matrix_figure

        fig = confusion_matrix_figure(found.y_true, found.y_pred, bundle.class_names, f"{title}: test confusion matrix")
        save_atomic(
            out_dir / "confusion_matrix.png",
            lambda tmp: fig.savefig(tmp, dpi=STYLE["savefig.dpi"], bbox_inches="tight"),
        )

    def write_records(self, matrix: Mapping[int, EvalResult], out_dir: Path) -> Path | None:
        """predictions.csv: every test image's label and prediction at every test resolution (resomap.records)."""
        from resomap.records import Predictions, write_predictions

        records = {}
        for res, found in matrix.items():
            if found.index is not None and len(found.index) == len(found.y_true):
                records[res] = Predictions(int(res), np.asarray(found.index), found.y_true, found.y_pred, found.score)
        return write_predictions(out_dir, records) if records else None

    def probe_targets(
        self, bundle: DataBundle, rows: np.ndarray, device: torch.device
    ) -> tuple[torch.Tensor, np.ndarray | None]:
        """The probe images' labels (their class logit is explained) and their object masks, when the data has
        them (localisation scores)."""
        import torch

        labels = bundle.labels("test").cpu().numpy()
        masks = bundle.masks("test")
        chosen = torch.as_tensor(labels[rows], dtype=torch.int64)
        return chosen, (masks[rows].cpu().numpy() if masks is not None else None)

    def step_targets(self, out: torch.Tensor, cfg: Config | None = None) -> tuple[torch.Tensor, Loss]:
        import torch

        y = torch.randint(0, out.shape[1], (out.shape[0],), device=out.device)
        return y, torch.nn.functional.cross_entropy
