"""End to end on data with a known answer (issue 18, adaptive sweeps): on the synthetic set whose class detail (a
checkerboard of 4 px cells on 64 px images) averages away below 16 px, an adaptive sweep over 8, 32 and 64 px must
decide 8 px inferior and 32 px non-inferior to 64 px, with fewer trials than the full grid of the seeds it plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resomap.cli import main
from test_resolution_effect import LEARNING

SETTINGS = [  # tests/test_resolution_effect.py's data and training (what tiny_cnn learns there), adaptive
    "experiment.name=adaptive-effect",
    "sweep.models=[tiny_cnn]",
    "sweep.resolutions=[8,32,64]",
    # model scope (the default): two seeds in the first round, as one seed alone cannot see the seed spread
    "sweep.seeds=[1,2]",
    "sweep.adaptive.enabled=true",
    "sweep.adaptive.max_rounds=3",
    "sweep.adaptive.seeds_per_round=1",
    "sweep.adaptive.spending=obrien_fleming",
    *LEARNING,
]


@pytest.mark.slow
def test_adaptive_sweep_decides_the_known_answer_with_fewer_trials_than_the_full_grid(
    project: Path,
):
    assert main(["-q", "sweep", "--preset", "smoke", f"experiment.output_dir={project}", *SETTINGS]) == 0

    out = project / "model_summaries" / "_sweep" / "adaptive-effect"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    record = summary["adaptive"]
    print(
        f"\nadaptive sweep: {record['trials_used']} trials in {len(record['rounds'])} round(s); full grid with every "
        f"planned seed: {record['full_grid_trials']}; with the seeds reached: "
        f"{record['full_grid_trials_seeds_reached']}"
    )
    print((out / "summary.md").read_text(encoding="utf-8").split("## Adaptive sweep")[1])
    assert record["stopped"] == "every model is decided"
    assert record["trials_used"] < record["full_grid_trials"]

    (rec,) = summary["recommendations"]
    verdicts = {v["resolution"]: v["verdict"] for v in rec["verdicts"]}
    dropped = {int(r): why for r, why in record["models"]["tiny_cnn"]["dropped"].items()}
    assert verdicts[64] == "reference"
    assert verdicts[32] == "non-inferior", rec["sentence"]
    assert verdicts.get(8) == "inferior" or dropped.get(8, "").startswith("shown inferior"), (verdicts, dropped)
    assert "obrien_fleming" in (out / "summary.md").read_text(encoding="utf-8")
