"""What a sweep leaves in MLflow for its UI: the experiment's kind and runs-table view, plain params, tags and
dataset inputs, headline metrics, per-resolution metrics and probe images (step = resolution) logged once, the
HTML report on the parent, one line per trial on the console; the UI app's model-training default; pt2 models."""

from __future__ import annotations

import asyncio
import csv
import json
import os
from pathlib import Path

import pytest
import yaml
from PIL import Image

from conftest import trial_summary
from resomap.cli import main
from resomap.config import load
from resomap.reports.probe_images import BESIDE_SIDE, PARENT_PROBES
from resomap.summary.rows import SummaryRow
from resomap.tracking import Tracker
from resomap.tracking.parent import CONFIG_ARTIFACT, PARENT_SETTINGS, SETTING_TAG
from resomap.tracking.publish import _held_images
from resomap.tracking.sweep_run import resolution_points
from resomap.tracking.views import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    HEADROOM,
    LATENCY_METRIC,
    MODELS_TAG,
    PALETTE,
    PARALLEL_TAG,
    RECOMMENDED_TAG,
    RESOLUTION_METRIC,
    SCORE_HIGH,
    SCORE_LOW,
    SCORE_METRIC,
    VIEW_COLUMNS,
    VIEW_TAG,
    chart_ranges,
    experiment_tags,
    group_id,
    model_colors,
    view_charts,
    view_ranges,
    with_ranges,
)

REPO = Path(__file__).resolve().parents[1]
MODELS, RESOLUTIONS = ("tiny_cnn",), (16, 24)


def _client(project: Path):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{project / 'mlflow.db'}")


def test_experiments_are_tagged_model_training_with_the_runs_view(project: Path):
    client = _client(project)
    old = client.create_experiment("made-by-hand")  # an experiment that existed before ResoMap logged to it
    tracker = Tracker(load("configs", "smoke", ["mlflow.experiment=made-by-hand"]))
    assert tracker.experiment_id == old
    fresh = Tracker(load("configs", "smoke", ["mlflow.experiment=new-one"])).experiment_id
    for exp_id in (old, fresh):
        tags = client.get_experiment(exp_id).tags
        assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
        view = json.loads(tags[VIEW_TAG])
        assert view["selectedColumns"] == list(VIEW_COLUMNS)
        # score, its interval and latency are metrics (sortable as numbers); the runs grouped by model, sorted by
        # the resolution metric (a param sorts as text: 128 before 32)
        assert {"params.`resolution`", "metrics.`score`", "metrics.`score_low`", "metrics.`latency_ms`"} <= set(
            view["selectedColumns"]
        )
        assert view["groupBy"]["groupByKeys"] == [{"mode": "param", "groupByData": "model"}]
        assert (view["orderByKey"], view["orderByAsc"]) == ("metrics.`resolution`", True)
        assert view["groupsExpanded"] == {"param.model": True}  # the parent's group open (the models' open anyway)
        # charts against resolution: each line card's x axis is the resolution metric, per group (model)
        lines = {c["metricKey"]: c for c in view["compareRunCharts"]}
        methods = ("saliency", "gradcam")
        costs = ["test/macro_f1", "profile/peak_memory_mb", "profile/gmacs", "train_time_s"]
        explain = [f"explain/{m}/seconds" for m in methods]
        assert list(lines) == ["score", "latency_ms", *(f"agreement/{m}" for m in methods), *costs, explain[0]]
        assert lines[explain[0]]["selectedMetricKeys"] == explain  # every method's seconds in one card
        assert all(c["xAxisKey"] == "metric" and c["selectedXAxisMetricKey"] == "resolution" for c in lines.values())
        # the score with its pooled interval, each agreement with its shift floor and chance level (drawn dashed
        # and dotted beside it)
        assert lines["score"]["selectedMetricKeys"] == ["score", "score_low", "score_high"]
        agreement = ["agreement/gradcam", "agreement_shift_floor/gradcam", "agreement_chance/gradcam"]
        assert lines["agreement/gradcam"]["selectedMetricKeys"] == agreement
        assert json.loads(tags[MODELS_TAG]) == ["tiny_cnn"]  # the smoke preset's: the order of their colours
        assert view["useGroupedValuesInCharts"] and view["compareRunSections"][0]["uuid"] == "against resolution"
        # the parallel-coordinates view: the same runs ungrouped (MLflow's card refuses grouped string params)
        parallel = json.loads(tags[PARALLEL_TAG])
        (card,) = parallel["compareRunCharts"]
        assert card["type"] == "PARALLEL" and parallel["groupBy"] is None
        assert (card["selectedParams"], card["selectedMetrics"]) == (
            ["model", "resolution", "seed"],
            ["score", "latency_ms"],
        )


