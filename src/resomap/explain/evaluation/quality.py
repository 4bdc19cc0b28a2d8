"""Quality of explanation maps: faithfulness (deletion/insertion AUC, ROAD) and localisation against ground-truth
masks (pointing game, energy in mask); the weight-randomisation sanity check is `explain.evaluation.sanity`.

Every score is reported beside baselines, so that "faithful" or "localises" means better than chance:
- `<metric>_random`: the same metric for random maps of the same images (uniform noise smoothed at side/32,
  averaged over `explainability.baseline_draws` draws; deletion and insertion share one level, equal in
  expectation for random maps; ROAD's is its exact expectation 0, see `quality_context`);
- `<metric>_model_free`: the same metric for the image's own gradient-magnitude (Sobel) edge map;
- `<metric>_vs_random`: the signed excess over the random maps, > 0 = better than random (deletion AUC: random
  minus method, since lower is better; every other metric: method minus random);
- localisation also `_centre` (a Gaussian centred map, sigma = side/4), `_random_weights` (the same method on
  the model with every weight re-drawn, the sanity check's randomised model) and `_vs_random_weights`; and the
  method and every reference (`<metric>[_<reference>]`) beside its OWN chance level, `_chance` (its maps scored
  against the masks of other probe images) and `_corrected` (score - that chance): a map that ignores the image,
  like the centre prior, is corrected to 0 (`explain.evaluation.intervals`);
- `quality_scores` also gives the per-image excesses behind the bootstrap intervals (`explain.evaluation.intervals`).
Deletion/insertion move pixels to a baseline image that the model should not read as evidence for a class: the
candidates (mean colour, zeros, blur, noise) are checked on the model and the one whose softmax is closest to
uniform (lowest mean largest probability, `baseline_max_prob`) is used unless `faithfulness_baseline` fixes one.
Pointing game: tie-safe (the fraction of the maximum's pixels inside the mask; a flat map scores 0) with the mask
dilated by `pointing_tolerance` x side.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from torch import nn

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.evaluation.intervals import chance_corrected
from resomap.explain.evaluation.measures import centre_maps
from resomap.explain.methods.guard import explaining
from resomap.explain.methods.targets import cam_targets, target_probs

log = logging.getLogger(__name__)

ROAD_PERCENTILES = (20, 40, 60, 80)  # fraction of pixels imputed by ROAD, in %
BASELINE_CANDIDATES = ("mean", "zeros", "blur", "noise")  # deletion/insertion baseline images, in tie order
RANDOM_MAP_SIGMA = 1 / 32  # random maps: uniform noise smoothed by a Gaussian of sigma = side * this
POINTING_TOLERANCE = 0.05  # pointing game: the mask is dilated by this fraction of the image side
FLAT_RTOL = 1e-6  # map values within this fraction of the map's range of its maximum count as the maximum
FAITHFULNESS = ("deletion_auc", "insertion_auc", "road")
LOCALISATION = ("pointing_game", "energy_in_mask")
LOWER_IS_BETTER = frozenset({"deletion_auc"})


# ------------------------------------------------------------------------------------------------ baselines


def blur_baseline(images: torch.Tensor) -> torch.Tensor:
    """Gaussian blur with a resolution-derived kernel (sigma = res / 16)."""
    res = images.shape[-1]
    sigma = max(0.5, res / 16)
    kernel = 2 * int(2 * sigma) + 1
    return TF.gaussian_blur(images, [kernel, kernel], [sigma, sigma])


def baseline_images(images: torch.Tensor, kind: str, seed: int = 0) -> torch.Tensor:
    """The baseline image of each image: `mean` (its mean colour), `zeros` (0 of the normalised input, i.e. the
    normalisation mean), `blur` (`blur_baseline`) or `noise` (Gaussian noise with its per-channel mean and std)."""
    if kind == "blur":
        return blur_baseline(images)
    if kind == "zeros":
        return torch.zeros_like(images)
    mean = images.mean(dim=(2, 3), keepdim=True)
    if kind == "mean":
        return mean.expand_as(images).clone()
    if kind == "noise":
        gen = torch.Generator().manual_seed(seed)
        noise = torch.randn(images.shape, generator=gen).to(images)
        return mean + images.std(dim=(2, 3), keepdim=True) * noise
    raise ExplainError(f"faithfulness baseline must be one of {', '.join(BASELINE_CANDIDATES)}, got {kind!r}")


@dataclass
class BaselineChoice:
    """The deletion/insertion baseline and how much the model reads it as a class."""

    name: str
    max_prob: float  # mean over images of the model's largest softmax probability on the baseline image
    uniform: float  # 1 / classes: the value of a prediction that favours no class
    candidates: dict[str, float] = field(default_factory=dict)  # candidate -> its mean largest probability


def choose_baseline(
    model: nn.Module, images: torch.Tensor, candidates: Sequence[str] = BASELINE_CANDIDATES
) -> BaselineChoice:
    """The candidate whose prediction is closest to uniform: lowest mean (over images) largest softmax
    probability; ties go to the earlier candidate."""
    probs: dict[str, float] = {}
    classes = 1
    with explaining(model), torch.no_grad():
        for kind in candidates:
            p = torch.softmax(model(baseline_images(images, kind)).float(), dim=1)  # [B, K] or [B, K, r, r]
            classes = p.shape[1]
            probs[kind] = float(p.max(dim=1).values.mean())
    name = min(candidates, key=lambda k: probs[k])
    return BaselineChoice(name, probs[name], 1.0 / classes, probs)


def random_maps(n: int, side: int, draws: int, seed: int = 0) -> np.ndarray:
    """float32 [draws, n, side, side]: uniform noise smoothed at sigma = side * RANDOM_MAP_SIGMA (the same
    spatial scale relative to the image at every resolution)."""
    gen = torch.Generator().manual_seed(seed)
    sigma = max(0.5, side * RANDOM_MAP_SIGMA)
    pad = math.ceil(2 * sigma)  # smoothed on a larger field and cropped: no border effect (every pixel alike)
    noise = torch.rand(max(1, draws) * n, 1, side + 2 * pad, side + 2 * pad, generator=gen)
    smooth = TF.gaussian_blur(noise, [2 * pad + 1, 2 * pad + 1], [sigma, sigma])[..., pad:-pad, pad:-pad]
    return smooth.reshape(max(1, draws), n, side, side).numpy()


def edge_maps(images: torch.Tensor) -> np.ndarray:
    """float32 [N, H, W]: gradient magnitude (Sobel) of each image, summed over channels; uses no model."""
    sx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    kernel = torch.stack([sx, sx.T])[:, None].to(images.device, torch.float32)
    x = images.detach().float()
    b, c, h, w = x.shape
    g = F.conv2d(F.pad(x.reshape(b * c, 1, h, w), (1, 1, 1, 1), mode="replicate"), kernel)
    return g.pow(2).sum(1).sqrt().reshape(b, c, h, w).sum(1).cpu().numpy()


# ------------------------------------------------------------------------------------------------ faithfulness


def deletion_insertion(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: np.ndarray,
    *,
    steps: int = 10,
    baseline: str | torch.Tensor = "blur",
    ends: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-image (deletion AUC, insertion AUC) of the target's softmax probability (Petsiuk et al. 2018).

    Pixels are moved from the image to the baseline (deletion) or back (insertion) in decreasing order of the map,
    in `steps` equal steps; AUC over the fraction moved in [0, 1]. Low deletion / high insertion = faithful.
    `baseline` is a kind of `baseline_images` or the baseline images themselves. Both curves end at the image and
    at the baseline whatever the map: `ends` (the target's probability on the images, on the baselines), when
    given, are those ends' values (computed once per probe set: QualityContext.ends), else computed here once.
    """
    # hand-written: neither captum nor grad-cam ships deletion/insertion curves; a few batched forwards
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device)
    base = baseline_images(images, baseline) if isinstance(baseline, str) else baseline.to(images)
    n, h, w = maps.shape
    order = torch.from_numpy(np.argsort(-maps.reshape(n, -1), axis=1, kind="stable").copy()).to(images.device)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(h * w, device=images.device).expand(n, -1))
    rank = rank.reshape(n, 1, h, w)
    fractions = np.linspace(0.0, 1.0, steps + 1)
    dele, ins = [], []
    with explaining(model):
        whole, none = ends if ends is not None else end_probs(model, images, targets, base)
        for f in fractions:
            count = round(float(f) * h * w)
            if count in (0, h * w):  # nothing or everything moved: the image or the baseline
                dele.append(whole if count == 0 else none)
                ins.append(none if count == 0 else whole)
                continue
            moved = rank < count
            dele.append(target_probs(model, torch.where(moved, base, images), targets))
            ins.append(target_probs(model, torch.where(moved, images, base), targets))
    return np.trapezoid(np.stack(dele, 1), fractions, axis=1), np.trapezoid(np.stack(ins, 1), fractions, axis=1)


