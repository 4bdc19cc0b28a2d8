"""The real data path against tensors in memory: one training epoch reading the uint8 resolution cache with
batched augmentation (resomap.data.build -> BatchLoader) against one epoch over the same images pre-built as a
normalised float tensor (no augmentation), same model and optimizer, timed in interleaved rounds. Prints the
ratio (cache + augmentation / in memory) with its 95% interval and the target (<= 1.05), plus the same ratio for
the loaders alone (no model), e.g.

    python scripts/benchmark_data.py                        # tiny_cnn, synthetic 1024 images at 64 px, CPU
    python scripts/benchmark_data.py --device cuda --model resnet18 --resolution 128

--json PATH also writes the figures. Exit status 0 (a missed target is printed as MISS).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import tempfile
from pathlib import Path

import torch
from torch import nn

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from resomap.config import build as build_config
from resomap.data import build as build_data
from resomap.models import build_model
from resomap.profiling.timing import time_rounds
from resomap.runtime import measurement_threads, resolve_device
from resomap.stats import MedianInterval, ratio_interval
from resomap.training.bare import InMemoryLoader

TARGET = 1.05


def epoch_call(loader, model: nn.Module | None, opt: torch.optim.Optimizer | None, device: torch.device):
    """A call running one epoch over `loader` (training steps when a model is given), a new epoch each call."""
    state = {"epoch": 0}

    def run() -> None:
        loader.set_epoch(state["epoch"])
        state["epoch"] += 1
        for x, y in loader:
            if model is None:
                continue
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return run


def verdict(ci: MedianInterval, target: float = TARGET) -> str:
    if ci.value <= target:
        return "PASS"
    return "MISS (interval reaches it)" if ci.low <= target else "MISS"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny_cnn")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--images", type=int, default=1024, help="synthetic images (about 70%% train)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds, one epoch per variant each")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(
            {
                "experiment": {"output_dir": tmp},
                "system": {"device": args.device},
                "training": {"batch_size": args.batch_size},
                "data": {"dataset": "synthetic", "synthetic": {"num_images": args.images, "size": args.resolution * 2}},
            }
        )
        device = resolve_device(cfg.system)
        measurement_threads(cfg.system)
        bundle = build_data(cfg, args.resolution, seed=0, device=device)
        real = bundle.train
        rows = real.positions
        x = real.normalizer(real.images[rows]).to(device)  # the same images, decoded and normalised once
        y = real.labels.to(device)
        memory = InMemoryLoader(x, y, args.batch_size, shuffle=True, seed=0)
        torch.manual_seed(0)
        base, _ = build_model(args.model, bundle.num_classes, x.shape[1], cfg.models)
        models = {"cache": base.to(device), "memory": copy.deepcopy(base).to(device)}  # same initial weights
        opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
        variants = {
            "cache+aug epoch": epoch_call(real, models["cache"].train(), opts["cache"], device),
            "in-memory epoch": epoch_call(memory, models["memory"].train(), opts["memory"], device),
            "cache+aug loader": epoch_call(real, None, None, device),
            "in-memory loader": epoch_call(memory, None, None, device),
        }
        done = time_rounds(variants, device, iters=args.rounds, warmup=1, rounds=args.rounds)
        for name, exc in done.errors.items():
            raise SystemExit(f"{name} failed: {exc}")
    med = {k: done.stats(k).median_ms / 1000 for k in variants}
    train = ratio_interval(done.round_medians("cache+aug epoch"), done.round_medians("in-memory epoch"))
    loader = ratio_interval(done.round_medians("cache+aug loader"), done.round_medians("in-memory loader"))
    n = real.num_samples
    print(f"{n} training images at {args.resolution} px, batch {args.batch_size}, {args.model} on {device}")
    for k, v in med.items():
        print(f"  {k:17s} {v * 1000:9.1f} ms  ({n / v:8.1f} images/s)")
    line = (
        f"data cache+aug/in-memory epoch {args.model}@{args.resolution} {device.type}: {train.text('.3f')} "
        f"(target <= {TARGET}) {verdict(train)}"
    )
    print(f"loaders alone (no model): cache+aug / in-memory {loader.text('.2f')}")
    print("\n".join(["", "targets:", line]))
    if args.json:
        out = {"epoch_ratio": train.as_list(), "loader_ratio": loader.as_list(), "median_s": med, "images": n}
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
