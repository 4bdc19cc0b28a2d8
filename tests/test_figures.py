"""Every figure a sweep draws, checked as a reviewer would: rendered at the style's dpi, no text outside the canvas
or cut by the axes it sits in, and every resolution axis ticked at the sweep's resolutions (in px).

A tiny real sweep (2 models x 2 resolutions x 2 seeds, synthetic set, MLflow off) draws them; each figure is
checked when it is saved (matplotlib's Figure.savefig is wrapped), so a figure type added later is checked too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import tiny_sweep_config

MODELS, RESOLUTIONS, SEEDS = ("tiny_cnn", "simple_cnn"), (16, 24), (42, 43)


def text_problems(fig) -> list[str]:
    """Texts of `fig` (visible, non-empty) whose drawn extent leaves the canvas, or leaves the axes box of an axes
    that clips it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    if not hasattr(fig.canvas, "get_renderer"):  # a Figure made without pyplot: give it the Agg canvas savefig uses
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    hidden = set()  # tick labels of ticks outside the view limits: matplotlib keeps them but does not draw them
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = sorted(limits)
            pad = 1e-9 * abs(high - low)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not low - pad <= tick.get_loc() <= high + pad:
                    hidden.update({id(tick.label1), id(tick.label2)})
    problems = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or text.figure is None or id(text) in hidden:
            continue
        box = text.get_window_extent(renderer)
        if box.width == 0 and box.height == 0:
            continue
        slack = 1.0  # px of rounding
        if box.x0 < -slack or box.y0 < -slack or box.x1 > canvas.x1 + slack or box.y1 > canvas.y1 + slack:
            problems.append(f"{text.get_text()!r} leaves the canvas")
        clip = text.get_clip_box() if text.get_clip_on() else None
        if clip is not None and (box.x0 < clip.x0 - slack or box.x1 > clip.x1 + slack):
            problems.append(f"{text.get_text()!r} is cut by its axes")
    return problems


def resolution_axes(fig) -> list[tuple[str, set[int]]]:
    """(label, tick values in view) of every x axis that is labelled as a resolution."""
    out = []
    for ax in fig.axes:
        label = ax.get_xlabel()
        if "resolution" in label.lower():
            low, high = sorted(ax.get_xlim())
            shown = [(t, tl.get_text()) for t, tl in zip(ax.get_xticks(), ax.get_xticklabels()) if low <= t <= high]
            # a categorical axis (a heatmap's columns) is ticked by its labels, a numeric one by its positions
            ticks = {int(text) if text.isdigit() else round(t) for t, text in shown}
            out.append((label, ticks))
    return out


def marks(fig) -> dict:
    """What a figure marks: its point labels' drawn extents (annotations other than the '*' of a significant
    difference), its legends' entries, and per axes the y values of its dashed lines."""
    from matplotlib.text import Annotation, Text

    renderer = fig.canvas.get_renderer()  # drawn by text_problems
    found = [a for a in fig.findobj(Annotation) if a.get_text() != "*"]
    labels = [(a.get_text(), Text.get_window_extent(a, renderer)) for a in found]  # the text, without its leader
    legends = [t.get_text() for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
               for t in leg.get_texts()]  # fmt: skip
    dashed = [[list(map(float, line.get_ydata())) for line in ax.get_lines() if line.get_linestyle() == "--"]
              for ax in fig.axes]  # fmt: skip
    return {"labels": labels, "legends": legends, "dashed": dashed}


def limits(fig) -> list[tuple[str, tuple[float, float], tuple[float, float]]]:
    """(x label, x limits, y limits) of every axes of `fig` but its colour bars."""
    return [(ax.get_xlabel(), ax.get_xlim(), ax.get_ylim()) for ax in fig.axes if ax.get_label() != "<colorbar>"]


@pytest.fixture(scope="module")
def figures_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("figures")


