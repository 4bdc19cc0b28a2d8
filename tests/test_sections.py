"""The summary's sections (resomap.summary.sections), decided once and rendered in one order everywhere: a real sweep
(tiny_cnn and pixel_logreg at two resolutions, MLflow on) with a section defined here, in this one file, as a
plugin would, and one that raises. Each section with data appears in summary.json, summary.md, summary.txt,
report.html and the parent run's MLflow description, in the same order, the answer first and the methods last; the
raising one is left out with one line naming it, the rest written whole."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import LOWER_BOUND, lower_bounds, summary_lower_bounds, tiny_sweep_config
from resomap.blocks import Text, table
from resomap.summary.sections import SECTIONS, register_section, section_names

PLUGIN_TITLE = "Sweep size (a plugin's section)"


def sweep_size(summary):
    """A plugin's section: how many trials and rows the sweep has, a sentence and a table."""
    rows = summary.rows
    return [
        Text(f"{len(summary.trials)} trials, {len(rows)} model x resolution rows."),
        table(["model", "rows"], [[m, sum(r.model == m for r in rows)] for m in sorted({r.model for r in rows})]),
    ]


def broken(summary):
    raise RuntimeError("the plugin's data is not there")


@pytest.fixture(scope="module")
def swept(tmp_path_factory, request):
    from resomap.sweep.sweep import run_sweep

    root = tmp_path_factory.mktemp("sections")
    register_section("sweep_size", title=PLUGIN_TITLE, order=65)(sweep_size)
    register_section("broken_part", title="Never shown", order=66)(broken)
    request.addfinalizer(lambda: (SECTIONS.unregister("sweep_size"), SECTIONS.unregister("broken_part")))
    extra = ("mlflow.enabled=true", "profiling.iters=6")  # 6 timed calls: the latency's 95% interval
    extra += (f"mlflow.tracking_uri=sqlite:///{root / 'mlflow.db'}",)  # the store _views reads, whatever the env says
    cfg = tiny_sweep_config(root, ["tiny_cnn", "pixel_logreg"], [16, 24], ["saliency"], 2, *extra)
    caplog = logging.getLogger("resomap.summary.sections")
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    caplog.addHandler(handler)
    try:
        outcome = run_sweep(cfg)
    finally:
        caplog.removeHandler(handler)
    assert not outcome.failed and outcome.parent_run_id
    return outcome, records, root


def _views(outcome) -> dict[str, str]:
    import mlflow

    folder = outcome.summary_dir
    client = mlflow.MlflowClient(f"sqlite:///{outcome.summary_dir.parents[2] / 'mlflow.db'}")
    note = client.get_run(outcome.parent_run_id).data.tags["mlflow.note.content"]
    return {
        "summary.md": (folder / "summary.md").read_text(encoding="utf-8"),
        "summary.txt": (folder / "summary.txt").read_text(encoding="utf-8"),
        "report.html": (folder / "report.html").read_text(encoding="utf-8"),
        "MLflow description": note,
    }


def _heading(view: str, name: str, title: str) -> str:
    """How `view` heads a section."""
    import html

    return {
        "summary.md": f"\n## {title}\n",
        "summary.txt": f"\n{title}\n{'-' * len(title)}\n",
        "report.html": f'<section id="{name.replace("_", "-")}"><h2>{html.escape(title, quote=True)}</h2>',
        "MLflow description": f"**{title}**",
    }[view]


def test_the_sections_are_the_registered_ones_in_order_with_the_plugins(swept):
    outcome, records, _ = swept
    data = json.loads((outcome.summary_dir / "summary.json").read_text())
    names = [s["name"] for s in data["sections"]]
    assert names[0] == "answer" and names[1] == "decision" and names[-1] == "methods"
    assert names == [n for n in section_names() if n in names]  # the registered order
    assert {"results", "training", "explanations", "paired", "sweep_size"} <= set(names)
    plugin = next(s for s in data["sections"] if s["name"] == "sweep_size")
    assert plugin["blocks"][0] == {"kind": "text", "text": "4 trials, 4 model x resolution rows."}
    # the section that raised: left out, one line naming it and the error, in summary.json, the log and the notes
    said = "section 'broken_part' not written: RuntimeError: the plugin's data is not there"
    assert "broken_part" not in names and data["section_errors"] == [said]
    assert records == [f"summary {said}"]
    md = (outcome.summary_dir / "summary.md").read_text()
    notes = md[md.index("## Notes") :]
    assert f"- {said}" in notes and "Never shown" not in md
    for name in ("summary.csv", "paired_tests.csv", "recommendation.csv", "sensitive_images.csv", "report.html"):
        assert (outcome.summary_dir / name).stat().st_size > 0  # nothing else lost


