"""Benchmarks of the explain package: batched vs per-image Grad-CAM, and Integrated Gradients' peak memory."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from resomap.config.schema import ExplainabilityConfig
from resomap.explain.methods.captum import IntegratedGradientsOptions
from resomap.explain.methods.guard import explaining
from resomap.explain.methods.registry import build_explainer, explainer_options
from resomap.models import ModelSpec
from resomap.profiling.memory import MB, RssPeakSampler

log = logging.getLogger(__name__)


def gradcam_batched_vs_loop(
    model: nn.Module,
    spec: ModelSpec,
    images: torch.Tensor,
    targets: torch.Tensor,
    cfg: ExplainabilityConfig,
    repeats: int = 3,
    method: str = "gradcam",
) -> dict[str, float]:
    """images/s of one batched call over the whole set vs one call per image (best of `repeats`), both through
    one explainer built once (as the probe set uses it)."""
    res = images.shape[-1]
    with explaining(model), build_explainer(method, model, spec=spec, resolution=res, cfg=cfg) as explain:
        explain(images[:2], targets[:2])  # warm-up

        def batched() -> None:
            explain(images, targets)

        def loop() -> None:
            for i in range(len(images)):
                explain(images[i : i + 1], targets[i : i + 1])

        def best(fn: Callable[[], None]) -> float:
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        t_batch, t_loop = best(batched), best(loop)
    n = len(images)
    out = {"images": n, "batched_images_per_s": n / t_batch, "loop_images_per_s": n / t_loop}
    out["speedup"] = out["batched_images_per_s"] / out["loop_images_per_s"]
    return out


def peak_rss_mb(fn: Callable[[], Any], interval_s: float = 0.001) -> float:
    """Peak resident memory above the level before the call, in MiB (profiling.memory's RSS sampler)."""
    with RssPeakSampler(interval_s) as sampler:
        fn()
    return sampler.increase_bytes / MB


def ig_peak_memory(
    model: nn.Module,
    spec: ModelSpec,
    images: torch.Tensor,
    targets: torch.Tensor,
    cfg: ExplainabilityConfig,
    options: IntegratedGradientsOptions | None = None,
) -> dict[str, float]:
    """Peak RSS of integrated_gradients with the options' internal_batch_size vs all steps of all images at once."""
    opts = options or explainer_options(cfg, "integrated_gradients")
    res = images.shape[-1]
    unbounded = len(images) * opts.steps
    runs = {}
    for label, ibs in (("bounded", opts.internal_batch_size), ("unbounded", unbounded)):
        o = dataclasses.replace(opts, internal_batch_size=ibs)
        kw = dict(spec=spec, resolution=res, cfg=cfg, options=o)
        with explaining(model), build_explainer("integrated_gradients", model, **kw) as explain:
            explain(images[:1], targets[:1])  # warm-up
            runs[label] = peak_rss_mb(lambda explain=explain: explain(images, targets))
    return {
        "internal_batch_size": opts.internal_batch_size,
        "unbounded_batch": unbounded,
        "bounded_peak_mb": runs["bounded"],
        "unbounded_peak_mb": runs["unbounded"],
        "ratio": runs["unbounded"] / max(runs["bounded"], 1e-6),
    }
