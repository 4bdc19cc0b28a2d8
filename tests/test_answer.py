"""The answer across models (issue 58): the configuration to use, chosen on the validation split; every cheaper
configuration of any model decided against it on the same test images in a fixed sequence by cost; the recall of
the class that matters with its interval; each model's own smallest sufficient resolution, never "best" or
"recommended". Known answers through build_summary on written trial results and predictions.csv (no model runs),
and the bad inputs of the issue: one model, models tested on different images, no validation record; a model
deterministic by its spec decides with one seed, and its seeds disagreeing is a warning. The SweepSummary is built
once: frozen, and no attribute of one assigned anywhere in the package."""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
import logging
import typing
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.records import Predictions, write_predictions
from resomap.summary import SweepSummary, build_summary, write_summary
from resomap.summary.answer_text import own_words
from resomap.trial_result import TrialResult

N = 600
FAST = StatsConfig(resamples=400)
# (model, resolution) -> (GMACs, validation accuracy, validation loss, images it gets wrong beyond the base errors)
CONFIGS = {
    ("big", 64): (4.0, 0.90, 0.30, 0),
    ("big", 32): (1.0, 0.88, 0.33, 2),
    ("small", 32): (0.1, 0.86, 0.35, 3),
    ("small", 16): (0.025, 0.70, 0.60, 90),
}


def _labels() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image index, labels with a minority class 1 of 180 images, the images the best configuration gets right)."""
    rng = np.random.default_rng(11)
    index = np.sort(rng.choice(50_000, N, replace=False))
    labels = np.zeros(N, dtype=np.int64)
    labels[rng.choice(N, 180, replace=False)] = 1
    right = rng.random(N) < 0.9
    return index, labels, right


def _write(
    root: Path,
    configs: dict = CONFIGS,
    seeds: tuple[int, ...] = (0, 1),
    deterministic: bool = True,
    digest: dict | None = None,
    history: bool = True,
    spec: bool | None = None,
) -> tuple[list[dict], dict]:
    """Each configuration's trials (result dict, predictions.csv in its folder): every seed of a `deterministic`
    model predicts the same; otherwise each seed flips a few images of its own. `spec`: what result.json says of
    the model's determinism (default: what it is)."""
    index, labels, right = _labels()
    results, folders = [], {}
    for (model, res), (gmacs, val_acc, val_loss, wrong) in configs.items():
        for seed in seeds:
            mine = right.copy()
            mine[np.flatnonzero(right)[:wrong]] = False
            if not deterministic:
                mine[np.random.default_rng(100 * seed + res).choice(N, 3, replace=False)] ^= True
            pred = np.where(mine, labels, 1 - labels)
            folder = root / model / str(res) / f"seed{seed}"
            folder.mkdir(parents=True)
            write_predictions(folder, {res: Predictions(res, index, labels, pred)})
            hist = [{"epoch": 0.0, "val/accuracy": val_acc, "val/loss": val_loss}] if history else []
            data = {
                "key": f"{model}{res}{seed}", "name": f"{model}@{res}", "model": model, "family": "cnn",
                "resolution": res, "seed": seed, "status": "FINISHED", "task": "classification",
                "test": {"test/accuracy": float(mine.mean())},
                "profile": {"params_m": 1.0, "gmacs": gmacs, "gflops": 2 * gmacs, "latency_median_ms": 10 * gmacs,
                            "latency_p90_ms": 11 * gmacs},
                "history": hist, "convergence": {"best_epoch": 0, "undertrained": False},
                "data": {"classes": ["ok", "defect"], "digest": (digest or {}).get(model, "d1")},
                "deterministic": deterministic if spec is None else spec,
            }  # fmt: skip
            results.append(TrialResult.from_dict(data).to_dict())
            folders[(model, res, seed)] = folder
    return results, folders


