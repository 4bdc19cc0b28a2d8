"""Benchmark explain on CPU: batched vs per-image Grad-CAM throughput, Integrated Gradients' peak memory.

.venv/bin/python scripts/benchmark_explain.py --model simple_cnn --resolution 64 --images 32
"""

from __future__ import annotations

import argparse
import json

import torch

from resomap.config.schema import ExplainabilityConfig, ModelsConfig
from resomap.explain.bench import gradcam_batched_vs_loop, ig_peak_memory
from resomap.explain.methods.captum import IntegratedGradientsOptions
from resomap.models import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="simple_cnn")
    parser.add_argument("--resolution", type=int, default=64)
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ig-images", type=int, default=8)
    parser.add_argument("--ig-steps", type=int, default=32)
    parser.add_argument("--internal-batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, spec = build_model(args.model, args.classes, 1, ModelsConfig())
    x = torch.randn(args.images, 1, args.resolution, args.resolution)
    t = torch.arange(args.images) % args.classes
    cfg = ExplainabilityConfig()
    ig_options = IntegratedGradientsOptions(steps=args.ig_steps, internal_batch_size=args.internal_batch_size)
    cam = gradcam_batched_vs_loop(model, spec, x, t, cfg)
    ig = ig_peak_memory(model, spec, x[: args.ig_images], t[: args.ig_images], cfg, ig_options)
    print(json.dumps({"model": args.model, "resolution": args.resolution, "gradcam": cam, "ig": ig}, indent=2))


if __name__ == "__main__":
    main()
