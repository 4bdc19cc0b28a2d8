"""The weight-randomisation sanity check of explanation maps (Adebayo et al. 2018): every weight of the model is
re-drawn (cascading from the output side for the first draw) and the maps of the randomised model are compared with
the trained model's (Spearman of |map| per image), over `explainability.sanity_seeds` randomisation draws (10 by
default: the randomised copies of the small models explained here are cheap).

The similarity comes with a bootstrap interval over the probe images (`resomap.stats.bootstrap_scores`, each image's
similarity averaged over the draws) and beside calibrated references, each with its own chance level:
- the unrelated-image reference: the trained model's maps of two different probe images (what two maps share that
  says nothing about the image: centre bias, borders); its own chance level is the similarity of pixel-shuffled
  maps; its chance-corrected value (reference - its chance) says how much the maps ignore the image;
- identity: 1, the similarity of a map with itself (what a map that ignores the weights gets).
The verdict splits the way from the reference to identity at its midpoint, `threshold = reference + SANITY_MIDPOINT x
(1 - reference)`: pass when the whole interval is below it (the randomised maps are shown closer to unrelated
images' maps than to the trained maps), fail when the whole interval is above it (they survive the randomisation),
inconclusive otherwise (never counted as passed). A map that ignores the image (the reference at identity, e.g. a
centred Gaussian) fails: its reference is uncalibrated. Constant maps (all-zero) have no ranking: those images are
left out and counted. Fewer than `resomap.stats.MIN_BOOTSTRAP_IMAGES` usable images give no interval: inconclusive.
Its numbers are the `sanity_*` metrics of `SanityResult`.
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
from resomap.explain.methods.guard import explaining
from resomap.explain.methods.probe import explain_probe_set
from resomap.explain.methods.registry import build_explainer
from resomap.models import ModelSpec
from resomap.stats import bootstrap_scores

SANITY_MIDPOINT = 0.5  # the pass/fail threshold's place between the unrelated-image reference (0) and identity (1)
IDENTICAL = 0.99  # a reference at or above this: maps of unrelated images are the same map (the image is ignored)

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


def _flat(maps: np.ndarray) -> np.ndarray:
    """[N, pixels] float64, N = 0 included (reshape(0, -1) cannot infer the pixel count)."""
    arr = np.asarray(maps, dtype=np.float64)
    return arr.reshape(arr.shape[0], int(np.prod(arr.shape[1:], dtype=np.int64)))


def _ranks(maps: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata  # scipy only when a sanity check runs

    flat = _flat(maps)
    return rankdata(flat, axis=1) if len(flat) else flat


def _rank_corr(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Row-wise Pearson correlation of rank rows (= Spearman); a constant row shares no ranking: 0."""
    a = ra - ra.mean(axis=1, keepdims=True)
    b = rb - rb.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.where(den > 0, (a * b).sum(axis=1) / np.maximum(den, 1e-300), 0.0)