def test_the_answer_is_chosen_on_validation_and_decides_cheaper_configurations_of_any_model(tmp_path: Path):
    results, folders = _write(tmp_path / "trials")
    summary = build_summary(results, folders, FAST)
    answer = summary.answer
    assert answer["available"] and answer["use"] == "big@64" and answer["cost"] == "MACs"
    assert answer["chosen_by"] == "validation accuracy" and answer["tie"] == ""
    steps = {s["configuration"]: s for s in answer["steps"]}
    # tested from the most costly cheaper one down: big@32 (2 images fewer right), small@32 (3), small@16 (90)
    assert [s["configuration"] for s in answer["steps"]] == ["big@64", "big@32", "small@32", "small@16"]
    assert [s["verdict"] for s in answer["steps"]] == ["reference", "non-inferior", "non-inferior", "inferior"]
    assert answer["cheapest"] == "small@32" and steps["small@32"]["cost_ratio"] == pytest.approx(40.0)
    # the step is the summary's own test on the paired per-image differences (independently: the same arrays)
    _, labels, right = _labels()
    best, small = right.astype(float), right.copy()
    small[np.flatnonzero(right)[:3]] = False
    d = (small.astype(float) - best)[None]
    assert steps["small@32"]["difference"] == pytest.approx(-3 / N)
    assert steps["small@32"]["p_value"] == pytest.approx(stats.scope.p_value(d, -0.02, binary=True, scope="checkpoint"))
    # the class that matters: the minority class (180 images), its recall at each configuration named, with the
    # image-bootstrap interval of its images' outcomes
    named = {c["configuration"]: c for c in answer["classes"]}
    assert set(named) == {"big@64", "small@32"} and named["big@64"]["class"] == "defect"
    ones = labels == 1
    iv = stats.bootstrap_scores(right[ones].astype(float)[None], level=0.95, resamples=400, seed=FAST.seed)
    got = named["big@64"]
    assert (got["recall"], got["recall_low"], got["recall_high"]) == pytest.approx((iv.estimate, iv.low, iv.high))
    assert got["class_images"] == 180
    # the files and the first screen
    out = tmp_path / "out"
    write_summary(summary, out)
    with (out / "answer.csv").open(newline="") as fh:
        assert [r["verdict"] for r in csv.DictReader(fh)] == ["reference", "non-inferior", "non-inferior", "inferior"]
    assert json.loads((out / "summary.json").read_text())["answer"]["use"] == "big@64"
    md = (out / "summary.md").read_text()
    first = " ".join(md.splitlines()[:15])
    assert "Use big at 64 px, chosen on validation (validation accuracy: 0.900, the highest of 4" in first
    assert "The cheapest configuration shown non-inferior within 0.02: small@32 (40x fewer MACs)" in first
    assert "defect recall " in first and "(180 test images)" in first
    assert "recommend" not in md.lower()  # a model's result is its smallest sufficient resolution
    answer = md[md.index("## Answer") : md.index("## Decision")]
    assert "best" not in answer  # the answer's words are "use" and "cheapest"; no model line says "best"


def test_the_choice_reads_validation_not_the_test_images(tmp_path: Path):
    """small@32 scores higher on the test images than big@64 but lower on validation: big@64 is the one to use,
    and small@32, cheaper and above it on the test images, is shown non-inferior to it."""
    configs = {**CONFIGS, ("big", 64): (4.0, 0.90, 0.30, 5), ("small", 32): (0.1, 0.80, 0.45, 0)}
    results, folders = _write(tmp_path, configs)
    answer = build_summary(results, folders, FAST).answer
    steps = {s["configuration"]: s for s in answer["steps"]}
    assert answer["use"] == "big@64" and steps["small@32"]["score"] > steps["big@64"]["score"]
    assert steps["small@32"]["verdict"] == "non-inferior"