def test_resolution_points_put_each_model_against_resolution():
    rows = [
        SummaryRow("a", "", 32, 1, test_accuracy=0.5, latency_ms=2.0, explain_costs={"explain_seconds/saliency": 1.5}),
        SummaryRow("a", "", 64, 1, test_accuracy=0.75, latency_ms=float("nan")),
        SummaryRow("b:x", "", 32, 1, test_accuracy=None),
    ]
    spearman = [[1, 0.2, 0.4], [0.2, 1, None], [0.4, None, 1]]
    matrices = {"a/gradcam": {"resolutions": [32, 64, 128], "spearman": spearman}}
    points = resolution_points(rows, matrices)
    assert points["by_resolution/a/test_accuracy"] == {32: 0.5, 64: 0.75}
    assert points["by_resolution/a/latency_p50_ms"] == {32: 2.0}  # NaN left out
    assert points["by_resolution/a/explain_seconds_saliency"] == {32: 1.5}
    assert points["by_resolution/a/agreement_gradcam"] == pytest.approx({32: 0.3, 64: 0.2, 128: 0.4})
    assert not any(k.startswith("by_resolution/b") for k in points)  # no value, no point


def test_held_images_reads_mlflow_image_names():
    have = {
        "images/probe~gradcam~00+step+32+timestamp+1+abc.png",
        "images/probe~gradcam~00+step+32+timestamp+1+abc+compressed.webp",
        "images/probe~a~saliency~03+step+128+timestamp+2+def.png",
        "figures/confusion_matrix.png",
    }
    assert _held_images(have) == {("probe/gradcam/00", 32), ("probe/a/saliency/03", 128)}


def _one_probe_image_lost(monkeypatch: pytest.MonkeyPatch, project: Path) -> None:
    """The summary's sensitive images with tiny_cnn's first probe image listed as lost at 16 px (the counts
    themselves are tested in test_sensitivity and test_report_html), so that the sweep draws and logs its figure."""
    import resomap.summary.build as summary_module
    from resomap.explain.methods.probe import load_meta

    counted = summary_module.sensitivity

    def with_one_lost(records, recommendations, cfg):
        found = counted(records, recommendations, cfg)
        index = load_meta(trial_summary(project, "tiny_cnn", 16) / "explanations.npz")["index"][0]
        row = {"model": "tiny_cnn", "resolution": 16, "reference": 24, "index": index, "status": "lost"}
        found.images[:] = [r for r in found.images if r["index"] != index] + [row]
        return found

    monkeypatch.setattr(summary_module, "sensitivity", with_one_lost)


