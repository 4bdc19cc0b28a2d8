"""Segmentation metrics at a stated reference resolution, so that numbers compare across training resolutions.

Protocol: the model's logits at its own resolution r are resized to the reference masks' side R with bilinear
interpolation (align_corners=False) and then argmax-ed ("bilinear-logit resampling"); the reference masks were
made from the full-size class-index masks with nearest-neighbour resampling (data.masks). R is
segmentation.reference_resolution, or the dataset's own mask side, or the largest sweep resolution.

Per image and class the counts tp/fp/fn come from segmentation-models-pytorch's `metrics.get_stats`; IoU, Dice
(= F1 of the pixels), pixel accuracy and their means follow. Dataset numbers pool the counts over images
(per-class IoU = sum tp / sum (tp + fp + fn)); a class that is neither in the masks nor predicted is left out of
the mean. `accuracy` = pixel accuracy and `macro_f1` = mean Dice, so the classification summary reads them as is.

Boundary F1 (Csurka et al. 2013's BF score): a pixel is on a class's boundary when one of its 8 neighbours has
another class (image edges do not count); a predicted boundary pixel matches when a true boundary pixel of that
class lies within the tolerance (Chebyshev distance <= d, d = max(1, round(boundary_tolerance * R))), and the
reverse for recall. Written here with max-pooling because none of the installed libraries (smp, torchmetrics,
scikit-image) computes it batched on the device.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from resomap.data.bundle import DataBundle
    from resomap.tasks.base import EvalContext

RECORD_COLUMNS = ("pixel_accuracy", "miou", "mdice", "boundary_f1", "background_miou")


def tolerance_px(reference: int, fraction: float) -> int:
    """The boundary tolerance in pixels at the reference side."""
    return max(1, round(fraction * reference))


def resize_logits(logits: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bilinear (align_corners=False) resampling of logits [B, K, h, w] to `size` (a no-op when equal), antialiased
    when it shrinks (reference masks smaller than the model's resolution), like every other resize."""
    if tuple(logits.shape[-2:]) == tuple(size):
        return logits
    shrinks = size[0] < logits.shape[-2] or size[1] < logits.shape[-1]  # upsampling: the same without the filter
    return F.interpolate(logits.float(), size=size, mode="bilinear", align_corners=False, antialias=shrinks)


