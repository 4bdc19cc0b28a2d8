"""Resolution-sensitive test images: per model, for each resolution r below its reference R, on the seeds and test
images both have (0/1 correctness [S, N], summary.decision.scores_by_resolution), the images

- lost: right at R in every seed and wrong at r in every seed;
- gained: the reverse;
- seed-dependent: right in some seeds and wrong in others at R or at r: what flips with the training seed alone,
  the noise the lost and gained counts are read against.

Each count comes with its share of the N images and a Wilson interval (stats.wilson_interval, at stats.level). With
one seed "in every seed" is one seed: a lost image then cannot be told apart from seed noise, and the row says so
(its lost and gained counts are kept; the seed-dependent count is None: one seed cannot show it). A deterministic
fit's seeds are one replicate: the row says so. A task whose headline score is not 0/1 (segmentation) is not
counted: its rows give the reason.

`sensitivity(records, recommendations, cfg) -> Sensitivity`: `rows` (results.SENSITIVITY_COLUMNS, summary.json
`sensitivity`) and `images` (one row per lost or gained image, results.SENSITIVE_IMAGE_COLUMNS, the summary folder's
sensitive_images.csv); `most_sensitive(images, limit)` orders a model's lost images for the report."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.results import SENSITIVITY_COLUMNS
from resomap.summary.aligned import TrialRecord
from resomap.summary.decision import Compared, by_model, class_names, scores_by_resolution

ONE_SEED = (
    "one seed: 'in every seed' is one seed, so a lost or gained image cannot be told apart from seed noise"
    " (no seed-dependent count: it needs two seeds)"
)

DETERMINISTIC = "one fit: its seeds' agreement says nothing of seed noise"


@dataclasses.dataclass(frozen=True)
class Sensitivity:
    rows: list[dict[str, Any]]  # one per model x resolution below its reference
    images: list[dict[str, Any]]  # one per lost or gained image


def sensitivity(
    records: Iterable[TrialRecord], recommendations: Iterable[Mapping[str, Any]], cfg: StatsConfig
) -> Sensitivity:
    """Every model's lost, gained and seed-dependent images at each resolution below its reference (the
    recommendation row's `reference`; without a decision stats.reference, else the model's largest resolution)."""
    recs = {str(r["model"]): r for r in recommendations}
    rows: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for model, by_res in by_model(records).items():
        rec = recs.get(model) or {}
        reference = rec.get("reference") or cfg.reference
        reference = int(reference) if reference in by_res else max(by_res)
        for res in sorted((r for r in by_res if r < reference), reverse=True):
            row, found = _compare(model, {reference: by_res[reference], res: by_res[res]}, reference, res, cfg)
            if rec.get("deterministic") and row["available"]:
                row["reason"] = DETERMINISTIC
            rows.append(row)
            images += found
    return Sensitivity(rows, images)


def _compare(
    model: str, pair: Mapping[int, list[TrialRecord]], reference: int, res: int, cfg: StatsConfig
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The row of `res` against `reference` and its lost and gained images."""
    task = pair[reference][0].task
    headline = task.scores[0]
    row: dict[str, Any] = dict.fromkeys(SENSITIVITY_COLUMNS)
    row.update(model=model, resolution=res, reference=reference, metric=headline.name, level=cfg.level)
    row["available"] = False
    if not headline.binary:
        row["reason"] = f"{headline.words} is not right-or-wrong per image: images are not counted as lost or gained"
        return row, []
    found = scores_by_resolution(pair, task)
    if isinstance(found, str):
        row["reason"] = found
        return row, []
    at_ref, at_res = (np.asarray(found.arrays[headline.name][r], dtype=bool) for r in (reference, res))
    seeds, n = at_ref.shape
    lost = at_ref.all(axis=0) & ~at_res.any(axis=0)
    gained = ~at_ref.any(axis=0) & at_res.all(axis=0)
    varies = _varies(at_ref) | _varies(at_res)
    row.update(n_seeds=seeds, n_images=n, available=True, reason=ONE_SEED if seeds == 1 else "")
    for name, mask in (("lost", lost), ("gained", gained), ("seed_dependent", varies)):
        if name == "seed_dependent" and seeds == 1:
            continue  # one seed cannot show what flips with the seed: None, not 0
        share = stats.wilson_interval(int(mask.sum()), n, cfg.level)
        row.update({name: int(mask.sum()), f"{name}_share": share.estimate})
        row.update({f"{name}_low": share.low, f"{name}_high": share.high})
    return row, _image_rows(row, found, pair, {"lost": lost, "gained": gained}, (at_ref, at_res))


