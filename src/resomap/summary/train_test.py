"""Each model tested above its training resolution: the train-test resolution discrepancy (FixRes: Touvron et al.
2019, a pretrained model trained at r often scores higher tested at r' > r). Every trial is tested at every
resolution of the sweep on the same test images, so for each resolution r a model was trained at and each test
resolution t above r, the decision metric (stats.metric, else the task's headline score) at (trained r, tested t)
is compared with (trained r, tested r) on the same images and seeds: d = score(r -> t) - score(r -> r), paired by
seed (a deterministic model's seeds one replicate), by stats.better_or_noninferior at the summary's margin and
scope: ``better``, ``non-inferior``, ``worse`` (more than the margin below) or ``undecided``.

A model's K (trained, tested) pairs are one family: each is decided at one-sided alpha / K (Bonferroni; alpha the
model's decision's, 1 - level or an adaptive sweep's alpha of the look). One row per model with its pairs and one
sentence (schema.TrainTest); a model tested only at its training resolutions' own sizes, or below them, gets none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.summary.aligned import TrialRecord, deterministic
from resomap.summary.decision import (
    by_model,
    class_names,
    decision_scores,
    family_alpha,
    kept_resolutions,
    scores_by_test_resolution,
)

SECTION_TITLE = "Tested above the training resolution (the train-test resolution discrepancy)"


def train_test_decisions(records: Iterable[TrialRecord], cfg: StatsConfig) -> list[dict[str, Any]]:
    """One row per model tested above a resolution it was trained at (module doc), models by name."""
    out = []
    for model, by_res in by_model(records).items():
        row = model_train_test(model, by_res, cfg)
        if row is not None:
            out.append(row)
    return out


def model_train_test(model: str, by_res: Mapping[int, list[TrialRecord]], cfg: StatsConfig) -> dict[str, Any] | None:
    """The model's row: every (trained r, tested t > r) pair decided at the family's alpha; None without such a
    pair. A trained resolution whose seeds cannot be compared across their test resolutions is named in ``notes``."""
    kept, _ = kept_resolutions(model, by_res, cfg)
    if not kept:
        return None
    task = next(iter(kept.values()))[0].task
    names, notes, found = class_names(kept), [], []
    for trained, members in sorted(kept.items()):
        if not any(t > trained for m in members for t in m.tables):
            continue
        compared = scores_by_test_resolution(members, task, trained)
        chosen = compared if isinstance(compared, str) else decision_scores(compared, task, cfg.metric, names)
        if isinstance(chosen, str):
            notes.append(f"trained at {trained} px: not compared: {chosen}")
            continue
        found += [(trained, tested, chosen) for tested in sorted(chosen.scores) if tested > trained]
    if not found and not notes:
        return None
    k = max(len(found), 1)
    alpha, fixed = family_alpha(model, cfg, k), deterministic(kept)
    pairs = [_pair(trained, tested, chosen, alpha, cfg, fixed) for trained, tested, chosen in found]
    row = {
        "model": model,
        "metric": found[0][2].words if found else (cfg.metric or task.scores[0].name),
        "n_pairs": len(found),
        "alpha": alpha,
        "level": 1 - alpha,
        "correction": f"Bonferroni over {len(found)} pair{'' if len(found) == 1 else 's'}",
        "margin": cfg.margin,
        "scope": cfg.scope,
        "deterministic": fixed,
        "pairs": pairs,
        "notes": notes,
    }
    row["sentence"] = train_test_sentence(row)
    return row


def _pair(trained: int, tested: int, chosen: Any, alpha: float, cfg: StatsConfig, fixed: bool) -> dict[str, Any]:
    """One (trained, tested) pair decided: tested at `tested` against tested at `trained`, same images and seeds."""
    own, above = (np.asarray(chosen.scores[r], dtype=float) for r in (trained, tested))
    found = stats.better_or_noninferior(
        above - own, margin=cfg.margin, alpha=alpha, binary=chosen.binary, power=cfg.power, scope=cfg.scope,
        seed_sd=cfg.seed_sd, deterministic=fixed,
    )  # fmt: skip
    return {
        "trained": trained,
        "tested": tested,
        "score_trained": float(own.mean()),
        "score_tested": float(above.mean()),
        "images": chosen.images,
        **found,
    }


# ------------------------------------------------------------------------------------------------ in words


def _pair_words(pair: Mapping[str, Any]) -> str:
    """'at 128 px worse by more than the margin (-0.148 [-0.194, -0.102])': the verdict, the difference and its
    one-sided bounds (and the p of the claim made)."""
    if pair.get("low") is None or pair.get("high") is None:
        why = str(pair.get("untestable") or "not testable")
        return f"at {pair['tested']} px undecided ({pair['difference']:+.3f}; {why})"
    bounds = f"{pair['difference']:+.3f} [{pair['low']:+.3f}, {pair['high']:+.3f}]"
    if pair["verdict"] == "better":
        return f"at {pair['tested']} px better ({bounds}, p {pair['p_better']:.3g})"
    if pair["verdict"] == "non-inferior":
        return f"at {pair['tested']} px non-inferior, not shown better ({bounds}, p {pair['p_noninferior']:.3g})"
    if pair["verdict"] == "worse":
        return f"at {pair['tested']} px worse by more than the margin ({bounds})"
    detects = pair.get("detectable")
    said = f"; this design detects {detects:.3f} and larger" if detects is not None else ""
    return f"at {pair['tested']} px undecided ({bounds}{said})"


def train_test_sentence(row: Mapping[str, Any]) -> str:
    """The model's one sentence: how many pairs each verdict, then each trained resolution's pairs."""
    pairs = list(row.get("pairs") or [])
    if not pairs:
        return f"{row['model']}: not tested above its training resolution: " + "; ".join(row.get("notes") or [])
    counts = {v: sum(p["verdict"] == v for p in pairs) for v in stats.ABOVE_VERDICTS}
    tally = ", ".join(f"{v} {n}" for v, n in counts.items() if n)
    first = pairs[0]
    one_fit = "one fit: its seeds give the same predictions"
    seeds = one_fit if row.get("deterministic") else f"{first['n_seeds']} seed(s)"
    head = (
        f"{row['model']}, tested above its training resolution ({row['metric']} on the same {first['n_images']} "
        f"{first['images']}, {seeds}; margin {row['margin']:g}, {row['correction']}: one-sided alpha "
        f"{row['alpha']:.3g}): {tally} of {len(pairs)} pair(s)"
    )
    parts = []
    for trained in sorted({p["trained"] for p in pairs}):
        mine = [_pair_words(p) for p in pairs if p["trained"] == trained]
        parts.append(f"trained at {trained} px, tested " + ", ".join(mine))
    notes = "; ".join(row.get("notes") or [])
    return f"{head}: " + "; ".join(parts) + (f"; {notes}" if notes else "") + "."


TRAIN_TEST_NOTE = (
    "Each model as trained at a resolution r, tested at each larger resolution t of the sweep against itself tested at "
    "r, on the same test images and seeds (paired; the seeds of one fit count once): 'better' is shown "
    "above 0 (one-sided p < alpha), 'non-inferior' no more than the margin below, 'worse' more than the margin below "
    "(the one-sided upper bound under -margin); 'undecided' is not 'the same'. A model's pairs are one family "
    "(Bonferroni). Pretrained models trained with random-resized crops often score higher tested above their training "
    "resolution (FixRes, Touvron et al. 2019); a model fitted on fixed-size inputs need not."
)
