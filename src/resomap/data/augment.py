"""Batched train-time augmentation on the device: random resized crop + flips, vectorised jitter, per-sample blur.

One recipe at every resolution by default: the crop's area fraction, the flips, the jitter and the blur (its sigma
given for a 224 px image and scaled with the resolution) are the same operations relative to the image at 32 px and
at 512 px, so the factor under study is not also a change of augmentation. `resolution_aware` (an explicit option)
brings back the recipe that varies with resolution: stronger crops and the blur only at and above
`high_resolution`; `describe()` says which recipe a trial trained with (result.json, MLflow).

Every rescaling is antialiased, as in the resolution cache and at test time: the crop box is cut on whole pixels and
resized with torchvision's `resized_crop(antialias=True)` (bilinear with an antialiasing filter when shrinking, the
same operation as the cache's PIL resize), class-index masks with nearest neighbour.

Optional turns for images with no preferred orientation (solar cells): quarter turns (`rot90`, exact, no
resampling) and a small rotation and shift (`rotate_degrees`, `translate`) resampled bilinearly in one batched
`grid_sample` (no change of scale, so there is nothing to antialias; torchvision's affine takes one angle per
call). Their random draws are taken only when they are on, so a recipe without them draws as before.

Random parameters are drawn on the CPU from the loader's generator (seeded from seed + epoch), so batches are
the same on every device and a resumed run sees the same augmentation.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from resomap.config.schema import AugmentationConfig

RECIPE_ONE = "one recipe at every resolution"
RECIPE_AWARE = "resolution-aware ({} recipe at {} px; the recipe varies with resolution)"


class BatchAugment:
    """Random resized crop + flips (torchvision, antialiased), brightness/contrast, and Gaussian blur."""

    def __init__(self, cfg: AugmentationConfig, resolution: int):
        self.cfg = cfg
        self.resolution = resolution
        high = cfg.resolution_aware and resolution >= cfg.high_resolution
        self.scale_min = cfg.crop_scale_min_high if high else cfg.crop_scale_min
        blur_here = high or not cfg.resolution_aware
        self.blur_active = blur_here and cfg.blur_prob > 0 and cfg.blur_sigma_max > 0
        self.sigma_max = cfg.blur_sigma_max * resolution / 224  # blur_sigma_max is given for a 224 px image
        self._high = high

    def describe(self) -> dict[str, Any]:
        """The recipe this resolution trains with, for result.json and MLflow."""
        cfg = self.cfg
        if cfg.resolution_aware:
            recipe = RECIPE_AWARE.format("high-resolution" if self._high else "low-resolution", self.resolution)
        else:
            recipe = RECIPE_ONE
        return {
            "enabled": True,
            "recipe": recipe,
            "resolution_aware": bool(cfg.resolution_aware),
            "crop_scale_min": float(self.scale_min),
            "hflip": float(cfg.hflip),
            "vflip": float(cfg.vflip),
            "brightness": float(cfg.brightness),
            "contrast": float(cfg.contrast),
            "blur_prob": float(cfg.blur_prob) if self.blur_active else 0.0,
            "blur_sigma_max_px": round(float(self.sigma_max), 4) if self.blur_active else 0.0,
            "rot90": float(cfg.rot90),
            "rotate_degrees": float(cfg.rotate_degrees),
            "translate": float(cfg.translate),
            "resampling": "torchvision resized_crop, bilinear, antialias=True (masks: nearest)",
        }

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """x: float [B, C, r, r] in [0, 1] on any device -> augmented batch, same shape, in [0, 1]."""
        x = self._turn(self._geometry(x, gen), gen)
        x = self._jitter(x, gen)
        if self.blur_active:
            x = self._blur(x, gen)
        return x.clamp_(0.0, 1.0)

    def pair(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Segmentation: x as in __call__ and its class-index masks y [B, r, r] moved by the same crop and flips
        (nearest-neighbour, so classes never mix); jitter and blur touch the image only. The random draws are
        those of __call__, in the same order."""
        x, y = self._geometry(x, gen, y)
        x, y = self._turn(x, gen, y)
        x = self._jitter(x, gen)
        if self.blur_active:
            x = self._blur(x, gen)
        return x.clamp_(0.0, 1.0), y

    def crop_boxes(self, u: torch.Tensor, height: int, width: int) -> list[tuple[int, int, int, int]]:
        """(top, left, h, w) in whole pixels per sample from uniform draws u [B, >=4]: area fraction a in
        [scale_min, 1], aspect ratio log-uniform within torchvision's RandomResizedCrop range [3/4, 4/3] narrowed to
        [a, 1/a], the ratios whose box fits inside the image (so a crop of the whole area is the image itself, never
        a squeezed one), each side at most the image's."""
        area = self.scale_min + (1.0 - self.scale_min) * u[:, 0]
        lo = torch.clamp(torch.log(area), min=math.log(3 / 4))
        hi = torch.clamp(-torch.log(area), max=math.log(4 / 3))
        ratio = torch.exp(lo + (hi - lo) * u[:, 1])
        boxes = []
        for a, r, ut, ul in zip(area.tolist(), ratio.tolist(), u[:, 2].tolist(), u[:, 3].tolist(), strict=True):
            w = min(width, max(1, round(math.sqrt(a * r) * width)))
            h = min(height, max(1, round(math.sqrt(a / r) * height)))
            top = min(height - h, int(ut * (height - h + 1)))
            left = min(width - w, int(ul * (width - w + 1)))
            boxes.append((top, left, h, w))
        return boxes

    def _geometry(self, x: torch.Tensor, gen: torch.Generator, masks: torch.Tensor | None = None):
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2 import functional as TF

        cfg = self.cfg
        u = torch.rand(x.shape[0], 6, generator=gen)
        if self.scale_min >= 1.0 and cfg.hflip <= 0 and cfg.vflip <= 0:
            return x if masks is None else (x, masks)
        hgt, wid = x.shape[-2:]
        hflip, vflip = (u[:, 4] < cfg.hflip).tolist(), (u[:, 5] < cfg.vflip).tolist()
        out, moved = torch.empty_like(x), None if masks is None else torch.empty_like(masks)
        for i, (top, left, h, w) in enumerate(self.crop_boxes(u, hgt, wid)):
            dims = [d for d, flip in ((-1, hflip[i]), (-2, vflip[i])) if flip]
            same = (h, w) == (hgt, wid)
            img = x[i] if same else TF.resized_crop(x[i], top, left, h, w, [hgt, wid], antialias=True)
            out[i] = img.flip(dims) if dims else img
            if moved is not None:
                m = masks[i : i + 1]
                if not same:
                    m = TF.resized_crop(m, top, left, h, w, [hgt, wid], InterpolationMode.NEAREST)
                moved[i] = (m.flip(dims) if dims else m)[0]
        return out if moved is None else (out, moved)

    def _turn(self, x: torch.Tensor, gen: torch.Generator, masks: torch.Tensor | None = None):
        """Quarter turns, then a small rotation and shift, per sample. Masks turn with their image (nearest
        neighbour for the small rotation, so classes never mix)."""
        cfg = self.cfg
        out = x if masks is None else (x, masks)
        if cfg.rot90 <= 0 and cfg.rotate_degrees <= 0 and cfg.translate <= 0:
            return out
        b, hgt, wid = x.shape[0], x.shape[-2], x.shape[-1]
        u = torch.rand(b, 5, generator=gen)
        turns = torch.where(u[:, 0] < cfg.rot90, 1 + (u[:, 1] * 3).floor().clamp(max=2), 0).long().tolist()
        if any(turns):
            if hgt != wid:
                raise ValueError(f"data.augmentation.rot90 needs square images, got {hgt} x {wid}")
            x = torch.stack([img.rot90(t, dims=(-2, -1)) if t else img for img, t in zip(x, turns, strict=True)])
            if masks is not None:
                masks = torch.stack([m.rot90(t, dims=(-2, -1)) if t else m for m, t in zip(masks, turns, strict=True)])
        if cfg.rotate_degrees > 0 or cfg.translate > 0:
            angle = (2 * u[:, 2] - 1) * math.radians(cfg.rotate_degrees)
            shift = (2 * u[:, 3:5] - 1) * 2 * cfg.translate  # affine_grid's coordinates span [-1, 1]: 2 per side
            cos, sin = torch.cos(angle), torch.sin(angle)
            theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
            theta = theta.to(x.device, torch.float32)
            grid = F.affine_grid(theta, [b, 1, hgt, wid], align_corners=False)
            x = F.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode="reflection", align_corners=False)
            if masks is not None:
                moved = F.grid_sample(
                    masks[:, None].float(), grid, mode="nearest", padding_mode="border", align_corners=False
                )
                masks = moved[:, 0].round().to(masks.dtype)
        return x if masks is None else (x, masks)

    def _jitter(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        b, cfg = x.shape[0], self.cfg
        u = torch.rand(b, 2, generator=gen)
        if cfg.brightness <= 0 and cfg.contrast <= 0:
            return x
        bright = 1.0 + cfg.brightness * (2 * u[:, 0] - 1)
        contrast = 1.0 + cfg.contrast * (2 * u[:, 1] - 1)
        bright = bright.to(x.device, x.dtype).view(b, 1, 1, 1)
        contrast = contrast.to(x.device, x.dtype).view(b, 1, 1, 1)
        x = x * bright
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - mean) * contrast + mean

    def _blur(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        # torchvision's gaussian_blur takes one sigma per call; a grouped separable conv blurs every sample with
        # its own sigma in one op (sigma 0 = identity kernel for the samples that are not blurred).
        b, c, hgt, wid = x.shape
        u = torch.rand(b, 2, generator=gen)
        sigma = torch.where(u[:, 0] < self.cfg.blur_prob, 0.1 + (self.sigma_max - 0.1) * u[:, 1], 0.0)
        radius = max(1, math.ceil(3 * self.sigma_max))
        radius = min(radius, (min(hgt, wid) - 1) // 2)
        t = torch.arange(-radius, radius + 1, dtype=torch.float32)
        kernel = torch.exp(-(t[None] ** 2) / (2 * sigma.clamp(min=1e-6)[:, None] ** 2))
        kernel = kernel / kernel.sum(dim=1, keepdim=True)  # [B, k]; sigma 0 -> one-hot centre
        kernel = kernel.repeat_interleave(c, dim=0).to(x.device, x.dtype)  # [B*C, k]
        k = kernel.shape[1]
        y = x.reshape(1, b * c, hgt, wid)
        y = F.conv2d(F.pad(y, (radius, radius, 0, 0), mode="reflect"), kernel.view(b * c, 1, 1, k), groups=b * c)
        y = F.conv2d(F.pad(y, (0, 0, radius, radius), mode="reflect"), kernel.view(b * c, 1, k, 1), groups=b * c)
        return y.reshape(b, c, hgt, wid)