@pytest.fixture(scope="module")
def drawn(figures_root) -> dict[str, dict]:
    """stem -> {'problems', 'axes', 'dpi'} for every figure the tiny sweep saved (in figures_root)."""
    from matplotlib.figure import Figure

    from resomap.sweep.sweep import run_sweep

    root = figures_root
    seeds = f"sweep.seeds=[{','.join(map(str, SEEDS))}]"
    iters = "profiling.iters=6"  # 6 timed calls: the latency's 95% interval
    cfg = tiny_sweep_config(root, MODELS, RESOLUTIONS, ("gradcam", "saliency"), 3, seeds, iters)
    seen: dict[str, dict] = {}
    original = Figure.savefig

    def checked(self, fname, *args, **kwargs):
        stem = Path(str(fname)).stem
        if str(fname).endswith(".png") and stem not in seen:
            seen[stem] = {"problems": text_problems(self), "axes": resolution_axes(self), "dpi": kwargs.get("dpi")}
            seen[stem].update(marks(self))
            seen[stem]["limits"] = limits(self)
        return original(self, fname, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(Figure, "savefig", checked)
    mp.setattr("resomap.plotstyle.SAVE_WORKERS", 1)  # saved in this process, where savefig is wrapped
    try:
        outcome = run_sweep(cfg)
    finally:
        mp.undo()
    assert all(r.status == "FINISHED" for r in outcome.results)
    return seen


def test_every_figure_type_is_drawn(drawn):
    stems = set(drawn)
    for stem in (
        "accuracy_vs_resolution",
        "cost_vs_resolution",
        "pareto_accuracy_latency",
        "explain_cost_vs_resolution",
    ):
        assert stem in stems, sorted(stems)
    for model in MODELS:
        assert f"train_test_resolution_{model}" in stems
        assert f"learning_curves_{model}" in stems  # loss and validation score by epoch, seeds overlaid
        assert f"{model}_gradcam_agreement" in stems  # agreement across resolutions, every measure side by side
        assert f"{model}_methods_spearman" in stems  # agreement between methods, each resolution side by side
        assert any(s.startswith(f"{model}_probe") for s in stems)  # probe grids
        assert f"{model}_quality" in stems, sorted(stems)  # explanation quality with intervals and baseline


def test_no_figure_has_text_outside_its_canvas_or_cut_by_its_axes(drawn):
    bad = {stem: found["problems"] for stem, found in drawn.items() if found["problems"]}
    assert not bad, bad


def test_every_resolution_axis_is_ticked_at_the_sweeps_resolutions_in_px(drawn):
    checked = 0
    for stem, found in drawn.items():
        for label, ticks in found["axes"]:
            assert "px" in label, (stem, label)
            assert ticks == set(RESOLUTIONS), (stem, label, sorted(ticks))
            checked += 1
    assert checked >= 5  # accuracy, cost, explanation cost and the quality figures have one


def test_figures_are_saved_at_the_styles_dpi(tmp_path):
    import matplotlib.pyplot as plt
    from PIL import Image

    from resomap.plotstyle import STYLE, save_figure

    assert STYLE["savefig.dpi"] >= 200
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [0, 1])
    png, pdf = save_figure(fig, tmp_path, "line")  # outside the style's context, as the sweep's figures are saved
    assert pdf.stat().st_size > 0
    dpi = Image.open(png).info.get("dpi")
    assert dpi is not None and round(dpi[0]) == STYLE["savefig.dpi"]


def test_figures_written_by_worker_processes_are_the_ones_written_here(tmp_path):
    """Inside parallel_saves (the sweep's summary) forked processes write the figures: the same pixels at the
    style's dpi and the same PDF page as a save in this process, all written when the block ends; a figure that
    cannot be written raises there. Checked in a fresh interpreter, as a sweep runs it: the workers are forks of
    the process, and this test's process holds whatever the tests before it left (once, in CI, a worker's pixels
    differed from this process's there and nowhere else)."""
    import subprocess
    import sys

    check = f"import test_figures as t; t.worker_saves_match(__import__('pathlib').Path({str(tmp_path)!r}))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "checked 3 worker figures", done.stdout


