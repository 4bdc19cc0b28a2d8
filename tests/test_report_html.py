"""`resomap report` / resomap.reports.html.write_report on a real tiny sweep (2 models x 2 resolutions, synthetic
data, 1 epoch): every model and resolution present, every image a decodable data: URI, one strip per probe image
and method, text escaped; probe_overlays; the explanation cost in the summary. The `browser` test opens the page
with file:// in headless Chromium, moves a slider and saves a screenshot ($RESOMAP_SCREENSHOTS or .ci/screenshots/)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from conftest import tiny_sweep_config, trial_summary
from resomap.cli import main

REPO = Path(__file__).resolve().parents[1]
MODELS, RESOLUTIONS, METHODS, PROBES = ("simple_cnn", "tiny_cnn"), (16, 24), ("gradcam", "saliency"), 3
NAME = "tiny-report"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """A finished tiny sweep (MLflow off); returns its summary folder model_summaries/_sweep/<name>/."""
    from resomap.sweep.sweep import run_sweep

    root = tmp_path_factory.mktemp("sweep")
    extra = (
        f"experiment.name={NAME}",
        "explainability.faithfulness_steps=2",
        "explainability.baseline_draws=1",
        "data.synthetic.coarse_share=0.5",  # the group `detail` (fine / coarse) of the per-group decisions
    )
    cfg = tiny_sweep_config(root, MODELS, RESOLUTIONS, METHODS, PROBES, *extra)
    outcome = run_sweep(cfg)
    assert all(r.status == "FINISHED" for r in outcome.results)
    return outcome.summary_dir


class _Page(HTMLParser):
    """The tags the tests look at: every <img> (src, alt), the strips (data-label) and their frames (data-res)."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.strips: list[str] = []
        self.frames: list[tuple[str, int, bool]] = []  # (strip label, resolution, hidden)
        self.scripts = 0
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a)
        elif tag == "div" and "strip" in (a.get("class") or "").split():
            self.strips.append(a.get("data-label", ""))
        elif tag == "figure" and "data-res" in a:
            self.frames.append((self.strips[-1], int(a["data-res"]), "hidden" in a))
        elif tag == "script":
            self.scripts += 1
            assert "src" not in a, "scripts are inline"
        elif tag in ("a", "link"):
            self.links.append(a.get("href", ""))


def _parse(path: Path) -> tuple[str, _Page]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    return text, page


def test_the_report_holds_every_model_resolution_and_probe_map(sweep_dir: Path):
    from PIL import Image

    from resomap.reports.html import write_report

    path = write_report(sweep_dir)
    assert path == sweep_dir / "report.html"
    text, page = _parse(path)
    assert path.stat().st_size < 3 * 2**20
    # every image is an inline PNG that decodes; nothing is fetched from anywhere
    assert len(page.images) >= len(MODELS) * PROBES * len(METHODS) * len(RESOLUTIONS)
    for img in page.images:
        src = img.get("src", "")
        assert src.startswith("data:image/png;base64,"), src[:40]
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as decoded:
            assert decoded.width > 0 and decoded.height > 0
    assert all(link.startswith("#") for link in page.links)
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    # one strip per model x probe image x method, each with a frame per resolution, all shown without JS
    assert len(page.strips) == len(MODELS) * PROBES * len(METHODS)
    for model in MODELS:
        for method in METHODS:
            labels = [s for s in page.strips if s.startswith(f"{model} {method} ")]
            assert len(labels) == PROBES
            for label in labels:
                assert sorted(r for s, r, _ in page.frames if s == label) == list(RESOLUTIONS)
    assert not any(hidden for *_, hidden in page.frames)
    assert page.scripts == 1 and "type='range'" in text
    # the summary table and the train x test matrix name every model and resolution
    summary = text[text.index('id="answer"') : text.index('id="figures"')]
    matrix = text[text.index('id="matrix"') : text.index('id="probes"')]
    for model in MODELS:
        assert model in summary and f"<h3>{model}</h3>" in matrix
        for res in RESOLUTIONS:
            assert re.search(rf"{model}[^<]*</td><td>{res}</td>", summary), (model, res)
    assert all(f"<th>{res}</th>" in matrix for res in RESOLUTIONS)
    # the explanations section states each finding (findings.txt, word for word), each statement in full below
    data = json.loads((sweep_dir / "summary.json").read_text())
    findings = (sweep_dir / "explanations" / "findings.txt").read_text().strip().splitlines()
    statements = (sweep_dir / "explanations" / "agreement.txt").read_text().strip().splitlines()
    explained = text[text.index('id="explanations"') : text.index('id="probes"')]
    assert findings and all(html.escape(s, quote=True) in explained for s in findings)
    agreement = text[text.index('id="agreement"') :]
    assert all(html.escape(s, quote=True) in agreement for s in statements)  # in full further down
    # each finding is its statement's head, measure and decision without the references' detail
    assert len(findings) == len(statements) == len(MODELS) * len(METHODS)
    # (where it looks, decided, is said word for word in both: the rest is compared)
    for short, full in zip(findings, statements, strict=True):
        short, where = short.split(" Where it looks (")
        assert f" Where it looks ({where.split('):')[0]}" in full
        head = short.split(":")[0]
        assert full.startswith(head) and len(short) < len(full.split(" Where it looks (")[0]) / 2
        decision = short.rsplit(": ", 1)[-1] if "no decision" not in short else "no decision"
        assert decision.split(" (")[0] in full
    # the answer, then the decisions, then the table of numbers; the paired tests further down
    order = [text.index(f'<section id="{key}">') for key in ("answer", "decision", "results", "explanations", "paired")]
    assert order == sorted(order)
    for rec in data["recommendations"]:
        assert html.escape(rec["sentence"], quote=True) in _part(text, "decision")
    assert "Same test images, seeds paired" in _part(text, "paired")  # the paired-test table is on the page
    # what the model said, and the figures of accuracy, cost, explanation cost, Pareto
    assert re.search(r"true class <b>\w+</b>", text) and re.search(r"\d+ px: \w+ \d+%", text)
    for stem in ("accuracy_vs_resolution", "explain_cost_vs_resolution", "pareto_accuracy_latency"):
        assert f'alt="{stem}"' in text
    # agreement matrices captioned in words; each model's explanation quality (intervals, random-map baseline)
    between = text[text.index('id="agreement"') : text.index('id="quality"')]
    for model in MODELS:
        for method in METHODS:
            caption = f"{model} / {method}: Spearman, top-k IoU and mass agreement across resolutions"
            assert f"<figcaption>{caption}</figcaption>" in between
        caption = f"{model}: Spearman agreement between methods at each resolution"
        assert f"<figcaption>{caption}</figcaption>" in between
    quality = text[text.index('id="quality"') :]
    for model in MODELS:
        assert f"<figcaption>{model}: explanation quality against resolution</figcaption>" in quality
    assert "excess over random maps" in quality and "explanations/quality.txt" in quality


