"""Batched train-time augmentation on the device: one affine resample, vectorised jitter, per-sample blur.

Random parameters are drawn on the CPU from the loader's generator (seeded from seed + epoch), so batches are
the same on every device and a resumed run sees the same augmentation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from resomap.config.schema import AugmentationConfig


class BatchAugment:
    """Random resized crop + flips (affine_grid/grid_sample), brightness/contrast, and Gaussian blur at high res."""

    def __init__(self, cfg: AugmentationConfig, resolution: int):
        self.cfg = cfg
        self.resolution = resolution
        high = resolution >= cfg.high_resolution
        self.scale_min = cfg.crop_scale_min if high else cfg.crop_scale_min_low
        self.blur_active = high and cfg.blur_prob > 0 and cfg.blur_sigma_max > 0
        self.sigma_max = cfg.blur_sigma_max * resolution / 224  # blur_sigma_max is given for a 224 px image

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """x: float [B, C, r, r] in [0, 1] on any device -> augmented batch, same shape, in [0, 1]."""
        x = self._geometry(x, gen)
        x = self._jitter(x, gen)
        if self.blur_active:
            x = self._blur(x, gen)
        return x.clamp_(0.0, 1.0)

    def pair(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Segmentation: x as in __call__ and its class-index masks y [B, r, r] moved by the same crop and flips
        (nearest-neighbour, so classes never mix); jitter and blur touch the image only. The random draws are
        those of __call__, in the same order."""
        x, y = self._geometry(x, gen, y)
        x = self._jitter(x, gen)
        if self.blur_active:
            x = self._blur(x, gen)
        return x.clamp_(0.0, 1.0), y

    def _geometry(self, x: torch.Tensor, gen: torch.Generator, masks: torch.Tensor | None = None):
        b, cfg = x.shape[0], self.cfg
        u = torch.rand(b, 6, generator=gen)
        if self.scale_min >= 1.0 and cfg.hflip <= 0 and cfg.vflip <= 0:
            return x if masks is None else (x, masks)
        area = self.scale_min + (1.0 - self.scale_min) * u[:, 0]
        log_ratio = math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * u[:, 1]
        ratio = torch.exp(log_ratio)
        w = torch.sqrt(area * ratio).clamp(max=1.0)  # half-extents in the [-1, 1] grid are w and h
        h = torch.sqrt(area / ratio).clamp(max=1.0)
        tx = (1.0 - w) * (2 * u[:, 2] - 1)
        ty = (1.0 - h) * (2 * u[:, 3] - 1)
        fx = torch.where(u[:, 4] < cfg.hflip, -1.0, 1.0)
        fy = torch.where(u[:, 5] < cfg.vflip, -1.0, 1.0)
        theta = torch.zeros(b, 2, 3)
        theta[:, 0, 0], theta[:, 0, 2] = w * fx, tx
        theta[:, 1, 1], theta[:, 1, 2] = h * fy, ty
        theta = theta.to(device=x.device, dtype=x.dtype)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        if masks is None:
            return out
        moved = F.grid_sample(
            masks[:, None].to(x.dtype), grid, mode="nearest", padding_mode="reflection", align_corners=False
        )
        return out, moved[:, 0].round().to(masks.dtype)

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
