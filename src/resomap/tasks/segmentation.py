"""Segmentation: logits [B, K, r, r], a class per pixel, the configured sum of loss terms (resomap.tasks.losses),
metrics at a reference resolution with per-image IoU/Dice/pixel accuracy/boundary F1 (resomap.tasks.seg_metrics),
and explanations of a class's logits summed over its region (resomap.explain.methods.targets). The summary reads
the per-image mIoU and boundary F1 (seg_predictions.csv); torch is imported where it is used."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from resomap.atomic import save_atomic
from resomap.records import SEG_OVERLAYS_FILE, SEG_RECORDS_FILE, ScoreTable, read_score_csv
from resomap.tasks.base import EvalContext, Evaluation, Fail, Loss, Score, Task, register_task

if TYPE_CHECKING:
    import torch
    from torch import nn

    from resomap.config.schema import Config
    from resomap.data.bundle import DataBundle
    from resomap.tasks.evaluation import EvalResult

TRIVIAL = "background_miou"  # seg_predictions.csv: the mIoU of predicting background everywhere, per image


@register_task("segmentation")
class SegmentationTask(Task):
    target_form = "region"
    headline = ("miou", "boundary_f1")
    trivial_words = "all background"
    section = "segmentation"
    output_rank = 4
    step_words = "segmentation loss on per-pixel labels"
    default_classes = 21  # torchvision's segmentation default (Pascal VOC)
    line_metrics = (("test/miou", "test mIoU"), ("test/boundary_f1", "boundary F1"))  # on the reference masks
    scores = (
        Score("miou", "image_miou", "mIoU per image"),
        Score("boundary_f1", "image_boundary_f1", "boundary F1 per image"),
    )
    records_file = SEG_RECORDS_FILE
    words = (
        ("test_accuracy", "pixel accuracy"),
        ("test_macro_f1", "mean Dice"),
        ("test_miou", "mIoU"),
        ("test_boundary_f1", "boundary F1"),
    )
    report_figures = (
        (SEG_OVERLAYS_FILE, "segmentation/overlays", "true and predicted masks of the first test images"),
    )

    def check(self, cfg: Config, fail: Fail) -> None:
        from resomap.tasks.losses import check_loss_names, loss_options

        seg = cfg.segmentation
        problem = check_loss_names(seg.loss, seg.loss_weights, self.name)
        if problem:
            fail("segmentation.loss", problem, list(seg.loss))
        if cfg.training.label_smoothing:
            fail("training.label_smoothing", "0 for segmentation", cfg.training.label_smoothing)
        if cfg.training.sample_weights != "none":
            fail("training.sample_weights", "none for segmentation", cfg.training.sample_weights)
        if seg.reference_resolution is not None and seg.reference_resolution < 1:
            fail("segmentation.reference_resolution", "null or a positive integer", seg.reference_resolution)
        if not 0 <= seg.boundary_tolerance < 0.5:
            fail("segmentation.boundary_tolerance", "a fraction of the side in [0, 0.5)", seg.boundary_tolerance)
        tversky = loss_options(cfg, "focal_tversky")
        for key in ("alpha", "beta", "gamma"):
            if not getattr(tversky, key) > 0:
                fail(f"loss.focal_tversky.{key}", "a positive number", getattr(tversky, key))

    def criterion(self, cfg: Config, data: DataBundle, device: torch.device) -> nn.Module:
        from resomap.tasks.losses import build_loss, pixel_class_weights

        weight = None
        if cfg.training.class_weights == "balanced":
            weight = pixel_class_weights(data.train_pixel_counts).to(device)
        return build_loss(cfg, int(data.num_classes), weight).to(device)

    def evaluate(self, ctx: EvalContext, loader: Iterable, prefix: str) -> Evaluation:
        """(metrics, per-image records (structured [N], seg_metrics.RECORD_COLUMNS), pixel confusion [K, K])."""
        from resomap.tasks.seg_metrics import evaluate

        return evaluate(ctx, loader, prefix)

    def test_outputs(self, found: EvalResult, ctx: EvalContext, bundle: DataBundle, title: str, out_dir: Path) -> None:
        from resomap.plotstyle import STYLE  # every figure printed at one dpi
        from resomap.tasks.seg_metrics import confusion_figure, overlay_figure

        out_dir.mkdir(parents=True, exist_ok=True)
        fig = confusion_figure(found.y_pred, bundle.class_names, f"{title}: test pixel confusion matrix")
        save_atomic(
            out_dir / "confusion_matrix.png",
            lambda tmp: fig.savefig(tmp, dpi=STYLE["savefig.dpi"], bbox_inches="tight"),
        )
        overlays = overlay_figure(ctx, bundle, title)
        save_atomic(out_dir / SEG_OVERLAYS_FILE, lambda tmp: overlays.savefig(tmp, dpi=STYLE["savefig.dpi"]))

    def write_records(self, matrix: Mapping[int, EvalResult], out_dir: Path) -> Path | None:
        """seg_predictions.csv: per test resolution and image, pixel accuracy, IoU, Dice and boundary F1."""
        from resomap.tasks.seg_metrics import write_records

        found = {res: f for res, f in matrix.items() if f.index is not None and len(f.index) == len(f.y_true)}
        if not found:
            return None
        path = out_dir / SEG_RECORDS_FILE
        write_records(path, next(iter(found.values())).index, {res: f.y_true for res, f in found.items()})
        return path

    def read_scores(self, folder: Path) -> dict[int, ScoreTable]:
        """seg_predictions.csv's per-image mIoU and boundary F1, and the all-background prediction's mIoU (NaN
        where an image has no score, or in a file from before that column)."""
        names = (*(s.name for s in self.scores), TRIVIAL)
        return read_score_csv(Path(folder) / SEG_RECORDS_FILE, names)

    def trivial_scores(
        self, scores: Mapping[str, np.ndarray], label: np.ndarray | None, train_counts: Sequence[int] | None = None
    ) -> np.ndarray | None:
        """Per image, the mIoU of predicting background everywhere (seg_metrics.SegScores.per_image), the same
        under every seed (the masks are): their mean over seeds; None without that column."""
        found = scores.get(TRIVIAL)
        if found is None or not np.isfinite(found).any():
            return None
        return np.asarray(found, dtype=np.float64).mean(axis=0)

    def probe_targets(
        self, bundle: DataBundle, rows: np.ndarray, device: torch.device
    ) -> tuple[torch.Tensor, np.ndarray]:
        """Per probe image the rarest class of the training masks present in its mask (background 0 only when
        nothing else is), over that class's pixels at the model's resolution: region targets, and those regions
        as the localisation masks."""
        import torch
        import torch.nn.functional as F

        from resomap.tasks.targets import region_targets

        masks = bundle.targets("test")[torch.as_tensor(rows, dtype=torch.int64)].long()  # reference side
        r = bundle.resolution
        small = F.interpolate(masks[:, None].float(), size=(r, r), mode="nearest")[:, 0].long()
        counts = np.asarray(bundle.train_pixel_counts, dtype=np.float64)
        rank = np.argsort(np.where(counts > 0, counts, np.inf), kind="stable")  # rarest first
        classes, regions = [], []
        for m in small:
            present = set(m.unique().tolist())
            k = next((int(c) for c in rank if int(c) in present and c != 0), int(m.max()))
            classes.append(k)
            regions.append(m == k)
        region = torch.stack(regions)
        return region_targets(torch.tensor(classes), region), region.numpy()

    def step_targets(self, out: torch.Tensor, cfg: Config | None = None) -> tuple[torch.Tensor, Loss]:
        """Random per-pixel labels and the configured segmentation loss (segmentation.loss, loss.<term>.*)."""
        import torch

        from resomap.tasks.losses import build_loss

        classes = out.shape[1]
        y = torch.randint(0, classes, (out.shape[0], *out.shape[-2:]), device=out.device)
        return y, build_loss(cfg, classes).to(out.device)