def test_a_sweep_in_mlflow_reads_well_and_publishing_again_adds_nothing(project: Path, capsys, monkeypatch):
    _one_probe_image_lost(monkeypatch, project)
    args = [
        "sweep", "--preset", "smoke", f"sweep.models=[{','.join(MODELS)}]",
        f"sweep.resolutions=[{','.join(map(str, RESOLUTIONS))}]", "explainability.sanity_methods=[]",
    ]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    trial_lines = [line for line in out.splitlines() if " | tiny_cnn@" in line]
    assert len(trial_lines) == len(RESOLUTIONS) and all("test accuracy" in line for line in trial_lines), out
    assert " INFO " not in err and "Pickle" not in err and "pip" not in err, err  # detail only with -v

    client = _client(project)
    exp = client.get_experiment_by_name("resomap-smoke")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    parent = runs.pop("sweep resomap-smoke")
    probes = load("configs", "smoke", []).explainability.probe_size
    counts = {}
    summary_dir = project / "model_summaries" / "_sweep" / "resomap-smoke"
    summary_rows = json.loads((summary_dir / "summary.json").read_text())["rows"]
    for res in RESOLUTIONS:
        run = runs[f"tiny_cnn@{res}"]
        # what identifies the trial as params (MLflow's image cards print them above the image), the rest of the
        # config as the config.yaml artifact named by a digest tag
        assert run.data.params == {
            "model": "tiny_cnn", "resolution": str(res), "seed": "42", "task": "classification", "dataset": "synthetic"
        }  # fmt: skip
        saved_cfg = client.download_artifacts(run.info.run_id, "config.yaml", str(project / f"cfg{res}"))
        from resomap.tracking.publish import CONFIG_DIGEST_TAG, config_digest

        assert run.data.tags[CONFIG_DIGEST_TAG] == config_digest(load(Path(saved_cfg).parent, None, []))
        assert run.data.tags["dataset"] == "synthetic" and run.data.tags["model"] == "tiny_cnn"
        assert run.data.tags["model_resolution"] == f"tiny_cnn@{res}"  # the seed-free group-by key
        assert {"test/accuracy", "test/macro_f1", "profile/latency_p50_ms", "profile/peak_memory_mb"} <= set(
            run.data.metrics
        )
        (inp,) = run.inputs.dataset_inputs
        profile = json.loads(inp.dataset.profile)
        result = json.loads((trial_summary(project, "tiny_cnn", res) / "result.json").read_text())
        assert inp.dataset.name == "synthetic" and inp.dataset.digest == result["data"]["digest"]
        assert profile["train_images"] == result["data"]["splits"]["train"] > 0
        images = _held_images({a.path for a in client.list_artifacts(run.info.run_id, "images")})
        assert images == {(f"probe/{m}/{p:02d}", res) for m in ("saliency", "gradcam") for p in range(probes)}
        counts[run.info.run_id] = len(client.list_artifacts(run.info.run_id, "images"))
        # a child's picture: its map with its words beside it, wider than high (whole in MLflow's image card)
        png = next(a.path for a in client.list_artifacts(run.info.run_id, "images") if a.path.endswith(".png"))
        with Image.open(client.download_artifacts(run.info.run_id, png, str(project / f"png{res}"))) as picture:
            assert picture.size == (BESIDE_SIDE, BESIDE_SIDE), picture.size  # its map and words in the top part
        # the runs table's rounded metric columns: the trial's score, the pooled interval of its row, its latency,
        # and its resolution (the charts' x axis)
        row = next(r for r in summary_rows if r["resolution"] == res)
        assert run.data.metrics[SCORE_METRIC] == round(run.data.metrics["test/accuracy"], 3)
        low, high = row["test_accuracy_ci_low"], row["test_accuracy_ci_high"]
        assert (run.data.metrics[SCORE_LOW], run.data.metrics[SCORE_HIGH]) == (round(low, 3), round(high, 3))
        assert run.data.metrics[LATENCY_METRIC] == float(f"{result['profile']['latency_median_ms']:.3g}")
        assert run.data.metrics[RESOLUTION_METRIC] == res
        # its description: its score, its row's pooled interval, its training and its model's decision
        child_note = run.data.tags["mlflow.note.content"]
        assert child_note.startswith(f"**tiny_cnn at {res} px, seed 42**")
        assert f"- test accuracy: {run.data.metrics['test/accuracy']:.3f} (this seed)" in child_note
        assert f"over 1 seed: {row['test_accuracy_pooled']:.3f} [{low:.3f}, {high:.3f}]" in child_note
        assert "- training: " in child_note and "- baselines: " in child_note and "'s decision: " in child_note
        assert "penalty chosen" not in child_note  # a gradient fit: its epochs, no penalty grid
        # the map agreement beside its shift floor at this resolution and its chance level (maps of different probe
        # images), what the view draws; the floor is a map's agreement with itself, so it is a real agreement value
        assert {"agreement/gradcam", "agreement_shift_floor/gradcam", "agreement_chance/gradcam"} <= set(
            run.data.metrics
        )
        assert -1 <= run.data.metrics["agreement_shift_floor/gradcam"] <= 1
    # the sweep view's line cards: a y range holding every value of the trial runs, with HEADROOM of their span
    # above the highest (plotly's toolbar covers the top of a chart); a card with no values keeps MLflow's
    view = client.get_experiment(exp.experiment_id).tags[VIEW_TAG]
    for card in json.loads(view)["compareRunCharts"]:
        values = [r.data.metrics[k] for r in runs.values() for k in card["selectedMetricKeys"] if k in r.data.metrics]
        if not values:
            assert card["range"] == {}, card
            continue
        low, high, got = min(values), max(values), card["range"]
        assert got["yMin"] <= low and got["yMax"] > high, card
        assert got["yMax"] - high >= HEADROOM * (high - low) - 1e-9, card  # float rounding of the bound
    # one model, one seed: no answer across models and no smallest sufficient resolution shown; the parent's
    # `recommended` says the model's own result, and it holds no score (never the highest raw one)
    top = max(RESOLUTIONS)
    assert parent.data.tags[RECOMMENDED_TAG].startswith(f"one model, tiny_cnn: {top} px until shown otherwise")
    assert SCORE_METRIC not in parent.data.metrics and not any(k.startswith("best_test") for k in parent.data.metrics)
    assert parent.data.tags["decision.tiny_cnn"] == f"{top} px until shown otherwise"
    assert "resomap.best" not in parent.data.tags
    history = client.get_metric_history(parent.info.run_id, "by_resolution/tiny_cnn/test_accuracy")
    assert sorted(m.step for m in history) == list(RESOLUTIONS)
    parent_paths = {a.path for a in client.list_artifacts(parent.info.run_id, "images")}
    parent_images = _held_images(parent_paths)
    # the first PARENT_PROBES probe maps of each method at every resolution (step = resolution), and at step 0, where
    # MLflow's image card opens, the same map at every resolution side by side
    shown = range(min(probes, PARENT_PROBES))
    steps = (0, *RESOLUTIONS)
    assert parent_images == {
        (f"probe/tiny_cnn/{m}/{p:02d}", s) for m in ("saliency", "gradcam") for p in shown for s in steps
    }
    # the parent's pictures, their words at least 10 px high in MLflow's copy (at most 256 px on its longer side): at
    # a resolution its map with its words beside it (square), at step 0 the maps of every resolution in a row under
    # the title "all resolutions" (wider than high)
    from resomap.reports.probe_images import BESIDE_FONT, OVERVIEW_FONT, OVERVIEW_TILE, OVERVIEW_WIDTH

    for step, width in ((RESOLUTIONS[0], BESIDE_SIDE), (0, OVERVIEW_WIDTH)):
        name = next(
            a
            for a in parent_paths
            if a.startswith(f"images/probe~tiny_cnn~gradcam~00+step+{step}+") and a.endswith(".png")
        )
        with Image.open(client.download_artifacts(parent.info.run_id, name, str(project))) as picture:
            assert picture.width == width and OVERVIEW_TILE < picture.height <= picture.width, picture.size
            font = OVERVIEW_FONT if step == 0 else BESIDE_FONT
            assert font * 256 / picture.width >= 10, picture.size
    assert "report.html" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    # the learning curves beside the other summary figures, and which model x resolution is undertrained
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert "figures/learning_curves_tiny_cnn.png" in logged
    # the most sensitive lost images with their maps at each resolution (reports.sensitive_maps)
    sensitive = "sensitive_images_tiny_cnn.png"
    assert (summary_dir / "figures" / sensitive).is_file() and f"figures/{sensitive}" in logged
    # no params on the parent (MLflow's image cards print them above the image): a few settings as tags, the whole
    # config as an artifact
    assert parent.data.params == {} and parent.data.tags[SETTING_TAG + "training.epochs"] == "1"
    assert {k for k in parent.data.tags if k.startswith(SETTING_TAG)} == {SETTING_TAG + k for k in PARENT_SETTINGS}
    saved = client.download_artifacts(parent.info.run_id, CONFIG_ARTIFACT, str(project))
    assert yaml.safe_load(Path(saved).read_text())["training"]["epochs"] == 1
    # the parent's description: the decisions, the explanation finding and where the report and figures are
    summary_dir = project / "model_summaries" / "_sweep" / "resomap-smoke"
    note = parent.data.tags["mlflow.note.content"]
    recs = json.loads((summary_dir / "summary.json").read_text())["recommendations"]
    sentences = [r["sentence"] for r in recs]
    # it opens on the answer (MLflow shows its first lines before "Show more"), then the decisions in full
    top = max(RESOLUTIONS)
    assert note.startswith(f"**Answer**: one model, tiny_cnn: {top} px until shown otherwise")
    answer = note.split("**Decision per model")[0]
    assert "No answer across models: one model in this sweep (tiny_cnn): its own decision is the answer." in answer
    assert f"\n- tiny_cnn: {top} px until shown otherwise" in answer
    # and where the model looks, decided, in the Answer's own words (summary.json's map_answers)
    (where,) = json.loads((summary_dir / "summary.json").read_text())["map_answers"]
    assert (
        where.startswith(f"tiny_cnn, where it looks at {min(RESOLUTIONS)} px against {top} px")
        and f"- {where}" in answer
    )
    decisions = "**Decision per model (non-inferiority to the reference)**"
    assert decisions in note and sentences and all(f"- {s}" in note for s in sentences)
    # under each decision, how the model trained and where it stands against the majority class (summary.standing)
    for model in {r["model"] for r in recs}:
        said = note[note.index(f"- {next(r['sentence'] for r in recs if r['model'] == model)}") :]
        assert said.split("\n")[1].startswith("  - training: ") and "undertrained" in said.split("\n")[1]
        assert said.split("\n")[2].startswith("  - baselines: ") and "the majority class (" in said.split("\n")[2]
    # one epoch, one seed: no smallest sufficient resolution shown, said with its reason, and no resomap.best tag
    # nor sufficient resolution on the parent
    assert recs and not any(r["sufficient"] for r in recs)
    assert all(r["sufficiency"].startswith("no sufficient resolution shown: ") for r in recs)
    assert "resomap.best" not in parent.data.tags
    assert not any(k.startswith(("sufficient_resolution/", "recommended_resolution/")) for k in parent.data.metrics)
    findings = (summary_dir / "explanations" / "findings.txt").read_text().strip().splitlines()
    assert findings and all(f"- {s}" in note for s in findings)
    assert (
        "- report: artifact `report.html`" in note and "- figure: artifact `figures/accuracy_vs_resolution.png`" in note
    )
    assert f"- figure: artifact `figures/{sensitive}`" in note
    # the headline figures drawn in the description (its Overview): a copy no wider than the page holds, each a link
    # to the full-size file; the copies are the parent's artifacts, resampled from the summary's own figures
    from resomap.tracking.note import NOTE_FIGURE_WIDTH, figure_link

    pid = parent.info.run_id
    names = ("accuracy_vs_resolution.png", "cost_vs_resolution.png", "pareto_accuracy_latency.png")
    for name in names:
        image, full = figure_link(pid, f"figures/overview/{name}"), figure_link(pid, f"figures/{name}")
        link = next(line for line in note.splitlines() if image in line)
        assert link.startswith("[![") and link.endswith(f"]({image})]({full})"), link
        copy_path = client.download_artifacts(pid, f"figures/overview/{name}", str(project))
        with Image.open(copy_path) as copy, Image.open(summary_dir / "figures" / name) as original:
            assert copy.width == min(NOTE_FIGURE_WIDTH, original.width)
            assert abs(copy.height / copy.width - original.height / original.width) < 0.01
    at = [note.index(figure_link(pid, f"figures/overview/{name}")) for name in names]
    assert at == sorted(at)  # the score first
    assert note.index("**Figures**") < note.index("**Training**") < note.index("**Files**")
    flagged = "- tiny_cnn @ 16 px: seed 42: the epoch budget ended it while val/loss was still improving"
    assert "**Training**" in note and flagged in note
    counts[parent.info.run_id] = len(client.list_artifacts(parent.info.run_id, "images"))

    model_folder = trial_summary(project, "tiny_cnn", 16).parents[1]
    for path in model_folder.glob("*/seed42/result.json"):  # forget they were logged
        path.write_text(json.dumps({**json.loads(path.read_text()), "tracked": False}))
    (project / "model_summaries" / "_sweep" / "resomap-smoke" / "state.json").unlink()
    assert main(["sync", *args[1:]]) == 0
    assert "[sync] 2 logged" in capsys.readouterr().out
    for run_id, n in counts.items():
        assert len(client.list_artifacts(run_id, "images")) == n  # nothing logged twice
    assert client.get_experiment(exp.experiment_id).tags[VIEW_TAG] == view  # the same runs, the same ranges
    assert len(client.search_runs([exp.experiment_id])) == 1 + len(RESOLUTIONS)


