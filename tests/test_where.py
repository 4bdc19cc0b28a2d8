"""Where it looks, decided (resomap.explain.evaluation.where, resomap.stats.margin): the sign-flip tests against a
margin and their bounds, the error rates of the map decision in seeded simulations where the maps at two
resolutions differ only by the nuisance (deterministic and random-seed models), its power when they do differ,
and the maps it must leave out or cannot decide on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from resomap.explain.evaluation.where import answer_sentence, decide_maps, method_words, verdict_words
from resomap.explain.methods.nuisance import shift_images, unshift_maps
from resomap.stats.margin import margin_test, margin_verdicts
from resomap.stats.permutation import sign_flip

ALPHA = 0.05


@pytest.mark.parametrize("n", [6, 12, 16, 40])
def test_margin_tests_are_the_sign_flip_test_of_the_shifted_differences_and_their_bounds_invert_it(n):
    rng = np.random.default_rng(n)
    d = rng.normal(-0.05, 0.1, n)
    for margin in (0.0, 0.05, 0.1):
        t = margin_test(d, margin)
        within = sign_flip(d + margin, alternative="greater").p_value
        beyond = sign_flip(d + margin, alternative="less").p_value
        tol = 0 if n <= 16 else 0.01  # beyond 16 both draw random flips (Monte-Carlo se <= 0.004)
        assert abs(t.p_within - within) <= tol + 1e-12 and abs(t.p_beyond - beyond) <= tol + 1e-12
    t = margin_test(d, 0.1)
    # the bounds are the margins each test starts to decide at
    assert margin_test(d, -t.lower + 1e-6).p_within <= ALPHA < margin_test(d, -t.lower - 1e-3).p_within
    assert margin_test(d, -t.upper - 1e-6).p_beyond <= ALPHA < margin_test(d, -t.upper + 1e-3).p_beyond
    assert t.lower <= t.mean <= t.upper


def test_one_family_never_says_within_and_beyond_and_holm_adjusts_per_direction():
    rng = np.random.default_rng(3)
    tests = [margin_test(rng.normal(mu, 0.05, 12), 0.1) for mu in (0.0, -0.3, -0.1, -0.1)]
    out = margin_verdicts(tests)
    assert [v for v, _, _ in out][:2] == ["within", "beyond"]
    for (_, w, b), t in zip(out, tests, strict=True):
        assert w >= t.p_within and b >= t.p_beyond  # Holm never lowers a p


# ------------------------------------------------------------------------------- simulated maps of a method


def _method(images: torch.Tensor, field: torch.Tensor) -> np.ndarray:
    """A map method with the pixel-grid sensitivity of a CAM: the images times a fixed weight field (the model's),
    its mass on their bright blobs, pooled on a stride-4 grid and upsampled back, so a shift of a pixel changes the
    map a little."""
    x = (images.mean(1, keepdim=True) * field).clamp(min=0) ** 3  # mass on the image's bright blobs
    pooled = torch.nn.functional.avg_pool2d(x, 4)
    return torch.nn.functional.interpolate(pooled, size=images.shape[-2:], mode="bilinear")[:, 0].numpy()


def _at_phase(images: torch.Tensor, field: torch.Tensor, phase: np.ndarray) -> np.ndarray:
    """The method's map of each image moved phase[i] pixels (circularly: no edge differs from another phase's),
    moved back: the map the image gets on a pixel grid offset by that much (phase 0: the map itself)."""
    out = np.empty((len(images), *images.shape[-2:]), dtype=np.float32)
    for p in np.unique(phase):
        rows = np.flatnonzero(phase == p)
        maps = _method(torch.roll(images[rows], (int(p), int(p)), dims=(-2, -1)), field)
        out[rows] = np.roll(maps, (-int(p), -int(p)), axis=(-2, -1))
    return out


def _simulated(rng: np.random.Generator, n: int, seeds: int, differ: bool) -> tuple[dict, dict]:
    """maps and floors [model][seed][resolution][method] of one simulated sweep at 64 (reference) and 48 px: every
    map of an image (at either resolution, and each floor map) is its map on a pixel grid of a random phase (0-3 px,
    drawn independently per map), so the maps at the two resolutions differ only by the nuisance the floor
    measures, and for every image (not only on average over fits) the agreement across resolutions has the
    expectation of its floor. With `differ`, the 48 px maps are of the images mirrored (the model looks
    elsewhere)."""
    images = torch.as_tensor(rng.normal(size=(n, 3, 64, 64)), dtype=torch.float32)
    images = torch.nn.functional.avg_pool2d(images, 5, stride=1, padding=2)  # smooth content
    low_images = images.flip(-1) if differ else images
    maps: dict = {"m": {}}
    floors: dict = {"m": {}}
    for s in range(seeds):
        field = torch.as_tensor(1 + 0.5 * rng.random((1, 1, 64, 64)), dtype=torch.float32)  # the seed's weights

        both = ((64, images), (48, low_images))
        maps["m"][s], floors["m"][s] = (
            {r: {"x": _at_phase(imgs, field, rng.integers(0, 4, size=n))} for r, imgs in both} for _ in range(2)
        )
    return maps, floors


def _verdicts(reps: int, n: int, seeds: int, margin: float, differ: bool = False) -> list[str]:
    rng = np.random.default_rng(20261204 + seeds + int(differ))
    out = []
    for _ in range(reps):
        maps, floors = _simulated(rng, n, seeds, differ)
        det = {"m": seeds} if seeds == 1 else None
        (row,) = decide_maps(maps, floors, grid=32, top_k=10.0, margin=margin, alpha=ALPHA, deterministic=det)
        out.append(row["verdict"])
    return out


@pytest.mark.parametrize(("seeds", "reps"), [(1, 300), (4, 200)], ids=["deterministic", "random-seed"])
def test_maps_that_differ_only_by_the_nuisance_are_said_elsewhere_at_most_alpha_of_the_time(seeds, reps):
    """At margin 0 the nuisance-only case is the boundary of both nulls (the agreement across resolutions and the
    floor have the same expectation): each verdict at most alpha of the time, plus 2 Monte-Carlo SE. The
    deterministic model is decided against its shift floor, the random-seed one (4 seeds: 2 disjoint pairs)
    against its cross-seed floor. Measured with 1000 runs each (Monte-Carlo SE 0.7%): 1 seed 5.0% / 3.6%
    (elsewhere / same), 2 seeds 3.8% / 5.0%, 4 seeds 4.6% / 5.7%."""
    verdicts = _verdicts(reps, 12, seeds, margin=0.0)
    se = math.sqrt(ALPHA * (1 - ALPHA) / reps)  # 0.0126 (300 runs) and 0.0154 (200): bounds 0.075 and 0.081
    elsewhere, same = verdicts.count("beyond") / reps, verdicts.count("within") / reps
    assert elsewhere <= ALPHA + 2 * se, (elsewhere, se)
    assert same <= ALPHA + 2 * se, (same, se)
    assert "chance" not in verdicts  # these maps follow their images
    # at the default margin the same maps are said to look at the same places, most of the time
    at_margin = _verdicts(40, 12, seeds, margin=0.1)
    assert at_margin.count("beyond") == 0 and at_margin.count("within") >= 0.8 * 40, at_margin


@pytest.mark.parametrize("seeds", [1, 2], ids=["deterministic", "random-seed"])
def test_maps_of_mirrored_images_are_said_elsewhere(seeds):
    verdicts = _verdicts(40, 12, seeds, margin=0.1, differ=True)
    assert verdicts.count("beyond") >= 0.9 * 40, verdicts


def test_one_seed_of_a_model_trained_per_resolution_is_never_said_elsewhere():
    """Its only floor is the shift floor, which holds no fit-to-fit variation: below it, the verdict says why."""
    maps, floors = _simulated(np.random.default_rng(8), 12, 1, differ=True)
    (row,) = decide_maps(maps, floors, grid=32, top_k=10.0, margin=0.1)  # not deterministic: a trained model
    assert row["verdict"] == "undecided" and row["p_elsewhere"] <= ALPHA
    assert "one seed gives no fit-to-fit floor: needs 2 or more seeds (sweep.seeds)" in verdict_words(row)


def test_constant_maps_are_counted_and_left_out_and_said():
    rng = np.random.default_rng(5)
    maps, floors = _simulated(rng, 12, 1, differ=False)
    maps["m"][0][48]["x"][:3] = 0.0  # a method that gave all-zero maps on three images
    (row,) = decide_maps(maps, floors, grid=32, top_k=10.0, margin=0.1, deterministic={"m": 1})
    assert (row["images"], row["left_out"]) == (9, 3)
    said = method_words([row], "m", "x")
    assert "this fit on these 12 probe images" in said
    assert "48 px against 64 px (on 9 images: 3 left out, a constant or non-finite map) " in said


def test_maps_saved_without_a_floor_are_not_decided_and_say_why():
    rng = np.random.default_rng(6)
    maps, _ = _simulated(rng, 12, 1, differ=False)
    (row,) = decide_maps(maps, {}, grid=32, top_k=10.0, margin=0.1, deterministic={"m": 1})
    assert row["verdict"] == "no floor"
    assert verdict_words(row) == "not decided (no shift floor saved with these maps (explainability.floor))"


def test_maps_that_ignore_the_image_are_at_chance_whatever_their_floor():
    """A linear model's saliency is its weight map for every image: its agreement across resolutions equals that of
    maps of different images. It is said at chance, not 'the same places', which the floor test alone would say."""
    rng = np.random.default_rng(7)
    weights = rng.normal(size=(64, 64)).astype(np.float32)
    same = np.broadcast_to(weights, (12, 64, 64)).copy()
    maps = {"lin": {0: {64: {"saliency": same}, 32: {"saliency": same[:, ::2, ::2].copy()}}}}
    floors = {
        "lin": {0: {64: {"saliency": unshift_maps(same, 1)}, 32: {"saliency": unshift_maps(same[:, ::2, ::2], 1)}}}
    }
    (row,) = decide_maps(maps, floors, grid=32, top_k=10.0, margin=0.1, deterministic={"lin": 1})
    assert row["verdict"] == "chance" and row["p_same"] <= ALPHA  # above its floor, yet it ignores the image
    said = answer_sentence([row], "lin")
    assert said.startswith("lin, where it looks at 32 px against 64 px") and "saliency at chance" in said
    assert "not shown to follow the image" in verdict_words(row)


def test_shift_and_unshift_keep_the_content_where_it_was():
    x = torch.arange(2 * 1 * 8 * 8, dtype=torch.float32).reshape(2, 1, 8, 8)
    moved = shift_images(x, 1)
    assert torch.equal(moved[..., 1:, 1:], x[..., :-1, :-1])  # content one pixel down and right
    back = unshift_maps(moved[:, 0].numpy(), 1)
    assert np.array_equal(back[:, :-1, :-1], x[:, 0, :-1, :-1].numpy())  # and back, but the pushed-out edge


def test_a_sign_flip_of_float_noise_differences_is_counted_not_divided_by_zero():
    """Differences of 1e-17 (two equal agreements computed two ways) once rounded to the lattice 1/1 as all zero
    and divided by their gcd, 0; they lie on no lattice and are enumerated."""
    flip = sign_flip([1e-17, -2e-17, 3e-17, 1e-17], alternative="greater")
    assert flip.exact and flip.lattice is None and flip.p_value == 5 / 16


def test_a_method_without_maps_at_one_resolution_is_not_decided_and_says_the_trials_reason():
    maps, floors = _simulated(np.random.default_rng(9), 12, 1, differ=False)
    for both in (maps, floors):
        both["m"][0][48] = {}  # the method failed at 48 px (e.g. no CAM layer): the trial saved no map of it
    why = {("m", 48, "x"): "ExplainError: no convolution layer of at least 4 px"}
    (row,) = decide_maps(maps, floors, grid=32, top_k=10.0, margin=0.1, deterministic={"m": 1}, failed=why)
    assert row["verdict"] == "no floor"
    assert verdict_words(row) == (
        "not decided (no x maps at both resolutions (48 px: ExplainError: no convolution layer of at least 4 px))"
    )
