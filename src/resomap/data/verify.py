"""The data's checks without torch: the dataset opens, its images read, unreadable ones within
data.max_bad_fraction, the split can be made, the probe set fits (`check`); `build` (resomap.data.bundle) runs the
same functions on the images it caches. Importing nothing of torch lets `resomap sweep` refuse bad data at load
before torch is imported (resomap.cli.args)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from resomap.config.schema import Config
from resomap.data.cache import cache_key, check_passed, read_all, record_check
from resomap.data.images import BitDepth
from resomap.data.registry import RawDataset, digest, open_dataset
from resomap.data.split import limit_subset, predefined_positions, split_indices
from resomap.errors import ConfigError, DataError

log = logging.getLogger("resomap.data.bundle")  # the name its warnings had before they moved here


def enough_probes(cfg: Config) -> Callable[[dict[str, np.ndarray]], None]:
    """`check(positions)` for the split: a ConfigError when the test split holds fewer images than the probe set
    (for datasets whose size the config load could not know)."""
    ec = cfg.explainability

    def check(positions: dict) -> None:
        n_test = len(positions["test"])
        if ec.enabled and ec.probe_size > n_test:
            raise ConfigError(
                f"explainability.probe_size: expected at most the {n_test} test images of {cfg.data.dataset}, "
                f"got {ec.probe_size}; lower it or add images"
            )

    return check


def usable(
    raw: RawDataset, subset: np.ndarray, bad: np.ndarray, max_fraction: float, reasons: dict[int, str] | None = None
) -> np.ndarray:
    """Bool mask over subset positions; a warning naming the unreadable files and what is wrong with the others (a
    mask's class index: `reasons`), or a DataError past the limit."""
    ok = np.ones(len(subset), dtype=bool)
    if len(bad) == 0:
        return ok
    ok[bad] = False
    reasons = reasons or {}
    unreadable = [int(p) for p in bad if int(p) not in reasons]
    wrong = [int(p) for p in bad if int(p) in reasons]
    parts = []
    if unreadable:
        names = ", ".join(raw.name(int(subset[p])) for p in unreadable[:3]) + (", ..." if len(unreadable) > 3 else "")
        parts.append(f"{len(unreadable)} of {len(subset)} images could not be read ({names})")
    if wrong:
        shown = "; ".join(reasons[p] for p in wrong[:2]) + ("; ..." if len(wrong) > 2 else "")
        parts.append(f"{len(wrong)} of {len(subset)} images have an invalid mask ({shown})")
    msg = "; ".join(parts)
    fraction = len(bad) / len(subset)
    if fraction > max_fraction:
        raise DataError(
            f"{msg}: {fraction:.1%} is over data.max_bad_fraction={max_fraction}; "
            "fix or remove those files, or raise data.max_bad_fraction"
        )
    skipped(msg)
    return ok


_FOUND: list[str] = []  # the skipped-image lines of this process, each time one is found
_SAID: set[str] = set()  # those the running sweep said ahead of its trials (resomap.sweep.plan.check_data)


def skipped(line: str) -> None:
    """Images skipped under data.max_bad_fraction (`line` names them): a warning, unless the sweep said it ahead of
    its trials (resomap.sweep.plan.check_data, `said`); found either way (`found_since`)."""
    _FOUND.append(line)
    if line in _SAID or not log.isEnabledFor(logging.WARNING):  # said, or a quiet check ahead of trials
        log.debug("%s; skipped them", line)
        return
    log.warning("%s; skipped them", line)


def found_count() -> int:
    """How many skipped-image lines were found in this process so far (a start for `found_since`)."""
    return len(_FOUND)


def found_since(start: int) -> list[str]:
    """The skipped-image lines found in this process since `start` (`found_count`), each once, in order."""
    return list(dict.fromkeys(_FOUND[start:]))


def said(lines: list[str], *, anew: bool = False) -> None:
    """`lines` (from `found_since`) said by the caller: the trials do not warn of them again. `anew`: these are all
    that are said (a sweep's check ahead of its trials: what an earlier sweep of this process said is not)."""
    if anew:
        _SAID.clear()
    _SAID.update(lines)


def said_lines() -> list[str]:
    """The skipped-image lines said in this process (a sweep's driver hands them to its worker processes)."""
    return sorted(_SAID)


def data_seed(cfg: Config, trial_seed: int) -> int:
    """The seed of the split, the generated images and the probe set: by default experiment.seed, the same for
    every seed of a sweep (so seeds differ only in init, data order and augmentation, and compare on the same
    test images); `data.seed: trial` varies them with the trial's seed; an integer fixes them."""
    chosen = cfg.data.seed
    if chosen == "trial":
        return trial_seed
    return cfg.experiment.seed if chosen is None else int(chosen)


def splitter(
    raw: Any,
    subset: np.ndarray,
    labels: np.ndarray,
    class_names: list[str],
    dc: Any,
    dseed: int,
    check: Callable[[dict[str, np.ndarray]], object] | None,
) -> Callable[[np.ndarray, dict[int, str]], dict[str, np.ndarray]]:
    """`split(bad, reasons)`: the positions of each split among the usable images (all but a cache entry's `bad`
    ones; the dataset's own split when it has one, else a stratified one), passed through the caller's `check`."""

    def split(bad: np.ndarray, reasons: dict[int, str]) -> dict[str, np.ndarray]:
        ok = usable(raw, subset, bad, dc.max_bad_fraction, reasons)
        rows = np.flatnonzero(ok)
        predefined = getattr(raw, "predefined_splits", None)
        if predefined is not None:  # the user's own train/val/test folders or split column
            found = predefined_positions(
                rows, predefined[subset][rows], labels[subset], dc.split.val, dc.split.test, dseed
            )
        else:
            strata = getattr(raw, "strata", None)  # (codes [N], names): finer groups than the label, when given
            if strata is not None:
                strata = (np.asarray(strata[0], dtype=np.int64)[subset][rows], list(strata[1]))
            found = split_indices(
                rows, labels[subset][rows], class_names, dc.split.val, dc.split.test, dseed, strata=strata
            )
        if check is not None:
            check(found)
        return found

    return split


def subset_of(raw: RawDataset, dc: Any) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The raw dataset's labels and class names, and its data.limit subset."""
    labels, class_names = np.asarray(raw.labels, dtype=np.int64), list(raw.class_names)
    if len(raw) == 0:
        raise DataError(f"dataset '{dc.dataset}' has no images")
    return labels, class_names, limit_subset(labels, dc.limit, class_names)


def check(
    cfg: Config,
    seed: int,
    check: Callable[[dict[str, np.ndarray]], object] | None = None,
    *,
    also: tuple = (),
    record: bool = True,
    files_only: bool = False,
) -> BitDepth | None:
    """build's checks of the data, without building it: the dataset opens, its images are read (unreadable ones
    within data.max_bad_fraction, none over a configured data.bit_depth), the split can be made and passes the
    caller's `check`; a DataError (or the caller's error) otherwise. One read of every image, at its own size, kept
    nowhere (no resolution cache). Returns the image files' bit depth (resomap.data.images), None for other data.

    A pass is recorded beside the data's resolution cache (`record` and data.cache.disk), keyed like it on the
    dataset's fingerprint (its files, their sizes and mtimes) plus the settings these checks read (the data
    section, the labels, the data seed and `also`: what the caller's `check` reads): unchanged data is not read
    again, a changed file is. `files_only`: only a dataset of the user's files (`user_files`) is read; generated
    and packaged images are left to build."""
    dc = cfg.data
    dseed = data_seed(cfg, seed)
    raw = open_dataset(dc, seed=dseed)  # a file dataset checks here that its files are listed (an empty class)
    if files_only and not getattr(raw, "user_files", False):
        return None
    depth = getattr(raw, "depth", None)
    if depth is not None:
        log.info("data: %s", depth.words)
    labels, class_names, subset = subset_of(raw, dc)
    cache_root = Path(cfg.experiment.output_dir) / cfg.experiment.cache_dir
    predefined = getattr(raw, "predefined_splits", None)
    settings = digest(
        [
            json.dumps(dataclasses.asdict(dc), sort_keys=True, default=str),
            labels[subset].tobytes(),
            "" if predefined is None else "|".join(map(str, predefined[subset])),
            dseed,
            *also,
        ]
    )
    key = cache_key(raw, subset)
    recorded = check_passed(cache_root, key, settings)
    if recorded is not None:  # passed before: what it skipped then is said again
        for line in recorded:
            skipped(line)
        return depth
    start = found_count()
    bad, reasons = read_all(raw, subset)
    splitter(raw, subset, labels, class_names, dc, dseed, check)(bad, reasons)
    if record and dc.cache.disk:
        record_check(cache_root, key, settings, found_since(start))
    return depth


def check_files(cfg: Config, seed: int, *, record: bool = True) -> BitDepth | None:
    """`check` of a dataset of the user's files with the probe set's check, as `resomap sweep` runs it at load
    (once before torch is imported, resomap.cli.args, and per trial setting after: sweep.trial.check_data); the
    same settings, so a pass recorded by one is read by the other."""
    ec = cfg.explainability
    return check(cfg, seed, enough_probes(cfg), also=(ec.enabled, ec.probe_size), record=record, files_only=True)


@contextlib.contextmanager
def quiet_log() -> Iterator[None]:
    """The data's log lines held back (errors aside) while a check runs ahead of the trials, which say them again
    (its size, images skipped under the threshold); shown with -v (DEBUG): a refusal is then the only line."""
    logger = logging.getLogger("resomap.data")
    level = logger.level
    if not logger.isEnabledFor(logging.DEBUG):
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