@pytest.mark.parametrize("view", ["summary.md", "summary.txt", "report.html", "MLflow description"])
def test_every_section_appears_in_every_view_in_one_order(swept, view):
    outcome, _, _ = swept
    data = json.loads((outcome.summary_dir / "summary.json").read_text())
    text = _views(outcome)[view]
    at = []
    for section in data["sections"]:
        heading = _heading(view, section["name"], section["title"])
        assert text.count(heading) == 1, (view, section["name"])
        at.append(text.index(heading))
    assert at == sorted(at), view  # the answer first, the methods last, the plugin's in its place
    if view != "MLflow description":  # the plugin's sentence itself (the description keeps what fits)
        assert "model x resolution rows." in text


def test_the_first_screen_answers_and_the_lines_stay_readable(swept):
    outcome, _, _ = swept
    md = (outcome.summary_dir / "summary.md").read_text()
    lines = md.splitlines()
    first = lines[:15]
    data = json.loads((outcome.summary_dir / "summary.json").read_text())
    from resomap.summary.answer_text import own_words

    # the answer across models first, then per model its own decision (or why none), within the first 15 lines
    assert first[4].startswith(("Use ", "No answer across models")), first[4]
    for rec in data["recommendations"]:
        assert any(line.startswith(f"- {rec['model']}: {own_words(rec)[:40]}") for line in first), rec["model"]
    table = next(line for line in lines if line.startswith("| "))
    assert len(table.strip("|").split(" | ")) <= 10  # the first table: at most 10 columns
    assert not [line for line in lines if not line.startswith("|") and len(line) > 400]
    assert md.index("## Answer") < md.index("## Results per model") < md.index("## Methods")
    # a reason said once: each note once, with the rows it holds for
    notes = md[md.index("## Notes") :].split("\n## ")[0]
    items = [" ".join(x.split()) for x in re.split(r"^- ", notes, flags=re.M)[1:]]  # wrapped lines joined
    said = [x.rsplit(": ", 1)[0] for x in items if " px" in x.rsplit(": ", 1)[-1]]
    assert said and len(said) == len(set(said))


def test_no_lower_bound_of_a_nonnegative_quantity_is_below_zero(swept):
    """Issue 58: a latency, a throughput, a score, a share of images cannot be below zero, nor can its interval's
    lower bound: summary.json, every CSV of the summary folder and every point of every metric of the MLflow parent
    and children (a bound of a difference, which may be negative, left aside: conftest.lower_bounds). The latency's
    interval is there in each, so the walk is not empty."""
    import mlflow

    outcome, _, _ = swept
    found = summary_lower_bounds(outcome.summary_dir)
    client = mlflow.MlflowClient(f"sqlite:///{outcome.summary_dir.parents[2] / 'mlflow.db'}")
    runs = client.search_runs([client.get_run(outcome.parent_run_id).info.experiment_id])
    assert len(runs) == 5  # the parent and its 4 trials
    for run in runs:
        points = {
            f"{key}/step{m.step}": m.value
            for key in run.data.metrics
            if LOWER_BOUND.search(key)
            for m in client.get_metric_history(run.info.run_id, key)
        }
        found[f"MLflow run {run.info.run_name}"] = list(lower_bounds(points))
    below = [(source, where, v) for source, bounds in found.items() for where, v, nonnegative in bounds
             if nonnegative and v < 0]  # fmt: skip
    assert not below, below
    rows = json.loads((outcome.summary_dir / "summary.json").read_text())["rows"]
    assert all(0 < r["latency_ms_ci_low"] <= r["latency_ms"] <= r["latency_ms_ci_high"] for r in rows)

    def said(source: str, name: str) -> int:
        return sum(where.split("/")[-1].startswith(name) for where, _, _ in found[source])

    assert said("summary.json", "latency_ms_ci_low") == said("summary.csv", "latency_ms_ci_low") == len(rows)
    parent = next(s for s in found if s == "MLflow run sweep resomap-smoke")
    assert sum("latency_p50_ms_ci_low" in where for where, _, _ in found[parent]) == len(rows)
    children = [s for s in found if s.startswith("MLflow run ") and s != parent]
    assert all(any("profile/latency_median_low_ms" in where for where, _, _ in found[s]) for s in children)