def worker_saves_match(tmp_path: Path) -> None:
    """The body of the test above, in the process that runs it."""
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from resomap.plotstyle import STYLE, parallel_saves, save_figure

    def figure():
        with plt.rc_context(STYLE):
            fig, ax = plt.subplots(figsize=(2.5, 2))
            image = ax.imshow(np.arange(16.0).reshape(4, 4))
            fig.colorbar(image, ax=ax, label="value")
            fig.suptitle("a title long enough to be laid out")
        return fig

    here = save_figure(figure(), tmp_path / "here", "f")
    with parallel_saves(workers=2) as wait:
        there = [save_figure(figure(), tmp_path / "there", f"f{i}") for i in range(3)]
        wait()
    expected = np.asarray(Image.open(here[0]))
    for png, pdf in there:
        pixels = np.asarray(Image.open(png))
        assert pixels.shape == expected.shape, (png.name, pixels.shape, expected.shape)
        differ = np.argwhere((pixels != expected).any(axis=-1))  # where, said when any do
        assert len(differ) == 0, (png.name, len(differ), differ.min(0), differ.max(0))
        assert round(Image.open(png).info["dpi"][0]) == STYLE["savefig.dpi"]
        assert pdf.read_bytes().split(b"MediaBox")[1][:60] == here[1].read_bytes().split(b"MediaBox")[1][:60]
    with parallel_saves(workers=2):  # a figure that cannot be pickled is written in this process
        fig = figure()
        fig.axes[0].xaxis.set_major_formatter(lambda x, pos: f"{x:.0f} px")
        (unpicklable,) = save_figure(fig, tmp_path / "here", "lambda", formats=("png",))
    assert round(Image.open(unpicklable).info["dpi"][0]) == STYLE["savefig.dpi"]
    raised = None
    try:
        with parallel_saves(workers=2):
            fig = figure()
            fig.axes[0].set_title(r"$\frac{$")  # fails when drawn: in a worker
            save_figure(fig, tmp_path / "bad", "bad")
    except ValueError as exc:
        raised = exc
    assert raised is not None and "frac" in str(raised), raised
    print(f"checked {len(there)} worker figures")


def test_every_png_the_sweep_wrote_is_at_the_styles_dpi(drawn, figures_root):
    """The files themselves: the sweep's figures and each trial's (confusion matrix, probe grids), as printed."""
    from PIL import Image

    from resomap.plotstyle import STYLE

    # probe_images/ hold each map at its own pixels (PIL, for MLflow's image grid), not a printed figure
    pngs = sorted(p for p in figures_root.rglob("*.png") if "probe_images" not in p.parts)
    assert len(pngs) >= len(drawn)
    low = {}
    for png in pngs:
        with Image.open(png) as image:
            dpi = image.info.get("dpi")
        if dpi is None or round(dpi[0]) != STYLE["savefig.dpi"]:
            low[str(png.relative_to(figures_root))] = dpi
    assert not low, low


def test_probe_grids_are_png_only_and_the_vector_figures_keep_their_pdf(drawn, figures_root):
    grids = sorted(figures_root.rglob("*_probe*.*"))
    assert any(p.suffix == ".png" for p in grids) and not [p for p in grids if p.suffix == ".pdf"], grids
    for stem in ("accuracy_vs_resolution", "cost_vs_resolution"):
        assert len(list(figures_root.rglob(f"{stem}.pdf"))) == 1, stem


def test_no_two_point_labels_overlap(drawn):
    """The Pareto figure labels every point by its resolution; with two models at close latencies the labels
    crowd: none may cover another (their drawn extents, after the layout)."""
    labels = drawn["pareto_accuracy_latency"]["labels"]
    assert len(labels) == len(MODELS) * len(RESOLUTIONS)
    for i, (text, box) in enumerate(labels):
        for other, obox in labels[i + 1 :]:
            assert not box.overlaps(obox), f"labels {text!r} and {other!r} overlap"


