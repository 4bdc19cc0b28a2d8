"""The data section's load-time checks, pushed to the config loader when resomap.data is imported: augmentation
values in range, and a probe set no larger than the test set when the dataset's size is known from the config
(a registered dataset's `images` meta: its image count from its options; other datasets are checked once their
test split is built, before training)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from resomap.config import register_check
from resomap.data.registry import DATASETS


def known_images(cfg: Any) -> int | None:
    """The number of images the data section selects (after data.limit), when the dataset says it without reading
    files; None otherwise."""
    from resomap.config.groups import group_options
    from resomap.errors import UnknownNameError

    dc = cfg.data
    try:
        count = DATASETS.meta(dc.dataset).get("images")
    except UnknownNameError:
        return None  # reported with its suggestions by the data config group
    if count is None:
        return None
    n = int(count(group_options(dc, dc.dataset)) if callable(count) else count)
    return n if dc.limit is None else min(n, int(dc.limit))


def known_classes(cfg: Any) -> list[str] | None:
    """The class names of the data section's dataset, when its registry entry says them without loading images (a
    `classes` meta: a list, or a function of the dataset's options); None otherwise."""
    from resomap.config.groups import group_options
    from resomap.errors import UnknownNameError

    dc = cfg.data
    try:
        found = DATASETS.meta(dc.dataset).get("classes")
    except UnknownNameError:
        return None  # reported with its suggestions by the data config group
    if callable(found):
        found = found(group_options(dc, dc.dataset))
    return None if found is None else [str(c) for c in found]


def known_groups(cfg: Any) -> list[str] | None:
    """The groups the data section's dataset declares (its registry entry's `groups` meta: a list, or a function of
    the dataset's options), [] when it declares none; None for an unknown dataset."""
    from resomap.config.groups import group_options
    from resomap.errors import UnknownNameError

    dc = cfg.data
    try:
        found = DATASETS.meta(dc.dataset).get("groups") or []
    except UnknownNameError:
        return None
    if callable(found):
        found = found(group_options(dc, dc.dataset))
    return [str(g) for g in found]


def check_groups(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """fail on a stats.groups name the dataset does not declare."""
    wanted, known = cfg.stats.groups, known_groups(cfg)
    if wanted is None or known is None:
        return
    unknown = [g for g in wanted if g not in known]
    if unknown:
        said = ", ".join(known) if known else f"none: {cfg.data.dataset} declares no groups"
        fail("stats.groups", f"groups the dataset declares ({said}), null (all) or []", unknown[0])


def test_images(n: int, test: float) -> int:
    """The test split's size for n images: scikit-learn's train_test_split takes ceil(test x n)."""
    return math.ceil(test * n)


def check_data(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """fail(path, expected, got) for augmentation values out of range, or a probe set larger than the test set."""
    aug = cfg.data.augmentation
    for key in ("crop_scale_min", "crop_scale_min_high"):
        value = getattr(aug, key)
        if not 0 < value <= 1:
            fail(f"data.augmentation.{key}", "an area fraction in (0, 1]", value)
    if not 0 <= aug.rotate_degrees <= 45:
        fail("data.augmentation.rotate_degrees", "an angle in [0, 45] (quarter turns: rot90)", aug.rotate_degrees)
    if not 0 <= aug.translate < 0.5:
        fail("data.augmentation.translate", "a fraction of the side in [0, 0.5)", aug.translate)
    for key in ("hflip", "vflip", "blur_prob", "rot90"):
        value = getattr(aug, key)
        if not 0 <= value <= 1:
            fail(f"data.augmentation.{key}", "a probability in [0, 1]", value)
    if aug.blur_sigma_max < 0:
        fail("data.augmentation.blur_sigma_max", "a number >= 0", aug.blur_sigma_max)
    if aug.high_resolution < 1:
        fail("data.augmentation.high_resolution", "an integer >= 1", aug.high_resolution)
    _check_tta(cfg, fail)
    _check_split_sizes(cfg, fail)
    ex = cfg.explainability
    n = known_images(cfg) if ex.enabled else None
    if n is not None and 0 < cfg.data.split.test < 1:
        test = test_images(n, cfg.data.split.test)
        if ex.probe_size > test:
            where = f"{n} images x data.split.test={cfg.data.split.test}"
            fail("explainability.probe_size", f"at most the {test} test images ({where})", ex.probe_size)


register_check(check_data)  # run by the config loader on every load
register_check(check_groups)


def split_sizes(n: int, val: float, test: float) -> dict[str, int]:
    """The parts' sizes data.split.split_indices makes of n images (scikit-learn's train_test_split rounds each
    carved part up: test first, then val from the rest)."""
    test_n = test_images(n, test)
    val_n = math.ceil(val / (1.0 - test) * (n - test_n))
    return {"train": n - test_n - val_n, "val": val_n, "test": test_n}


def _check_split_sizes(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """Each part of the split holds at least one image of every class (a stratified split needs it; a test set
    of one image decides nothing), when the dataset's size and classes are known from the config."""
    split = cfg.data.split
    n, classes = known_images(cfg), known_classes(cfg)
    if n is None or not classes or not (0 < split.val < 1 and 0 < split.test < 1 and split.val + split.test < 1):
        return
    need = max(2, len(classes))
    for part, size in split_sizes(n, split.val, split.test).items():
        if size < need:
            fraction = "test" if part == "test" else "val"
            fail(
                f"data.split.{fraction}",
                f"a split whose {part} part holds at least {need} images, one per class ({n} images make a {part} "
                f"part of {size}; change data.split or data.limit)",
                getattr(split, fraction),
            )
            return


def _check_tta(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """training.tta: symmetries the dataset declares, on a classification task; a dataset's own `symmetries`
    option: known names."""
    from resomap.data.symmetry import SYMMETRIES, declared
    from resomap.errors import UnknownNameError

    try:
        have = declared(cfg)
    except UnknownNameError:
        return  # reported with its suggestions by the data config group
    for name in have:
        if name not in SYMMETRIES:
            fail(f"data.{cfg.data.dataset}.symmetries", f"names among {', '.join(SYMMETRIES)}", name)
    tta = list(cfg.training.tta)
    if not tta:
        return
    if cfg.experiment.task != "classification":
        fail("training.tta", "[] (test-time augmentation averages class probabilities: classification only)", tta)
    for name in tta:
        if name not in have:
            shown = ", ".join(have) if have else "none"
            fail("training.tta", f"symmetries dataset '{cfg.data.dataset}' declares ({shown})", name)
    if len(set(tta)) != len(tta):
        fail("training.tta", "each symmetry once", tta)
