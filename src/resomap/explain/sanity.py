"""The weight-randomisation sanity check of explanation maps (Adebayo et al. 2018): every weight of the model is
re-drawn (cascading from the output side for the first seed) and the maps of the randomised model are compared with
the trained model's (Spearman of |map| per image). The verdict compares the interval of the mean similarity over
images x randomisation seeds (`resomap.stats.crossed_interval`) with the similarity of the trained model's maps of
unrelated images; its numbers are the `sanity_*` metrics of `SanityResult`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.probe import explain_probe_set
from resomap.explain.registry import ExplainFn, build_explainer, explaining
from resomap.models import ModelSpec
from resomap.stats import crossed_interval

log = logging.getLogger(__name__)


def _param_layers(model: nn.Module) -> list[str]:
    """Modules that own parameters, output side first (reverse registration order)."""
    names = [n for n, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    return list(reversed(names))


def _randomise(module: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters(recurse=False):
            scale = (float(p.std()) if p.numel() > 1 else 0.0) or 1.0  # BN weights start constant (std 0)
            noise = torch.randn(p.shape, generator=gen).to(p.device, p.dtype)
            p.copy_(noise * scale + p.mean())


def randomised_copy(model: nn.Module, seed: int = 0) -> nn.Module:
    """A deepcopy with every parameter re-drawn (same mean/std per tensor), output side first: the end state of
    the cascading randomisation with the same seed."""
    work = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(int(seed))
    for name in _param_layers(work):
        _randomise(work.get_submodule(name), gen)
    return work


def _ranks(maps: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata  # scipy only when a sanity check runs

    flat = np.asarray(maps, dtype=np.float64).reshape(len(maps), -1)
    return rankdata(flat, axis=1)


def _rank_corr(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Row-wise Pearson correlation of rank rows (= Spearman); a constant row shares no ranking: 0."""
    a = ra - ra.mean(axis=1, keepdims=True)
    b = rb - rb.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.where(den > 0, (a * b).sum(axis=1) / np.maximum(den, 1e-300), 0.0)