def test_no_cost_axis_or_interval_of_the_sweep_goes_below_zero(drawn, figures_root: Path):
    """Issue 58: the trade-off figure's latency axis ran to -40 ms on a Student-t interval over two seeds. Here (two
    seeds) its axes, the score x latency figure's and the cost figure's values start at zero or above, and no lower
    bound of a nonnegative quantity in summary.json or the summary's CSVs is below zero; the front's latency has its
    interval from the timed calls."""
    import json

    from conftest import summary_lower_bounds
    from resomap.summary.front import LATENCY_INTERVAL

    for stem in ("tradeoff_score_cost_quality", "pareto_accuracy_latency", "cost_vs_resolution"):
        for xlabel, x, y in drawn[stem]["limits"]:
            assert y[0] >= 0 and ("resolution" in xlabel or x[0] >= 0), (stem, xlabel, x, y)
    summary_dir = next(figures_root.rglob("summary.json")).parent
    found = summary_lower_bounds(summary_dir)
    below = [(s, w, v) for s, bounds in found.items() for w, v, nonnegative in bounds if nonnegative and v < 0]
    assert not below, below
    front3 = json.loads((summary_dir / "summary.json").read_text())["front3"]
    assert front3 and all(next(a for a in e["axes"] if a["name"] == "cost")["interval"] == LATENCY_INTERVAL
                          for e in front3)  # fmt: skip
    assert all(0 < p["cost"][1] <= p["cost"][0] <= p["cost"][2] for e in front3 for p in e["points"])


def test_the_accuracy_figure_draws_the_majority_class(drawn, figures_root: Path):
    """The headline panel has the majority-class predictor's score as a dashed line, named with its value in the
    legend, at the trivial score summary.json holds for the same test images."""
    import json

    summary = next(figures_root.rglob("summary.json"))
    rows = json.loads(summary.read_text())["rows"]
    trivial = {round(r["trivial_score"], 6) for r in rows}
    assert len(trivial) == 1  # one test set for every model and resolution
    score = trivial.pop()
    found = drawn["accuracy_vs_resolution"]
    assert f"the majority class ({score:.3f})" in found["legends"]
    headline = found["dashed"][0]  # the first panel: the headline score
    assert [round(v, 6) for v in headline[0]] == [score] * len(RESOLUTIONS)


def test_labels_of_crowded_points_do_not_overlap():
    """Points closer than a label's size (two models at almost the same latency and accuracy at each resolution,
    as a classical baseline and a small CNN can be): each label goes where it covers no other, after the layout."""
    from resomap.plotstyle import STYLE, _laid_out
    from resomap.reports.figures import pareto_figure
    from resomap.summary.rows import SummaryRow

    cluster = [(m, res, 0.80 + 0.004 * k + 0.002 * i, 1.0 + 0.02 * k + 0.01 * i) for i, m in enumerate("ab")
               for k, res in enumerate((32, 48, 64))]  # fmt: skip
    far = [("far", res, 0.60 + 0.01 * k, 3.0 + k) for k, res in enumerate((32, 48, 64))]  # stretches the axes
    rows = [SummaryRow(m, "cnn", res, 1, test_accuracy=acc, latency_ms=ms) for m, res, acc, ms in cluster + far]
    fig = pareto_figure(rows)
    _laid_out(fig, STYLE["savefig.dpi"])
    found = marks_after_draw(fig)["labels"]
    assert len(found) == len(rows)
    for i, (text, box) in enumerate(found):
        for other, obox in found[i + 1 :]:
            assert not box.overlaps(obox), f"labels {text!r} and {other!r} overlap"


def marks_after_draw(fig) -> dict:
    text_problems(fig)  # draws the figure
    return marks(fig)


def test_a_cost_that_spans_decades_is_drawn_on_a_log_axis():
    """Latency and throughput of a classical model and a CNN differ a hundredfold: their panels are log-scaled (and
    say so), so neither model is squashed against the axis; a panel within one decade stays linear."""
    from resomap.reports.figures import metric_vs_resolution
    from resomap.summary.rows import SummaryRow

    rows = [
        SummaryRow(m, "", res, 1, latency_ms=ms * res / 32, peak_memory_mb=5.0 + res / 64)
        for m, ms in (("logreg", 0.03), ("cnn", 2.0))
        for res in (32, 64, 128)
    ]
    fig = metric_vs_resolution(rows, [("latency_ms", "latency (ms)"), ("peak_memory_mb", "peak memory (MB)")], "cost")
    latency, memory = fig.axes[:2]
    assert latency.get_yscale() == "log" and latency.get_ylabel() == "latency (ms) (log scale)"
    assert memory.get_yscale() == "linear" and memory.get_ylabel() == "peak memory (MB)"


