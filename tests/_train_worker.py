"""Trains a tiny model with TopKCheckpoint into argv[1]; `--resume` continues from last.pt.

Used by the SIGKILL test in test_training.py; also importable (make_run) for the uninterrupted reference run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from resomap.config import build
from resomap.training import TopKCheckpoint, Trainer
from resomap.training.bare import InMemoryLoader, in_memory_data

EPOCHS = 5


class SlowLoader(InMemoryLoader):
    def __init__(self, inner: InMemoryLoader, delay: float):
        super().__init__(inner.x, inner.y, inner.batch_size, inner.shuffle, inner.seed)
        self.delay = delay

    def __iter__(self):
        for batch in super().__iter__():
            time.sleep(self.delay)
            yield batch


def make_run(delay: float = 0.0):
    cfg = build(
        {
            "experiment": {"seed": 7},
            "training": {"epochs": EPOCHS, "progress": "off", "optimizer": {"lr": 0.01}},
            "system": {"device": "cpu", "threads": 1},
        }
    )
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(96, 1, 8, 8, generator=gen)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    data = in_memory_data(x, y, batch_size=8, seed=7)
    if delay:
        data.train = SlowLoader(data.train, delay)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
    return cfg, model, data


def main() -> None:
    out = Path(sys.argv[1])
    resume = "--resume" in sys.argv
    if "--wait" in sys.argv:  # started early so imports overlap with the first run; go on at a line on stdin
        import sklearn.metrics  # noqa: F401

        print("ready", flush=True)
        sys.stdin.readline()
    cfg, model, data = make_run(delay=0.04)
    ckpt = TopKCheckpoint(out, monitor="val/loss", mode="min", top_k=2, metadata={"model": "mlp"})
    result = Trainer(cfg, torch.device("cpu"), [ckpt]).fit(model, data, resume_from=out / "last.pt" if resume else None)
    (out / "result.json").write_text(json.dumps({"history": result.history, "resumed": result.resumed_from_epoch}))


if __name__ == "__main__":
    main()
