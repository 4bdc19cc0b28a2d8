"""Each model decided within each group of test images the dataset declares (stats.groups; ELPV: cell_type,
defect_probability): per group value, the headline score at every resolution with its interval (pooled over seeds,
the image bootstrap of the summary's rows: stats.bootstrap_scores) and the non-inferiority decision on that value's
images through the summary's own decision (summary.decision: ``scores_by_resolution``, ``decide``: the same tests,
scope, margin and reference; no statistics of its own).

A group's G values are one family: each value is decided at one-sided alpha / G (Bonferroni; alpha the model
decision's, 1 - level or an adaptive look's), and every row says so. A value with fewer than 2 test images is a row
"not decided: n too small". When the decided resolutions of a group's values differ, a sentence says so
(``GroupDecisions.differ``), and says whether the difference itself is shown: the group x resolution interaction
(stats.interaction_test, two-sided: is a step's per-image difference to the reference the same for every value?) at
each step whose verdicts differ between the values, Holm over those steps, at the model decision's alpha; two
separate verdicts alone are no evidence of a difference (``GroupDecisions.interactions``). The test is given each
seed's per-image differences (seed s at the step against seed s at the reference), so the seed x value variation of
a model whose seeds differ is part of its error. The group codes of the test images come from the trials'
result.json (``data.groups``: sweep.trial_records.groups_record); trials from before it have none: no rows.

Rows are plain dicts of JSON-safe values (results.GROUP_DECISION_COLUMNS, plus ``scores``: each resolution's
estimate and interval, and ``verdicts``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.summary.aligned import TrialRecord, deterministic
from resomap.summary.decision import (
    by_model,
    decide,
    decided_cell,
    decided_fields,
    family_alpha,
    kept_resolutions,
    not_decided_fields,
    scores_by_resolution,
)


@dataclasses.dataclass(frozen=True)
class GroupDecisions:
    rows: list[dict[str, Any]]
    differ: list[str]  # per model x group whose values' decided resolutions differ: a sentence
    # per model x group x step tested for a difference between the values (those decided apart): the step, the
    # reference, each value's mean difference and image count, p and its Holm value, alpha, shown
    interactions: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def group_codes(by_res: Mapping[int, list[TrialRecord]]) -> dict[str, tuple[dict[int, int], list[str]]]:
    """name -> ({test image index: its code}, the codes' names), from the first trial that recorded groups."""
    for members in by_res.values():
        for m in members:
            found = (m.result.get("data") or {}).get("groups") or {}
            if found:
                return {
                    name: (dict(zip(map(int, g["index"]), map(int, g["code"]), strict=True)), list(g["names"]))
                    for name, g in found.items()
                }
    return {}


def group_decisions(records: Iterable[TrialRecord], cfg: StatsConfig) -> GroupDecisions:
    """Every model's per-group rows (module doc), models by name, groups in the order asked (stats.groups; null:
    the dataset's order), values in the dataset's order."""
    rows: list[dict[str, Any]] = []
    differ: list[str] = []
    tested: list[dict[str, Any]] = []
    for model, by_res in by_model(records).items():
        codes = group_codes(by_res)
        names = [g for g in (cfg.groups if cfg.groups is not None else list(codes)) if g in codes]
        if not names:
            continue
        kept, _ = kept_resolutions(model, by_res, cfg)
        task = next(iter(by_res.values()))[0].task
        found = scores_by_resolution(kept, task) if kept else "every resolution was dropped"
        fixed = deterministic(kept)  # one fit: one seed decides as several (the model's decision does the same)
        for name in names:
            mine = model_group_rows(model, name, codes[name], found, task, cfg, fixed)
            rows += mine
            steps = _interactions(model, name, mine, (codes[name], found, task), cfg) if _apart(mine) else []
            differ += _differ(model, name, mine, steps) + _too_few_values(model, name, mine)
            tested += steps
    return GroupDecisions(rows, differ, tested)


def model_group_rows(
    model: str,
    name: str,
    group: tuple[dict[int, int], list[str]],
    found: Any,
    task: Any,
    cfg: StatsConfig,
    fixed: bool = False,
) -> list[dict[str, Any]]:
    """One row per value of group `name` for one model (module doc); `found`: the model's Compared or a reason;
    `fixed`: the model's seeds are one fit (summary.aligned.deterministic)."""
    by_index, values = group
    alpha = family_alpha(model, cfg, len(values))
    headline = task.scores[0]
    base = {
        "model": model,
        "group": name,
        "n_values": len(values),
        "alpha": alpha,
        "correction": f"Bonferroni over the {len(values)} values of {name}",
        "scope": cfg.scope,
        "margin": cfg.margin,
        "metric": headline.name,
    }
    if isinstance(found, str):
        return [_not_decided({**base, "value": v, "n_images": None}, found) for v in values]
    code = _image_codes(by_index, found)
    arrays = found.arrays[headline.name]
    rows = []
    for k, value in enumerate(values):
        chosen = code == k
        row = {**base, "value": value, "n_images": int(chosen.sum())}
        if chosen.sum() < 2:
            rows.append(_not_decided(row, f"n too small: {int(chosen.sum())} test image(s) of {name} = {value}"))
            continue
        scores = {r: np.asarray(a, dtype=float)[:, chosen] for r, a in arrays.items()}
        rows.append(_decided(row, scores, headline, len(found.seeds), cfg, fixed))
    return rows


def _image_codes(by_index: Mapping[int, int], found: Any) -> np.ndarray:
    """The group code of each image the model's resolutions were compared on (`found.common`; -1: none)."""
    return np.array([by_index.get(int(i), -1) for i in found.common], dtype=np.int64)


def _decided(
    row: dict[str, Any], scores: dict[int, np.ndarray], headline: Any, n_seeds: int, cfg: StatsConfig, fixed: bool
):
    """The value's decision at the row's Bonferroni alpha, and its score at every resolution with its interval."""
    images = f"test images of {row['group']} = {row['value']}"
    kw = {"binary": headline.binary, "words": headline.words, "images": images, "deterministic": fixed}
    decision = decide(scores, cfg, alpha=row["alpha"], **kw)
    settings = {"level": cfg.level, "resamples": cfg.resamples, "seed": cfg.seed}
    found = {r: stats.bootstrap_scores(v, **settings) for r, v in sorted(scores.items())}
    said = (
        f"{row['model']}, {headline.words} on {row['n_images']} {images} ({row['correction']}, one-sided alpha "
        f"{row['alpha']:.3g}): {decision.reason}"
    )
    scored = {str(r): {"estimate": iv.estimate, "low": iv.low, "high": iv.high} for r, iv in found.items()}
    return {**row, **decided_fields(decision, n_seeds), "sentence": said, "scores": scored}


def _not_decided(row: dict[str, Any], why: str) -> dict[str, Any]:
    fields = not_decided_fields(why)
    said = f"{row['model']}, {row['group']} = {row['value']}: {fields['reason']}"
    return {**row, **fields, "sentence": said, "scores": {}}


def _decided_words(rows: list[dict[str, Any]]) -> dict[str, str]:
    """value -> its decision in words ('128 px', 'undecided'), for the values that were decided."""
    return {r["value"]: (f"{r['resolution']} px" if r["decided"] else "undecided") for r in rows if r["available"]}


def _apart(rows: list[dict[str, Any]]) -> bool:
    """Did the values of a group get different decisions (a decided resolution, or none)?"""
    return len(set(_decided_words(rows).values())) > 1


def _interactions(model: str, name: str, rows: list[dict[str, Any]], data: tuple, cfg: StatsConfig) -> list[dict]:
    """The group x resolution interaction at each step whose verdicts differ between the decided values (module
    doc), Holm over those steps; `data` = (the group's codes, the model's Compared, its task)."""
    (by_index, values), found, task = data
    decided = [r for r in rows if r["available"]]
    verdicts = [{int(v["resolution"]): v.get("verdict") for v in r.get("verdicts") or []} for r in decided]
    reference = decided[0]["reference"]
    steps = sorted({res for v in verdicts for res in v if res != reference}, reverse=True)
    apart = [res for res in steps if len({v.get(res) for v in verdicts}) > 1] or steps
    headline = task.scores[0]
    arrays = found.arrays[headline.name]
    code = _image_codes(by_index, found)
    chosen = [values.index(r["value"]) for r in decided]
    keep = np.isin(code, chosen)
    alpha = family_alpha(model, cfg, 1)
    found_tests = []
    for res in apart:
        d = np.asarray(arrays[res], dtype=float) - np.asarray(arrays[reference], dtype=float)  # [S, N]: seed s at both
        test = stats.interaction_test(d[:, keep], code[keep], binary=headline.binary)
        compared = [values[k] for k in test.values]
        found_tests.append(
            {
                "model": model,
                "group": name,
                "resolution": res,
                "reference": reference,
                "means": dict(zip(compared, test.means, strict=True)),
                "sizes": dict(zip(compared, test.sizes, strict=True)),
                "p": test.p,
                "method": test.method,
            }
        )
    adjusted = stats.holm([t["p"] for t in found_tests]) if found_tests else []
    for t, p_holm in zip(found_tests, adjusted, strict=True):
        t.update(p_holm=float(p_holm), alpha=alpha, shown=bool(p_holm <= alpha), steps=len(found_tests))
    return found_tests


def _too_few_values(model: str, name: str, rows: list[dict[str, Any]]) -> list[str]:
    """One line when fewer than two values of the group have the 2 test images a decision needs: no difference
    between its values can be tested (its rows still say each value's own decision or why there is none)."""
    if any(r.get("n_images") is None for r in rows):  # no comparison at all: the rows say why
        return []
    usable = [str(r["value"]) for r in rows if r["n_images"] >= 2]
    if len(usable) >= 2:
        return []
    which = f" ({usable[0]})" if usable else ""
    return [
        f"{model}: {name} has {len(usable)} value{'' if len(usable) == 1 else 's'} with at least 2 test images{which}:"
        " no difference between its values can be tested."
    ]


def _differ(model: str, name: str, rows: list[dict[str, Any]], tests: list[dict[str, Any]]) -> list[str]:
    """A sentence when the values of a group got different decisions (a decided resolution, or none), saying
    whether a difference between the values is shown (the interaction tests) or only the separate verdicts differ."""
    if not _apart(rows):
        return []
    parts = ", ".join(f"{v}: {d}" for v, d in _decided_words(rows).items())
    if not tests:
        return [f"{model}: the decision differs between the values of {name} ({parts}); read the decision per group."]
    holm = f", Holm over {len(tests)} steps" if len(tests) > 1 else ""
    said = "; ".join(
        f"{t['resolution']} px - {t['reference']} px: "
        + ", ".join(f"{v} {m:+.3f}" for v, m in t["means"].items())
        + f", p {t['p_holm' if holm else 'p']:.3g}"
        for t in tests
    )
    test = f"the {name} x resolution interaction ({said}{holm}; alpha {tests[0]['alpha']:.3g})"
    if any(t["shown"] for t in tests):
        return [
            f"{model}: the decision differs between the values of {name} ({parts}), and so does the resolution "
            f"effect: {test}; read the decision per group."
        ]
    return [
        f"{model}: the values of {name} were decided apart ({parts}), but no difference between the values is shown "
        f"({test}): separate verdicts are not evidence that the resolution needed depends on {name}."
    ]


def group_cells(rows: list[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the per-group table (summary.md/txt and report.html): model, group = value (its test
    images), the one-sided alpha, the decided resolution ("undecided", or "not decided: <why>") and each
    resolution's score with its interval and verdict, largest resolution first."""
    resolutions = sorted({int(k) for r in rows for k in (r.get("scores") or {})}, reverse=True)
    header = [
        "model",
        "group = value (test images)",
        "one-sided alpha",
        "decided",
        *(f"{res} px" for res in resolutions),
    ]
    body = []
    for r in rows:
        verdicts = {int(v["resolution"]): v.get("verdict") for v in r.get("verdicts") or []}
        scores = {int(k): v for k, v in (r.get("scores") or {}).items()}
        n = r.get("n_images")
        cells = [str(r["model"]), f"{r['group']} = {r['value']} ({'-' if n is None else n})", f"{r['alpha']:.3g}"]
        body.append(
            [*cells, decided_cell(r), *(_score_cell(scores.get(res), verdicts.get(res)) for res in resolutions)]
        )
    return header, body


def _score_cell(score: Mapping[str, Any] | None, verdict: str | None) -> str:
    """'0.812 [0.771, 0.850] non-inferior': the score, its interval and the resolution's verdict."""
    if not score or score.get("estimate") is None:
        return "-"
    low, high = score.get("low"), score.get("high")
    shown = f"{score['estimate']:.3f}" + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else "")
    return f"{shown} {verdict}" if verdict else shown


def group_note(rows: list[Mapping[str, Any]], differ: list[str]) -> str:
    """What the per-group table says, in words, with the sentences of the groups whose values were decided apart."""
    margin = next((r["margin"] for r in rows if r.get("margin") is not None), None)
    at = f" at margin {margin:g}" if margin is not None else ""
    said = (
        f"Each group value's test images decided on their own against the reference{at}, by the model's own decision "
        "(the same tests, scope and reference); a group's values are one family, each decided at one-sided alpha / "
        "(its number of values) (Bonferroni), the groups themselves separate families. Cells: the score on those "
        "images pooled over seeds with its interval (image bootstrap), and the resolution's verdict; 'undecided' is "
        "not 'the same', and a value with too few images is not decided."
    )
    return " ".join([said, *differ])