def test_a_closed_form_run_shows_the_fit_chosen_on_validation_and_its_penalty_grid(project: Path):
    """pixel_logreg (one solver fit per penalty, the best on validation kept): its run's train/* and val/* are the
    chosen fit's (the convergence record's best epoch, the penalty the summary names), one point each; no `epoch`
    nor epoch counts; the grid is `penalty/*` against the penalty's index and a table with the chosen row marked."""
    args = ["-q", "sweep", "--preset", "smoke", "sweep.models=[pixel_logreg]", "sweep.resolutions=[16]"]
    assert main([*args, "profiling.enabled=false", "explainability.enabled=false"]) == 0
    client = _client(project)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("resomap-smoke").experiment_id], "tags.`resomap.kind` = 'trial'"
    )
    result = json.loads((trial_summary(project, "pixel_logreg", 16) / "result.json").read_text())
    history, best = result["history"], result["convergence"]["best_epoch"]
    chosen = history[best]
    summary_dir = project / "model_summaries" / "_sweep" / "resomap-smoke"
    (row,) = json.loads((summary_dir / "summary.json").read_text())["rows"]
    assert [c["penalty"] for c in row["convergence"]] == [chosen["train/penalty_C"]]  # what the summary says
    metrics = run.data.metrics
    for key in ("train/loss", "train/accuracy", "train/penalty_C", "val/loss", "val/accuracy", "val/macro_f1"):
        assert metrics[key] == pytest.approx(chosen[key]), key
        assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] == [(0, metrics[key])]
    assert not [k for k in metrics if "epoch" in k], metrics  # neither `epoch`, best_epoch nor epoch seconds
    assert metrics["convergence/undertrained"] == float(result["convergence"]["undertrained"])
    # the grid: each penalty's fit, step = its index (strongest penalty first)
    for key, name in (("penalty/C", "train/penalty_C"), ("penalty/val_loss", "val/loss"), ("penalty/fit_time_s", None)):
        points = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert [step for step, _ in points] == list(range(len(history)))
        if name is not None:
            assert [value for _, value in points] == pytest.approx([h[name] for h in history]), key
    table = client.download_artifacts(run.info.run_id, "penalty_grid.csv", str(project))
    with open(table, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["penalty/C"]) for r in rows] == [h["train/penalty_C"] for h in history]
    assert [int(r["chosen"]) for r in rows] == [int(i == best) for i in range(len(history))]
    assert f"penalty chosen on validation: C = {chosen['train/penalty_C']:g}" in run.data.tags["mlflow.note.content"]


