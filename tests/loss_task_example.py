"""A plugin task with its own options and loss terms, as a user's package would add them (no file of ResoMap edited):
`counting` predicts a number per image (the count of bright squares, as tests/task_example.py's regression) and
trains with the loss term its task option `task.counting.loss` names: `mse_spy` or `l1_spy`, registered for the
counting task with options `loss.<term>.scale`. Every call of a term is recorded in CALLS (term, scale, batch size),
so a test can tell which loss ran, with which options, in training and in the profile's timed step.

Registered on import with a dataset (`count_squares`) and a model (`count_net`) of the task; `unregister()` takes
every entry out again (tests/test_tasks.py imports it for one test).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from resomap.data import register_dataset
from resomap.data.registry import DATASETS
from resomap.models import MODELS, register_model
from resomap.tasks import TASKS, Task, register_task, task_options
from resomap.tasks.losses import LOSSES, build_term, check_loss_names, register_loss
from resomap.tasks.metrics import classification_metrics

TASK = "counting"
CALLS: list[tuple[str, float, int]] = []  # (loss term, its scale option, batch size) of every loss call


@dataclass(frozen=True)
class CountingOptions:
    loss: str = "mse_spy"  # the loss term: a registered loss term of the counting task


@dataclass(frozen=True)
class SpyOptions:
    scale: float = 1.0  # the loss is multiplied by this


class SpyLoss(nn.Module):
    def __init__(self, name: str, scale: float, fn):
        super().__init__()
        self.name, self.scale, self.fn = name, scale, fn

    def forward(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        CALLS.append((self.name, self.scale, int(y.shape[0])))
        return self.scale * self.fn(out[:, 0].float(), y.float())


@register_loss("mse_spy", options=SpyOptions, task=TASK)
def mse_spy(num_classes: int, options: SpyOptions, weight=None) -> nn.Module:
    return SpyLoss("mse_spy", options.scale, nn.functional.mse_loss)


@register_loss("l1_spy", options=SpyOptions, task=TASK)
def l1_spy(num_classes: int, options: SpyOptions, weight=None) -> nn.Module:
    return SpyLoss("l1_spy", options.scale, nn.functional.l1_loss)


@register_task(TASK, options=CountingOptions)
class CountingTask(Task):
    headline = ("mae", "accuracy")
    step_words = "the counting loss (task.counting.loss) on one number per image"

    def check(self, cfg, fail):
        name = task_options(cfg).loss
        problem = check_loss_names([name], [], self.name)
        if problem:
            fail("task.counting.loss", problem, name)

    def criterion(self, cfg, data, device):
        return build_term(task_options(cfg).loss, 1, cfg)

    def correct(self, out, y):
        return (out.detach()[:, 0].round() == y).sum()

    def evaluate(self, ctx, loader, prefix):
        preds, trues = [], []
        with ctx.evaluating():
            for x, y in loader:
                preds.append(ctx.logits(x)[:, 0].float())
                trues.append(y)
        pred, true = torch.cat(preds).cpu().numpy(), torch.cat(trues).cpu().numpy()
        counted = np.clip(np.round(pred), 0, None).astype(np.int64)
        metrics = {
            f"{prefix}/loss": float(np.mean((pred - true) ** 2)),
            f"{prefix}/mae": float(np.abs(pred - true).mean()),
        }
        metrics.update(
            classification_metrics(true, counted, int(max(true.max(initial=0), counted.max(initial=0)) + 1), prefix)
        )
        return metrics, true, counted

    def write_records(self, matrix, out_dir):
        from resomap.records import Predictions, write_predictions

        return write_predictions(
            out_dir, {r: Predictions(int(r), f.index, f.y_true, f.y_pred) for r, f in matrix.items()}
        )

    def probe_targets(self, bundle, rows, device):
        return torch.zeros(len(rows), dtype=torch.int64), None

    def step_targets(self, out, cfg=None):
        name = task_options(cfg).loss if cfg is not None else CountingOptions().loss
        return torch.randn(out.shape[0], device=out.device), build_term(name, 1, cfg)


class CountSquares:
    """0 to 3 bright squares on a dark background; the label is how many."""

    channels, has_masks, class_names = 1, False, ["0", "1", "2", "3"]

    def __init__(self, n: int = 32, size: int = 16):
        self.labels, self.size, self.fingerprint = np.arange(n, dtype=np.int64) % 4, size, f"count_squares-{n}-{size}"

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, i: int) -> np.ndarray:
        n = self.size
        img = np.random.default_rng(i).normal(40, 8, (n, n))
        for q in range(self.labels[i]):
            y0, x0 = (q // 2) * n // 2, (q % 2) * n // 2
            img[y0 : y0 + n // 4, x0 : x0 + n // 4] = 220
        return np.clip(img, 0, 255).astype(np.uint8)

    def mask(self, i: int) -> np.ndarray:
        raise NotImplementedError

    def name(self, i: int) -> str:
        return f"count_squares #{i}"


@register_dataset("count_squares", task=TASK)
def count_squares(cfg) -> CountSquares:
    return CountSquares()


class CountNet(nn.Module):
    def __init__(self, in_channels: int):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


@register_model("count_net", family="toy", cam_layers=("features.0",), task=TASK)
def count_net(num_classes: int, in_channels: int, cfg) -> nn.Module:
    return CountNet(in_channels)


def unregister() -> None:
    import resomap.tasks

    resomap.tasks._BUILT.pop(TASK, None)
    for registry, names in ((LOSSES, ("mse_spy", "l1_spy")), (TASKS, (TASK,)), (DATASETS, ("count_squares",))):
        for name in names:
            registry.unregister(name)
    MODELS.unregister("count_net")
