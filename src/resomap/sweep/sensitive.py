"""The maps of the most resolution-sensitive images, the step of the sweep's summary phase (and of `resomap analyze`)
that explains on demand those outside the probe set: reports.sensitive_maps chooses them (up to 4 lost images per
model, the seed whose probe maps the report shows), explain.on_demand explains them from that seed's best
checkpoint at each resolution into explanations/sensitive_maps.npz (reused from the summary's earlier file while its
checkpoints, images and explainability settings are unchanged), and reports.sensitive_maps draws a figure per model,
figures/sensitive_images_<model>.png, logged to the parent run with the other figures."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from resomap.atomic import disk_full
from resomap.config import Config
from resomap.filecheck import check_zip

log = logging.getLogger(__name__)


def sensitive_maps(summary: Any, cfg: Config, out_dir: Path, previous_dir: Path | None = None) -> list[Path]:
    """explanations/sensitive_maps.npz in `out_dir` (the summary folder being built; `previous_dir`: where the
    summary's earlier files are, whose maps are reused) and the figure files per model; nothing when explanations
    are off or no image is lost. A failure is logged, never fatal (a full disk is raised: nothing else fits)."""
    if not cfg.explainability.enabled or not summary.sensitive_images:
        return []
    from resomap.explain.on_demand import maps_on_demand
    from resomap.reports.sensitive_maps import map_requests, on_demand_file, sensitive_figures

    try:
        requests = map_requests(out_dir, summary.sensitive_images, summary.trials)
        previous = on_demand_file(previous_dir) if previous_dir is not None else None
        if previous is not None and Path(previous).is_file() and check_zip(previous) is not None:
            previous = None  # cut short (the sweep named it): made again from the checkpoints, not read
        maps_on_demand(requests, cfg, on_demand_file(out_dir), previous)
        return sensitive_figures(out_dir, summary.sensitive_images, summary.trials, Path(out_dir) / "figures")
    except Exception as exc:
        if disk_full(exc) is not None:
            raise
        log.warning("maps of the sensitive images not made: %s: %s", type(exc).__name__, exc)
        return []