def test_a_resumed_closed_form_fit_logs_the_penalties_its_run_lacks_as_its_grid():
    """The live callback: a closed-form fit's rows go to the grid (`penalty/*`, step = the penalty's index, no
    `epoch`); a penalty the run holds already (an earlier attempt) is not logged twice; a gradient fit's epochs stay
    epochs."""
    from types import SimpleNamespace

    from resomap.tracking.live import MlflowCallback

    class Held:
        def __init__(self, held: dict[str, list[int]]):
            self.held, self.logged = held, []

        def metric_history(self, run_id, key):
            return [SimpleNamespace(step=s) for s in self.held.get(key, [])]

        def log_metrics(self, run_id, metrics, step=None):
            self.logged.append((step, dict(metrics)))

    def fit(callback, rows):
        callback.on_fit_start(None)
        for i, row in enumerate(rows):
            callback.on_train_epoch_end(None, {k: v for k, v in row.items() if not k.startswith("val/")})
            callback.on_validation_end(SimpleNamespace(epoch=i), {k: v for k, v in row.items() if k.startswith("val/")})

    grid = [
        {"epoch": i, "train/loss": 1.0 / (i + 1), "train/penalty_C": c, "val/loss": 0.5}
        for i, c in enumerate((1e-3, 1e-2, 1e-1))
    ]
    tracker = Held({"penalty/C": [0, 1], "epoch": [0, 1, 2]})  # an earlier attempt logged two penalties
    fit(MlflowCallback(tracker, "run"), grid)
    assert tracker.logged == [(2, {"penalty/train_loss": 1 / 3, "penalty/C": 0.1, "penalty/val_loss": 0.5})]
    epochs = [{"epoch": i, "train/loss": 1.0, "val/loss": 0.5} for i in range(3)]
    tracker = Held({"penalty/C": [0, 1, 2], "epoch": [0]})
    fit(MlflowCallback(tracker, "run"), epochs)
    assert [step for step, _ in tracker.logged] == [1, 2] and all("epoch" in m for _, m in tracker.logged)


