"""End to end on data with a known answer (issue 13): the synthetic class detail (a checkerboard of DETAIL px cells
on SIZE px images) averages away below about SIZE / DETAIL px, so a real sweep over resolutions below and above that
threshold must find a significant accuracy drop below it, none between the resolutions above it, and recommend the
smallest resolution above it."""

from __future__ import annotations

from pathlib import Path

import pytest

from resomap.cli import main
from resomap.results import load_sweep

SIZE, DETAIL = 64, 4
THRESHOLD = SIZE // DETAIL  # 16 px: below it a detail cell is under one pixel and the antialiased resize blurs it
LOW, HIGH = [8], [32, 64]  # 8 px: a cell is half a pixel (averaged away exactly); 32 and 64 px: 2 and 4 px cells
# tiny_cnn learns the texture in a few epochs without augmentation (random crops resample the 2 px cells at 32 px
# and blur them; with augmentation 64 px stayed near 0.92 while 32 px reached 0.97-0.99). 800 images give 120 test
# images (x 3 seeds = 360 McNemar pairs). About 70 s on an idle 2-core CPU, 3-6 min with another suite beside it.
LEARNING = [  # the data and training these tests (and tests/test_adaptive_synthetic.py) learn the texture with
    "experiment.seed=42",  # also the data seed: the images and the split
    "data.dataset=synthetic",
    "data.synthetic.num_images=800",
    f"data.synthetic.size={SIZE}",
    f"data.synthetic.detail_size={DETAIL}",
    "data.augmentation.enabled=false",
    "training.epochs=12",
    "training.batch_size=32",
    "training.optimizer.lr=0.002",
    "stats.level=0.95",
    "stats.margin=0.05",
    "explainability.enabled=false",
    "profiling.enabled=false",
    "mlflow.enabled=false",
]
SETTINGS = [
    "experiment.name=resolution-effect",
    "sweep.models=[tiny_cnn]",
    f"sweep.resolutions=[{','.join(map(str, LOW + HIGH))}]",
    "sweep.seeds=[1,2,3]",  # model scope (the default) counts the seed as a replicate: 3 seeds to decide
    *LEARNING,
    "stats.paired_test=mcnemar",
    "stats.correction=holm",
]


@pytest.mark.slow
def test_sweep_finds_the_drop_below_the_detail_resolution_and_recommends_the_smallest_above(
    project: Path,
):
    assert main(["-q", "sweep", "--preset", "smoke", f"experiment.output_dir={project}", *SETTINGS]) == 0

    sweep = load_sweep("resolution-effect", root=project / "model_summaries")
    assert sorted(zip(sweep.trials.resolution, sweep.trials.seed)) == [(r, s) for r in LOW + HIGH for s in (1, 2, 3)]
    assert set(sweep.trials.status) == {"FINISHED"}, sweep.trials

    pairs = sweep.paired_tests.set_index(["resolution_a", "resolution_b"])
    table = sweep.paired_tests.drop(columns=["reason", "method", "correction", "level"]).to_string()
    assert len(pairs) == 3 and pairs.available.all() and set(pairs.n_seeds) == {3}, table
    own = sweep.predictions.query("test_resolution == resolution")  # each trial tested at its own resolution
    acc = own.groupby("resolution").correct.mean().to_dict()  # pooled over seeds and test images
    # the data behave as designed (observed: 0.43-0.53 below the threshold, 0.95-1.00 above, over 5 data seeds)
    assert all(acc[r] < 0.65 for r in LOW) and all(acc[r] > 0.85 for r in HIGH), (acc, table)

    for low in LOW:
        for high in HIGH:
            row = pairs.loc[(low, high)]
            # effect = accuracy(high) - accuracy(low): the low resolution is significantly worse
            assert row.significant and row.p_adjusted < 0.05 and row.effect > 0 and row.ci_low > 0, table
            assert row.b01 > row.b10, table  # images the low resolution gets wrong and the high one right dominate
    assert not pairs.loc[(HIGH[0], HIGH[1])].significant, table  # no drop between resolutions above the threshold

    # the decision at margin 0.05 against the largest resolution, about the model (3 seeds as replicates): 32 px
    # shown non-inferior, never a resolution below the detail threshold
    rec = sweep.recommendations.set_index("model").loc["tiny_cnn"]
    assert rec.available and rec.decided and rec.scope == "model", rec.to_dict()
    assert rec.resolution == min(HIGH) and rec.reference == max(HIGH), rec.to_dict()
    assert rec.n_seeds == 3 and rec.resolution > THRESHOLD > max(LOW)
    assert "at model scope (training seeds as replicates)" in rec.sentence, rec.sentence
    verdicts = sweep.summary.set_index("resolution")["verdict"]
    assert all(verdicts[r] != "non-inferior" for r in LOW), verdicts


# With the default augmentation on (one recipe at every resolution, antialiased crops): the fine texture must be learnt
# at least as well at 64 px (4 px cells) as at 32 px (2 px cells). Before issue 23 the crop resampled with
# grid_sample and the recipe changed with resolution, and 64 px stayed near 0.92 while 32 px reached 0.97-0.99.
# simple_cnn, not tiny_cnn: tiny_cnn's receptive field is about 15 input px, 7 cells of 2 px at 32 px but under 4 cells
# of 4 px at 64 px, and with augmentation it stays at 0.91-0.95 at 64 px vs 0.94-0.97 at 32 px whatever the recipe
# (measured here with the blur, the jitter or the crop each turned off, and with 24 epochs): a property of that model,
# not of the pipeline. simple_cnn (5 blocks) sees enough cells at both: 0.975-0.983 at 32 px, 1.000 at 64 px.
# 7.5 min on this 2-core CPU with other work beside it (pooled accuracy 0.979 at 32 px, 1.000 at 64 px).
AUGMENTED = [s for s in SETTINGS if not s.startswith(("data.augmentation", "sweep.", "experiment.name"))]
AUGMENTED += ["experiment.name=augmented-texture", "sweep.models=[simple_cnn]", "sweep.resolutions=[32,64]"]
AUGMENTED += ["sweep.seeds=[1,2]"]


@pytest.mark.slow
def test_with_augmentation_the_texture_is_learnt_at_least_as_well_at_64_as_at_32_px(
    project: Path,
):
    assert main(["-q", "sweep", "--preset", "smoke", f"experiment.output_dir={project}", *AUGMENTED]) == 0

    sweep = load_sweep("augmented-texture", root=project / "model_summaries")
    assert set(sweep.trials.status) == {"FINISHED"}, sweep.trials
    own = sweep.predictions.query("test_resolution == resolution")
    acc = own.groupby("resolution").correct.mean().to_dict()  # pooled over the 2 seeds x 120 test images
    print(f"pooled test accuracy with the default augmentation: {acc}")
    assert acc[64] > 0.9 and acc[64] >= acc[32], acc
    row = sweep.paired_tests.set_index(["resolution_a", "resolution_b"]).loc[(32, 64)]
    assert not (row.significant and row.effect < 0), row.to_dict()  # 64 px never significantly below 32 px