def spearman_per_image(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of each pair of maps a[i], b[i] (0 where either map is constant)."""
    return _rank_corr(_ranks(a), _ranks(b))


def _constant(maps: np.ndarray) -> np.ndarray:
    """bool [N]: maps with no ranking (every pixel equal, e.g. all zero) or with a non-finite value."""
    flat = _flat(maps)
    return ~np.isfinite(flat).all(axis=1) | (np.ptp(np.nan_to_num(flat), axis=1) == 0)


def unrelated_similarity(maps: np.ndarray) -> np.ndarray:
    """Spearman similarity of the maps of every pair of different images (i < j) of one model (pairs with a
    constant map are left out: they share no ranking to compare)."""
    keep = ~_constant(maps)
    r = _ranks(np.asarray(maps)[keep])
    i, j = np.triu_indices(len(r), k=1)
    return _rank_corr(r[i], r[j]) if len(i) else np.zeros(0)


def shuffled_similarity(maps: np.ndarray, seed: int = 0) -> float:
    """The unrelated-image reference's own chance level: the same similarity with every map's pixels shuffled."""
    keep = ~_constant(maps)
    rng = np.random.default_rng([seed, 8191])
    flat = np.abs(_flat(maps)[keep])
    sims = unrelated_similarity(rng.permuted(flat, axis=1)) if len(flat) > 1 else np.zeros(0)
    return float(sims.mean()) if sims.size else float("nan")


@dataclass
class SanityResult:
    """Weight-randomisation sanity check of one method on one model (module doc for the rule).

    `similarities`: mean Spearman similarity of |map| to the trained model's after each cascading step (top
    layer first, the first draw). `final` [draws, images]: the similarity after every weight is re-drawn (NaN for
    an image whose trained map is constant: left out and counted in `images_constant`). `reference`: the mean
    similarity of the trained model's maps of different images (`reference_kind` 'unrelated images'), with its
    own chance level `reference_chance` (pixel-shuffled maps); or a fixed threshold ('fixed': one image, or
    given explicitly), which is then the threshold itself. `verdict`: 1 pass, 0 inconclusive, -1 fail, with
    `reason` in words; `passed` only for 1. `seed_passed`: per draw, its mean similarity below the threshold.
    """

    layers: list[str]
    similarities: list[float]
    reference: float
    final: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    reference_kind: str = "fixed"
    random_maps: np.ndarray | None = field(default=None, repr=False)  # raw maps of the first draw's random model
    reference_chance: float = float("nan")
    level: float = 0.95
    resamples: int = 2000
    threshold: float = field(init=False)
    verdict: int = field(init=False)
    reason: str = field(init=False)
    passed: bool = field(init=False)
    mean: float = field(init=False)
    low: float = field(init=False)
    high: float = field(init=False)
    images_used: int = field(init=False)
    images_constant: int = field(init=False)
    seed_passed: list[bool] = field(init=False)

    def __post_init__(self) -> None:
        final = np.asarray(self.final, dtype=np.float64)
        if final.size == 0:  # the cascade alone (no per-image values): its last step, no interval
            final = np.array([[self.similarities[-1] if self.similarities else float("nan")]])
        self.final = final
        usable = np.isfinite(final).all(axis=0)
        self.images_used, self.images_constant = int(usable.sum()), int((~usable).sum())
        fixed = self.reference_kind == "fixed"
        ref = float(self.reference)
        self.threshold = ref if fixed else ref + SANITY_MIDPOINT * (1.0 - ref)
        table = final[:, usable]
        found = bootstrap_scores(table, level=self.level, resamples=self.resamples) if table.size else None
        self.mean = float(table.mean()) if table.size else float("nan")
        ok = found is not None and found.available
        self.low, self.high = (float(found.low), float(found.high)) if ok else (float("nan"), float("nan"))
        why = found.reason if found is not None else "no image with a non-constant map"
        self.verdict, self.reason = self._decide(ref, fixed, why)
        self.passed = self.verdict == 1
        self.seed_passed = [bool(np.nanmean(row) < self.threshold) if table.size else False for row in table]

    def _decide(self, ref: float, fixed: bool, why: str | None) -> tuple[int, str]:
        t = self.threshold
        if not fixed and ref >= IDENTICAL:
            return (
                -1,
                f"fail: the maps of unrelated images are the same map ({ref:.2f}): they ignore the image",
            )
        if not np.isfinite(self.high):
            return 0, f"inconclusive: no interval ({why})"
        interval = f"similarity {self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"
        if self.high < t:
            return 1, f"pass: {interval} below the threshold {t:.2f}"
        if self.low > t:
            return -1, f"fail: {interval} above the threshold {t:.2f}: the maps survive the randomisation"
        return 0, f"inconclusive: {interval} contains the threshold {t:.2f}; more probe images or draws would decide"

    def metrics(self) -> dict[str, float]:
        """The numbers of the verdict, as `sanity_*` metrics (each reference beside its chance level)."""
        ref, chance = float(self.reference), float(self.reference_chance)
        return {
            "sanity_similarity": self.mean,
            "sanity_similarity_low": self.low,
            "sanity_similarity_high": self.high,
            "sanity_similarity_corrected": self.mean - ref,  # beyond the unrelated-image reference
            "sanity_reference": ref,
            "sanity_reference_chance": chance,
            "sanity_reference_corrected": ref - chance,  # what maps of different images share beyond chance
            "sanity_threshold": self.threshold,
            "sanity_reference_is_fixed": float(self.reference_kind == "fixed"),
            "sanity_passed": float(self.passed),
            "sanity_inconclusive": float(self.verdict == 0),
            "sanity_verdict": float(self.verdict),
            "sanity_seeds": float(len(self.seed_passed)),
            "sanity_images": float(self.images_used),
            "sanity_images_constant": float(self.images_constant),
            "sanity_seed_pass_fraction": float(np.mean(self.seed_passed)) if self.seed_passed else float("nan"),
        }


def sanity_check(
    explainer: str | Callable[..., torch.Tensor],
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
    level: float = 0.95,
    resamples: int = 2000,
) -> SanityResult:
    """Weight randomisation on deepcopies: for each draw every weight is re-drawn (same mean/std per tensor),
    and the maps of the images are compared with the trained model's (Spearman of |map|, per image).

    The first draw re-draws the layers one by one from the top (cascading, Adebayo et al.) when `cascade`, giving
    the per-layer curve; the other draws re-draw all at once (the same end state). `seeds` defaults to
    range(cfg.sanity_seeds). The verdict (module doc) compares the bootstrap interval over the probe images (at
    `level`, `resamples`) with the threshold between the unrelated-image reference and identity; `threshold`
    fixes the threshold instead. `explainer` is a method name or a one-shot callable such as
    `get_explainer(name)`.
    """
    kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size)
    seeds = list(range(max(1, getattr(cfg, "sanity_seeds", 10)))) if seeds is None else list(seeds)
    if not seeds:
        raise ExplainError("sanity check needs at least one randomisation seed")
    batch = max(1, getattr(cfg, "batch_size", len(images)) or len(images))
    bound = _Bound(explainer, images, targets, kw, batch)
    with bound(model) as explain:
        trained = np.abs(explain())
    layers = _param_layers(model) if cascade else []
    first_maps, curve, final = _randomised(bound, model, seeds, layers, _ranks(trained))
    final = np.where(_constant(trained)[None, :], np.nan, np.stack(final))
    unrelated = unrelated_similarity(trained)
    if threshold is None and unrelated.size:
        ref, kind, chance = float(unrelated.mean()), "unrelated images", shuffled_similarity(trained)
    else:
        ref, kind, chance = float(cfg.sanity_threshold if threshold is None else threshold), "fixed", float("nan")
    result = SanityResult(layers, curve, ref, final, kind, first_maps, chance, level, resamples)
    log.info(
        "sanity %s: %d images x %d draws vs %s %.3f (its chance %.3f) -> %s",
        *(spec.name, result.images_used, len(seeds), kind, ref, chance, result.reason),
    )
    return result


@dataclass
class _Bound:
    """`explainer` bound to the images, targets and options: ``with bound(model) as explain: maps = explain()``."""

    explainer: str | Callable[..., torch.Tensor]
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
    method: str, model: nn.Module, images: torch.Tensor, targets: torch.Tensor, *, seed: int = 0, **settings: Any
) -> np.ndarray:
    """Maps of `method` on the model with every weight re-drawn (`randomised_copy(model, seed)`); `settings`: the
    explainer's (spec, resolution, cfg, min_cam_size), as explain_probe_set takes them."""
    maps, failed = explain_probe_set(randomised_copy(model, seed), images, targets, [method], **settings)
    if method not in maps:
        raise ExplainError(f"{method} on the randomised model: {failed.get(method, 'failed')}")
    return maps[method]