def test_the_first_screen_says_how_each_model_trained_and_where_it_stands(sweep_dir: Path):
    """Under each model's decision (report, summary.md): whether it is undertrained and at which resolutions, its
    best epochs, and whether it is shown above the majority class (its score) at each resolution, as the rows say;
    each explanation finding with its chance level. The tables fit the page (the costs in a table of their own)."""
    from resomap.reports.html import write_report
    from resomap.summary.rows import SummaryRow
    from resomap.summary.standing import standing

    data = json.loads((sweep_dir / "summary.json").read_text())
    rows = [SummaryRow.from_dict(r) for r in data["rows"]]
    lines = standing(rows)
    assert set(lines) == set(MODELS)
    text, _ = _parse(write_report(sweep_dir))
    decisions = text[text.index('id="decision"') : text.index('id="results"')]
    md = " ".join((sweep_dir / "summary.md").read_text().split())  # lines wrapped
    for model in MODELS:
        mine = [r for r in rows if r.model == model]
        training, baselines = lines[model]
        flagged = sorted(r.resolution for r in mine if r.undertrained)
        if flagged:
            assert training.startswith(f"training: undertrained at {flagged[0]}")
        else:
            assert training.startswith("training: not flagged undertrained at any resolution")
        assert "best epoch " in training
        above = sorted(r.resolution for r in mine if r.shown_above())
        trivial = f"{mine[0].trivial_score:.3f}"
        if above:
            assert f"shown above the majority class ({trivial}) at {above[0]}" in baselines
        for line in (training, baselines):
            assert f"<li>{html.escape(line, quote=True)}</li>" in decisions
            assert f"- {line}" in md
    findings = (sweep_dir / "explanations" / "findings.txt").read_text().strip().splitlines()
    assert findings and all("(chance " in f for f in findings)
    summary = text[text.index('id="answer"') : text.index('id="training"')]
    head = summary[summary.index("<table") : summary.index("</tr>")]
    assert "latency ms" not in head and "latency ms" in summary[summary.index("<h3>Cost</h3>") :]


def test_the_summary_keeps_each_methods_cost(sweep_dir: Path):
    data = json.loads((sweep_dir / "summary.json").read_text())
    assert {(r["model"], r["resolution"]) for r in data["rows"]} == {(m, r) for m in MODELS for r in RESOLUTIONS}
    for row in data["rows"]:
        for method in METHODS:
            assert row[f"explain_seconds/{method}"] > 0
            assert row[f"explain_peak_memory_mb/{method}"] >= 0
    for trial in data["trials"]:
        metrics = trial["explain"]["metrics"]
        assert all(metrics[f"explain/{m}/seconds"] > 0 for m in METHODS)
    assert (sweep_dir / "figures" / "explain_cost_vs_resolution.png").is_file()


def _shown(entry: dict, axis: str, one: int, other: int) -> str | None:
    """The resolution the front's test of `one` against `other` on `axis` shows better (None: none shown)."""
    (test,) = [
        t
        for t in entry["tests"]
        if t["axis"] == axis and {t["resolution_a"], t["resolution_b"]} == {str(one), str(other)}
    ]
    return test["shown_better"]


def test_the_three_way_front_is_in_the_summary_the_report_and_its_figure(sweep_dir: Path):
    data = json.loads((sweep_dir / "summary.json").read_text())
    front3 = {e["model"]: e for e in data["front3"]}
    assert set(front3) == set(MODELS)
    rows = {(r["model"], r["resolution"]): r for r in data["rows"]}
    with open(sweep_dir / "explanations" / "quality.csv", newline="") as f:
        quality = {(r["model"], int(r["resolution"]), r["method"], r["score"]): r for r in csv.DictReader(f)}
    for model, entry in front3.items():
        axes = {a["name"]: a for a in entry["axes"]}
        # every trial profiled and explained, but PROBES (3) probe images are too few for an interval on the
        # explanation quality: the axis is left out and said (tests/test_where_resolution_matters.py has it)
        assert set(axes) == {"score", "cost"}, entry
        first = quality[(model, RESOLUTIONS[0], "gradcam", "deletion_auc_vs_random")]  # gradcam: first by name
        assert first["low"] == "" and first["reason"].startswith(f"only {PROBES} test images")
        assert f"(gradcam) has no interval ({first['reason']}): quality left out" in entry["note"]
        # one seed: latency cannot be tested, so the cost is GMACs, a count compared exactly
        assert axes["cost"]["column"] == "gmacs" and "latency of one seed at some resolution" in entry["note"]
        assert [p["resolution"] for p in entry["points"]] == list(RESOLUTIONS)
        for p in entry["points"]:  # each coordinate is the summary's own number
            row = rows[(model, p["resolution"])]
            assert p["score"][0] == pytest.approx(row["test_accuracy_pooled"])
            assert p["cost"][0] == pytest.approx(row["gmacs"])
            assert p["quality"] is None
        assert any(p["on_front"] for p in entry["points"])
        # every pair of resolutions on each axis: the score's p the summary's paired test, Holm over the model's
        # tests; GMACs compared exactly (no p)
        pairs = len(RESOLUTIONS) * (len(RESOLUTIONS) - 1) // 2
        assert sorted(t["axis"] for t in entry["tests"]) == ["cost"] * pairs + ["score"] * pairs
        paired = {(p["resolution_a"], p["resolution_b"]): p for p in data["paired_tests"]
                  if p["model"] == model and p["metric"] == "accuracy"}  # fmt: skip
        for t in entry["tests"]:
            if t["axis"] == "score":
                assert t["p_value"] == paired[(int(t["resolution_a"]), int(t["resolution_b"]))]["p_value"]
                assert t["p_holm"] >= t["p_value"]
            else:
                assert t["p_value"] is None and t["test"] == "a count: exact" and t["effect"] > 0
        for p in entry["points"]:  # a drop names a resolution shown better on its axes and worse on none
            if p["on_front"]:
                assert p["standing"] == "on the front" and p["dropped_by"] is None
                continue
            q = p["dropped_by"]
            assert p["better_on"] and all(_shown(entry, a, q, p["resolution"]) == str(q) for a in p["better_on"])
            assert not any(_shown(entry, a, q, p["resolution"]) == str(p["resolution"]) for a in ("score", "cost"))
            assert p["standing"].startswith(f"dropped: {q} px is shown better on")
    page = (sweep_dir / "report.html").read_text(encoding="utf-8")
    assert '<section id="front">' in page and "Score x cost x explanation quality" in page
    for entry in front3.values():
        for p in entry["points"]:
            assert html.escape(p["standing"]) in page
    assert "A resolution is dropped from a model&#x27;s front only when" in page
    md = (sweep_dir / "summary.md").read_text(encoding="utf-8")
    assert "## Score x cost x explanation quality (the front per model)" in md
    assert all(f"- {m}: on the front" in md for m in MODELS)
    assert (sweep_dir / "figures" / "tradeoff_score_cost_quality.png").is_file()
    assert 'alt="tradeoff_score_cost_quality"' in page  # among the figures


