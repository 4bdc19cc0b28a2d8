"""Explanations of a segmentation model: which pixels drive the score of one class over one region.

For each probe image (the first explainability.probe_size test images, the same raw images for every resolution
and seed) the explained class is the rarest class of the training masks that is present in the image's mask,
the region is that class's pixels at the model's resolution, and the explained score is the class's logit summed
over the region:
- `gradcam`: pytorch-grad-cam's GradCAM with its `SemanticSegmentationTarget(class, region)`, on the CAM layer the
  model's spec picks at this resolution (models.cam_layer_policy over the sweep's resolutions, as for classifiers);
- `saliency`, `integrated_gradients`: captum on a wrapper whose output is that summed logit.
Quality: deletion and insertion (steps = explainability.faithfulness_steps) of the region score (the class's mean
softmax probability over the region) as pixels are removed / restored in the map's order, each beside the same
curve for random maps (`_random`; `_vs_random` > 0 = better than random), and `mass` (share of the map's mass
inside the region, beside the region's share of the image). Maps are resampled to explainability.common_grid and
saved to seg_explanations.npz. `compare_maps` compares them across resolutions and seeds (Spearman rank
correlation and top-k% IoU per probe image, with the cross-seed floor and a different-image chance level); the
sweep summary writes its rows to seg_agreement.csv (resomap.reports.seg_summary). The classification comparison
(resomap.explain.crossres: permutation tests, figures, MLflow metrics) does not read these maps yet.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)
MAPS_FILE = "seg_explanations.npz"


class RegionScore(nn.Module):
    """x -> sum over `region` [B, r, r] of the logits of class `cls` [B]: one scalar per image (captum's target)."""

    def __init__(self, model: nn.Module, cls: torch.Tensor, region: torch.Tensor):
        super().__init__()
        self.model, self.cls, self.region = model, cls, region

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        picked = out[torch.arange(out.shape[0], device=out.device), self.cls]  # [B, r, r]
        return (picked * self.region).sum(dim=(1, 2))


def _norm(maps: torch.Tensor) -> torch.Tensor:
    flat = maps.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    return ((flat - lo) / (hi - lo).clamp(min=1e-12)).view_as(maps)


def _gradcam(model, spec, cfg, resolution, images, cls, region) -> tuple[torch.Tensor, str]:
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

    from resomap.explain.cam import cam_layer, sweep_cam_spec

    layer = cam_layer(model, sweep_cam_spec(spec, cfg), resolution, cfg.models.min_cam_size)
    targets = [SemanticSegmentationTarget(int(c), m.detach().cpu().numpy()) for c, m in zip(cls, region)]
    with GradCAM(model=model, target_layers=[layer.module]) as cam:  # weights are frozen: the graph starts at x
        maps = cam(input_tensor=images.detach().clone().requires_grad_(True), targets=targets)
    return torch.as_tensor(maps, dtype=torch.float32, device=images.device), layer.name


def _captum(method: str, model, images, cls, region, steps: int) -> torch.Tensor:
    from captum.attr import IntegratedGradients, Saliency

    wrapped = RegionScore(model, cls, region)
    if method == "saliency":
        attr = Saliency(wrapped).attribute(images, abs=True)
    else:
        attr = IntegratedGradients(wrapped).attribute(images, n_steps=steps, internal_batch_size=images.shape[0])
        attr = attr.abs()
    return attr.sum(1).float()


def region_probability(model, images, cls, region) -> torch.Tensor:
    """The class's mean softmax probability over the region, per image [B]."""
    with torch.no_grad():
        prob = model(images).float().softmax(1)
    picked = prob[torch.arange(len(cls), device=prob.device), cls]
    return (picked * region).sum((1, 2)) / region.sum((1, 2)).clamp(min=1)


def deletion_insertion(model, images, maps, cls, region, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Area under the region-score curve as the map's top pixels are removed (deletion: lower = better) or
    restored onto the baseline (insertion: higher = better); the baseline is 0 (the data mean after
    normalisation). Per image [B]."""
    b, _, h, w = images.shape
    order = maps.flatten(1).argsort(1, descending=True)
    baseline = torch.zeros_like(images)
    dele, ins = [], []
    for k in range(steps + 1):
        n = round(k / steps * h * w)
        keep = torch.zeros(b, h * w, device=images.device)
        keep.scatter_(1, order[:, :n], 1.0)
        keep = keep.view(b, 1, h, w)
        dele.append(region_probability(model, images * (1 - keep) + baseline * keep, cls, region))
        ins.append(region_probability(model, images * keep + baseline * (1 - keep), cls, region))
    auc = lambda curve: torch.trapezoid(torch.stack(curve, 1), dx=1.0 / steps, dim=1).cpu().numpy()  # noqa: E731
    return auc(dele), auc(ins)


def _probe(bundle, size: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """(normalised images, explained class per image, region at the model's resolution, raw indices)."""
    n = min(size, len(bundle.splits["test"]))
    images = bundle.normalize(bundle.images("test")[:n].to(device))
    masks = bundle.targets("test")[:n].to(device).long()  # reference side
    r = bundle.resolution
    small = F.interpolate(masks[:, None].float(), size=(r, r), mode="nearest")[:, 0].long()
    counts = np.asarray(bundle.train_pixel_counts, dtype=np.float64)
    rank = np.argsort(np.where(counts > 0, counts, np.inf))  # rarest first
    cls, regions = [], []
    for m in small:
        present = set(m.unique().tolist())
        k = next((int(c) for c in rank if int(c) in present and c != 0), int(m.max()))
        cls.append(k)
        regions.append((m == k).float())
    return images, torch.tensor(cls, device=device), torch.stack(regions), bundle.splits["test"][:n]


def explain_segmentation(model, spec, bundle, cfg, seed: int, out_dir: Path, device) -> Any:
    """Explain the probe set (see the module doc); returns resomap.stages.ExplainSummary."""
    from resomap.explain.registry import explaining
    from resomap.stages import ExplainSummary

    ec = cfg.explainability
    t0 = time.perf_counter()
    model = model.to(device).eval()
    images, cls, region, index = _probe(bundle, ec.probe_size, device)
    saved: dict[str, np.ndarray] = {"_index": np.asarray(index), "_class": cls.cpu().numpy()}
    metrics: dict[str, float] = {}
    failed: dict[str, str] = {}
    cam_name = None
    grid = ec.common_grid
    gen = torch.Generator().manual_seed(seed)
    rand = torch.rand(images.shape[0], *images.shape[-2:], generator=gen).to(device)
    steps = ec.faithfulness_steps
    with explaining(model):
        rd, ri = deletion_insertion(model, images, rand, cls, region, steps)
        share = float(region.mean().item())
        for method in ec.methods:
            try:
                if method == "gradcam":
                    maps, cam_name = _gradcam(model, spec, cfg, bundle.resolution, images, cls, region)
                else:
                    maps = _captum(method, model, images, cls, region, 16)
            except Exception as exc:  # one failing method must not lose the others (reported per method)
                failed[method] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                log.warning("segmentation %s failed: %s", method, failed[method])
                continue
            maps = _norm(maps.detach())
            d, i = deletion_insertion(model, images, maps, cls, region, steps)
            mass = float(((maps * region).sum((1, 2)) / maps.sum((1, 2)).clamp(min=1e-12)).mean())
            prefix = f"explain/{method}"
            metrics |= {
                f"{prefix}/deletion": float(d.mean()),
                f"{prefix}/deletion_random": float(rd.mean()),
                f"{prefix}/deletion_vs_random": float(rd.mean() - d.mean()),
                f"{prefix}/insertion": float(i.mean()),
                f"{prefix}/insertion_random": float(ri.mean()),
                f"{prefix}/insertion_vs_random": float(i.mean() - ri.mean()),
                f"{prefix}/mass": mass,
                f"{prefix}/mass_random": share,
            }
            saved[method] = F.interpolate(maps[:, None], size=(grid, grid), mode="bilinear")[:, 0].cpu().numpy()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MAPS_FILE
    np.savez_compressed(path, **saved)
    seconds = time.perf_counter() - t0
    log.info("segmentation explanations: %s (%.1fs)", ", ".join(k for k in saved if not k.startswith("_")), seconds)
    # maps=None: these maps are not in the format of the classification comparison (resomap.explain.crossres)
    return ExplainSummary(None, failed, cam_name, round(seconds, 2), metrics)


# ---------------------------------------------------------------- across resolutions


def _topk_iou(a: np.ndarray, b: np.ndarray, percent: float) -> float:
    k = max(1, int(a.size * percent / 100))
    ta, tb = np.argsort(a.ravel())[-k:], np.argsort(b.ravel())[-k:]
    return len(np.intersect1d(ta, tb)) / len(np.union1d(ta, tb))


def _agreement(a: np.ndarray, b: np.ndarray, percent: float) -> tuple[float, float]:
    """(mean Spearman rank correlation, mean top-k% IoU) over the images both map sets hold, image by image."""
    import warnings

    from scipy.stats import spearmanr

    with warnings.catch_warnings():  # a constant map has no rank correlation: NaN, left out of the mean
        warnings.simplefilter("ignore")
        rho = [spearmanr(x.ravel(), y.ravel()).statistic for x, y in zip(a, b)]
    iou = [_topk_iou(x, y, percent) for x, y in zip(a, b)]
    return float(np.nanmean(rho)), float(np.mean(iou))


def compare_maps(entries: list[tuple[str, int, int, Path]], top_k_percent: float) -> list[dict]:
    """Agreement rows of the saved seg_explanations.npz of (model, resolution, seed, folder) entries: per model and
    method, every pair of resolutions (kind 'resolution', seeds matched), the same resolution across seeds (kind
    'seed': the noise floor) and maps of different probe images (kind 'chance'). Maps are compared on the common
    grid they were saved at, only over probe images both hold."""
    loaded = {}
    for model, res, seed, folder in entries:
        path = Path(folder) / MAPS_FILE
        if path.is_file():
            with np.load(path) as npz:
                loaded[(model, res, seed)] = {k: npz[k] for k in npz.files}
    rows: list[dict] = []
    keys = sorted(loaded)
    for i, ka in enumerate(keys):
        for kb in keys[i + 1 :]:
            if ka[0] != kb[0]:
                continue
            kind = "seed" if ka[1] == kb[1] else ("resolution" if ka[2] == kb[2] else None)
            if kind is None:
                continue
            a, b = loaded[ka], loaded[kb]
            common, ia, ib = np.intersect1d(a["_index"], b["_index"], return_indices=True)
            for method in sorted(set(a) & set(b)):
                if method.startswith("_") or len(common) == 0:
                    continue
                rho, iou = _agreement(a[method][ia], b[method][ib], top_k_percent)
                row = {
                    "model": ka[0],
                    "method": method,
                    "kind": kind,
                    "resolution_a": ka[1],
                    "resolution_b": kb[1],
                    "seed_a": ka[2],
                    "seed_b": kb[2],
                    "n_images": len(common),
                    "spearman": rho,
                    "topk_iou": iou,
                }
                if kind == "resolution" and len(common) > 1:  # chance: each image against another image
                    crho, ciou = _agreement(a[method][ia], np.roll(b[method][ib], 1, axis=0), top_k_percent)
                    row |= {"chance_spearman": crho, "chance_topk_iou": ciou}
                rows.append(row)
    return rows
