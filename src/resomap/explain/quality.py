"""Quality of explanation maps: faithfulness (deletion/insertion AUC, ROAD), sanity (cascading weight
randomisation, Adebayo et al. 2018) and localisation against ground-truth masks (pointing game, energy)."""

from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass, field

import numpy as np
import torch
import torchvision.transforms.functional as TF
from torch import nn

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.compare import spearman
from resomap.explain.registry import ExplainFn, build_explainer, explaining
from resomap.models import ModelSpec

log = logging.getLogger(__name__)

ROAD_PERCENTILES = (20, 40, 60, 80)  # fraction of pixels imputed by ROAD, in %


def blur_baseline(images: torch.Tensor) -> torch.Tensor:
    """Gaussian blur with a resolution-derived kernel (sigma = res / 16)."""
    res = images.shape[-1]
    sigma = max(0.5, res / 16)
    kernel = 2 * int(2 * sigma) + 1
    return TF.gaussian_blur(images, [kernel, kernel], [sigma, sigma])


def _target_probs(model: nn.Module, x: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return torch.softmax(model(x), dim=-1).gather(1, targets[:, None])[:, 0].cpu().numpy()


def deletion_insertion(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: np.ndarray,
    *,
    steps: int = 10,
    baseline: str = "blur",
) -> tuple[np.ndarray, np.ndarray]:
    """Per-image (deletion AUC, insertion AUC) of the target's softmax probability (Petsiuk et al. 2018).

    Pixels are moved from the image to the baseline (deletion) or back (insertion) in decreasing order of the map,
    in `steps` equal steps; AUC over the fraction moved in [0, 1]. Low deletion / high insertion = faithful.
    """
    # hand-written: neither captum nor grad-cam ships deletion/insertion curves; a few batched forwards
    if baseline not in ("blur", "zeros"):
        raise ExplainError(f"faithfulness baseline must be 'blur' or 'zeros', got {baseline!r}")
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device)
    base = blur_baseline(images) if baseline == "blur" else torch.zeros_like(images)
    n, h, w = maps.shape
    order = torch.from_numpy(np.argsort(-maps.reshape(n, -1), axis=1, kind="stable").copy()).to(images.device)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(h * w, device=images.device).expand(n, -1))
    rank = rank.reshape(n, 1, h, w)
    fractions = np.linspace(0.0, 1.0, steps + 1)
    dele, ins = [], []
    with explaining(model):
        for f in fractions:
            moved = rank < round(float(f) * h * w)
            dele.append(_target_probs(model, torch.where(moved, base, images), targets))
            ins.append(_target_probs(model, torch.where(moved, images, base), targets))
    return np.trapezoid(np.stack(dele, 1), fractions, axis=1), np.trapezoid(np.stack(ins, 1), fractions, axis=1)


def road(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, maps: np.ndarray) -> np.ndarray:
    """Per-image ROADCombined score of pytorch-grad-cam (higher = more faithful), on softmax targets."""
    from pytorch_grad_cam.metrics.road import ROADCombined  # heavy import, only when used
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    cam_targets = [ClassifierOutputSoftmaxTarget(int(t)) for t in targets]
    with explaining(model):
        scores = ROADCombined(percentiles=list(ROAD_PERCENTILES))(images.detach(), maps, cam_targets, model)
    return np.asarray(scores, dtype=np.float64).reshape(-1)


@dataclass
class SanityResult:
    """Spearman similarity of |map| to the original after each cascading randomisation step (top layer first)."""

    layers: list[str]
    similarities: list[float]
    threshold: float
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.passed = bool(self.similarities) and self.similarities[-1] < self.threshold


def _param_layers(model: nn.Module) -> list[str]:
    """Modules that own parameters, output side first (reverse registration order)."""
    names = [n for n, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    return list(reversed(names))


def _randomise(module: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters(recurse=False):
            scale = (float(p.std()) if p.numel() > 1 else 0.0) or 1.0  # BN weights start constant (std 0)
            p.copy_(torch.randn(p.shape, generator=gen) * scale + p.mean())


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
) -> SanityResult:
    """Cascading randomisation on a deepcopy: weights re-drawn (same mean/std) layer by layer from the top.

    `explainer` is a method name (built once for the model and once for the copy, whose layers are then
    randomised under the same built explainer) or a one-shot callable such as `get_explainer(name)`.
    """
    kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size)

    @contextlib.contextmanager
    def bound(m: nn.Module):
        if isinstance(explainer, str):
            with explaining(m), build_explainer(explainer, m, **kw) as built:
                yield lambda: np.abs(built(images, targets).numpy())
        else:
            yield lambda: np.abs(explainer(m, images, targets, **kw).numpy())

    with bound(model) as explain:
        reference = explain()
    work = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    layers, sims = _param_layers(work), []
    with bound(work) as explain:
        for name in layers:
            _randomise(work.get_submodule(name), gen)
            sims.append(spearman(reference, explain()))
    sims = [0.0 if np.isnan(s) else s for s in sims]  # a constant map after randomisation shares no ranking
    result = SanityResult(layers, sims, cfg.sanity_threshold if threshold is None else threshold)
    log.info("sanity %s: final similarity %.3f -> %s", spec.name, sims[-1] if sims else float("nan"), result.passed)
    return result


def _check_masks(maps: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    maps, masks = np.asarray(maps, dtype=np.float64), np.asarray(masks, dtype=bool)
    if maps.shape != masks.shape:
        raise ExplainError(f"maps {list(maps.shape)} and masks {list(masks.shape)} must have the same shape")
    return maps, masks


def pointing_game(maps: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per image 1.0 when the map's maximum falls inside the mask, else 0.0."""
    maps, masks = _check_masks(maps, masks)
    flat = maps.reshape(len(maps), -1)
    hit = np.take_along_axis(masks.reshape(len(masks), -1), flat.argmax(axis=1)[:, None], axis=1)[:, 0]
    return hit.astype(np.float64)


def energy_in_mask(maps: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per image: positive attribution inside the mask / all positive attribution (0 when none)."""
    maps, masks = _check_masks(maps, masks)
    pos = np.clip(maps, 0, None)
    total = pos.sum(axis=(1, 2))
    return np.where(total > 0, (pos * masks).sum(axis=(1, 2)) / np.maximum(total, 1e-12), 0.0)


def quality_metrics(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: np.ndarray,
    cfg: ExplainabilityConfig,
    masks: np.ndarray | None = None,
) -> dict[str, float]:
    """Mean faithfulness (and localisation, when masks are given) of one method's maps."""
    dele, ins = deletion_insertion(model, images, targets, maps, steps=cfg.faithfulness_steps)
    out = {"deletion_auc": float(dele.mean()), "insertion_auc": float(ins.mean())}
    out["road"] = float(road(model, images, targets, maps).mean())
    if masks is not None:
        out["pointing_game"] = float(pointing_game(maps, masks).mean())
        out["energy_in_mask"] = float(energy_in_mask(maps, masks).mean())
    return out