def spearman_per_image(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of each pair of maps a[i], b[i] (0 where either map is constant)."""
    return _rank_corr(_ranks(a), _ranks(b))


def unrelated_similarity(maps: np.ndarray) -> np.ndarray:
    """Spearman similarity of the maps of every pair of different images (i < j) of one model."""
    r = _ranks(maps)
    i, j = np.triu_indices(len(r), k=1)
    return _rank_corr(r[i], r[j]) if len(i) else np.zeros(0)


@dataclass
class SanityResult:
    """Weight-randomisation sanity check of one method on one model.

    `similarities`: mean Spearman similarity of |map| to the trained model's after each cascading step (top
    layer first, the first seed). `final` [seeds, images]: the similarity after every weight is re-drawn.
    The verdict compares the 95% interval of the mean of `final` (`crossed_interval`: seeds and images both
    random) with `threshold`: the mean similarity of the trained model's maps of different images
    (`reference_kind` 'unrelated images'), or the configured fixed threshold ('fixed') when that reference is
    unavailable (one image) or a threshold is given explicitly. `verdict`: 1 (the whole interval is below the
    reference), 0 (the interval contains it: the randomised maps are as similar to the trained ones as the maps
    of unrelated images are to each other, what a weight-dependent method gives) or -1 (the whole interval is
    above it: the maps survive randomisation). `passed` = verdict >= 0: a one-sided test at 2.5% that fails
    only when the randomised model's maps are significantly more similar than unrelated images' maps. A fixed
    threshold, or a single value, is compared with the mean alone. `seed_passed`: the same rule per seed
    (t-interval across images).
    """

    layers: list[str]
    similarities: list[float]
    threshold: float
    final: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    reference_kind: str = "fixed"
    random_maps: np.ndarray | None = field(default=None, repr=False)  # raw maps of the first seed's random model
    verdict: int = field(init=False)
    passed: bool = field(init=False)
    mean: float = field(init=False)
    low: float = field(init=False)
    high: float = field(init=False)
    seed_passed: list[bool] = field(init=False)

    def _verdict(self, table: np.ndarray) -> tuple[float, float, float, int]:
        mean, low, high = crossed_interval(table)
        if not np.isfinite(mean):
            return mean, low, high, -1
        if self.reference_kind == "fixed" or not np.isfinite(high):
            return mean, low, high, 1 if mean < self.threshold else -1
        return mean, low, high, 1 if high < self.threshold else (-1 if low > self.threshold else 0)

    def __post_init__(self) -> None:
        final = np.asarray(self.final, dtype=np.float64)
        if final.size == 0:  # the cascade alone (no per-image values): its last step against the threshold
            last = self.similarities[-1] if self.similarities else float("nan")
            final = np.array([[last]])
        self.final = final
        self.mean, self.low, self.high, self.verdict = self._verdict(final)
        self.passed = self.verdict >= 0
        self.seed_passed = [self._verdict(row[None])[3] >= 0 for row in final]

    def metrics(self) -> dict[str, float]:
        """The numbers of the verdict, as `sanity_*` metrics."""
        return {
            "sanity_similarity": self.mean,
            "sanity_similarity_low": self.low,
            "sanity_similarity_high": self.high,
            "sanity_reference": self.threshold,
            "sanity_reference_is_fixed": float(self.reference_kind == "fixed"),
            "sanity_passed": float(self.passed),
            "sanity_verdict": float(self.verdict),
            "sanity_seeds": float(len(self.seed_passed)),
            "sanity_seed_pass_fraction": float(np.mean(self.seed_passed)) if self.seed_passed else float("nan"),
        }


def sanity_check(
    explainer: str | ExplainFn,
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    *,
    spec: ModelSpec,
    resolution: int,
    cfg: ExplainabilityConfig,
    threshold: float | None = None,
    min_cam_size: int = 4,
    seeds: Sequence[int] | None = None,
    cascade: bool = True,
) -> SanityResult:
    """Weight randomisation on deepcopies: for each seed every weight is re-drawn (same mean/std per tensor),
    and the maps of the images are compared with the trained model's (Spearman of |map|, per image).

    The first seed re-draws the layers one by one from the top (cascading, Adebayo et al.) when `cascade`, giving
    the per-layer curve; the other seeds re-draw all at once (the same end state). `seeds` defaults to
    range(cfg.sanity_seeds). The pass threshold is the similarity of the trained maps of unrelated images (see
    SanityResult); `threshold` fixes it instead. `explainer` is a method name or a one-shot callable such as
    `get_explainer(name)`.
    """
    kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size)
    seeds = list(range(max(1, getattr(cfg, "sanity_seeds", 3)))) if seeds is None else list(seeds)
    if not seeds:
        raise ExplainError("sanity check needs at least one randomisation seed")
    batch = max(1, getattr(cfg, "batch_size", len(images)) or len(images))
    bound = _Bound(explainer, images, targets, kw, batch)
    with bound(model) as explain:
        trained = explain()
    layers = _param_layers(model) if cascade else []
    first_maps, curve, final = _randomised(bound, model, seeds, layers, _ranks(np.abs(trained)))
    unrelated = unrelated_similarity(np.abs(trained))
    if threshold is None and unrelated.size:
        limit, kind = float(unrelated.mean()), "unrelated images"
    else:
        limit, kind = float(cfg.sanity_threshold if threshold is None else threshold), "fixed"
    result = SanityResult(layers, curve, limit, np.stack(final), kind, first_maps)
    verdict = {1: "pass", 0: "inconclusive", -1: "fail"}[result.verdict]
    log.info(
        "sanity %s: similarity %.3f [%.3f, %.3f] over %d images x %d seeds vs %s %.3f -> %s",
        *(spec.name, result.mean, result.low, result.high, len(images), len(seeds), kind, limit, verdict),
    )
    return result


@dataclass
class _Bound:
    """`explainer` bound to the images, targets and options: ``with bound(model) as explain: maps = explain()``."""

    explainer: str | ExplainFn
    images: torch.Tensor
    targets: torch.Tensor
    kw: dict[str, Any]
    batch: int

    @contextlib.contextmanager
    def __call__(self, m: nn.Module) -> Iterator[Callable[[], np.ndarray]]:
        images, targets, batch = self.images, self.targets, self.batch
        if isinstance(self.explainer, str):
            with explaining(m), build_explainer(self.explainer, m, **self.kw) as built:
                yield lambda: torch.cat(
                    [built(images[i : i + batch], targets[i : i + batch]) for i in range(0, len(images), batch)]
                ).numpy()
        else:
            yield lambda: self.explainer(m, images, targets, **self.kw).numpy()


def _randomised(
    bound: _Bound, model: nn.Module, seeds: list[int], layers: list[str], ref_ranks: np.ndarray
) -> tuple[np.ndarray | None, list[float], list[np.ndarray]]:
    """(the first seed's maps on its randomised model, the cascade's mean similarity after each layer, per seed
    the per-image similarity of the fully randomised model's maps to the trained ones)."""
    first_maps, curve, final = None, [], []
    for k, seed in enumerate(seeds):
        if k == 0 and layers:
            work = copy.deepcopy(model)
            gen = torch.Generator().manual_seed(int(seed))
            with bound(work) as explain:
                for name in layers:
                    _randomise(work.get_submodule(name), gen)
                    maps = explain()
                    sims = _rank_corr(ref_ranks, _ranks(np.abs(maps)))
                    curve.append(float(sims.mean()))
        else:
            with bound(randomised_copy(model, seed)) as explain:
                maps = explain()
            sims = _rank_corr(ref_ranks, _ranks(np.abs(maps)))
        first_maps = maps if first_maps is None else first_maps
        final.append(sims)
    return first_maps, curve, final


def random_weight_maps(
    method: str,
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    *,
    spec: ModelSpec,
    resolution: int,
    cfg: ExplainabilityConfig,
    min_cam_size: int = 4,
    seed: int = 0,
) -> np.ndarray:
    """Maps of `method` on the model with every weight re-drawn (`randomised_copy(model, seed)`)."""
    kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size)
    maps, failed = explain_probe_set(randomised_copy(model, seed), images, targets, [method], **kw)
    if method not in maps:
        raise ExplainError(f"{method} on the randomised model: {failed.get(method, 'failed')}")
    return maps[method]
