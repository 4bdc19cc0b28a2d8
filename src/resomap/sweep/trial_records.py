"""What a trial records about its data and recipe (result.json `data`, MLflow tags): the split, the classes, the
augmentation and the training recipe."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from resomap.config import Config


def data_record(bundle: Any) -> dict[str, Any]:
    """What a trial trained on, for result.json and MLflow's dataset inputs: the dataset and its options, a digest
    of the classes and of the raw-image indices of each split (same digest = same images in the same splits, at
    any resolution), and the split sizes."""
    import numpy as np

    h = hashlib.sha256(json.dumps([bundle.dataset, bundle.variant, list(bundle.class_names)]).encode())
    for split in sorted(bundle.splits):
        h.update(split.encode())
        h.update(np.asarray(bundle.splits[split], dtype=np.int64).tobytes())
    return {
        "name": bundle.dataset,
        "options": bundle.variant,
        "digest": h.hexdigest()[:12],
        "splits": {split: len(bundle.splits[split]) for split in sorted(bundle.splits)},
        "classes": list(bundle.class_names),
        "train_counts": train_counts(bundle),
        "channels": int(bundle.channels),
        "bit_depth": getattr(bundle, "depth", None),  # image files: the depth found and how it was read (data.images)
        "data_seed": int(bundle.data_seed),
        "augmentation": augmentation_record(bundle),
        "groups": groups_record(bundle),
    }


def train_counts(bundle: Any) -> list[int] | None:
    """The training split's image count per class (the trivial predictor answers its most frequent class:
    summary.uncertainty); None where the split has no class labels (segmentation)."""
    import numpy as np

    labels = getattr(bundle, "train_labels", None)
    names = list(getattr(bundle, "class_names", None) or [])
    if labels is None or not names or not len(labels):
        return None
    labels = np.asarray(labels, dtype=np.int64)
    if labels.min() < 0 or labels.max() >= len(names):
        return None
    return [int(n) for n in np.bincount(labels, minlength=len(names))]


def groups_record(bundle: Any) -> dict[str, dict[str, list]]:
    """The groups the dataset declares, for the test images: name -> {"names": the codes' names, "index": the test
    images' raw-dataset indices, "code": each one's code}; what the summary decides each group on (summary.groups)."""
    test = [int(i) for i in bundle.splits.get("test", [])]
    return {
        name: {"names": list(names), "index": test, "code": [int(codes[i]) for i in test]}
        for name, (codes, names) in (getattr(bundle, "groups", None) or {}).items()
    }


def recipe_record(cfg: Config) -> dict[str, str]:
    """How the trial was trained, in words, for result.json and the summary's "Training recipe" line: the class
    imbalance treatment, the learning rate, the weights evaluated, the stopping rule and test-time augmentation."""
    tc = cfg.training
    imbalance = {"balanced": "the loss weighted by inverse class frequency", "none": "none"}[tc.class_weights]
    if tc.sample_weights == "confidence":
        imbalance += ", each image also weighted by its label's confidence"
    es = tc.early_stopping
    stop = f"at most {tc.epochs} epochs"
    if es.enabled:
        smooth = f" (smoothed, weight {es.smoothing:g})" if es.smoothing < 1 else ""
        stop += f"; early stopping when {es.monitor}{smooth} did not improve for {es.patience} epochs"
        stop += f", not before epoch {es.min_epochs}" if es.min_epochs else ""
    if tc.max_minutes is not None:
        stop += f"; at most {tc.max_minutes:g} minutes"
    return {
        "class_imbalance": imbalance,
        "learning_rate": "the LR range test's (training.lr_find)" if tc.lr_find.enabled else f"{tc.optimizer.lr:g}",
        "schedule": tc.scheduler.name,
        "weights_evaluated": f"EMA (decay {tc.ema.decay:g})" if tc.ema.enabled else "the trained weights",
        "stopping": stop,
        "tta": ", ".join(tc.tta) if tc.tta else "none",
    }


def augmentation_record(bundle: Any) -> dict[str, Any]:
    """The augmentation recipe the trial trained with (BatchAugment.describe), or that there was none."""
    augment = getattr(getattr(bundle, "train", None), "augment", None)
    return augment.describe() if augment is not None else {"enabled": False, "recipe": "no augmentation"}