def end_probs(
    model: nn.Module, images: torch.Tensor, targets: torch.Tensor, base: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """The target's probability on the images and on their baselines: where every deletion / insertion curve ends."""
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device)
    with explaining(model):
        return target_probs(model, images, targets), target_probs(model, base.to(images), targets)


def road(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, maps: np.ndarray) -> np.ndarray:
    """Per-image ROADCombined score of pytorch-grad-cam (higher = more faithful), on softmax targets."""
    from pytorch_grad_cam.metrics.road import ROADCombined  # heavy import, only when used

    softmax_targets = cam_targets(targets, softmax=True)
    with explaining(model):
        scores = ROADCombined(percentiles=list(ROAD_PERCENTILES))(images.detach(), maps, softmax_targets, model)
    return np.asarray(scores, dtype=np.float64).reshape(-1)


def faithfulness(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: np.ndarray,
    *,
    steps: int,
    baseline: str | torch.Tensor,
    with_road: bool = True,
    ends: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Per-image deletion AUC, insertion AUC and (with_road) ROAD of one set of maps (`ends`: deletion_insertion's)."""
    dele, ins = deletion_insertion(model, images, targets, maps, steps=steps, baseline=baseline, ends=ends)
    out = {"deletion_auc": dele, "insertion_auc": ins}
    if with_road:
        out["road"] = road(model, images, targets, maps)
    return out


# ------------------------------------------------------------------------------------------------ localisation


def _check_masks(maps: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    maps, masks = np.asarray(maps, dtype=np.float64), np.asarray(masks, dtype=bool)
    if maps.shape != masks.shape:
        raise ExplainError(f"maps {list(maps.shape)} and masks {list(masks.shape)} must have the same shape")
    return maps, masks


def tolerance_px(side: int, tolerance: float = POINTING_TOLERANCE) -> float:
    """The pointing game's dilation radius in pixels: a fixed fraction of the image side."""
    return float(tolerance) * side


def dilate(masks: np.ndarray, radius: float) -> np.ndarray:
    """bool [N,H,W]: each mask grown by a disc of `radius` px (offsets with dy^2 + dx^2 <= radius^2)."""
    masks = np.asarray(masks, dtype=bool)
    r = math.floor(radius)
    if r < 1:
        return masks
    d = np.arange(-r, r + 1)
    disc = torch.from_numpy(((d[:, None] ** 2 + d[None, :] ** 2) <= radius**2).astype(np.float32))
    x = torch.from_numpy(masks.astype(np.float32))[:, None]
    return (F.conv2d(x, disc[None, None], padding=r)[:, 0] > 0.5).numpy()


def pointing_game(maps: np.ndarray, masks: np.ndarray, tolerance: float = POINTING_TOLERANCE) -> np.ndarray:
    """Per image, tie-safe: the fraction of the map's maximum pixels that fall inside the mask dilated by
    `tolerance` x side (1.0 = a hit); a flat map (no maximum) scores 0.

    Pixels within FLAT_RTOL of the map's range below the maximum all count as the maximum, so a map that ties
    over a region is credited only for the part of that region inside the mask.
    """
    maps, masks = _check_masks(maps, masks)
    region = dilate(masks, tolerance_px(masks.shape[-1], tolerance)).reshape(len(masks), -1)
    flat = maps.reshape(len(maps), -1)
    top, spread = flat.max(axis=1, keepdims=True), np.ptp(flat, axis=1, keepdims=True)
    is_max = flat >= top - FLAT_RTOL * spread
    frac = (is_max & region).sum(axis=1) / np.maximum(is_max.sum(axis=1), 1)
    return np.where(spread[:, 0] > 0, frac, 0.0)


def energy_in_mask(maps: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per image: positive attribution inside the mask / all positive attribution (0 when none)."""
    maps, masks = _check_masks(maps, masks)
    pos = np.clip(maps, 0, None)
    total = pos.sum(axis=(1, 2))
    return np.where(total > 0, (pos * masks).sum(axis=(1, 2)) / np.maximum(total, 1e-12), 0.0)


def _energy(maps: np.ndarray, masks: np.ndarray, tolerance: float = 0.0) -> np.ndarray:
    return energy_in_mask(maps, masks)


LOCALISATION_SCORES = {"pointing_game": pointing_game, "energy_in_mask": _energy}  # score(maps, masks, tolerance)


def localisation(maps: np.ndarray, masks: np.ndarray, tolerance: float = POINTING_TOLERANCE) -> dict[str, np.ndarray]:
    """Per-image pointing game and energy in mask."""
    return {"pointing_game": pointing_game(maps, masks, tolerance), "energy_in_mask": energy_in_mask(maps, masks)}


# ------------------------------------------------------------------------------------------------ per probe set


def _vs(metric: str, value: float, reference: float) -> float:
    """Signed excess of `value` over `reference`, > 0 = better."""
    return reference - value if metric in LOWER_IS_BETTER else value - reference


@dataclass
class QualityContext:
    """The baselines every method of one (model, probe set) is compared with, computed once."""

    baseline: BaselineChoice
    base: torch.Tensor  # the deletion/insertion baseline images
    tolerance: float  # pointing-game tolerance, fraction of the side
    scores: dict[str, float]  # '<metric>_random', '<metric>_model_free', '<metric>_centre' (+ their own chance)
    per_image: dict[str, np.ndarray] = field(default_factory=dict)  # '<metric>_random' per probe image
    ends: tuple[np.ndarray, np.ndarray] | None = None  # the target's probability on the images, on `base`

    def meta(self) -> dict[str, Any]:
        """What to store beside the maps: the baseline chosen, the check's numbers and the tolerance."""
        return {
            "faithfulness_baseline": self.baseline.name,
            "baseline_max_prob": self.baseline.max_prob,
            "baseline_uniform_prob": self.baseline.uniform,
            "baseline_candidates_max_prob": self.baseline.candidates,
            "pointing_tolerance": self.tolerance,
            "pointing_tolerance_px": tolerance_px(int(self.base.shape[-1]), self.tolerance),
        }


def quality_context(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    cfg: ExplainabilityConfig,
    masks: np.ndarray | None = None,
) -> QualityContext:
    """Choose the baseline image and score the method-independent maps (random, model-free, centre)."""
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device)
    kind = getattr(cfg, "faithfulness_baseline", "auto")
    choice = choose_baseline(model, images, BASELINE_CANDIDATES if kind == "auto" else (kind,))
    base = baseline_images(images, choice.name)
    n, side = images.shape[0], images.shape[-1]
    rnd = random_maps(n, side, getattr(cfg, "baseline_draws", 2))
    edge = edge_maps(images)
    ends = end_probs(model, images, targets, base)  # where every curve ends, whatever the map
    kw = {"steps": cfg.faithfulness_steps, "baseline": base, "ends": ends}
    # For random maps the deletion curve at fraction f and the insertion curve at 1 - f move equally distributed
    # random pixel sets, so both AUCs have the same expectation: every draw's two AUCs are pooled into one level.
    # ROAD of a random map is 0 in expectation (its most- and least-relevant-first orders are exchangeable), so
    # its random level is that 0 and its expensive imputation is not run for random maps.
    draws = [faithfulness(model, images, targets, m, with_road=False, **kw) for m in rnd]
    per_level = np.mean([d[k] for d in draws for k in ("deletion_auc", "insertion_auc")], axis=0)  # [N]
    level = float(per_level.mean())
    scores = {"deletion_auc_random": level, "insertion_auc_random": level, "road_random": 0.0}
    per_image = {"deletion_auc_random": per_level, "insertion_auc_random": per_level, "road_random": 0 * per_level}
    free = faithfulness(model, images, targets, edge, with_road=getattr(cfg, "road", True), **kw)
    scores.update({f"{k}_model_free": float(v.mean()) for k, v in free.items()})
    tolerance = getattr(cfg, "pointing_tolerance", POINTING_TOLERANCE)
    references = {"random": rnd[0], "model_free": edge, "centre": centre_maps(n, side)}
    if masks is not None:
        for suffix, sets in (("random", list(rnd)), ("model_free", [edge]), ("centre", [references["centre"]])):
            per = [localisation(m, masks, tolerance) for m in sets]
            per_image.update({f"{k}_{suffix}": np.mean([p[k] for p in per], axis=0) for k in LOCALISATION})
            scores.update({f"{k}_{suffix}": float(per_image[f"{k}_{suffix}"].mean()) for k in LOCALISATION})
        for k in LOCALISATION:  # each reference beside its own chance level (the masks of other images)
            scores.update(chance_corrected(k, LOCALISATION_SCORES[k], references, masks, tolerance))
    log.info(
        "faithfulness baseline %s (mean largest probability %.3f, uniform %.3f; candidates %s)",
        choice.name,
        choice.max_prob,
        choice.uniform,
        {k: round(v, 3) for k, v in choice.candidates.items()},
    )
    return QualityContext(choice, base, tolerance, scores, per_image, ends)


_CONTEXTS: weakref.WeakKeyDictionary[nn.Module, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _cached_context(model, images, targets, cfg, masks) -> QualityContext:
    """quality_context, reused while the same model, images, masks and settings come back (one per probe set)."""
    hit = _CONTEXTS.get(model)
    if hit is not None and hit[0]() is images and hit[1] is masks and hit[2] == cfg and torch.equal(hit[3], targets):
        return hit[4]
    ctx = quality_context(model, images, targets, cfg, masks)
    _CONTEXTS[model] = (weakref.ref(images), masks, cfg, torch.as_tensor(targets).clone(), ctx)
    return ctx


def quality_metrics(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: np.ndarray,
    cfg: ExplainabilityConfig,
    masks: np.ndarray | None = None,
    *,
    context: QualityContext | None = None,
    random_weight_maps: np.ndarray | None = None,
) -> dict[str, float]:
    """Mean faithfulness (and localisation, when masks are given) of one method's maps, each beside its
    baselines (see the module doc for the names). `random_weight_maps`: the same method's maps on the
    randomised model, for the localisation `_random_weights` baseline."""
    kw = {"context": context, "random_weight_maps": random_weight_maps}
    return quality_scores(model, images, targets, maps, cfg, masks, **kw)[0]


def quality_scores(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: np.ndarray,
    cfg: ExplainabilityConfig,
    masks: np.ndarray | None = None,
    *,
    context: QualityContext | None = None,
    random_weight_maps: np.ndarray | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(quality_metrics' means, the per-image scores behind the intervals: `explain.evaluation.intervals.PER_IMAGE`)."""
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device)
    ctx = context or _cached_context(model, images, targets, cfg, masks)
    scores = faithfulness(
        model, images, targets, maps, steps=cfg.faithfulness_steps, baseline=ctx.base, with_road=cfg.road, ends=ctx.ends
    )
    out: dict[str, float] = {}
    per_image: dict[str, np.ndarray] = {}
    for k, v in scores.items():
        out[k] = float(v.mean())
        out[f"{k}_random"] = ctx.scores[f"{k}_random"]
        out[f"{k}_model_free"] = ctx.scores[f"{k}_model_free"]
        out[f"{k}_vs_random"] = _vs(k, out[k], out[f"{k}_random"])
        per_image[f"{k}_vs_random"] = _vs(k, v, ctx.per_image[f"{k}_random"])
    out["baseline_max_prob"] = ctx.baseline.max_prob
    if masks is not None:
        out.update(_localisation_scores(maps, masks, ctx, random_weight_maps, per_image))
    return out, per_image


def _localisation_scores(maps, masks, ctx: QualityContext, random_weight_maps, per_image) -> dict[str, float]:
    """Pointing game and energy in mask beside the references, each reference and the method with its own chance
    level and chance-corrected (`explain.evaluation.intervals.chance_corrected`); per-image scores into `per_image`."""
    loc = localisation(maps, masks, ctx.tolerance)
    rw = localisation(random_weight_maps, masks, ctx.tolerance) if random_weight_maps is not None else None
    out: dict[str, float] = {}
    for k, v in loc.items():
        out[k] = float(v.mean())
        for suffix in ("random", "centre", "model_free"):
            out[f"{k}_{suffix}"] = ctx.scores[f"{k}_{suffix}"]
            for own in ("chance", "corrected"):
                if f"{k}_{suffix}_{own}" in ctx.scores:
                    out[f"{k}_{suffix}_{own}"] = ctx.scores[f"{k}_{suffix}_{own}"]
        out[f"{k}_vs_random"] = _vs(k, out[k], out[f"{k}_random"])
        per_image[f"{k}_vs_random"] = v - ctx.per_image[f"{k}_random"]
        sets = {"": maps} | ({"random_weights": random_weight_maps} if rw is not None else {})
        out.update(chance_corrected(k, LOCALISATION_SCORES[k], sets, masks, ctx.tolerance))
        if rw is not None:
            out[f"{k}_random_weights"] = float(rw[k].mean())
            out[f"{k}_vs_random_weights"] = _vs(k, out[k], out[f"{k}_random_weights"])
    per_image["pointing_game"] = loc["pointing_game"]
    out["pointing_tolerance_px"] = tolerance_px(int(masks.shape[-1]), ctx.tolerance)
    return out