def test_a_tie_on_validation_goes_to_the_lower_validation_loss(tmp_path: Path):
    configs = {**CONFIGS, ("big", 32): (1.0, 0.90, 0.25, 2)}  # as accurate on validation as big@64, lower loss
    results, folders = _write(tmp_path, configs)
    answer = build_summary(results, folders, FAST).answer
    assert answer["use"] == "big@32" and answer["tie"] == "tied with big@64, its validation loss lower (0.250)"
    assert [s["configuration"] for s in answer["steps"]][:2] == ["big@32", "small@32"]
    assert next(s for s in answer["steps"] if s["configuration"] == "big@64")["verdict"] == "above reference"


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("one model", "one model in this sweep (big): its own decision is the answer"),
        ("other images", "no cross-model test: the models were tested on different images"),
        ("no validation", "no cross-model answer: the trials keep no validation score"),
    ],
)
def test_without_an_answer_across_models_one_line_says_why(tmp_path: Path, case: str, reason: str):
    kw: dict = {}
    if case == "one model":
        kw["configs"] = {c: v for c, v in CONFIGS.items() if c[0] == "big"}
    elif case == "other images":
        kw["digest"] = {"small": "d2"}  # a split of its own
    else:
        kw["history"] = False
    results, folders = _write(tmp_path / "trials", **kw)
    summary = build_summary(results, folders, FAST)
    assert not summary.answer["available"] and summary.answer["reason"].startswith(reason)
    write_summary(summary, tmp_path / "out")
    md = (tmp_path / "out" / "summary.md").read_text()
    answer = md[md.index("## Answer") : md.index("## Decision")]
    assert " ".join(answer.split()).count("No answer across models: ") == 1  # one line, then each model's own
    for rec in summary.recommendations:
        assert f"- {rec['model']}: {own_words(rec)}" in " ".join(answer.split())


def test_each_models_own_line_says_its_smallest_sufficient_resolution(tmp_path: Path):
    results, folders = _write(tmp_path / "trials")
    summary = build_summary(results, folders, FAST)
    recs = {r["model"]: r for r in summary.recommendations}
    assert (recs["small"]["resolution"], recs["small"]["decided"]) == (32, True)  # small@16 is shown inferior
    assert own_words(recs["small"]).startswith("needs 32 px: 16 px is shown more than 0.02 below it")
    assert own_words(recs["big"]).startswith("32 px is enough, within 0.02 of 64 px")
    line = next(b for b in summary.sections[0].blocks if hasattr(b, "items")).items[1].text
    assert line.startswith("small: needs 32 px") and "against big@64" in line and "40x fewer MACs" in line


def test_a_deterministic_fit_decides_with_one_seed_as_with_two(tmp_path: Path, caplog):
    """(issue 58, item 7) A model deterministic by its spec is one replicate: one seed decides about it as two do;
    without the spec one seed says nothing of seed-to-seed variation. Its seeds disagreeing is a warning."""
    one = build_summary(*_write(tmp_path / "one", seeds=(0,)), FAST)
    two = build_summary(*_write(tmp_path / "two", seeds=(0, 1)), FAST)
    for a, b in zip(one.recommendations, two.recommendations, strict=True):
        assert a["decided"] and (a["resolution"], a["detectable"]) == (b["resolution"], b["detectable"])
        assert "at model scope (one fit: the training seed changes nothing)" in a["reason"]
    written, folders = _write(tmp_path / "plain", seeds=(0,))
    plain = [{**r, "deterministic": False} for r in written]  # the same trials, without the spec's word
    undecided = build_summary(plain, folders, FAST).recommendations
    assert all(not r["decided"] and "one seed says nothing" in r["reason"] for r in undecided)
    with caplog.at_level(logging.WARNING, logger="resomap.summary.decision"):
        differ = build_summary(*_write(tmp_path / "differ", deterministic=False, spec=True), FAST)
    said = "its spec says the training seed changes nothing, but its seeds gave different predictions at"
    assert [r for r in caplog.messages if said in r] and all(said in r["note"] for r in differ.recommendations)
    assert not any(r["deterministic"] for r in differ.recommendations)


def test_the_summary_is_built_once_and_its_sections_are_typed():
    """(issue 58, item 8) SweepSummary is frozen, no module of the package assigns an attribute of one (the
    summary phase builds it complete: summary.build.assemble), and every section builder takes a SweepSummary."""
    from resomap.summary.sections import SECTIONS

    fields = {f.name for f in dataclasses.fields(SweepSummary)}
    bare = SweepSummary([], [], [], [], {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.front3 = []  # type: ignore[misc]
    assigned = []
    for path in sorted((REPO / "src" / "resomap").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(t, ast.Attribute) and t.attr in fields and "summary" in ast.unparse(t.value):
                        assigned.append(f"{path.name}:{node.lineno} {ast.unparse(t)}")
    assert assigned == []
    for name in SECTIONS.names():
        fn = SECTIONS.get(name)
        if fn.__module__ == "resomap.summary.sections":
            assert typing.get_type_hints(fn)["summary"] is SweepSummary, name