def test_chart_ranges_leave_room_above_the_values_and_none_below_zero_for_positive_ones():
    charts = view_charts(("gradcam",))
    runs = [
        {"score": 0.62, "score_low": 0.5, "score_high": 0.74, "latency_ms": 0.2, "agreement/gradcam": -0.2},
        {"score": 0.9, "score_low": 0.8, "score_high": 0.97, "latency_ms": 8.0, "agreement_chance/gradcam": 0.1},
        {"score": float("nan"), "other": 5.0},
    ]
    ranges = chart_ranges(runs, charts)
    assert set(ranges) == {"resomap-score", "resomap-latency", "resomap-agreement-gradcam"}  # no value, no range
    for uuid, (low, high) in {
        "resomap-score": (0.5, 0.97),
        "resomap-latency": (0.2, 8.0),
        "resomap-agreement-gradcam": (-0.2, 0.1),
    }.items():
        got = ranges[uuid]
        assert got["yMin"] <= low and got["yMax"] - high >= HEADROOM * (high - low) - 1e-9, (uuid, got)
        assert got["yMax"] - high <= (HEADROOM + 0.1) * (high - low), (uuid, got)  # room, not a flat line
    assert ranges["resomap-latency"]["yMin"] == 0.0  # 0.2 - FOOTROOM of 7.8 would be below zero
    assert ranges["resomap-agreement-gradcam"]["yMin"] < -0.2  # a negative agreement keeps room below
    one = chart_ranges([{"latency_ms": 3.0}], charts)["resomap-latency"]
    assert one["yMin"] <= 3.0 < one["yMax"]  # one value: a span of its tenth
    view = json.dumps({"compareRunCharts": charts})
    assert view_ranges(with_ranges(view, ranges)) == ranges


def test_the_sweep_view_with_every_explainer_fits_in_an_experiment_tag():
    """MLflow refuses an experiment tag longer than MAX_EXPERIMENT_TAG_VAL_LENGTH (the view would be lost): the view
    of a config explaining with every registered method, its y ranges set, fits."""
    from mlflow.utils.validation import MAX_EXPERIMENT_TAG_VAL_LENGTH

    from resomap.explain.methods import registry
    from resomap.sweep.builtins import register_builtins

    register_builtins()
    methods = sorted(registry.EXPLAINERS.names())
    assert len(methods) >= 14
    charts = view_charts(methods)
    ranges = {c["uuid"]: {"yMin": -0.123456, "yMax": 1234.56} for c in charts}
    assert len(with_ranges(experiment_tags(methods, ["a", "b"])[VIEW_TAG], ranges)) < MAX_EXPERIMENT_TAG_VAL_LENGTH


def test_each_model_of_an_experiment_gets_its_own_colour_and_keeps_it():
    colors = model_colors([["tiny_cnn", "lite0_linear"], ["lite0_linear", "resnet18", "tiny_cnn"]])
    assert colors["tiny_cnn"] == PALETTE[0] and colors["lite0_linear"] == PALETTE[1]  # the most recent first
    assert colors["resnet18"] == PALETTE[2]  # not a colour its experiment's other models have
    many = [f"m{i}" for i in range(len(PALETTE) + 2)]
    colors = model_colors([many])
    assert len({colors[m] for m in many[: len(PALETTE)]}) == len(PALETTE)  # the palette, then it repeats


def test_the_ui_app_colours_each_models_group_from_the_store(project: Path, monkeypatch: pytest.MonkeyPatch):
    """The page `resomap ui` serves sets each model's group colour (the browser's experimentRunColors) from the
    store's ResoMap experiments, the latest updated first."""
    import mlflow.server.handlers as handlers
    from mlflow.server.constants import BACKEND_STORE_URI_ENV_VAR

    from resomap.tracking.ui_app import OWN_COLORS, colors_script, store_colors

    for name, models in (("older", ["tiny_cnn", "resnet18"]), ("newer", ["lite0_linear", "tiny_cnn"])):
        cfg = load("configs", "smoke", [f"mlflow.experiment={name}", f"sweep.models=[{','.join(models)}]"])
        assert Tracker(cfg).experiment_id
        assert Tracker(load("configs", "smoke", [f"mlflow.experiment={name}"])).experiment_id  # tiny_cnn only
        assert json.loads(_client(project).get_experiment_by_name(name).tags[MODELS_TAG]) == models  # the rest kept
    assert store_colors() == {}  # not in a server: nothing read
    monkeypatch.setenv(BACKEND_STORE_URI_ENV_VAR, f"sqlite:///{project / 'mlflow.db'}")
    monkeypatch.setattr(handlers, "_tracking_store", None)
    try:
        colors = store_colors()
    finally:
        handlers._tracking_store = None
    newer = model_colors([["lite0_linear", "tiny_cnn"], ["tiny_cnn", "resnet18"]])
    assert colors == {group_id(m): c for m, c in newer.items()}
    assert colors[group_id("resnet18")] not in {colors[group_id("tiny_cnn")]}
    script = colors_script(colors)
    assert json.dumps(colors, sort_keys=True) in script and OWN_COLORS in script and colors_script({}) == ""