def _tradeoff_rows():
    """Model a at three resolutions: 32 px shown below 64 px on accuracy (the paired test) with the same latency and
    quality (dropped); 128 px as accurate as 64 px but slower and with better maps (on the front); 3 seeds each."""
    import numpy as np

    from resomap.summary.front import Measured
    from resomap.summary.rows import SummaryRow

    def row(res, acc, ms):
        scores = {"test_accuracy_pooled": acc, "test_accuracy_ci_low": acc - 0.03, "test_accuracy_ci_high": acc + 0.03}
        timed = {"latency_ms_ci_low": 0.95 * ms, "latency_ms_ci_high": 1.1 * ms}  # from the calls (skewed)
        return SummaryRow("a", "cnn", res, 3, latency_ms=ms, latency_ms_std=0.05, ci_level=0.95, image_scores=scores,
                          **timed)  # fmt: skip

    rows = [row(32, 0.70, 1.0), row(64, 0.90, 1.05), row(128, 0.91, 4.0)]
    quality = [
        {"model": "a", "resolution": res, "method": "gradcam", "score": "insertion_auc_vs_random", "estimate": q,
         "low": q - 0.02, "high": q + 0.02, "level": 0.95}
        for res, q in ((32, 0.10), (64, 0.12), (128, 0.30))
    ]  # fmt: skip
    paired = [
        {"model": "a", "metric": "accuracy", "resolution_a": a, "resolution_b": b, "effect": effect, "p_value": p}
        for a, b, effect, p in ((32, 64, 0.2, 1e-6), (32, 128, 0.21, 1e-6), (64, 128, 0.01, 0.6))
    ]  # fmt: skip
    trials = [
        {"model": "a", "resolution": res, "seed": seed, "profile": {"latency_median_ms": ms + 0.05 * (seed - 1)}}
        for res, ms in ((32, 1.0), (64, 1.05), (128, 4.0)) for seed in range(3)
    ]  # fmt: skip
    noise = np.random.default_rng(0).normal(0, 0.05, (3, 16))
    images = {("a", r, "gradcam", "insertion_auc_vs_random"): q + noise[i] for i, (r, q) in
              enumerate(((32, 0.10), (64, 0.10), (128, 0.30)))}  # fmt: skip
    return rows, quality, Measured(paired, trials, images)


def test_the_tradeoff_figure_fills_the_front_and_leaves_dropped_points_hollow():
    from matplotlib.collections import PathCollection

    from resomap.reports.tradeoff import tradeoff_figure
    from resomap.summary.front import tradeoffs

    rows, quality, measured = _tradeoff_rows()
    fig = tradeoff_figure(tradeoffs(rows, quality, measured))
    assert text_problems(fig) == []
    ax = fig.axes[0]
    drawn = {gid: [c for c in ax.findobj(PathCollection) if c.get_gid() == gid] for gid in ("front", "dropped")}
    assert len(drawn["front"]) == 2 and len(drawn["dropped"]) == 1  # 64 and 128 px on the front; 32 px dropped
    hollow = drawn["dropped"][0]
    assert tuple(hollow.get_offsets()[0]) == pytest.approx((1.0, 0.70))
    assert hollow.get_facecolors()[0][3] == 0.0 and hollow.get_edgecolors()[0][3] == 1.0  # no fill, a coloured rim
    assert all(c.get_facecolors()[0][3] == 1.0 for c in drawn["front"])
    # the quality is the colour: 128 px (the best maps) is the top of the scale, 64 px below it
    top, low = (next(c for c in drawn["front"] if c.get_offsets()[0][0] == x) for x in (4.0, 1.05))
    assert top.get_edgecolors()[0][1] > low.get_edgecolors()[0][1]  # viridis: green rises with the value
    bar = fig.axes[1]  # the quality's colour bar says what it is
    said = bar.get_ylabel().replace("\n", " ")
    assert "insertion AUC, method - random maps" in said and "gradcam" in said
    assert len([line for line in ax.get_children() if type(line).__name__ == "LineCollection"]) == 6  # x and y bars
    legend = marks(fig)["legends"]
    assert "on the front" in legend and any(t.startswith("dropped: shown worse") for t in legend)
