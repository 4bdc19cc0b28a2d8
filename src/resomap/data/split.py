"""Stratified, seeded subsets and train/val/test splits (the same for every resolution)."""

from __future__ import annotations

import numpy as np

from resomap.errors import DataError

SPLITS = ("train", "val", "test")
LIMIT_SEED = 0  # the data.limit subset is fixed across seeds, so every seed shares one resolution cache


def _check_counts(labels: np.ndarray, class_names: list[str], need: int, what: str) -> None:
    counts = np.bincount(labels, minlength=len(class_names))
    few = [(class_names[k], int(c)) for k, c in enumerate(counts) if 0 < c < need]
    if few:
        shown = ", ".join(f"'{n}' has {c}" for n, c in few)
        raise DataError(
            f"too few images for a stratified {what} ({shown}; need >= {need} per class): "
            "add images, raise data.limit, or remove the class"
        )


def limit_subset(labels: np.ndarray, limit: int | None, class_names: list[str]) -> np.ndarray:
    """Sorted indices of a stratified subset of at most `limit` images (all indices when limit is None)."""
    n = len(labels)
    idx = np.arange(n)
    if limit is None or limit >= n:
        return idx
    _check_counts(labels, class_names, 2, "data.limit subset")
    from sklearn.model_selection import train_test_split  # imported where used: sklearn takes seconds to import

    try:
        keep, _ = train_test_split(idx, train_size=limit, stratify=labels, random_state=LIMIT_SEED)
    except ValueError as exc:
        raise DataError(f"data.limit={limit} is too small for a stratified subset of {n} images ({exc})") from None
    return np.sort(keep)


def split_indices(
    indices: np.ndarray,
    labels: np.ndarray,
    class_names: list[str],
    val: float,
    test: float,
    seed: int,
    strata: tuple[np.ndarray, list[str]] | None = None,
) -> dict[str, np.ndarray]:
    """Stratified train/val/test split of `indices` (labels aligned with them); each part sorted. `strata` (codes
    aligned with `indices`, their names) stratifies by finer groups than the label (ELPV: probability x cell type)."""
    _check_counts(labels, class_names, 3, "train/val/test split")
    if strata is not None:
        labels, class_names = strata  # every group keeps its share in each part
        _check_counts(labels, class_names, 3, "train/val/test split")
    from sklearn.model_selection import train_test_split

    try:
        rest, test_idx, rest_y, _ = train_test_split(
            indices, labels, test_size=test, stratify=labels, random_state=seed % 2**32
        )
        train_idx, val_idx = train_test_split(
            rest, test_size=val / (1.0 - test), stratify=rest_y, random_state=(seed + 1) % 2**32
        )
    except ValueError as exc:
        raise DataError(
            f"cannot split {len(indices)} images into stratified train/val/test with data.split.val={val}, "
            f"data.split.test={test} ({exc}); add images or raise data.limit"
        ) from None
    return {"train": np.sort(train_idx), "val": np.sort(val_idx), "test": np.sort(test_idx)}


def carve(
    indices: np.ndarray, labels: np.ndarray, fraction: float, seed: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """(rest, carved): a stratified `fraction` of `indices` taken out (a split the user's folders do not have)."""
    from sklearn.model_selection import train_test_split

    try:
        rest, carved = train_test_split(indices, test_size=fraction, stratify=labels, random_state=seed % 2**32)
    except ValueError as exc:
        raise DataError(f"cannot carve a stratified {what} split from {len(indices)} training images ({exc})") from None
    return np.sort(rest), np.sort(carved)


def predefined_positions(
    rows: np.ndarray, split_of: np.ndarray, labels: np.ndarray, val: float, test: float, seed: int
) -> dict[str, np.ndarray]:
    """The user's own splits (`split_of[i]` for each of `rows`); a missing val or test split is carved from train
    with the data.split fraction (of the training images)."""
    positions = {s: np.sort(rows[split_of == s]) for s in SPLITS}
    for split, fraction, salt in (("test", test, 2), ("val", val, 3)):
        if len(positions[split]) == 0:
            train = positions["train"]
            positions["train"], positions[split] = carve(train, labels[train], fraction, seed + salt, split)
    return positions