def test_the_ui_app_defaults_the_browser_to_model_training():
    from resomap.tracking.ui_app import SCRIPT, ModelTrainingFirst

    app = ModelTrainingFirst()
    passed = []

    async def mlflow_app(scope, receive, send):
        passed.append(scope["path"])

    app._mlflow = mlflow_app
    sent = []

    async def send(message):
        sent.append(message)

    async def call(path: str, method: str = "GET"):
        await app(
            {"type": "http", "path": path, "method": method, "headers": [(b"host", b"127.0.0.1:5000")]}, None, send
        )

    asyncio.run(call("/"))
    body = sent[1]["body"].decode()
    assert sent[0]["status"] == 200 and SCRIPT in body and body.index(SCRIPT) < body.index("</head>")
    assert '"mlflow.workflowType_v1": "machine_learning"' in SCRIPT
    from mlflow.server import app as flask_app

    original = (Path(flask_app.static_folder) / "index.html").read_text(encoding="utf-8")
    assert body.replace(SCRIPT, "", 1) == original  # MLflow's own page, one script added
    asyncio.run(call("/ajax-api/2.0/mlflow/experiments/search"))
    asyncio.run(call("/static-files/main.js"))
    assert passed == ["/ajax-api/2.0/mlflow/experiments/search", "/static-files/main.js"]


def test_the_ui_page_is_refused_to_a_foreign_host_as_mlflows_api_is(monkeypatch: pytest.MonkeyPatch):
    """GET / of the app `resomap ui` and `resomap server` serve, in-process with MLflow's real app behind it: a
    request addressed to a foreign name (DNS rebinding) is refused, 403, with MLflow's own answer, as every API call
    with that Host is; one addressed to the loopback address and port gets the page."""
    from mlflow.server.security_utils import INVALID_HOST_MSG

    from resomap.tracking.ui_app import SCRIPT, ModelTrainingFirst

    for name in ("MLFLOW_SERVER_ALLOWED_HOSTS", "MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE"):
        monkeypatch.delenv(name, raising=False)  # MLflow's default check: loopback and private addresses
    app = ModelTrainingFirst()

    def get(path: str, host: str) -> tuple[int, bytes]:
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {
            "type": "http", "http_version": "1.1", "method": "GET", "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [(b"host", host.encode())],
            "server": ("127.0.0.1", 5000), "client": ("127.0.0.1", 40000),
        }  # fmt: skip
        asyncio.run(app(scope, receive, send))
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    for host in ("evil.example.com", "evil.example.com:5000"):
        status, body = get("/", host)
        assert status == 403 and body.decode() == INVALID_HOST_MSG, (host, status)
        assert get("/api/2.0/mlflow/experiments/search", host)[0] == 403  # the API refuses it alike
    status, body = get("/", "127.0.0.1:5000")
    assert status == 200 and SCRIPT in body.decode()


def test_models_are_logged_in_pt2_and_reload_in_eval_mode(project: Path):
    import mlflow
    import mlflow.pytorch
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Dropout(0.5), torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 2),
    )  # fmt: skip
    model.train()
    for _ in range(3):  # running statistics away from their initial values
        model(torch.randn(8, 1, 8, 8))
    model.eval()
    tracker = Tracker(load("configs", "smoke", []))
    run_id = tracker.start_run("m")
    x = torch.randn(3, 1, 8, 8)
    env_before = os.environ.get("MLFLOW_TRACKING_URI")
    tracker.log_model(run_id, model, x[:2].numpy())
    assert tracker.failures == []
    assert os.environ.get("MLFLOW_TRACKING_URI") == env_before  # MLflow's global setter leaves nothing behind
    (logged,) = tracker.client.search_logged_models([tracker.experiment_id])
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracker.uri)  # models:/ URIs resolve through the global store
    try:
        loaded = mlflow.pytorch.load_model(logged.model_uri)
    finally:
        mlflow.set_tracking_uri(previous)
        if env_before is None:  # the setter writes the environment too
            os.environ.pop("MLFLOW_TRACKING_URI", None)
    with torch.no_grad():
        assert torch.allclose(loaded(x), model(x))  # eval-mode batch norm, no dropout, any batch size
        assert torch.equal(loaded(x), loaded(x))


