"""The HTML report of a segmentation sweep (resomap.reports.html.write_report): a real tiny sweep (tiny_segnet and
unet_resnet18 x 16/32 px, synthetic_seg, 1 epoch, MLflow off) through the same summary and page as a classifier's.
Every model and resolution in the summary table with its per-image mIoU and boundary F1 intervals (summary.csv),
the paired tests of both metrics, every <img> a decodable PNG data: URI, the quality figure with the mIoU panel,
one prediction overlay per model x resolution (the task's report figures); without its figures the report draws
them again from summary.json."""

from __future__ import annotations

import base64
import csv
import io
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODELS, RESOLUTIONS = ("tiny_segnet", "unet_resnet18"), (16, 32)
NAME = "tiny-seg-report"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    from resomap.config import load
    from resomap.sweep.sweep import run_sweep

    root = tmp_path_factory.mktemp("segsweep")
    cfg = load(
        str(REPO / "configs"),
        "seg_quickstart",
        [
            f"experiment.output_dir={root}",
            f"experiment.name={NAME}",
            f"sweep.models=[{','.join(MODELS)}]",
            f"sweep.resolutions=[{','.join(map(str, RESOLUTIONS))}]",
            "training.epochs=1",
            "data.synthetic_seg.num_images=40",
            "data.synthetic_seg.size=32",
            "profiling.warmup=1",
            "profiling.iters=2",
            "explainability.methods=[saliency]",
            "explainability.sanity_methods=[]",
            "explainability.probe_size=2",
            "stats.resamples=200",
            "mlflow.enabled=false",
        ],
    )
    outcome = run_sweep(cfg)
    assert all(r.status == "FINISHED" for r in outcome.results), [r.error for r in outcome.results]
    return outcome.summary_dir


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))


def _images(text: str) -> list[dict[str, str]]:
    page = _Images()
    page.feed(text)
    for img in page.images:  # every image inline and decodable
        from PIL import Image

        src = img.get("src", "")
        assert src.startswith("data:image/png;base64,"), src[:40]
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1], validate=True))) as decoded:
            decoded.load()
            assert decoded.width > 0 and decoded.height > 0
    return page.images


def _section(text: str, key: str) -> str:
    start = text.index(f'<section id="{key}">')
    return text[start : text.index("</section>", start)]


def _summary_rows(sweep_dir: Path) -> dict[tuple[str, int], dict[str, str]]:
    with (sweep_dir / "summary.csv").open() as fh:
        return {(r["model"], int(r["resolution"])): r for r in csv.DictReader(fh)}


def test_segmentation_report_shows_the_summary_figures_and_overlays(sweep_dir: Path):
    from resomap.reports.html import write_report

    assert not list(sweep_dir.glob("seg_*"))  # one summary for every task: no second set of tables
    path = write_report(sweep_dir)
    text = path.read_text(encoding="utf-8")
    alts = [img.get("alt", "") for img in _images(text)]
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    summary = _section(text, "results")
    rows = _summary_rows(sweep_dir)
    assert set(rows) == {(m, r) for m in MODELS for r in RESOLUTIONS}
    for (model, res), row in rows.items():
        assert re.search(rf"{model}[^<]*</td><td>{res}</td><td>1</td>", summary), (model, res)
        for column in ("image_miou", "image_boundary_f1"):  # the per-image scores with their intervals
            assert row[f"{column}_pooled"], (model, res, column)
            estimate = f"{float(row[f'{column}_pooled']):.3f}"
            if row[f"{column}_ci_low"]:
                estimate += f" [{float(row[f'{column}_ci_low']):.3f}, {float(row[f'{column}_ci_high']):.3f}]"
            assert f"<td>{estimate}</td>" in summary, (model, res, column)
        assert any(a.startswith(f"{model} {res} px true and predicted masks") for a in alts), (model, res)
    assert "mIoU per image" in summary and "boundary F1 per image" in summary and "mean Dice" in summary
    paired = _section(text, "paired")
    assert "Paired tests between resolutions" in paired and "16 → 32" in paired
    with (sweep_dir / "paired_tests.csv").open() as fh:
        assert {r["metric"] for r in csv.DictReader(fh)} == {"miou", "boundary_f1"}
    assert "accuracy_vs_resolution" in alts and "pareto_accuracy_latency" in alts
    assert "predictions.csv" not in summary
    # the segmenter's maps through the shared path: probe maps and the agreement with its floor and references
    assert "saliency" in _section(text, "probes") and "saliency" in _section(text, "agreement")


def test_segmentation_report_without_its_figures_draws_them_again(sweep_dir: Path, tmp_path: Path):
    """A sweep folder without figures/: the report draws them from summary.json, the numbers unchanged."""
    from resomap.reports.html import write_report

    root = sweep_dir.parents[2]  # <output>/model_summaries/_sweep/<name>: trial folders are relative to it
    copy = tmp_path / "copy"
    shutil.copytree(root / "model_summaries", copy / "model_summaries")
    bare = copy / "model_summaries" / "_sweep" / sweep_dir.name
    (bare / "report.html").unlink(missing_ok=True)
    shutil.rmtree(bare / "figures")
    text = write_report(bare).read_text(encoding="utf-8")
    alts = [img.get("alt", "") for img in _images(text)]
    assert {"accuracy_vs_resolution", "pareto_accuracy_latency"} <= set(alts)
    summary = _section(text, "results")
    for (model, res), row in _summary_rows(sweep_dir).items():
        miou = f"<td>{float(row['image_miou_pooled']):.3f}"
        assert re.search(rf"{model}[^<]*</td><td>{res}</td><td>1</td>{miou}", summary), (model, res)