def test_training_quality_is_in_every_summary_and_the_report(sweep_dir: Path):
    """Each row holds its trials' convergence records as their result.json has them (summary.json whole,
    summary.csv per key), summary.md shows them, each model's learning curves are a valid image, and the report's
    Training section, right after the summary, shows the curves and the table."""
    from PIL import Image

    from resomap.reports.html import write_report

    data = json.loads((sweep_dir / "summary.json").read_text())
    with (sweep_dir / "summary.csv").open(newline="") as fh:
        cells = {(r["model"], int(r["resolution"])): r for r in csv.DictReader(fh)}
    for row in data["rows"]:
        mine = [t for t in data["trials"] if (t["model"], t["resolution"]) == (row["model"], row["resolution"])]
        mine.sort(key=lambda t: t["seed"])
        convs = [json.loads((sweep_dir / t["folder"] / "result.json").read_text())["convergence"] for t in mine]
        assert [r["seed"] for r in row["convergence"]] == [t["seed"] for t in mine]
        for record, conv in zip(row["convergence"], convs, strict=True):
            assert conv and {k: record[k] for k in conv} == conv  # the whole record
            assert record["lr_found"] == conv.get("lr_found") and record["penalty"] is None
        assert row["undertrained"] == any(c["undertrained"] for c in convs)
        found = cells[(row["model"], row["resolution"])]
        for key in ("best_epoch", "epochs_run", "stop_reason", "undertrained", "undertrained_reason", "lr_found"):
            assert json.loads(found[f"convergence/{key}"]) == [c.get(key) for c in convs], key
    md = (sweep_dir / "summary.md").read_text()
    assert "| best epoch / epochs run (seeds) | stopped (seeds) |" in md and "**Convergence per seed**" in md
    assert md.index("## Results per model") < md.index("## Training") < md.index("**Convergence per seed**")
    for model in MODELS:
        png = sweep_dir / "figures" / f"learning_curves_{model}.png"
        with Image.open(png) as img:
            img.verify()
        with Image.open(png) as img:
            assert img.format == "PNG" and img.width > 600 and img.height > 400
        assert png.with_suffix(".pdf").stat().st_size > 1000
    text, _ = _parse(write_report(sweep_dir))
    assert text.index('id="answer"') < text.index('id="figures"') < text.index('id="training"')
    training = _part(text, "training")
    for model in MODELS:
        assert f'alt="learning_curves_{model}"' in training and f'<td class="l">{model}</td>' in training
    assert "best epoch / epochs run (seeds)" in training and "stopped (seeds)" in training
    figures = text[text.index('id="figures"') : text.index('id="matrix"')]
    assert "learning_curves" not in figures  # shown once, in the Training section


def test_per_class_decisions_in_the_summary_the_report_and_load_sweep(sweep_dir: Path):
    """summary.json's class_decisions: every model x class, the fewest test images first, each the decision the
    statistics give on that class's 0/1 recalls (read back from the trials' predictions.csv) at alpha / K; summary.md
    and report.html show them, load_sweep gives them as a DataFrame."""
    from resomap import stats
    from resomap.reports.html import write_report
    from resomap.results import CLASS_DECISION_COLUMNS, load_sweep

    data = json.loads((sweep_dir / "summary.json").read_text())
    found, st = data["class_decisions"], data["stats"]
    classes = data["trials"][0]["data"]["classes"]
    assert {(r["model"], r["class"]) for r in found} == {(m, c) for m in MODELS for c in classes}
    assert any(r["available"] for r in found)  # decisions made, not only reasons
    sweep = load_sweep(sweep_dir)
    own = sweep.predictions.query("test_resolution == resolution")
    for model in MODELS:
        mine = [r for r in found if r["model"] == model]
        assert [r["rank"] for r in mine] == list(range(1, len(classes) + 1))
        assert [r["n_images"] for r in mine] == sorted(r["n_images"] for r in mine)  # the minority class first
        for row in mine:
            assert row["alpha"] == pytest.approx((1 - st["level"]) / len(classes))
            assert row["correction"] == f"Bonferroni over {len(classes)} classes"
            of_class = own[(own.model == model) & (own.label == classes.index(row["class"]))]
            assert row["n_images"] == of_class["index"].nunique()
            if row["n_images"] < 2:
                assert row["reason"].startswith("not decided: ") and not row["available"]
                continue
            scores = {
                res: np.stack([g.sort_values("index")["correct"].to_numpy() for _, g in by_res.groupby("seed")])
                for res, by_res in of_class.groupby("resolution")
            }
            settings = {k: st[k] for k in ("margin", "reference", "level", "power", "scope", "seed_sd")}
            want = stats.noninferiority(scores, alpha=row["alpha"], binary=True, **settings)
            assert (row["resolution"], row["decided"]) == (want.resolution, want.decided)
            got = [(v["resolution"], v["verdict"], v["low"], v["p_value"]) for v in row["verdicts"]]
            assert got == [(v.resolution, v.verdict, v.low, v.p_value) for v in want.verdicts]
    assert list(sweep.class_decisions.columns) == list(CLASS_DECISION_COLUMNS)
    assert sweep.class_decisions[["model", "class", "n_images"]].to_dict("records") == [
        {"model": r["model"], "class": r["class"], "n_images": r["n_images"]} for r in found
    ]
    md = (sweep_dir / "summary.md").read_text()
    assert "## Per class (recall of each class, the minority class first)" in md
    text, _ = _parse(write_report(sweep_dir))
    assert text.index('id="answer"') < text.index('id="training"') < text.index('id="per-class"')
    section = _part(text, "per-class")
    assert "<h2>Per class (recall of each class" in section and "Bonferroni over K classes" in section
    for row in found:
        assert f"<td>{html.escape(row['class'])} ({row['n_images']})</td>" in section


def test_per_group_decisions_in_the_trials_the_summary_the_report_and_load_sweep(sweep_dir: Path):
    """Every trial records its test images' group codes (data.groups); summary.json's group_decisions hold each
    model x value of the synthetic set's `detail` group with its score at every resolution, read back from the
    trials' predictions.csv on that value's images; summary.md and report.html show them; load_sweep gives the
    per-group table."""
    from resomap.reports.html import write_report
    from resomap.results import GROUP_COLUMNS, group_table, load_sweep

    data = json.loads((sweep_dir / "summary.json").read_text())
    found, st = data["group_decisions"], data["stats"]
    recorded = data["trials"][0]["data"]["groups"]["detail"]
    assert recorded["names"] == ["fine", "coarse"] and len(recorded["index"]) == len(recorded["code"]) > 0
    code = dict(zip(recorded["index"], recorded["code"], strict=True))
    assert {(r["model"], r["group"], r["value"]) for r in found} == {
        (m, "detail", v) for m in MODELS for v in ("fine", "coarse")
    }
    sweep = load_sweep(sweep_dir)
    own = sweep.predictions.query("test_resolution == resolution")
    for row in found:
        assert row["alpha"] == pytest.approx((1 - st["level"]) / 2)
        mine = own[(own.model == row["model"]) & (own["index"].map(code) == ["fine", "coarse"].index(row["value"]))]
        assert row["n_images"] == mine["index"].nunique()
        if not row["available"]:
            assert row["reason"].startswith("not decided: n too small")
            continue
        for res, by_res in mine.groupby("resolution"):
            assert row["scores"][str(res)]["estimate"] == pytest.approx(by_res["correct"].mean())
    assert list(sweep.groups.columns) == list(GROUP_COLUMNS)
    keys = ["model", "group", "value", "resolution", "verdict", "decided"]
    assert sweep.groups[keys].to_dict("records") == [{k: t[k] for k in keys} for t in group_table(found)]
    assert len(sweep.groups) > 0
    md = (sweep_dir / "summary.md").read_text()
    assert "## Per group (each group value's test images decided on their own)" in md
    text, _ = _parse(write_report(sweep_dir))
    section = _part(text, "per-group")
    assert "<h2>Per group (each group value" in section and "Bonferroni" in section
    for row in found:
        assert f"<td>detail = {row['value']} ({row['n_images']})</td>" in section