def test_each_model_tested_above_its_training_resolution_is_decided_in_one_sentence(swept):
    """summary.train_test from the sweep's own files: each model trained at 16 px and tested at 24 px against itself
    tested at 16 px, its difference what the trials' predictions.csv give (read here with the csv module), one
    sentence per model in summary.json, summary.md and report.html."""
    import csv
    import html

    from resomap.stats import ABOVE_VERDICTS

    outcome, _, _ = swept
    folder = outcome.summary_dir
    data = json.loads((folder / "summary.json").read_text())
    rows = data["train_test"]
    assert [r["model"] for r in rows] == ["pixel_logreg", "tiny_cnn"]
    md = " ".join((folder / "summary.md").read_text(encoding="utf-8").split())  # wrapped lines joined
    page = (folder / "report.html").read_text(encoding="utf-8")
    for row in rows:
        (pair,) = row["pairs"]
        assert (pair["trained"], pair["tested"], pair["verdict"] in ABOVE_VERDICTS) == (16, 24, True)
        assert row["alpha"] == pytest.approx(0.05) and row["correction"] == "Bonferroni over 1 pair"
        right: dict[int, list[float]] = {16: [], 24: []}
        for trial in data["trials"]:
            if trial["model"] == row["model"] and trial["resolution"] == 16:
                with (folder / trial["folder"] / "predictions.csv").open(newline="") as fh:
                    for line in csv.DictReader(fh):
                        right[int(line["test_resolution"])].append(float(line["correct"]))
        assert len(right[16]) == len(right[24]) > 0
        assert pair["difference"] == pytest.approx(np.mean(right[24]) - np.mean(right[16]), abs=1e-12)
        assert f"- {row['sentence']}" in md and html.escape(row["sentence"], quote=False) in page
        assert row["sentence"].startswith(f"{row['model']}, tested above its training resolution (accuracy")
    from resomap.results import load_sweep

    frame = load_sweep(folder).train_test  # the notebook view: one row per pair
    assert list(frame["model"]) == ["pixel_logreg", "tiny_cnn"] and list(frame["tested"]) == [24, 24]
    assert list(frame["difference"]) == [r["pairs"][0]["difference"] for r in rows]


def test_a_summary_json_without_sections_gets_them_built_again(swept, tmp_path: Path):
    import shutil

    from resomap.reports.html import write_report

    outcome, _, _ = swept
    copy = tmp_path / "old"
    shutil.copytree(outcome.summary_dir, copy)
    data = json.loads((copy / "summary.json").read_text())
    names = [s["name"] for s in data.pop("sections")]
    for trial in data["trials"]:  # the copy's trial folders: the originals'
        trial["folder"] = str((outcome.summary_dir / trial["folder"]).resolve())
    (copy / "summary.json").write_text(json.dumps(data))
    page = write_report(copy).read_text(encoding="utf-8")
    found = [n for n in names if f'<section id="{n.replace("_", "-")}">' in page]
    assert found == names  # the explanation findings read back from explanations/findings.txt


def _untyped(tp) -> bool:
    """Is `tp` a mapping or list of mappings with no schema (dict, dict[str, Any], list[dict], Any)?"""
    import collections.abc
    import typing

    if tp is typing.Any or tp in (dict, list):
        return True
    if typing.is_typeddict(tp):
        return False
    origin = typing.get_origin(tp)
    if isinstance(origin, type) and issubclass(origin, collections.abc.Mapping):
        return True
    return any(_untyped(a) for a in typing.get_args(tp) if a is not type(None))


def test_no_summary_field_is_an_untyped_dict():
    """Every part of the summary is typed by its record (resomap.schema), whose keys are the CSV files' columns."""
    import dataclasses
    import typing

    from resomap import results, schema
    from resomap.summary.build import SweepSummary

    hints = typing.get_type_hints(SweepSummary)
    assert {f.name for f in dataclasses.fields(SweepSummary)} == set(hints)
    assert {name: tp for name, tp in hints.items() if _untyped(tp)} == {}

    @dataclasses.dataclass
    class Loose:  # what the check refuses
        rows: list[dict[str, Any]]
        stats: dict[str, Any]
        adaptive: dict | None

    assert [name for name, tp in typing.get_type_hints(Loose).items() if _untyped(tp)] == ["rows", "stats", "adaptive"]
    assert tuple(schema.PairedTest.__annotations__) == results.PAIRED_COLUMNS  # the columns are the records' keys
    assert results.RECOMMENDATION_COLUMNS[-1] == "note" and "verdicts" in schema.Recommendation.__annotations__
    # a trial's record mirrors the result.json a TrialResult writes, plus its folder: the two cannot drift apart
    from resomap.trial_result import TrialResult

    written = (*(f.name for f in dataclasses.fields(TrialResult)), "folder")
    assert tuple(schema.Trial.__annotations__) == written
