"""A third task added the way a user's package would add one, with no file of ResoMap edited: regression.

`regression`: a model with one output predicts a number per image (here the count of bright squares), trained with
the mean squared error; its per-image score table is the true and the predicted count (rounded), so the summary's
paired tests read "correct" as "counted right"; its explanations explain the one output (class target 0).
Registered with a dataset (`toy_counts`) and a model (`toy_regressor`) that declare the task. Loaded as a ResoMap
plugin (entry point `resomap.plugins`), as tests/test_tasks.py does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from resomap.data import register_dataset
from resomap.models import register_model
from resomap.tasks import Task, register_task
from resomap.tasks.metrics import classification_metrics


@register_task("regression")
class RegressionTask(Task):
    headline = ("mae", "accuracy")
    step_words = "mean squared error on one number per image"

    def criterion(self, cfg, data, device):
        return lambda out, y: nn.functional.mse_loss(out[:, 0].float(), y.float())

    def correct(self, out, y):
        return (out.detach()[:, 0].round() == y).sum()

    def evaluate(self, ctx, loader, prefix):
        preds, trues = [], []
        with ctx.evaluating():
            for x, y in loader:
                preds.append(ctx.logits(x)[:, 0].float())
                trues.append(y)
        pred = torch.cat(preds).cpu().numpy()
        true = torch.cat(trues).cpu().numpy()
        counted = np.clip(np.round(pred), 0, None).astype(np.int64)
        k = int(max(true.max(initial=0), counted.max(initial=0)) + 1)
        metrics = {
            f"{prefix}/loss": float(np.mean((pred - true) ** 2)),
            f"{prefix}/mae": float(np.abs(pred - true).mean()),
        }
        metrics.update(classification_metrics(true, counted, k, prefix))  # accuracy: counted right
        return metrics, true, counted

    def write_records(self, matrix, out_dir):
        from resomap.records import Predictions, write_predictions

        records = {res: Predictions(int(res), f.index, f.y_true, f.y_pred) for res, f in matrix.items()}
        return write_predictions(out_dir, records)

    def probe_targets(self, bundle, rows, device):
        return torch.zeros(len(rows), dtype=torch.int64), None  # the one output

    def step_targets(self, out, cfg=None):
        y = torch.randn(out.shape[0], device=out.device)
        return y, lambda o, t: nn.functional.mse_loss(o[:, 0], t)


@dataclass(frozen=True)
class ToyCountsOptions:
    num_images: int = 64  # images generated
    size: int = 32  # side of the generated images in pixels


class ToyCounts:
    """0 to 3 bright 6-px squares on a noisy dark background; the label is how many."""

    channels = 1
    has_masks = False

    def __init__(self, options: ToyCountsOptions):
        self.options = options
        self.labels = np.arange(options.num_images, dtype=np.int64) % 4
        self.class_names = ["0", "1", "2", "3"]
        self.fingerprint = f"toy_counts-{options.num_images}-{options.size}"

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, i: int) -> np.ndarray:
        n, rng = self.options.size, np.random.default_rng(i)
        img = rng.normal(40, 8, (n, n))
        quarters = rng.permutation(4)[: self.labels[i]]  # one square per quarter: they never overlap
        for q in quarters:
            y0, x0 = (q // 2) * n // 2 + n // 8, (q % 2) * n // 2 + n // 8
            img[y0 : y0 + n // 5, x0 : x0 + n // 5] = 220
        return np.clip(img, 0, 255).astype(np.uint8)

    def mask(self, i: int) -> np.ndarray:
        raise NotImplementedError

    def name(self, i: int) -> str:
        return f"toy_counts #{i}"


@register_dataset("toy_counts", options=ToyCountsOptions, task="regression")
def toy_counts(cfg, options: ToyCountsOptions) -> ToyCounts:
    return ToyCounts(options)


class ToyRegressor(nn.Module):
    def __init__(self, in_channels: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()
        )
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


@register_model("toy_regressor", family="toy", cam_layers=("features.2",), task="regression")
def toy_regressor(num_classes: int, in_channels: int, cfg) -> nn.Module:
    return ToyRegressor(in_channels)