def test_no_sufficient_resolution_where_the_evidence_is_missing(sweep_dir: Path):
    """The tiny sweep's models (one epoch, checkpoint-scope decisions) lack the evidence of a smallest sufficient
    resolution: recommendation.csv/json keep each decided resolution, not shown sufficient, with the rule's reason;
    summary.md's sentence and table, the report's first screen (no star, no green row) and the accuracy figure (no
    ring, no legend entry) say so, each read from the summary's one rule (summary.uncertainty.sufficiency)."""
    from matplotlib.lines import Line2D

    from resomap.reports.figures import quality_figure
    from resomap.summary.rows import SummaryRow
    from resomap.summary.uncertainty import sufficiency as recommendation

    data = json.loads((sweep_dir / "summary.json").read_text())
    rows = [SummaryRow.from_dict(r) for r in data["rows"]]
    by_key = {(r.model, r.resolution): r for r in rows}
    recs = data["recommendations"]
    with (sweep_dir / "recommendation.csv").open(newline="") as fh:
        cells = {r["model"]: r for r in csv.DictReader(fh)}
    assert sorted(cells) == sorted(MODELS) and [r["model"] for r in recs] == sorted(MODELS)
    md = (sweep_dir / "summary.md").read_text()
    decisions = " ".join(md[md.index("## Decision per model") :].split())  # lines wrapped
    for rec in recs:
        assert rec["sufficient"] is False and rec["sufficiency"].startswith("no sufficient resolution shown: ")
        assert rec["sufficiency"] == recommendation(rec, by_key.get((rec["model"], rec["resolution"]))).reason
        cell = cells[rec["model"]]
        assert (cell["sufficient"], cell["sufficiency"]) == ("False", rec["sufficiency"])
        assert cell["resolution"] == str(rec["resolution"])  # the decided resolution stays, not shown sufficient
        assert f"- {rec['sentence']}" in decisions
        if rec["decided"]:  # what is missing, said in the sentence
            assert "Not shown to be its smallest sufficient resolution: " in rec["sentence"]
        if rec["resolution"] is not None:
            assert f"| {rec['model']} | {rec['resolution']} |" in md
            line = next(ln for ln in md.splitlines() if ln.startswith(f"| {rec['model']} | {rec['resolution']} |"))
            assert line.endswith("| not shown |")
    headline = md[md.index("## Results per model") :].split("\n\n**")[0]
    assert not any(r.sufficient for r in rows) and not any(ln.endswith("| yes |") for ln in headline.splitlines())
    page = (sweep_dir / "report.html").read_text(encoding="utf-8")  # the page the sweep wrote
    first = page[page.index('id="answer"') : page.index('id="training"')]
    assert "★" not in first and "No model's smallest sufficient resolution is shown" in first
    assert not re.search(r'<tr class="rec"><td class="l">[^<]*</td><td>\d+</td><td>\d+</td>', first)
    assert all(html.escape(rec["sentence"], quote=True) in first for rec in recs)
    fig = quality_figure(rows, data["paired_tests"], recs)
    assert not [ln for ax in fig.axes for ln in ax.lines if ln.get_markersize() == 11]  # no ring
    assert "smallest sufficient" not in [h.get_label() for h in fig.legends[0].legend_handles if isinstance(h, Line2D)]


def test_probe_overlays_say_what_the_model_did(sweep_dir: Path):
    from resomap.explain.methods.probe import load_maps
    from resomap.reports.explain_figures import probe_overlays, shared_scales

    folder = trial_summary(sweep_dir.parents[2], "tiny_cnn", RESOLUTIONS[0], experiment=NAME).parents[1]
    paths = sorted(folder.glob("*/seed*/explanations.npz"))
    assert len(paths) == len(RESOLUTIONS)
    _, meta = load_maps(paths[0])
    found = probe_overlays(paths[0], size=40)
    assert [(o.method, o.position) for o in found] == [(m, p) for m in meta["methods"] for p in range(PROBES)]
    names = meta["class_names"]
    for o in found:
        assert o.image.shape == (40, 40, 3) and o.image.dtype == np.uint8
        assert o.index == meta["index"][o.position] and o.true == names[meta["targets"][o.position]]
        assert o.pred == names[meta["pred"][o.position]] and o.prob == pytest.approx(meta["prob"][o.position])
        assert o.correct == (o.pred == o.true)
        assert f"true {o.true}" in o.caption and f"predicted {o.pred}" in o.caption
        assert not o.shared_scale and "per map" in o.caption
    # a shared scale applies to raw-magnitude methods only (grad-cam's CAMs stay per map), and changes the image
    scales = shared_scales(paths)
    assert set(scales) == {"saliency"} and len(scales["saliency"]) == PROBES
    shared = {(o.method, o.position): o for o in probe_overlays(paths[0], size=40, scales=scales)}
    own = {(o.method, o.position): o for o in found}
    assert shared[("saliency", 0)].shared_scale and "shared across resolutions" in shared[("saliency", 0)].caption
    assert not shared[("gradcam", 0)].shared_scale
    np.testing.assert_array_equal(shared[("gradcam", 0)].image, own[("gradcam", 0)].image)
    huge = probe_overlays(paths[0], size=40, scales={"saliency": 1e30})
    assert not np.array_equal(huge[PROBES].image, own[("saliency", 0)].image)  # all-cold map vs its own range


def test_text_is_escaped(sweep_dir: Path, tmp_path: Path):
    from resomap.reports.html import write_report

    copy = tmp_path / "evil"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("report.html"))
    data = json.loads((copy / "summary.json").read_text())
    data["recommendations"][0]["sentence"] = '<script>alert("x")</script> & more'
    data["rows"][0]["note"] = "<img src=x onerror=alert(1)>"
    decision = next(x for x in data["sections"] if x["name"] == "decision")  # what the page shows of them
    decision["blocks"][0]["items"][0]["text"] = data["recommendations"][0]["sentence"]
    decision["blocks"].append({"kind": "table", "header": ["<b>"], "rows": [[data["rows"][0]["note"]]], "title": ""})
    for trial in data["trials"]:  # the copy's trial folders: the originals' (relative paths moved with it)
        trial["folder"] = str((sweep_dir / trial["folder"]).resolve())
    (copy / "summary.json").write_text(json.dumps(data))
    text = write_report(copy).read_text(encoding="utf-8")
    assert '<script>alert("x")' not in text and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more" in text
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text


