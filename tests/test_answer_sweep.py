"""The answer across models in a real sweep, as the quickstart runs it (issue 58): lite0_linear (a frozen pretrained
backbone with a closed-form head) beside pixel_logreg at two resolutions, two seeds, on the synthetic set, MLflow on.
The files the sweep wrote are read: summary.md opens on the answer (the configuration to use, chosen on validation,
the cheaper configurations, the class that matters) and a line per model within its first 15 lines, says
"deterministic" at most once per model and no sentence twice; report.html's first screen and the MLflow parent (its
description's first line, resomap.best, recommended) name the same configuration. A second sweep with one seed:
both fits are deterministic by their spec and decide as with two."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import tiny_sweep_config

pytestmark = pytest.mark.slow  # two real sweeps (a pretrained backbone, MLflow on): about 2 minutes on 2 cores

MODELS, RESOLUTIONS = ["lite0_linear", "pixel_logreg"], [32, 48]
MORE_IMAGES = ("data.synthetic.num_images=240",)  # about 36 test images: intervals over them, a model that learned


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from resomap.sweep.sweep import run_sweep

    root = tmp_path_factory.mktemp("answer")
    cfg = tiny_sweep_config(
        root, MODELS, RESOLUTIONS, ["saliency"], 2, "mlflow.enabled=true", "sweep.seeds=[42,43]", *MORE_IMAGES
    )
    outcome = run_sweep(cfg)
    assert not outcome.failed and outcome.parent_run_id
    return outcome, root


def _sentences(md: str) -> list[str]:
    """The sentences of summary.md's text (tables and headings left out), wrapped lines joined; a list item is a
    sentence of its own."""
    text = " ".join(ln for ln in md.splitlines() if ln and not ln.startswith(("|", "#", "**")))
    return [s.strip() for s in re.split(r"(?<=\.)\s+(?=[A-Z-])", " ".join(text.split())) if len(s.strip()) > 40]


def test_summary_md_opens_on_the_answer_and_says_each_thing_once(swept):
    outcome, _ = swept
    md = (outcome.summary_dir / "summary.md").read_text(encoding="utf-8")
    data = json.loads((outcome.summary_dir / "summary.json").read_text())
    answer = data["answer"]
    assert answer["available"] and answer["use"] in {f"{m}@{r}" for m in MODELS for r in RESOLUTIONS}
    first = md.splitlines()[:15]
    model, res = answer["use"].split("@")
    assert first[4].startswith(f"Use {model} at {res} px, chosen on validation (validation accuracy:"), first[4]
    joined = " ".join(" ".join(first).split())
    assert "non-inferior within 0.02" in joined or "No configuration is cheaper" in joined
    recall = r": test accuracy [^;]*, \w+ recall \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] \(\d+ test images\)"
    assert re.search(recall, joined)
    for m in MODELS:  # a line per model, its own decision, within the first 15 lines
        assert any(line.startswith(f"- {m}: ") for line in first), m
    assert md.lower().count("deterministic") <= len(MODELS)
    repeated = [s for s, n in Counter(_sentences(md)).items() if n > 1]
    assert repeated == []


def test_the_report_and_the_mlflow_parent_name_the_same_configuration(swept):
    import mlflow

    outcome, root = swept
    answer = json.loads((outcome.summary_dir / "summary.json").read_text())["answer"]
    page = (outcome.summary_dir / "report.html").read_text(encoding="utf-8")
    first = page[page.index('id="answer"') : page.index('id="decision"')]
    model, res = answer["use"].split("@")
    assert f"Use {model} at {res} px, chosen on validation" in first
    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    tags = client.get_run(outcome.parent_run_id).data.tags
    assert tags["resomap.best"] == answer["use"]
    assert tags["recommended"].startswith(f"use {answer['use']} (") and "chosen on validation" in tags["recommended"]
    note = tags["mlflow.note.content"]
    assert note.splitlines()[0] == f"**Answer**: {tags['recommended']}"
    assert f"Use {model} at {res} px, chosen on validation" in note.split("**Decision per model")[0]
    for m in MODELS:  # each model's own result in a few words, never "recommended"
        assert "recommend" not in tags[f"decision.{m}"]


def test_one_seed_decides_for_fits_deterministic_by_their_spec(tmp_path: Path, swept):
    from resomap.sweep.sweep import run_sweep

    outcome, _ = swept
    two = {r["model"]: r for r in json.loads((outcome.summary_dir / "summary.json").read_text())["recommendations"]}
    cfg = tiny_sweep_config(tmp_path, MODELS, RESOLUTIONS, ["saliency"], 2, "sweep.seeds=[42]", *MORE_IMAGES)
    one = run_sweep(cfg)
    data = json.loads((one.summary_dir / "summary.json").read_text())
    for rec in data["recommendations"]:
        assert rec["deterministic"] and rec["n_seeds"] == 1 and "one seed says nothing" not in rec["reason"]
        assert (rec["decided"], rec["resolution"]) == (two[rec["model"]]["decided"], two[rec["model"]]["resolution"])
    assert all(t["deterministic"] for t in data["trials"])  # result.json records the spec