def boundaries(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """bool [B, K, H, W]: the pixels of class k with an 8-neighbour of another class (edges replicated)."""
    onehot = F.one_hot(labels.long(), num_classes).permute(0, 3, 1, 2).float()
    padded = F.pad(onehot, (1, 1, 1, 1), mode="replicate")
    eroded = -F.max_pool2d(-padded, 3, stride=1)
    return (onehot > 0) & (eroded < 1)


def _dilate(mask: torch.Tensor, radius: int) -> torch.Tensor:
    return F.max_pool2d(mask.float(), 2 * radius + 1, stride=1, padding=radius) > 0


def boundary_counts(pred: torch.Tensor, target: torch.Tensor, num_classes: int, tolerance: int) -> torch.Tensor:
    """int64 [B, K, 4]: matched predicted boundary pixels, predicted boundary pixels, matched true boundary
    pixels, true boundary pixels (precision = [0] / [1], recall = [2] / [3])."""
    pb, tb = boundaries(pred, num_classes), boundaries(target, num_classes)
    matched_p = (pb & _dilate(tb, tolerance)).sum(dim=(2, 3))
    matched_t = (tb & _dilate(pb, tolerance)).sum(dim=(2, 3))
    return torch.stack([matched_p, pb.sum(dim=(2, 3)), matched_t, tb.sum(dim=(2, 3))], dim=-1).long()


def pixel_stats(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """int64 [B, K, 3]: tp, fp, fn per image and class (segmentation-models-pytorch's get_stats)."""
    from segmentation_models_pytorch.metrics import get_stats

    tp, fp, fn, _ = get_stats(pred.long(), target.long(), mode="multiclass", num_classes=num_classes)
    return torch.stack([tp, fp, fn], dim=-1).long()


def confusion(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """int64 [K, K], rows = true class, columns = predicted (one bincount: no library call needed)."""
    idx = target.reshape(-1).long() * num_classes + pred.reshape(-1).long()
    return torch.bincount(idx, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _f1(p: np.ndarray, r: np.ndarray, exists: np.ndarray) -> np.ndarray:
    """F1 of precision/recall; 0 where one side has boundary pixels and the other none; NaN where neither."""
    p0, r0 = np.nan_to_num(p), np.nan_to_num(r)
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(p0 + r0 > 0, 2 * p0 * r0 / np.maximum(p0 + r0, 1e-12), 0.0)
    return np.where(exists, f1, np.nan)


def _nanmean(a: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    with np.errstate(invalid="ignore"), np.testing.suppress_warnings() as sup:
        sup.filter(RuntimeWarning)
        return np.nanmean(a, axis=axis)


def background_miou(mask_pixels: np.ndarray) -> np.ndarray:
    """Per image, the mIoU of predicting class 0 (background) everywhere, from the mask's pixels per class [N, K]:
    class 0's IoU is its share of the image, every other class in the mask scores 0, classes in neither are left
    out, as in per_image's mIoU."""
    counts = np.asarray(mask_pixels, dtype=np.float64)
    total = counts.sum(axis=1)
    iou0 = _ratio(counts[:, 0], total)
    present = 1 + (counts[:, 1:] > 0).sum(axis=1)  # background is predicted, so its class always counts
    return np.where(total > 0, iou0 / present, np.nan)


@dataclass
class SegScores:
    """Counts gathered over a split (per image and class); every metric derives from them."""

    num_classes: int
    stats: np.ndarray  # int64 [N, K, 3] tp, fp, fn
    bounds: np.ndarray  # int64 [N, K, 4] (see boundary_counts)
    confusion: np.ndarray  # int64 [K, K]
    reference: int  # side of the masks the scores were computed on
    tolerance: int  # boundary tolerance in pixels at that side
    extra: dict = field(default_factory=dict)

    @property
    def per_class_iou(self) -> np.ndarray:
        tp, fp, fn = self.stats.sum(0).T
        return _ratio(tp, tp + fp + fn)

    @property
    def per_class_dice(self) -> np.ndarray:
        tp, fp, fn = self.stats.sum(0).T
        return _ratio(2 * tp, 2 * tp + fp + fn)

    @property
    def per_class_boundary_f1(self) -> np.ndarray:
        mp, np_, mt, nt = self.bounds.sum(0).T
        return _f1(_ratio(mp, np_), _ratio(mt, nt), (np_ + nt) > 0)

    @property
    def pixel_accuracy(self) -> float:
        total = self.confusion.sum()
        return float(np.trace(self.confusion) / total) if total else math.nan

    def per_image(self) -> dict[str, np.ndarray]:
        """float [N] per RECORD_COLUMNS (means over the classes present in the image's mask or prediction)."""
        tp, fp, fn = np.moveaxis(self.stats, -1, 0)
        iou, dice = _ratio(tp, tp + fp + fn), _ratio(2 * tp, 2 * tp + fp + fn)
        mp, np_, mt, nt = np.moveaxis(self.bounds, -1, 0)
        bf = _f1(_ratio(mp, np_), _ratio(mt, nt), (np_ + nt) > 0)
        pixels = (tp + fn).sum(1)
        return {
            "pixel_accuracy": _ratio(tp.sum(1), pixels),
            "miou": _nanmean(iou, 1),
            "mdice": _nanmean(dice, 1),
            "boundary_f1": _nanmean(bf, 1),
            "background_miou": background_miou(tp + fn),
        }

    def metrics(self, prefix: str) -> dict[str, float]:
        iou, dice, bf = self.per_class_iou, self.per_class_dice, self.per_class_boundary_f1
        out = {
            f"{prefix}/accuracy": self.pixel_accuracy,
            f"{prefix}/miou": float(_nanmean(iou)),
            f"{prefix}/mdice": float(_nanmean(dice)),
            f"{prefix}/macro_f1": float(_nanmean(dice)),  # pixel macro-F1 = mean Dice
            f"{prefix}/boundary_f1": float(_nanmean(bf)),
        }
        for k in range(self.num_classes):  # per class only where defined (the class is in masks or predictions)
            for name, values in (("iou", iou), ("dice", dice), ("boundary_f1", bf)):
                if math.isfinite(values[k]):
                    out[f"{prefix}/{name}_c{k}"] = float(values[k])
        return out


class SegAccumulator:
    """Feed (logits at any size, target masks [B, R, R]) batch by batch; `scores()` at the end."""

    def __init__(self, num_classes: int, boundary_tolerance: float):
        self.num_classes, self.fraction = num_classes, boundary_tolerance
        self._stats: list[torch.Tensor] = []
        self._bounds: list[torch.Tensor] = []
        self._conf: torch.Tensor | None = None
        self.reference = 0

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Adds a batch; returns the prediction at the target's size (int64 [B, R, R])."""
        self.reference = int(target.shape[-1])
        pred = resize_logits(logits, tuple(target.shape[-2:])).argmax(1)
        k = self.num_classes
        self._stats.append(pixel_stats(pred, target, k).cpu())
        tol = tolerance_px(self.reference, self.fraction)
        self._bounds.append(boundary_counts(pred, target, k, tol).cpu())
        conf = confusion(pred, target, k)
        self._conf = conf if self._conf is None else self._conf + conf
        return pred

    def scores(self) -> SegScores:
        k = self.num_classes
        stats = torch.cat(self._stats).numpy() if self._stats else np.zeros((0, k, 3), np.int64)
        bounds = torch.cat(self._bounds).numpy() if self._bounds else np.zeros((0, k, 4), np.int64)
        conf = self._conf.cpu().numpy() if self._conf is not None else np.zeros((k, k), np.int64)
        ref = self.reference
        return SegScores(k, stats, bounds, conf, ref, tolerance_px(ref, self.fraction) if ref else 0)


def records_array(scores: SegScores) -> np.ndarray:
    """The per-image scores as one structured array (fields RECORD_COLUMNS), aligned with the loader's order."""
    per = scores.per_image()
    n = len(scores.stats)
    out = np.zeros(n, dtype=[(name, np.float64) for name in RECORD_COLUMNS])
    for name in RECORD_COLUMNS:
        out[name] = per[name]
    return out


def evaluate(ctx: EvalContext, loader: Iterable, prefix: str) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """The segmentation task's evaluation: (metrics, per-image records (structured [N]), confusion [K, K]).

    The loss is plain cross-entropy on the logits resampled to the reference masks (as the classification loss is
    plain cross-entropy), the metrics those of SegScores.metrics. The model's train/eval mode is restored."""
    num_classes = ctx.num_classes
    acc: SegAccumulator | None = None
    loss_sum = torch.zeros((), device=ctx.device)
    pixels = 0
    with ctx.evaluating():
        for x, y in loader:
            out = ctx.logits(x)
            if acc is None:
                acc = SegAccumulator(int(num_classes or out.shape[1]), ctx.cfg.segmentation.boundary_tolerance)
            logits = resize_logits(out.float(), tuple(y.shape[-2:]))
            loss_sum += F.cross_entropy(logits, y, reduction="sum")
            pixels += y.numel()
            acc.update(logits, y)
    if acc is None:
        k = int(num_classes or 1)
        return (
            {f"{prefix}/loss": math.nan},
            np.zeros(0, dtype=[(c, np.float64) for c in RECORD_COLUMNS]),
            np.zeros((k, k), np.int64),
        )
    scores = acc.scores()
    metrics = {f"{prefix}/loss": float(loss_sum.item() / max(pixels, 1))}
    metrics.update(scores.metrics(prefix))
    metrics[f"{prefix}/reference_resolution"] = float(scores.reference)
    metrics[f"{prefix}/boundary_tolerance_px"] = float(scores.tolerance)
    return metrics, records_array(scores), scores.confusion


def confusion_figure(cm: np.ndarray, class_names, title: str):
    """Row-normalised pixel confusion matrix (counts and rates), a matplotlib Figure (Agg)."""
    from resomap.tasks.metrics import counts_figure

    return counts_figure(cm, class_names, title, unit="true class's pixels")


def write_records(path, index: np.ndarray, records_by_res: dict[int, np.ndarray]) -> None:
    """seg_predictions.csv: test_resolution, index, then RECORD_COLUMNS per test image (NaN written empty)."""
    import csv
    import io

    from resomap.atomic import write_text

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(("test_resolution", "index", *RECORD_COLUMNS))
    for res in sorted(records_by_res):
        rec = records_by_res[res]
        for i, row in zip(index, rec):
            values = ["" if not math.isfinite(float(v)) else f"{float(v):.6g}" for v in row]
            writer.writerow((res, int(i), *values))
    write_text(path, buf.getvalue())


def overlay_figure(ctx: EvalContext, bundle: DataBundle, title: str, n: int = 4) -> Figure:
    """The first `n` test images with their true and predicted masks (at the reference side) as a Figure: the
    prediction overlays a trial writes as seg_overlays.png (logged to MLflow with the trial's figures)."""
    from matplotlib.figure import Figure

    from resomap.plotstyle import class_labels, glyph_fonts

    n = min(n, len(bundle.splits["test"]))
    images = bundle.images("test")[:n]
    target = bundle.targets("test")[:n].long()
    with ctx.evaluating():
        logits = ctx.logits(bundle.normalize(images.to(ctx.device)), forward=ctx.model)
    pred = resize_logits(logits.float(), tuple(target.shape[-2:])).argmax(1).cpu()
    k = bundle.num_classes
    fig = Figure(figsize=(3 * n, 6.4), layout="constrained")
    axes = fig.subplots(2, n, squeeze=False)
    for i in range(n):
        img = images[i].float().mean(0).numpy()
        for row, (mask, name) in enumerate(((target[i], "true"), (pred[i], "predicted"))):
            ax = axes[row][i]
            ax.imshow(img, cmap="gray", extent=(0, 1, 1, 0))
            shown = np.ma.masked_where(mask.numpy() == 0, mask.numpy())
            ax.imshow(
                shown,
                cmap="tab10",
                vmin=0,
                vmax=max(k - 1, 1),
                alpha=0.55,
                extent=(0, 1, 1, 0),
                interpolation="nearest",
            )
            ax.set_title(f"#{int(bundle.splits['test'][i])} {name}", fontsize=8)
            ax.axis("off")
    names = class_labels(bundle.class_names)[1:]  # by index where no installed font draws one
    fig.suptitle(f"{title}: classes {', '.join(names)} over the image ({bundle.resolution} px in)")
    glyph_fonts(fig)
    return fig