def test_images_that_need_the_pixels_are_counted_written_loaded_and_shown(sweep_dir: Path, tmp_path: Path):
    """summary.json `sensitivity` and sensitive_images.csv hold what the trials' predictions.csv give (one seed: the
    caveat in the row), load_sweep exposes both, and the report's section shows the counts; an image listed as lost
    that is in the probe set is shown with each method's map at every resolution side by side, one that is not is
    named and said to have no map."""
    from resomap.explain.methods.probe import load_maps
    from resomap.reports.html import write_report
    from resomap.results import load_sweep
    from resomap.summary.sensitivity import ONE_SEED

    data, sweep = json.loads((sweep_dir / "summary.json").read_text()), load_sweep(sweep_dir)
    assert (sweep_dir / "sensitive_images.csv").is_file()
    own = sweep.predictions.query("test_resolution == resolution")
    expected = []
    for model in MODELS:
        (row,) = [r for r in data["sensitivity"] if r["model"] == model]
        assert (row["resolution"], row["reference"], row["n_seeds"], row["reason"]) == (16, 24, 1, ONE_SEED)
        right = own[own.model == model].pivot_table(index="index", columns="resolution", values="correct")
        lost, gained = (
            right.index[(right[24] == 1) & (right[16] == 0)],
            right.index[(right[24] == 0) & (right[16] == 1)],
        )
        assert (row["lost"], row["gained"], row["n_images"]) == (len(lost), len(gained), len(right))
        assert row["seed_dependent"] is None and row["lost_low"] <= row["lost_share"] <= row["lost_high"]
        expected += [(model, int(i), "lost") for i in lost] + [(model, int(i), "gained") for i in gained]
    found = sweep.sensitive_images
    assert sorted(zip(found.model, found["index"], found.status, strict=True)) == sorted(expected)
    assert sweep.sensitivity[["model", "lost", "gained"]].values.tolist() == [
        [r["model"], r["lost"], r["gained"]] for r in data["sensitivity"]
    ]
    md = (sweep_dir / "summary.md").read_text()
    assert "## Images that need the pixels" in md and f"{MODELS[0]} 16 px against 24 px: lost " in md
    text = write_report(sweep_dir).read_text(encoding="utf-8")
    section = _part(text, "sensitive")
    assert "<h2>Images that need the pixels (" in section and "seed-dependent (noise)" in section
    assert all(f"<h3>{model}</h3>" in section for model in MODELS)
    # the maps: a copy whose csv lists a probe image and an image outside the probe set as lost at 16 px
    copy = tmp_path / "listed"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("report.html"))
    for trial in data["trials"]:  # the copy's trial folders: the originals'
        trial["folder"] = str((sweep_dir / trial["folder"]).resolve())
    (copy / "summary.json").write_text(json.dumps(data))
    model = MODELS[0]
    folder = next(Path(t["folder"]) for t in data["trials"] if t["model"] == model and t["resolution"] == 16)
    probe = int(load_maps(folder / "explanations.npz")[1]["index"][0])
    outside = max(int(i) for i in own["index"]) + 1000
    with (copy / "sensitive_images.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["model", "resolution", "reference", "index", "label", "class_name", "status"])
        writer.writerows([[model, 16, 24, probe, 0, "c0", "lost"], [model, 16, 24, outside, 1, "c1", "lost"]])
    text, page = _parse(write_report(copy))
    section = _part(text, "sensitive")
    assert f"image #{probe}</b>" in section and f"image #{outside}</b>" in section
    assert section.count('<div class="sbs"') == len(METHODS)  # one row per method, every resolution side by side
    for method in METHODS:
        row = section[section.index(f'data-label="{model} {method} probe #{probe}"') :]
        row = row[: row.index("</div></div>")]
        assert all(f"{res} px" in row for res in RESOLUTIONS) and row.count("<img") == len(RESOLUTIONS)
    assert "not in the probe set: no map" in section.split(f"image #{outside}</b>")[1]
    assert len(page.strips) == len(MODELS) * PROBES * len(METHODS)  # the probe section's sliders, no more


# ------------------------------------------------------------------------------------------------ maps on demand


def _listed_copy(sweep_dir: Path, folder: Path, lost: list[int], model: str = MODELS[0]) -> tuple[dict, list[dict]]:
    """A copy of the sweep's summary folder (no report, no maps on demand, no sensitive-image figures) whose
    sensitive_images.csv lists `lost` as lost at 16 px; (its summary.json with the trials' folders made absolute,
    the csv's rows)."""
    skip = shutil.ignore_patterns("report.html", "sensitive_maps.npz", "sensitive_images_*")
    shutil.copytree(sweep_dir, folder, ignore=skip)
    data = json.loads((sweep_dir / "summary.json").read_text())
    for trial in data["trials"]:
        trial["folder"] = str((sweep_dir / trial["folder"]).resolve())
    (folder / "summary.json").write_text(json.dumps(data))
    head = ["model", "resolution", "reference", "index", "label", "class_name", "status"]
    rows = [dict(zip(head, [model, 16, 24, i, 0, "c0", "lost"], strict=True)) for i in lost]
    with (folder / "sensitive_images.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, head)
        writer.writeheader()
        writer.writerows(rows)
    return data, rows


def _outside_and_probe(sweep_dir: Path, model: str) -> tuple[list[int], int]:
    """(test images of `model` outside its probe set, one probe image), by raw dataset index."""
    from resomap.explain.methods.probe import load_maps
    from resomap.results import load_sweep

    data = json.loads((sweep_dir / "summary.json").read_text())
    folder = next(Path(sweep_dir / t["folder"]) for t in data["trials"] if t["model"] == model)
    probe = [int(i) for i in load_maps(folder / "explanations.npz")[1]["index"]]
    own = load_sweep(sweep_dir).predictions.query("test_resolution == resolution and model == @model")
    return sorted({int(i) for i in own["index"]} - set(probe)), probe[0]


@pytest.fixture(scope="module")
def on_demand(sweep_dir: Path, tmp_path_factory) -> dict:
    """A copy listing two images outside the probe set and one in it as lost, its maps on demand made by the
    summary's step (sweep.sensitive.sensitive_maps) with the figure drawing recorded."""
    from types import SimpleNamespace

    from resomap.config import load
    from resomap.plotstyle import save_drawn
    from resomap.sweep.sensitive import sensitive_maps

    outside, probe = _outside_and_probe(sweep_dir, MODELS[0])
    copy = tmp_path_factory.mktemp("on_demand") / "listed"
    data, rows = _listed_copy(sweep_dir, copy, [*outside[:2], probe])
    drawn = []
    mp = pytest.MonkeyPatch()

    def recorded(draw, args, *a, **kw):
        drawn.append(draw(*args))
        return save_drawn(draw, args, *a, **kw)

    mp.setattr("resomap.plotstyle.save_drawn", recorded)
    checkpoint = next(t["best_checkpoint"] for t in data["trials"])
    cfg = load(Path(checkpoint).parent, None, ())  # the trial's config: the sweep's explainability settings
    try:
        summary = SimpleNamespace(sensitive_images=rows, trials=data["trials"])
        figures = sensitive_maps(summary, cfg, copy)
    finally:
        mp.undo()
    return {"copy": copy, "data": data, "rows": rows, "cfg": cfg, "outside": outside[:2], "probe": probe,
            "figures": figures, "drawn": drawn, "summary": summary}  # fmt: skip


def test_lost_images_outside_the_probe_set_get_maps_from_the_checkpoints_at_every_resolution(on_demand: dict):
    """explanations/sensitive_maps.npz: per resolution of the model's lowest seed an entry naming the model,
    resolution, seed, images and checkpoint, with every configured method's map of each image (finite, at the
    resolution), equal to what the explain API gives for that checkpoint and image; the probe image is not in it."""
    from resomap.analysis import load_trained
    from resomap.explain.methods.cam import sweep_cam_spec
    from resomap.explain.methods.probe import explain_probe_set
    from resomap.explain.on_demand import load_on_demand
    from resomap.training.restore import load_bundle

    model, outside = MODELS[0], on_demand["outside"]
    entries = load_on_demand(on_demand["copy"] / "explanations" / "sensitive_maps.npz")
    assert sorted(int(m["resolution"]) for _, m in entries) == list(RESOLUTIONS)
    trials = {int(t["resolution"]): t for t in on_demand["data"]["trials"] if t["model"] == model}
    for arrays, meta in entries:
        res = int(meta["resolution"])
        assert (meta["model"], meta["seed"], meta["index"]) == (model, 42, outside)
        assert meta["checkpoint"] == trials[res]["best_checkpoint"] and not meta.get("unavailable")
        assert sorted(meta["methods"]) == sorted(METHODS) and not meta["failed"]
        assert len(meta["pred"]) == len(outside) and arrays["_probe_images"].shape[-2:] == (res, res)
        trained = load_trained(meta["checkpoint"])  # independently: the checkpoint through the public explain API
        bundle = load_bundle(trained, trained.cfg)
        rows = [int(np.flatnonzero(bundle.splits["test"] == i)[0]) for i in outside]
        images = bundle.normalize(bundle.images("test")[rows])
        labels = bundle.labels("test")[rows]
        spec = sweep_cam_spec(trained.spec, trained.cfg, trained.model)
        kw = {"spec": spec, "resolution": res, "cfg": on_demand["cfg"].explainability, "min_cam_size": 4}
        expected, failed = explain_probe_set(trained.model, images, labels, list(METHODS), **kw)
        assert not failed
        for method in METHODS:
            assert arrays[method].shape == (len(outside), res, res) and np.isfinite(arrays[method]).all()
            assert np.allclose(arrays[method], expected[method], atol=1e-6), (method, res)


def test_the_report_shows_the_maps_on_demand_like_the_probe_maps(on_demand: dict):
    """Each lost image outside the probe set: every method's map at every resolution side by side, captioned as
    computed after the sweep; no 'not in the probe set: no map' for it any more."""
    from resomap.reports.html import write_report

    model = MODELS[0]
    text, page = _parse(write_report(on_demand["copy"]))
    section = _part(text, "sensitive")
    assert "not in the probe set: no map" not in section
    assert section.count('<div class="sbs"') == len(METHODS) * (len(on_demand["outside"]) + 1)
    for index in on_demand["outside"]:
        card = section.split(f"image #{index}</b>")[1].split('<div class="probe">')[0]
        assert "computed after the sweep from the trial&#x27;s saved best checkpoint" in card
        for method in METHODS:
            row = card[card.index(f'data-label="{model} {method} probe #{index}"') :]
            row = row[: row.index("</div></div>")]
            assert all(f"{res} px" in row for res in RESOLUTIONS) and row.count("<img") == len(RESOLUTIONS)
    probe_card = section.split(f"image #{on_demand['probe']}</b>")[1].split('<div class="probe">')[0]
    assert "computed after the sweep" not in probe_card and probe_card.count('<div class="sbs"') == len(METHODS)
    assert len(page.strips) == len(MODELS) * PROBES * len(METHODS)  # the probe section's sliders, no more


def test_the_sensitive_images_figure_has_a_row_per_image_and_a_column_per_resolution(on_demand: dict):
    from PIL import Image

    from resomap.plotstyle import STYLE

    model = MODELS[0]
    path = on_demand["copy"] / "figures" / f"sensitive_images_{model}.png"
    assert on_demand["figures"] == [path]
    with Image.open(path) as image:
        assert image.format == "PNG" and round(image.info["dpi"][0]) == STYLE["savefig.dpi"]
        assert image.width > 200 * len(RESOLUTIONS) and image.height > 200 * 3  # 3 rows of panels, 2 columns
    (fig,) = on_demand["drawn"]
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 3 * len(RESOLUTIONS)  # every image has its first method's map at every resolution
    titles = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert [t.split()[0] for t in titles] == [f"#{i}" for i in [*on_demand["outside"], on_demand["probe"]]]
    assert all("lost at 16 px" in t for t in titles) and all("*" in t for t in titles[:2]) and "*" not in titles[2]
    assert f"{METHODS[0]} map" in fig._suptitle.get_text()


def test_a_rerun_reuses_the_maps_and_recomputes_only_what_changed(on_demand: dict, tmp_path: Path, monkeypatch):
    """The summary made again (in a new folder, the earlier one beside it) keeps the file as it was (same bytes,
    same modification time), explaining nothing; another set of images is explained again."""
    import resomap.explain.on_demand as od
    from resomap.sweep.sensitive import sensitive_maps

    calls = []
    original = od._explain
    monkeypatch.setattr(od, "_explain", lambda *a: calls.append(a) or original(*a))
    old = on_demand["copy"] / "explanations" / "sensitive_maps.npz"
    again = tmp_path / "again"  # the summary folder being built; the earlier one is on_demand["copy"]
    sensitive_maps(on_demand["summary"], on_demand["cfg"], again, previous_dir=on_demand["copy"])
    new = again / "explanations" / "sensitive_maps.npz"
    assert calls == [] and new.read_bytes() == old.read_bytes()
    assert new.stat().st_mtime_ns == old.stat().st_mtime_ns
    fewer = [r for r in on_demand["rows"] if int(r["index"]) != on_demand["outside"][1]]
    changed = type(on_demand["summary"])(sensitive_images=fewer, trials=on_demand["data"]["trials"])
    sensitive_maps(changed, on_demand["cfg"], again, previous_dir=on_demand["copy"])
    assert len(calls) == len(RESOLUTIONS)  # the one image left outside the probe set, at each resolution


def test_the_maps_made_beside_the_summary_are_the_maps_made_in_line(on_demand: dict, tmp_path: Path, monkeypatch):
    """The sweep's summary makes the maps in a thread (sweep.sensitive.SensitiveMaps): the checkpoints loaded before
    the images are known, each once, then explained: the same entries and maps as made in line, and the figure."""
    import resomap.explain.on_demand as od
    from resomap.explain.on_demand import load_on_demand
    from resomap.sweep.sensitive import SensitiveMaps, aside

    loads = []
    original = od._load
    monkeypatch.setattr(od, "_load", lambda *a: loads.append(a[0]) or original(*a))
    folder, summary = tmp_path / "beside", on_demand["summary"]
    with aside() as beside:
        maps = SensitiveMaps(on_demand["cfg"], folder, None, beside)
        maps.prepare(summary.trials)
        maps.start(summary)
        figures = maps.figures()
    assert figures == [folder / "figures" / f"sensitive_images_{MODELS[0]}.png"] and figures[0].is_file()
    assert sorted((r.model, r.resolution) for r in loads) == [(m, r) for m in MODELS for r in RESOLUTIONS]
    assert all(r.index == () for r in loads)  # loaded ahead, before the images were named
    ahead = load_on_demand(folder / "explanations" / "sensitive_maps.npz")
    in_line = load_on_demand(on_demand["copy"] / "explanations" / "sensitive_maps.npz")
    assert len(ahead) == len(in_line) == len(RESOLUTIONS)
    said = ("prob", "true_prob")  # what the model said: floats, computed alike (at another thread count, maybe)
    for (a, ma), (b, mb) in zip(ahead, in_line, strict=True):
        assert {k: v for k, v in ma.items() if k not in said} == {k: v for k, v in mb.items() if k not in said}
        assert all(np.allclose(ma[k], mb[k], atol=1e-6) for k in said)
        assert a.keys() == b.keys() and all(np.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_loading_ahead_stops_at_its_memory_budget(on_demand: dict):
    from resomap.explain.on_demand import load_checkpoints
    from resomap.reports.sensitive_maps import shown_checkpoints

    shown = shown_checkpoints(on_demand["copy"], on_demand["data"]["trials"])
    assert len(shown) == len(MODELS) * len(RESOLUTIONS)
    assert len(load_checkpoints(shown, on_demand["cfg"])) == len(shown)
    assert len(load_checkpoints(shown, on_demand["cfg"], budget_mb=1e-6)) == 1  # the first one, then no more


def test_a_missing_checkpoint_is_said_for_that_image(on_demand: dict, tmp_path: Path):
    """The trial at 24 px without its checkpoint (gone since): its maps are said to be missing with the path, the
    other resolution's maps still shown, nothing fails."""
    from resomap.reports.html import write_report
    from resomap.sweep.sensitive import sensitive_maps

    folder = tmp_path / "gone"
    data, rows = _listed_copy(on_demand["copy"].parent / "listed", folder, on_demand["outside"][:1])
    trials = [dict(t) for t in data["trials"]]
    gone = str(tmp_path / "deleted" / "epoch=0.pt")
    for t in trials:
        if t["model"] == MODELS[0] and t["resolution"] == 24:
            t["best_checkpoint"] = gone
    summary = type(on_demand["summary"])(sensitive_images=rows, trials=trials)
    figure = folder / "figures" / f"sensitive_images_{MODELS[0]}.png"
    assert sensitive_maps(summary, on_demand["cfg"], folder) == [figure]
    text = write_report(folder).read_text(encoding="utf-8")
    card = text.split(f"image #{on_demand['outside'][0]}</b>")[1].split('<div class="probe">')[0]
    assert f"no map at 24 px: the checkpoint of seed 42 at 24 px is missing ({gone})" in html.unescape(card)
    assert card.count('<div class="sbs"') == len(METHODS) and card.count("<img") == len(METHODS)  # 16 px only


def test_a_checkpoint_that_cannot_be_loaded_is_said_and_the_other_resolution_still_explained(on_demand: dict, tmp_path):
    from resomap.explain.on_demand import load_on_demand, maps_on_demand
    from resomap.reports.sensitive_maps import map_requests

    torn = tmp_path / "epoch=0-torn.pt"
    torn.write_bytes(b"not a checkpoint")
    trials = [dict(t) for t in on_demand["data"]["trials"]]
    for t in trials:
        if t["model"] == MODELS[0] and t["resolution"] == 16:
            t["best_checkpoint"] = str(torn)
    requests = map_requests(on_demand["copy"], on_demand["rows"], trials)
    path = maps_on_demand(requests, on_demand["cfg"], tmp_path / "sensitive_maps.npz")
    by_res = {int(m["resolution"]): (a, m) for a, m in load_on_demand(path)}
    assert not by_res[16][0] and "corrupt or not a checkpoint" in by_res[16][1]["unavailable"]
    assert str(torn) in by_res[16][1]["unavailable"] and set(METHODS) <= set(by_res[24][0])


def test_the_summary_phase_explained_the_sweeps_own_lost_images_outside_the_probe_set(sweep_dir: Path):
    """What the sweep's own summary did: each request reports.sensitive_maps makes of the summary is an entry of
    its sensitive_maps.npz with maps; a figure for every model with a lost image."""
    from resomap.explain.on_demand import load_on_demand
    from resomap.reports.sensitive_maps import map_requests

    data = json.loads((sweep_dir / "summary.json").read_text())
    with (sweep_dir / "sensitive_images.csv").open(newline="") as fh:
        images = list(csv.DictReader(fh))
    wanted = {(r.model, r.resolution, r.index) for r in map_requests(sweep_dir, images, data["trials"])}
    entries = load_on_demand(sweep_dir / "explanations" / "sensitive_maps.npz")
    found = {(m["model"], m["resolution"], tuple(m["index"])) for a, m in entries if set(METHODS) <= set(a)}
    assert found == wanted
    lost = {r["model"] for r in images if r["status"] == "lost"}
    assert {p.stem.removeprefix("sensitive_images_") for p in (sweep_dir / "figures").glob("sensitive_*.png")} == lost


def test_cli_report_and_its_errors(sweep_dir: Path, tmp_path: Path, capsys):
    root = sweep_dir.parent.parent
    assert main(["report", "--summaries", str(root), "--sweep", "nope"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("resomap: error: no sweep 'nope'; known sweeps: ") and NAME in err
    target = tmp_path / "r.html"
    assert main(["report", "--summaries", str(root), "--out", str(target)]) == 0  # the only sweep: the default
    assert str(target) in capsys.readouterr().out and target.stat().st_size > 0
    assert main(["report", "--summaries", str(tmp_path / "empty")]) == 2
    assert "no finished sweep" in capsys.readouterr().err


def _bare_sweep(root: Path) -> Path:
    """A sweep folder with an empty summary (enough for a page), under root/model_summaries/_sweep/."""
    folder = root / "model_summaries" / "_sweep" / "bare"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"rows": [], "trials": []}))
    return folder


def _report_refused(root: Path, capsys) -> str:
    assert main(["report", "--summaries", str(root / "model_summaries")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("resomap: error: cannot write ") and "report.html" in err
    assert "pass --out with a file in a writable folder" in err
    return err


def test_report_on_a_read_only_folder_says_to_use_out(tmp_path: Path, capsys):
    """A sweep folder one may read but not write (another user's, chmod a-w): one line saying to use --out, exit
    2, no traceback; --out writes it elsewhere."""
    folder = _bare_sweep(tmp_path)
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("chmod a-w does not stop this user writing (root): see the read-only file system test")
        _report_refused(tmp_path, capsys)
        assert sorted(p.name for p in folder.iterdir()) == ["summary.json"]
        assert (
            main(["report", "--summaries", str(tmp_path / "model_summaries"), "--out", str(tmp_path / "r.html")]) == 0
        )
        assert (tmp_path / "r.html").stat().st_size > 0
    finally:
        folder.chmod(0o755)


def test_report_on_a_read_only_file_system_says_to_use_out(tmp_path: Path, capsys, monkeypatch):
    """The same on a read-only mount (EROFS), which stops root too: the write is made to fail as the mount would."""
    import errno

    from resomap.reports import html as report_html

    def read_only(path, _text):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    _bare_sweep(tmp_path)
    monkeypatch.setattr(report_html, "write_text", read_only)
    assert "report.html (read-only file system); pass --out" in _report_refused(tmp_path, capsys)


def test_report_out_a_folder_is_one_line(tmp_path: Path, capsys):
    """--out naming an existing folder: one line saying to name the file, exit 2, nothing written there."""
    _bare_sweep(tmp_path)
    (tmp_path / "out").mkdir()
    assert main(["report", "--summaries", str(tmp_path / "model_summaries"), "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "is a folder; give the report's file" in err, err
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_report_opens_from_disk_and_its_slider_moves(sweep_dir: Path, tmp_path: Path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from resomap.reports.html import write_report

    chromium, chromedriver = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
    missing = [str(p) for p in (chromium, chromedriver) if not p.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}; `bash .ci/browser` installs Chromium and runs these tests")
    path = write_report(sweep_dir)
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(chromium)
    flags = "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking"
    for flag in [*flags.split(), "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'profile'}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(chromedriver)), options=opts)
    try:
        driver.get(path.resolve().as_uri())
        broken = driver.execute_script(
            "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length"
        )
        assert broken == 0
        assert driver.execute_script("return document.images.length") >= len(MODELS) * PROBES * len(METHODS) * 2
        sliders = driver.find_elements(By.CSS_SELECTOR, ".strip input[type=range]")
        assert len(sliders) == len(MODELS) * PROBES * len(METHODS)
        strip = sliders[0].find_element(By.XPATH, "..")
        shown = "return Array.from(arguments[0].querySelectorAll('figure')).filter(f => !f.hidden)"

        def visible():
            figs = driver.execute_script(shown, strip)
            assert len(figs) == 1  # JS on: one resolution at a time
            return figs[0].get_attribute("data-res"), figs[0].find_element(By.TAG_NAME, "img").get_attribute("src")

        before = visible()
        assert before[0] == str(max(RESOLUTIONS))
        sliders[0].click()
        driver.execute_script(
            "arguments[0].value = 0; arguments[0].dispatchEvent(new Event('input'))", sliders[0]
        )  # the smallest resolution
        after = visible()
        assert after[0] == str(min(RESOLUTIONS)) and after[1] != before[1]
        caption = driver.execute_script(shown, strip)[0].find_element(By.TAG_NAME, "figcaption").text
        assert caption.startswith(f"{min(RESOLUTIONS)} px") and "%" in caption
        # read as on screen at 1400 px: no caption cut (a wrong prediction keeps its mark), every table inside the
        # page's panel, and the first screen says how each model trained and where it stands
        cut = "return Array.from(document.querySelectorAll('figcaption')).filter(c => c.offsetParent !== null"
        cut += " && c.scrollWidth > c.clientWidth + 1).map(c => c.textContent)"
        assert driver.execute_script(cut) == []
        longest = "128 px: functional 95% ✗"  # ELPV's class names: a caption as long as the quickstart's
        driver.execute_script(
            "document.querySelector('.strip figure:not([hidden]) figcaption').textContent = arguments[0]", longest
        )
        assert driver.execute_script(cut) == []  # it wraps, its mark kept
        wide = "var m = document.querySelector('main').getBoundingClientRect(); return Array.from(document"
        wide += ".querySelectorAll('main table')).filter(t => t.getBoundingClientRect().right > m.right + 1).length"
        assert driver.execute_script(wide) == 0
        wrong = "return Array.from(document.querySelectorAll('.strip figure.wrong figcaption'))"
        wrong += ".filter(c => c.offsetParent !== null).map(c => c.textContent)"
        assert all("✗" in caption for caption in driver.execute_script(wrong))
        # the answer, per model: each model's own line says whether it learned (against the majority class, the
        # epoch budget)
        lines = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#answer ul li")]
        for model in MODELS:
            own = [line for line in lines if line.startswith(f"{model}:")]
            assert len(own) == 1, (model, lines)
            assert "above the majority class (" in own[0] and "undertrained" in own[0], own[0]
        decided = driver.find_element(By.CSS_SELECTOR, "#decision ul").text  # then the decisions in full
        assert decided.count("training: ") == decided.count("baselines: ") == len(MODELS)
        assert "undertrained" in decided and "the majority class (" in decided
        folder = Path(os.environ.get("RESOMAP_SCREENSHOTS") or REPO / ".ci" / "screenshots")
        folder.mkdir(parents=True, exist_ok=True)
        driver.execute_script("document.getElementById('answer').scrollIntoView()")
        assert driver.save_screenshot(str(folder / "report_first_screen.png"))
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 80, 6000))
        driver.execute_script("window.scrollTo(0, 0)")
        assert driver.save_screenshot(str(folder / "report.png"))
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def single_dir(tmp_path_factory) -> Path:
    """A finished sweep of one model at one resolution with one seed (MLflow off): its summary folder."""
    from resomap.sweep.sweep import run_sweep

    root = tmp_path_factory.mktemp("single")
    cfg = tiny_sweep_config(root, MODELS[:1], RESOLUTIONS[:1], METHODS, PROBES, "experiment.name=single")
    outcome = run_sweep(cfg)
    assert [r.status for r in outcome.results] == ["FINISHED"]
    return outcome.summary_dir


def test_one_model_one_resolution_one_seed_renders_every_section_and_says_what_is_missing(single_dir: Path):
    """Every section of the report is there and says in words what one model, one resolution and one seed cannot
    give: no comparison between resolutions (the decision, the explanations), no interval over seeds; no agreement
    figure across resolutions is drawn (one cell says nothing); summary.md says the same."""
    from resomap.reports.html import write_report

    text, page = _parse(write_report(single_dir))
    for key in ("answer", "decision", "results", "training", "figures", "matrix", "probes", "agreement", "quality"):
        assert f'<section id="{key}">' in text, key
    model, res = MODELS[0], RESOLUTIONS[0]
    assert f"only {res} px has per-image predictions: nothing to compare it with" in text
    assert f"{model} / {METHODS[0]} (spearman, grid" in text and "one resolution: nothing compared across" in text
    assert "interval over test images and training seeds not available: needs &gt;= 3 seeds" in text
    assert "training: " in text and "baselines: " in text
    assert not list((single_dir / "explanations" / "agreement").glob("*_agreement.png"))
    assert (single_dir / "explanations" / "agreement" / f"{model}_methods_spearman.png").is_file()
    assert page.images and all(img.get("src", "").startswith("data:image/png;base64,") for img in page.images)
    md = (single_dir / "summary.md").read_text()
    assert f"only {res} px has per-image predictions" in md and "  - training: " in md


def test_agreement_captions_read_model_names_that_end_in_digits():
    """A timm name such as mobilenetv3_large_100 ends in digits: its between-methods figure is the model's (every
    resolution side by side), not mobilenetv3_large's at 100 px; a per-resolution figure still reads its px."""
    from resomap.reports.html_explain import _agreement_caption

    pairs = {("mobilenetv3_large_100", "gradcam"), ("tiny_cnn", "saliency")}
    assert _agreement_caption("mobilenetv3_large_100_methods_spearman", pairs) == (
        "mobilenetv3_large_100: Spearman agreement between methods at each resolution"
    )
    assert _agreement_caption("tiny_cnn_32_methods_spearman", pairs) == (
        "tiny_cnn at 32 px: Spearman agreement between methods"
    )
    assert _agreement_caption("mobilenetv3_large_100_gradcam_agreement", pairs) == (
        "mobilenetv3_large_100 / gradcam: Spearman, top-k IoU and mass agreement across resolutions"
    )


def _part(text: str, key: str) -> str:
    """One <section> of the page, whole."""
    start = text.index(f'<section id="{key}">')
    return text[start : text.index("</section>", start)]


def test_where_each_model_looks_is_decided_in_the_files_the_sweep_wrote(sweep_dir: Path):
    """Every model x method x step has a row in map_decisions.csv with its floor and verdict; each trial's npz holds
    the shift floor's maps; the Answer of summary.md (and the summary.json every view renders) says where each
    model looks at its smallest resolution, and report.html draws its mean maps with the verdicts."""
    import numpy as np
    import pandas as pd

    from resomap.explain.methods.probe import load_maps
    from resomap.results import load_sweep

    rows = pd.read_csv(sweep_dir / "explanations" / "map_decisions.csv")
    pd.testing.assert_frame_equal(load_sweep(NAME, root=sweep_dir.parents[1]).map_decisions, rows)
    assert sorted(rows.groupby(["model", "method", "resolution", "reference"]).groups) == [
        (model, method, 16, 24) for model in sorted(MODELS) for method in sorted(METHODS)
    ]
    # one seed of a model trained per resolution: its floor is the shift floor, and 3 probe images decide nothing
    assert set(rows.floor_kind) == {"shift"} and set(rows.verdict) <= {"undecided", "chance"}
    assert ((rows.floor > -1) & (rows.floor <= 1) & (rows.images + rows.left_out == PROBES)).all()
    arrays, meta = load_maps(trial_summary(sweep_dir.parents[2], "tiny_cnn", 24, experiment=NAME) / "explanations.npz")
    assert meta["floor"] == {"nuisance": "shift", "pixels": 1, "failed": {}}
    for method in METHODS:
        assert arrays[f"floor__{method}"].shape == arrays[method].shape
        assert not np.array_equal(arrays[f"floor__{method}"], arrays[method])  # the shifted image's map, moved back
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert [s.split(",")[0] for s in summary["map_answers"]] == sorted(MODELS)
    answer = (sweep_dir / "summary.md").read_text().split("## Decision per model")[0]
    for said in summary["map_answers"]:
        assert said.startswith(f"{said.split(',')[0]}, where it looks at 16 px against 24 px (agreement: the share")
        assert said.split(" (")[0] in answer.replace("\n", " ").replace("  ", " ")
    html = (sweep_dir / "report.html").read_text()
    assert "Where the maps sit" in html and "tiny_cnn: mean maps and verdicts" in html
