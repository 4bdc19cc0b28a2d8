"""evaluation.quality: baselines of faithfulness and localisation, tie-safe pointing game, baseline-image choice,
and the sanity check's reference threshold, on hand-built models and maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from resomap.config.schema import ExplainabilityConfig, ModelsConfig
from resomap.explain import get_explainer, guarded
from resomap.explain.evaluation.measures import centre_maps
from resomap.explain.evaluation.quality import (
    choose_baseline,
    deletion_insertion,
    dilate,
    pointing_game,
    quality_context,
    quality_metrics,
    random_maps,
    tolerance_px,
)
from resomap.explain.evaluation.sanity import SANITY_MIDPOINT, SanityResult, sanity_check, unrelated_similarity
from resomap.explain.methods.probe import load_maps
from resomap.models import ModelSpec, build_model

CFG = ExplainabilityConfig(batch_size=8, faithfulness_steps=8, baseline_draws=2, sanity_seeds=3)
SPEC = ModelSpec("hand_built", "test", ())


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def square_masks(n: int, side: int, lo: float = 0.25, hi: float = 0.5) -> np.ndarray:
    masks = np.zeros((n, side, side), dtype=bool)
    a, b = round(lo * side), round(hi * side)
    masks[:, a:b, a:b] = True
    return masks


class Lambda(nn.Module):
    """A model given by a function of the input, with one parameter so the guard and randomisation apply."""

    def __init__(self, fn, weight: torch.Tensor | None = None):
        super().__init__()
        self.fn = fn
        self.weight = nn.Parameter(torch.ones(1) if weight is None else weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)


# ------------------------------------------------------------------------------------------------ pointing game


def test_pointing_game_flat_map_is_no_hit_and_ties_count_by_fraction():
    masks = square_masks(3, 16)
    flat = np.full((3, 16, 16), 0.7)
    assert pointing_game(flat, masks).tolist() == [0.0, 0.0, 0.0]
    ties = np.zeros((1, 16, 16))
    ties[0, 4:8, 0:8] = 1.0  # the maximum over a 4x8 band, half of it inside the mask's 4..8 columns
    assert pointing_game(ties, masks[:1], tolerance=0.0)[0] == pytest.approx(0.5)


def test_pointing_game_peak_inside_hits_outside_misses():
    masks = square_masks(2, 32)  # rows/cols 8..15
    inside, outside = np.zeros((2, 32, 32)), np.zeros((2, 32, 32))
    inside[:, 10, 12] = 1.0
    outside[:, 28, 3] = 1.0
    assert pointing_game(inside, masks).tolist() == [1.0, 1.0]
    assert pointing_game(outside, masks).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("side", [32, 64, 128])
def test_tolerance_scales_with_resolution(side: int):
    assert tolerance_px(side) == pytest.approx(0.05 * side)
    masks = square_masks(1, side)
    edge = round(0.5 * side)  # first column right of the mask
    near, far = np.zeros((1, side, side)), np.zeros((1, side, side))
    near[0, side // 3, edge - 1 + round(0.04 * side)] = 1.0  # 4% of the side outside: within the 5% tolerance
    far[0, side // 3, edge - 1 + round(0.08 * side)] = 1.0  # 8% outside: beyond it
    assert pointing_game(near, masks)[0] == 1.0 and pointing_game(near, masks, tolerance=0.0)[0] == 0.0
    assert pointing_game(far, masks)[0] == 0.0
    grown = dilate(masks, tolerance_px(side)).sum() / masks.sum()
    assert grown == pytest.approx(dilate(square_masks(1, 32), tolerance_px(32)).sum() / square_masks(1, 32).sum(), 0.2)


# ------------------------------------------------------------------------------------------------ faithfulness


def region_model(mask: np.ndarray, scale: float) -> nn.Module:
    """Two-class linear model that reads only the masked region: logit_1 = scale * sum(x in mask), logit_0 = 0."""
    region = torch.from_numpy(mask.astype(np.float32))

    def fn(self, x):
        s = (x[:, 0] * region).sum(dim=(1, 2)) * self.weight
        return torch.stack([torch.zeros_like(s), s], dim=1)

    return Lambda(fn, torch.tensor([scale]))


def _region_case(n: int, side: int) -> tuple:
    """(square masks, images brighter inside them, a model reading only the first mask's region, class-1 targets,
    near-oracle maps: the masks with a little noise)."""
    masks = square_masks(n, side)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, side, side, generator=gen) * 0.3 + torch.from_numpy(masks[:, None].astype(np.float32))
    model = region_model(masks[0], scale=0.15)
    targets = torch.ones(n, dtype=torch.int64)
    return masks, x, model, targets, masks.astype(np.float64) + 0.01 * np.random.default_rng(0).random(masks.shape)


def test_random_map_deletion_is_at_random_level_and_an_oracle_beats_it():
    side, n = 24, 6
    masks, x, model, targets, oracle = _region_case(n, side)
    scores = quality_metrics(model, x, targets, oracle, CFG, masks)
    assert scores["baseline_max_prob"] == pytest.approx(0.5, abs=1e-6)  # zeros: logit 0 for both classes
    assert scores["deletion_auc_random"] - scores["deletion_auc"] > 0.15
    assert scores["deletion_auc_vs_random"] == pytest.approx(scores["deletion_auc_random"] - scores["deletion_auc"])
    assert scores["insertion_auc_vs_random"] == pytest.approx(scores["insertion_auc"] - scores["insertion_auc_random"])
    assert scores["insertion_auc_vs_random"] > 0.08 and scores["road_vs_random"] > 0
    assert scores["pointing_game"] == 1.0 and scores["pointing_game_vs_random"] > 0.5
    other = random_maps(n, side, 1, seed=7)[0]  # a fresh random map scores at the random level
    rand = quality_metrics(model, x, targets, other, CFG, masks)
    assert abs(rand["deletion_auc_vs_random"]) < 0.06 and abs(rand["insertion_auc_vs_random"]) < 0.06
    assert rand["pointing_game"] <= 0.5
    for name in ("deletion_auc", "insertion_auc", "road", "pointing_game", "energy_in_mask"):
        assert {f"{name}_random", f"{name}_model_free", f"{name}_vs_random"} <= set(scores)
    assert {"pointing_game_centre", "energy_in_mask_centre", "pointing_tolerance_px"} <= set(scores)


def test_the_curves_ends_are_computed_once_per_probe_set_and_change_no_score():
    """Every deletion / insertion curve starts and ends at the image and at the baseline whatever the map: those
    two forwards are taken from the quality context (or once per call), with the AUCs the same to the bit as a
    forward at every fraction gives."""
    side, n, steps = 24, 6, 8
    _, x, model, targets, maps = _region_case(n, side)
    base = torch.zeros_like(x)
    seen: list[int] = []
    model.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    found = deletion_insertion(model, x, targets, maps, steps=steps, baseline=base)
    assert len(seen) == 2 * (steps - 1) + 2  # the inner fractions twice, the two ends once
    ctx = quality_context(model, x, targets, CFG)
    seen.clear()
    reused = deletion_insertion(model, x, targets, maps, steps=steps, baseline=ctx.base, ends=ctx.ends)
    assert len(seen) == 2 * (steps - 1)  # the ends from the context
    by_hand = []  # the curves with a forward at every fraction, as before the ends were shared
    order = np.argsort(-maps.reshape(n, -1), axis=1, kind="stable")
    for f in np.linspace(0.0, 1.0, steps + 1):
        moved = np.zeros((n, side * side), dtype=bool)
        np.put_along_axis(moved, order[:, : round(f * side * side)], True, axis=1)
        moved = torch.from_numpy(moved.reshape(n, 1, side, side))
        with torch.no_grad():
            probs = [torch.softmax(model(torch.where(moved, a, b)), 1)[:, 1].numpy() for a, b in ((base, x), (x, base))]
        by_hand.append(probs)
    fractions = np.linspace(0.0, 1.0, steps + 1)
    expected = [np.trapezoid(np.stack([p[k] for p in by_hand], 1), fractions, axis=1) for k in (0, 1)]
    assert all(np.array_equal(a, b) for a, b in zip(found, expected, strict=True))
    again = deletion_insertion(model, x, targets, maps, steps=steps, baseline=ctx.base)  # its ends computed here
    assert all(np.array_equal(a, b) for a, b in zip(reused, again, strict=True))


def test_baseline_check_picks_the_candidate_closest_to_uniform():
    gen = torch.Generator().manual_seed(0)
    x = 1.0 + 0.5 * torch.randn(4, 1, 16, 16, generator=gen)
    x = x - x.mean(dim=(2, 3), keepdim=True) + 1.0  # every image has mean intensity exactly 1

    def reads_mean(offset):
        def fn(self, inp):
            m = inp.mean(dim=(1, 2, 3)) * self.weight - offset
            return torch.stack([4 * m, torch.zeros_like(m)], dim=1)

        return Lambda(fn)

    dark = choose_baseline(reads_mean(0.0), x)  # the prediction depends on the mean: zeros is the neutral one
    assert dark.name == "zeros" and dark.max_prob == pytest.approx(0.5)
    assert min(dark.candidates["mean"], dark.candidates["blur"]) > 0.95
    grey = choose_baseline(reads_mean(1.0), x)  # neutral at the images' own mean colour
    assert grey.name == "mean" and grey.max_prob == pytest.approx(0.5, abs=1e-5)
    assert grey.candidates["zeros"] > 0.95 and grey.uniform == 0.5


# ------------------------------------------------------------------------------------------------ sanity


def linear_model(side: int) -> nn.Module:
    """logits = W x with structured weights (a blob per class): its saliency is |W_target|, model-only."""
    yy, xx = np.mgrid[:side, :side] / side
    w = np.stack([np.exp(-((yy - c) ** 2 + (xx - 1 + c) ** 2) * 8) for c in (0.3, 0.7)]).astype(np.float32)
    lin = nn.Linear(side * side, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w.reshape(2, -1)))
    return nn.Sequential(nn.Flatten(), lin)


def _sobel(model, images, targets, **_):
    """Weight-independent edge map of the input: must fail the sanity check."""
    x = images.detach()[:, 0]
    gy, gx = x.diff(dim=1, prepend=x[:, :1]), x.diff(dim=2, prepend=x[:, :, :1])
    return torch.hypot(gy, gx)


SEED_SETS = [(0, 1, 2), (3, 4, 5), (6, 7, 8)]


def test_sanity_threshold_lies_between_the_unrelated_image_reference_and_identity():
    side, n = 16, 12
    x = torch.randn(n, 1, side, side, generator=torch.Generator().manual_seed(1))
    t = torch.arange(n) % 2
    model = linear_model(side)
    kw = dict(spec=SPEC, resolution=side, cfg=CFG)
    saliency = get_explainer("saliency")
    trained = saliency(model, x, t, **kw).numpy()
    passing = [sanity_check(saliency, model, x, t, seeds=s, **kw) for s in SEED_SETS]
    for r in passing:
        assert r.reference_kind == "unrelated images"
        assert r.reference == pytest.approx(unrelated_similarity(np.abs(trained)).mean())
        assert r.threshold == pytest.approx(r.reference + SANITY_MIDPOINT * (1 - r.reference))
        assert r.final.shape == (3, n) and r.verdict == 1 and r.passed and r.high < r.threshold
        assert all(r.seed_passed) and r.reason.startswith("pass")
    edges = guarded(_sobel)
    failing = [sanity_check(edges, model, x, t, seeds=s, **kw) for s in SEED_SETS]
    for r in failing:
        reference = unrelated_similarity(np.abs(_sobel(None, x, t).numpy())).mean()
        assert r.reference == pytest.approx(reference) and r.reference < 0.3
        assert r.verdict == -1 and not r.passed and r.low > r.threshold and not any(r.seed_passed)
    metrics = failing[0].metrics()
    assert metrics["sanity_passed"] == 0.0 and metrics["sanity_inconclusive"] == 0.0 and metrics["sanity_seeds"] == 3
    assert metrics["sanity_reference"] == failing[0].reference and metrics["sanity_reference_is_fixed"] == 0.0
    assert metrics["sanity_threshold"] == failing[0].threshold and metrics["sanity_images"] == n


def _centred_gaussian(model, images, targets, **_):
    """A map that ignores both the model and the image: the centre prior."""
    return torch.from_numpy(centre_maps(len(images), images.shape[-1]))


def test_a_centred_gaussian_fails_the_sanity_check():
    side, n = 16, 12
    x = torch.randn(n, 1, side, side, generator=torch.Generator().manual_seed(3))
    r = sanity_check(guarded(_centred_gaussian), linear_model(side), x, torch.arange(n) % 2, spec=SPEC,
                     resolution=side, cfg=CFG)  # fmt: skip
    assert r.verdict == -1 and not r.passed and "ignore the image" in r.reason, r.reason
    m = r.metrics()
    # its reference is uncalibrated: unrelated images' maps agree at 1.0, far above their own chance level (~0)
    assert m["sanity_reference"] == pytest.approx(1.0) and abs(m["sanity_reference_chance"]) < 0.1
    assert m["sanity_reference_corrected"] > 0.9 and m["sanity_passed"] == 0.0


def test_inconclusive_is_never_passed():
    reference = 0.1
    threshold = reference + SANITY_MIDPOINT * (1 - reference)
    straddling = threshold + np.linspace(-0.3, 0.3, 24)[None, :].repeat(10, axis=0)  # 10 draws x 24 images
    r = SanityResult([], [], reference, straddling, "unrelated images")
    assert r.verdict == 0 and not r.passed and r.low < r.threshold < r.high and r.reason.startswith("inconclusive")
    assert r.metrics()["sanity_passed"] == 0.0 and r.metrics()["sanity_inconclusive"] == 1.0
    few = SanityResult([], [], reference, np.zeros((10, 4)), "unrelated images")  # 4 images: no interval
    assert few.verdict == 0 and not few.passed and "at least 10" in few.reason
    constant = np.zeros((10, 12))
    constant[:, :3] = np.nan  # 3 images whose trained map is constant: left out, counted
    counted = SanityResult([], [], reference, constant, "unrelated images")
    assert counted.images_used == 9 and counted.images_constant == 3 and counted.verdict == 0


def test_sanity_uses_at_least_ten_draws_by_default():
    assert ExplainabilityConfig().sanity_seeds >= 10
    side = 16
    x = torch.randn(12, 1, side, side, generator=torch.Generator().manual_seed(4))
    r = sanity_check(get_explainer("saliency"), linear_model(side), x, torch.arange(12) % 2, spec=SPEC,
                     resolution=side, cfg=ExplainabilityConfig(batch_size=12), cascade=False)  # fmt: skip
    assert r.final.shape == (10, 12) and r.metrics()["sanity_seeds"] == 10 and r.passed


def test_sanity_with_one_image_is_inconclusive_not_passed():
    model = linear_model(16)
    x = torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    r = sanity_check(
        get_explainer("saliency"), model, x, torch.tensor([0]), spec=SPEC, resolution=16, cfg=CFG, cascade=False
    )
    assert r.reference_kind == "fixed" and r.threshold == CFG.sanity_threshold
    assert r.verdict == 0 and not r.passed and r.reason.startswith("inconclusive")


# ------------------------------------------------------------------------------------------------ intervals


def test_localisation_references_are_corrected_by_their_own_chance_level():
    from resomap.explain.evaluation.intervals import chance_corrected, own_chance

    side, n = 32, 12
    rng = np.random.default_rng(0)
    masks = np.zeros((n, side, side), dtype=bool)
    for i in range(n):  # one object per image, anywhere
        y, x = rng.integers(2, side - 10, size=2)
        masks[i, y : y + 8, x : x + 8] = True
    centre = centre_maps(n, side)
    oracle = masks.astype(np.float32) + 0.01 * rng.random(masks.shape)
    found = chance_corrected("pointing_game", pointing_game, {"": oracle, "centre": centre}, masks, 0.0)
    assert found["pointing_game_centre_corrected"] == pytest.approx(0.0, abs=1e-9)  # ignores the image: 0
    assert found["pointing_game_corrected"] > 0.7  # points at the object beyond what other images' objects give
    assert own_chance(pointing_game, oracle, masks, 0.0) == pytest.approx(found["pointing_game_chance"])


def test_quality_scores_come_with_intervals_over_the_probe_images():
    from resomap.explain.evaluation.intervals import PER_IMAGE, interval_metrics
    from resomap.explain.evaluation.quality import quality_scores

    side, n = 16, 12
    x = torch.randn(n, 1, side, side, generator=torch.Generator().manual_seed(5))
    masks = square_masks(n, side)
    model = nn.Sequential(nn.Flatten(), nn.Linear(side * side, 2))
    t = torch.arange(n) % 2
    maps = get_explainer("saliency")(model, x, t, spec=SPEC, resolution=side, cfg=CFG).numpy()
    cfg = ExplainabilityConfig(batch_size=8, faithfulness_steps=4, baseline_draws=1, road=False)
    means, per_image = quality_scores(model, x, t, maps, cfg, masks)
    assert set(per_image) == set(PER_IMAGE) - {"road_vs_random"} and all(len(v) == n for v in per_image.values())
    assert np.mean(per_image["deletion_auc_vs_random"]) == pytest.approx(means["deletion_auc_vs_random"])
    ivs = interval_metrics(per_image, resamples=200)
    for name, values in per_image.items():
        assert ivs[f"{name}_low"] <= np.mean(values) <= ivs[f"{name}_high"], name
    assert {"pointing_game_chance", "pointing_game_corrected", "pointing_game_model_free_chance"} <= set(means)
    few = interval_metrics({k: v[:4] for k, v in per_image.items()})  # 4 images: no interval, NaN not a number
    assert all(np.isnan(v) for v in few.values())


# ------------------------------------------------------------------------------------------------ explain_trial


def test_explain_trial_reports_baselines_on_the_synthetic_set(tmp_path):
    from resomap.config import build as build_config
    from resomap.data import build
    from resomap.explain.run import explain_trial

    cfg = build_config(
        {
            "data": {"dataset": "synthetic", "synthetic": {"num_images": 40, "size": 32}},
            "experiment": {"output_dir": str(tmp_path)},
            "explainability": {
                "methods": ["saliency", "gradcam"],
                "sanity_methods": ["saliency"],
                "probe_size": 6,
                "sanity_seeds": 2,
                "baseline_draws": 1,
                "faithfulness_steps": 4,
            },
        }
    )
    torch.manual_seed(0)
    bundle = build(cfg, 32, seed=0, device="cpu")
    model, spec = build_model("tiny_cnn", 2, 1, ModelsConfig())
    out = explain_trial(model, spec, bundle, cfg, 0, tmp_path, torch.device("cpu"))
    assert not out.failed, out.failed
    m = out.metrics
    for method in ("saliency", "gradcam"):
        for name in ("pointing_game", "energy_in_mask"):
            for suffix in ("", "_random", "_centre", "_model_free", "_random_weights", "_vs_random_weights"):
                assert f"explain/{method}/{name}{suffix}" in m
        assert m[f"explain/{method}/pointing_tolerance_px"] == pytest.approx(1.6)
    assert {"explain/saliency/sanity_reference", "explain/saliency/sanity_similarity_high"} <= set(m)
    assert "explain/gradcam/sanity_passed" not in m
    _, meta = load_maps(out.maps_path)
    assert meta["faithfulness_baseline"] in ("mean", "zeros", "blur", "noise")
    assert meta["baseline_max_prob"] == pytest.approx(m["explain/saliency/baseline_max_prob"])