def test_segmentation_overlays_become_an_image_at_the_resolution(tmp_path: Path):
    """The overlays (RGBA) become an RGB image at step = resolution, as the images' writer lays it out."""
    from PIL import Image

    from resomap.records import SEG_OVERLAYS_FILE
    from resomap.tracking.images import write_step_images
    from resomap.tracking.publish import _log_probe_images

    Image.new("RGBA", (40, 30), (255, 0, 0, 255)).save(tmp_path / SEG_OVERLAYS_FILE)
    logged = []

    class Recorder:
        def log_images(self, run_id, images):
            images = list(images)
            write_step_images(tmp_path / "images", images)
            logged.extend((key, step) for key, step, _ in images)

    _log_probe_images(Recorder(), "r", tmp_path, {"resolution": 64, "task": "segmentation"}, set())
    assert logged == [("segmentation/overlays", 64)]
    (png,) = (tmp_path / "images").glob("segmentation~overlays+step+64+timestamp+*.png")
    with Image.open(png) as image:
        assert (image.mode, image.size, image.getpixel((0, 0))) == ("RGB", (40, 30), (255, 0, 0))
    assert len(list((tmp_path / "images").glob("*+compressed.webp"))) == 1
    held = {"images/segmentation~overlays+step+64+timestamp+1+u.png"}
    _log_probe_images(Recorder(), "r", tmp_path, {"resolution": 64, "predictions": "seg_predictions.csv"}, held)
    assert len(logged) == 1  # held at this step: not logged again


def test_a_model_not_in_memory_is_logged_from_what_the_caller_rebuilds(project: Path):
    """publish builds no model: without one in memory (resomap sync) it logs what `load_model` gives, and
    nothing without it."""
    from types import SimpleNamespace

    import torch

    from resomap.tracking.publish import publish

    cfg = load("configs", "smoke", ["mlflow.log_model=true"])
    tracker = Tracker(cfg)
    data = {"model": "tiny_cnn", "family": "cnn", "resolution": 8, "seed": 42, "status": "FINISHED"}
    asked = []

    def load_model(result):
        asked.append(result["model"])
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2)), torch.zeros(2, 1, 8, 8).numpy()

    for key, loader in (("without", None), ("with", load_model)):
        trial = SimpleNamespace(key=key, name=key, cfg=cfg, summary_dir=project / key)
        assert publish(data, trial, tracker, load_model=loader) is not None
    assert asked == ["tiny_cnn"]
    (logged,) = tracker.client.search_logged_models([tracker.experiment_id])
    assert tracker.client.get_run(logged.source_run_id).info.run_name == "with"


def test_a_long_parent_description_is_cut_at_a_line_within_mlflows_limit():
    from resomap.summary.build import assemble
    from resomap.tracking.note import NOTE_LIMIT, parent_note

    def summary(recs):
        parts = {"rows": [], "paired_tests": [], "trials": [], "stats": {}, "explanation_findings": ["a finding"]}
        return assemble(**parts, recommendations=recs)

    recs = [{"model": f"model{i}", "sufficiency": "x", "sentence": f"model{i}: " + "x" * 300} for i in range(40)]
    # the decisions (12k characters) do not fit: every section keeps its title, in order, the last ones first
    # pointing to summary.md, until the note fits
    note = parent_note(summary(recs), Path("/tmp/report.html"), [])
    assert len(note) <= NOTE_LIMIT and "- model39: no decision" in note  # the answer whole
    titles = ["**Answer**", "**Decision per model (non-inferiority to the reference)**", "**Explanations"]
    assert [note.index(t) for t in titles] == sorted(note.index(t) for t in titles)
    assert "a finding" not in note and note.count("*in summary.md and the report*") == 2
    # an answer that alone is over the limit (a line per model): cut at a line
    many = [dict(recs[0], model=f"model{i}") for i in range(400)]
    note = parent_note(summary(many), Path("/tmp/report.html"), [])
    assert len(note) <= NOTE_LIMIT and note.endswith("- ... (the rest: summary/summary.md)")
    assert "- model0: no decision" in note and "- model399:" not in note  # whole lines, in order
    short = parent_note(summary(recs[:2]), None, [Path("f/a.png"), Path("f/a.pdf")])
    assert short.splitlines()[-1] == "- figure: artifact `figures/a.png`" and "- a finding" in short


def test_a_store_that_refuses_the_view_warns_in_one_line_and_logs_the_runs(project: Path, monkeypatch, caplog):
    import logging

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    def refuse(self, experiment_id, key, value):  # an older server, or a store with smaller limits
        raise MlflowException(f"tag {key} refused\nsecond line of the server's error")

    monkeypatch.setattr(MlflowClient, "set_experiment_tag", refuse)
    tracker = Tracker(load("configs", "smoke", []))
    with caplog.at_level(logging.WARNING, logger="resomap.tracking.mlflow_store"):
        run_id = tracker.start_run("tiny_cnn@32")
        tracker.log_metrics(run_id, {"test/accuracy": 0.5})
    said = [r.getMessage() for r in caplog.records if "sweep view was not saved" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0] and "runs are logged as ever" in said[0], said
    client = _client(project)
    assert client.get_run(run_id).data.metrics == {"test/accuracy": 0.5} and not tracker.failures
    assert VIEW_TAG not in client.get_experiment(tracker.experiment_id).tags
