"""The task axis (experiment.task: classification | segmentation) and the config checks that go with it.

Each model declares its task when registered (`register_model(..., task=...)`, `timm:<name>` classifies) and each
dataset in its registry metadata (`task="segmentation"`; default classification). A config whose models, dataset,
loss or explainers do not fit its task fails on load with one line naming the key (exit 2, before any training).
Only the registries are read: no model is built and no heavy library is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TASKS = ("classification", "segmentation")
# explainers whose segmentation form exists (resomap.explain.segmentation: a class's summed logit over a region)
SEGMENTATION_EXPLAINERS = ("gradcam", "saliency", "integrated_gradients")


def dataset_task(name: str) -> str:
    import resomap.data  # noqa: F401  (registers the built-in datasets)
    from resomap.data.registry import DATASETS

    return str(DATASETS.meta(name).get("task", "classification"))


def check(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """fail(path, expected, got) on the first key that does not fit cfg.experiment.task."""
    from resomap.errors import UnknownNameError
    from resomap.models.registry import model_task

    task = cfg.experiment.task
    names = list(cfg.sweep.models) + [pair[0] for pair in cfg.sweep.include]
    for name in names:
        try:
            found = model_task(name)
        except UnknownNameError:
            continue  # reported with its suggestions where models are resolved
        if found != task:
            fail("sweep.models", f"{task} models (experiment.task={task})", f"{name} ({found} model)")
    try:
        data_task = dataset_task(cfg.data.dataset)
    except UnknownNameError:
        data_task = task
    if data_task != task:
        fail("data.dataset", f"a {task} dataset (experiment.task={task})", f"{cfg.data.dataset} ({data_task})")
    if task != "segmentation":
        return
    from resomap.training.losses import check_loss_names

    seg = cfg.segmentation
    problem = check_loss_names(seg.loss, seg.loss_weights)
    if problem:
        fail("segmentation.loss", problem, list(seg.loss))
    if cfg.training.label_smoothing:
        fail("training.label_smoothing", "0 for segmentation", cfg.training.label_smoothing)
    if seg.reference_resolution is not None and seg.reference_resolution < 1:
        fail("segmentation.reference_resolution", "null or a positive integer", seg.reference_resolution)
    if not 0 <= seg.boundary_tolerance < 0.5:
        fail("segmentation.boundary_tolerance", "a fraction of the side in [0, 0.5)", seg.boundary_tolerance)
    for key in ("tversky_alpha", "tversky_beta", "tversky_gamma"):
        if getattr(seg, key) <= 0:
            fail(f"segmentation.{key}", "a positive number", getattr(seg, key))
    ex = cfg.explainability
    if ex.enabled:
        for key in ("methods", "sanity_methods"):
            bad = [m for m in getattr(ex, key) if m.lower() not in SEGMENTATION_EXPLAINERS]
            if bad:
                fail(
                    f"explainability.{key}",
                    f"explainers with a segmentation form ({', '.join(SEGMENTATION_EXPLAINERS)})",
                    bad,
                )