def _image_rows(
    row: Mapping[str, Any],
    found: Compared,
    pair: Mapping[int, list[TrialRecord]],
    masks: Mapping[str, np.ndarray],
    correct: tuple[np.ndarray, np.ndarray],
) -> list[dict[str, Any]]:
    """One row per image of each mask (lost, gained) with its label, class name and seeds right at each side."""
    aligned = found.aligned[int(row["reference"])]
    labels = aligned.label[np.searchsorted(aligned.index, found.common)] if aligned.label is not None else None
    names = class_names(pair) or []
    images = []
    for status, mask in masks.items():
        for i in np.flatnonzero(mask):
            label = int(labels[i]) if labels is not None else None
            images.append(
                {
                    **{k: row[k] for k in ("model", "resolution", "reference")},
                    "index": int(found.common[i]),
                    "label": label,
                    "class_name": names[label] if label is not None and 0 <= label < len(names) else None,
                    "status": status,
                    "seeds_right_reference": int(correct[0][:, i].sum()),
                    "seeds_right": int(correct[1][:, i].sum()),
                    "n_seeds": int(correct[0].shape[0]),
                }
            )
    return images


def _varies(correct: np.ndarray) -> np.ndarray:
    """[N]: the images right in some seeds and wrong in others."""
    return correct.any(axis=0) & ~correct.all(axis=0)


def most_sensitive(images: Iterable[Mapping[str, Any]], limit: int = 4) -> dict[str, list[dict[str, Any]]]:
    """model -> up to `limit` of its lost images, the most sensitive first: lost at the most resolutions, then at
    the highest one (lost already at a small step down from the reference), then by index; each with the
    resolutions it is lost at (`lost_at`)."""
    lost: dict[tuple[str, int], dict[str, Any]] = {}
    for image in images:
        if image.get("status") != "lost":
            continue
        key = (str(image["model"]), int(image["index"]))
        found = lost.setdefault(key, {**image, "lost_at": []})
        found["lost_at"].append(int(image["resolution"]))
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (model, _index), image in sorted(
        lost.items(), key=lambda kv: (kv[0][0], -len(kv[1]["lost_at"]), -max(kv[1]["lost_at"]), kv[0][1])
    ):
        if len(out[model]) < limit:
            out[model].append({**image, "lost_at": sorted(image["lost_at"], reverse=True)})
    return dict(out)


SECTION_TITLE = "Images that need the pixels"
DEFINITIONS = (
    "Lost: right at the reference in every seed and wrong at the smaller resolution in every seed; gained: the"
    " reverse; seed-dependent: right in some seeds and wrong in others at either resolution, what flips with the"
    " training seed alone, the noise to read the other two against. Shares of the test images both resolutions have,"
    " with Wilson intervals; every lost and gained image is listed in sensitive_images.csv."
)


def count_words(row: Mapping[str, Any], name: str) -> str:
    """'6 (0.150 [0.071, 0.290])': a count with its share and interval."""
    count, share, low, high = (row.get(k) for k in (name, f"{name}_share", f"{name}_low", f"{name}_high"))
    if count is None:
        return "-"
    if share is None or low is None or high is None:
        return str(count)
    return f"{count} ({share:.3f} [{low:.3f}, {high:.3f}])"


def sensitivity_line(row: Mapping[str, Any]) -> str:
    """One model x resolution in words (summary.md/txt and the report)."""
    head = f"{row['model']} {row['resolution']} px against {row['reference']} px"
    if not row.get("available"):
        return f"{head}: not counted: {row.get('reason') or 'no per-image records'}"
    level = f"{float(row.get('level') or 0.95):.0%}"
    text = (
        f"{head}: lost {count_words(row, 'lost')}, gained {count_words(row, 'gained')} of {row['n_images']} test images"
        f" ({level} Wilson intervals, {row['n_seeds']} seed{'s' if row['n_seeds'] != 1 else ''})"
    )
    if row.get("seed_dependent") is not None:
        text += f"; seed-dependent (the noise to compare with) {count_words(row, 'seed_dependent')}"
    return text + (f"; {row['reason']}" if row.get("reason") else "")
