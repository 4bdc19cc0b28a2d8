"""The HTML report of a segmentation sweep (resomap.reports.html.write_report): a real tiny sweep (tiny_segnet and
unet_resnet18 x 16/32 px, synthetic_seg, 1 epoch, MLflow off). Every model and resolution in the segmentation
table with its intervals, every <img> a decodable PNG data: URI, the segmentation figures and one prediction overlay
per model x resolution; without seg_summary.csv and the figures the report computes and draws them again."""

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


def test_segmentation_report_shows_the_summary_figures_and_overlays(sweep_dir: Path):
    from resomap.reports.html import write_report

    path = write_report(sweep_dir)
    text = path.read_text(encoding="utf-8")
    alts = [img.get("alt", "") for img in _images(text)]
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    seg = _section(text, "segmentation")
    with (sweep_dir / "seg_summary.csv").open() as fh:
        rows = {(r["model"], int(r["resolution"])): r for r in csv.DictReader(fh)}
    assert set(rows) == {(m, r) for m in MODELS for r in RESOLUTIONS}
    for (model, res), row in rows.items():
        # the row of the table: model, px, seeds, mIoU, boundary F1, then the image mIoU with its interval
        miou, bf1 = float(row["test_miou"]), float(row["test_boundary_f1"])
        cells = rf'<td class="l">{model}</td><td>{res}</td><td>1</td><td>{miou:.3f}</td><td>{bf1:.3f}</td>'
        assert re.search(cells, seg), (model, res)
        if row["image_miou_ci_low"]:
            interval = f"{float(row['image_miou']):.3f} [{float(row['image_miou_ci_low']):.3f}, "
            assert interval in seg, (model, res)
        assert f"{model} {res} px predicted masks" in alts  # the prediction overlay of every trial
        summary = _section(text, "summary")
        assert re.search(rf"{model}[^<]*</td><td>{res}</td>", summary), (model, res)
    assert "pixel accuracy" in _section(text, "summary") and "mean Dice" in _section(text, "summary")
    assert "Paired tests between resolutions" in seg and "16 → 32" in seg
    assert {"seg_quality_vs_resolution", "seg_pareto"} <= set(alts)
    assert alts.count("seg_quality_vs_resolution") == 1  # in its section only, not again with the other figures
    assert "predictions.csv" not in _section(text, "summary")
    # the segmenter's maps through the shared path: probe maps and the agreement with its floor and references
    assert "saliency" in _section(text, "probes") and "saliency" in _section(text, "agreement")


def test_segmentation_report_without_its_tables_computes_them_again(sweep_dir: Path, tmp_path: Path):
    """A sweep folder without seg_summary.csv / figures: the report recomputes the same numbers and draws."""
    from resomap.reports.html import write_report

    root = sweep_dir.parents[2]  # <output>/model_summaries/_sweep/<name>: trial folders are relative to it
    copy = tmp_path / "copy"
    shutil.copytree(root / "model_summaries", copy / "model_summaries")
    bare = copy / "model_summaries" / "_sweep" / sweep_dir.name
    kept = (sweep_dir / "seg_summary.csv").read_text()
    for name in ("seg_summary.csv", "seg_paired_tests.csv", "report.html"):
        (bare / name).unlink(missing_ok=True)
    shutil.rmtree(bare / "figures")
    text = write_report(bare).read_text(encoding="utf-8")
    alts = [img.get("alt", "") for img in _images(text)]
    assert {"seg_quality_vs_resolution", "seg_pareto"} <= set(alts)
    seg = _section(text, "segmentation")
    for row in csv.DictReader(io.StringIO(kept)):
        miou = f"<td>{float(row['test_miou']):.3f}</td>"
        assert re.search(rf'<td class="l">{row["model"]}</td><td>{row["resolution"]}</td><td>1</td>{miou}', seg)
