"""Explanation agreement with its references: tie-safe top-k IoU, chance and random levels, the cross-seed noise
floor and the relabelling test, the common CAM layer, and compare_stage's rows, matrices and sentences."""

from __future__ import annotations

import csv
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from resomap.config.schema import Config, ExplainabilityConfig, ModelsConfig, SweepConfig
from resomap.explain.evaluation.compare import study, verdict
from resomap.explain.evaluation.measures import METRICS, pair_matrix, rescale, score_pair, top_mask, topk_iou
from resomap.explain.methods.probe import save_maps
from resomap.stats import relabel_test

CFG = ExplainabilityConfig(common_grid=16, top_k_percent=10.0)
N = 8


def _blobs(side: int, centres, radius: float = 0.12) -> np.ndarray:
    yy, xx = (np.mgrid[:side, :side] + 0.5) / side
    return np.stack([np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / radius**2) for cy, cx in centres]).astype(np.float32)


def _up(maps: np.ndarray, res: int) -> np.ndarray:
    """[N,g,g] -> [N,res,res] by block repetition (area-resampling it back to g is exact)."""
    k = res // maps.shape[-1]
    return np.kron(maps, np.ones((k, k), dtype=np.float32)).astype(np.float32)


# ------------------------------------------------------------------------------------------- top-k IoU ties


def test_topk_iou_disjoint_supports_score_zero_and_identical_one():
    a = np.zeros((1, 20, 20), dtype=np.float32)
    b = np.zeros((1, 20, 20), dtype=np.float32)
    a[0, 2:5, 2:5] = 1.0  # 9 pixels < k = 40: the rest of the map is one tied zero group
    b[0, 12:15, 12:15] = 1.0
    assert topk_iou(a, b, 10.0) == 0.0
    big_a, big_b = np.zeros_like(a), np.zeros_like(b)
    big_a[0, :10, :10] = np.arange(100).reshape(10, 10)  # 100 pixels > k, ranked: top set inside each blob
    big_b[0, 10:, 10:] = np.arange(100).reshape(10, 10)
    assert topk_iou(big_a, big_b, 10.0) == 0.0
    assert topk_iou(a, a.copy(), 10.0) == 1.0
    assert topk_iou(big_a, big_a.copy(), 10.0) == 1.0
    assert top_mask(a, 10.0).sum() == 9 and top_mask(big_a, 10.0).sum() == 40  # never more than k


def test_topk_iou_has_no_position_bias():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 25, size=(6, 16, 16)).astype(np.float32)  # many ties at every level
    b = rng.integers(0, 25, size=(6, 16, 16)).astype(np.float32)
    base = topk_iou(a, b, 10.0)
    assert 0 < base < 1
    for f in (lambda x: x[:, ::-1], lambda x: x[:, :, ::-1], lambda x: np.rot90(x, axes=(1, 2))):
        assert topk_iou(f(a).copy(), f(b).copy(), 10.0) == pytest.approx(base)
    perm = rng.permutation(256)
    shuffle = lambda x: x.reshape(6, -1)[:, perm].reshape(x.shape)  # noqa: E731
    assert topk_iou(shuffle(a), shuffle(b), 10.0) == pytest.approx(base)
    # a map of one blob on a flat background and its mirror image: the blobs do not overlap -> 0
    one = np.zeros((1, 16, 16), dtype=np.float32)
    one[0, 3:6, 2:5] = 1.0
    assert topk_iou(one, one[:, :, ::-1].copy(), 10.0) == 0.0
    assert np.isnan(topk_iou(np.ones((1, 8, 8)), np.ones((1, 8, 8)), 10.0))  # constant maps: no top set


def test_chance_and_random_levels_of_random_maps():
    rng = np.random.default_rng(1)
    a = rng.random((12, 16, 16)).astype(np.float32)
    b = rng.random((12, 16, 16)).astype(np.float32)
    sp, tk, ms = (score_pair(a, b, m, 10.0) for m in METRICS)
    assert abs(sp.value) < 0.05 and abs(sp.chance) < 0.05 and abs(sp.random) < 0.05
    k = 26 / 256
    assert tk.random == pytest.approx(k / (2 - k), abs=0.03) and tk.chance == pytest.approx(tk.random, abs=0.03)
    assert ms.raw == pytest.approx(2 / 3, abs=0.03) and ms.random == pytest.approx(2 / 3, abs=0.03)  # raw mass
    assert abs(ms.value) < 0.1 and abs(ms.chance) < 0.1  # rescaled: 0 at the random level
    assert rescale(1.0, 0.67) == 1.0 and rescale(0.67, 0.67) == 0.0
    same = score_pair(a, a.copy(), "mass", 10.0)
    assert same.value == pytest.approx(1.0)
    m = pair_matrix(a, b, "spearman", 10.0)
    assert m.shape == (12, 12) and np.diag(m).mean() == pytest.approx(sp.value)


# ------------------------------------------------------------------------------------------- relabelling test


def _values(latent):
    """latent[(seed, res)] -> vector; agreement = correlation, for every cross-seed pair."""
    keys = sorted(latent)
    return {(x, y): float(np.corrcoef(latent[x], latent[y])[0, 1]) for x in keys for y in keys if x[0] < y[0]}


def test_relabel_test_is_calibrated_under_no_effect():
    rng = np.random.default_rng(2)
    ps = []
    for _ in range(120):
        common = rng.normal(size=40)
        latent = {(s, r): common + rng.normal(size=40) for s in range(4) for r in (32, 64, 128)}
        ps.append(relabel_test(_values(latent), range(4), (32, 64, 128)).p_value)
    assert np.mean(np.asarray(ps) <= 0.05) < 0.12
    assert 0.35 < np.mean(ps) < 0.65


def test_relabel_test_counts_and_smallest_p():
    latent = {(s, r): np.arange(10.0) + r for s in range(2) for r in (1, 2)}
    found = relabel_test(_values(latent), range(2), (1, 2))
    assert found.relabellings == 2 and found.min_p == 0.5 and found.exact
    assert verdict(found, 2) == "n.a."  # 2 seeds x 2 resolutions can never give p <= 0.05
    assert verdict(found, 1) == "n.a."


def test_relabel_test_critical_value_and_detectable_drop_match_a_brute_force_enumeration():
    """3 seeds x 3 resolutions (36 relabellings): the critical value is the smallest statistic whose share of
    relabellings at or above it is <= alpha, and the detectable drop at power 0.8 is critical minus the 20% quantile,
    both recomputed here from every relabelling by hand; 2 seeds x 3 resolutions cannot decide (NaN)."""
    rng = np.random.default_rng(4)
    latent = {(s, r): rng.normal(size=30) + 0.3 * rng.normal() for s in range(3) for r in (1, 2, 3)}
    values = _values(latent)
    found = relabel_test(values, range(3), (1, 2, 3), alpha=0.05, power=0.8)
    res = (1, 2, 3)

    def agreement(x, y):
        return values.get((x, y), values.get((y, x)))

    null = []
    for p1 in itertools.permutations(range(3)):
        for p2 in itertools.permutations(range(3)):
            label = {0: (0, 1, 2), 1: p1, 2: p2}  # seed -> which trial carries each resolution label
            same, cross = [], []
            for s, t in itertools.combinations(range(3), 2):
                for i in range(3):
                    for j in range(3):
                        v = agreement((s, res[label[s][i]]), (t, res[label[t][j]]))
                        (same if i == j else cross).append(v)
            null.append(np.mean(same) - np.mean(cross))
    null = np.asarray(null)
    critical = min(v for v in null if np.mean(null >= v - 1e-12) <= 0.05)
    assert found.relabellings == 36 and found.exact
    assert found.critical == pytest.approx(critical)
    assert found.detectable == pytest.approx(max(0.0, critical - np.quantile(null, 0.2)))
    assert found.p_value == pytest.approx(np.mean(null >= found.statistic - 1e-12))
    two = relabel_test(values, range(2), (1, 2, 3))
    assert two.min_p == pytest.approx(1 / 6) and np.isnan(two.critical) and np.isnan(two.detectable)


# ---------------------------------------------------------------------------------------------- the study


def _images(res: int, n: int = N) -> np.ndarray:
    """Smooth probe images, the same content at every resolution, uint8 [n,3,res,res]."""
    rng = np.random.default_rng(7)
    centres = rng.random((n, 2)) * 0.6 + 0.2
    img = _blobs(res, centres, 0.25)
    return np.repeat((img * 255).astype(np.uint8)[:, None], 3, axis=1)


def _sweep(make, seeds, resolutions):
    maps = {"m": {s: {r: {"x": make(s, r)} for r in resolutions} for s in seeds}}
    images = {"m": {s: {r: _images(r) for r in resolutions} for s in seeds}}
    return maps, images


def _rows(found, kind, grid=16, metric="spearman"):
    return [r for r in found.rows if r["kind"] == kind and r["grid"] == grid and r["metric"] == metric]


def test_resolution_independent_model_free_maps_are_not_an_effect():
    """An explainer-like map that needs no model and does not depend on the resolution: the gradient magnitude of
    the probe image content on a fixed 8x8 lattice, block-repeated to each resolution. Identical for every seed
    and resolution: agreement 1 everywhere, no effect."""
    from resomap.explain.evaluation.measures import edge_maps, resample

    lattice = resample(edge_maps(_images(64)), 8)
    found = study(*_sweep(lambda s, r: _up(lattice, r), (1, 2, 3), (32, 64, 128)), CFG)
    for row in _rows(found, "resolution"):
        assert row["value"] == pytest.approx(1.0) and row["floor"] == pytest.approx(1.0)
        assert row["effect_beyond_noise"] != "yes"
    assert "no resolution effect" in found.statements[0] and "a resolution effect" not in found.statements[0]
    free = _rows(found, "model_free")
    assert free and all(np.isfinite(r["value"]) for r in free)


def test_seed_noise_as_large_as_resolution_noise_is_no_effect():
    base = _blobs(16, [(0.3 + 0.05 * i, 0.6 - 0.04 * i) for i in range(N)])

    def make(seed, res, scale=0.6):
        rng = np.random.default_rng([seed, res])
        return _up(base + scale * rng.random(base.shape).astype(np.float32), res)

    found = study(*_sweep(make, (1, 2), (32, 64, 128)), CFG)
    rows = _rows(found, "resolution")
    assert len(rows) == 3
    for row in rows:
        assert row["effect_beyond_noise"] in ("no", "n.a.") and row["seeds"] == "1,2"
        assert 0.7 < row["ratio_to_floor"] < 1.3 and row["p_value"] >= 0.5
        assert row["chance"] < row["value"]
    assert "a resolution effect" not in found.statements[0] and "2 seeds" in found.statements[0]
    seeds3 = study(*_sweep(make, (1, 2, 3), (32, 64, 128)), CFG)  # 36 relabellings: p can reach 1/36
    assert "no resolution effect beyond seed noise shown (relabelling test p" in seeds3.statements[0]
    assert "would show an agreement drop of" in seeds3.statements[0] and "not ruled out" in seeds3.statements[0]
    assert "no decision" in found.statements[0] and "needs >= 3 seeds" in found.statements[0]
    assert seeds3.matrices[("m", "x")]["effect_beyond_noise"]["spearman"] == "no"
    # the short findings: the same measure and decision, without the references
    drop = seeds3.statements[0].split("agreement drop of ")[1].split(" ")[0]
    assert seeds3.findings[0].startswith("m / x (spearman, grid 16): agreement across resolutions ")
    assert "no resolution effect beyond seed noise shown (relabelling test p" in seeds3.findings[0]
    assert f"a drop under {drop} is not ruled out." in seeds3.findings[0] and "edge map" not in seeds3.findings[0]
    assert found.findings[0].endswith("no decision: the relabelling test needs >= 3 seeds (this sweep has 2).")


def test_maps_that_change_with_resolution_but_not_with_seed_are_an_effect():
    where = {32: (0.25, 0.25), 64: (0.5, 0.7), 128: (0.75, 0.3)}

    def make(seed, res):
        rng = np.random.default_rng([seed, res])
        base = _blobs(16, [where[res]] * N)
        return _up(base + 0.05 * rng.random(base.shape).astype(np.float32), res)

    found = study(*_sweep(make, (1, 2, 3), (32, 64, 128)), CFG)
    assert "a resolution effect beyond seed noise" in found.statements[0], found.statements
    assert "a resolution effect beyond seed noise shown (relabelling test p = " in found.findings[0]
    assert "edge map" not in found.findings[0] and "edge map" in found.statements[0]
    rows = _rows(found, "resolution")
    assert all(r["ratio_to_floor"] < 0.5 and r["floor"] > r["value"] + 0.3 for r in rows)
    entry = found.matrices[("m", "x")]
    assert entry["floor_on_diagonal"] and entry["effect_beyond_noise"]["spearman"] == "yes"
    assert np.all(np.diag(entry["spearman"]) > 0.3) and np.all(np.diag(entry["spearman"]) < 1.0)
    assert found.floors["m/x/spearman"].keys() == {"32", "64", "128"}


def test_one_seed_says_no_noise_floor_and_gives_chance():
    found = study(*_sweep(lambda s, r: _up(_blobs(16, [(0.5, 0.5)] * N), r), (1,), (32, 64)), CFG)
    assert "one seed: no noise floor" in found.statements[0] and "chance" in found.statements[0]
    assert "one seed: no noise floor" in found.findings[0] and len(found.findings) == len(found.statements)
    row = _rows(found, "resolution")[0]
    assert row["effect_beyond_noise"] == "n.a." and np.isnan(row["floor"])
    kinds = {r["kind"] for r in found.rows if r["grid"] == 16}
    assert kinds == {"resolution", "chance", "random", "model_free", "centre", "maps"}
    assert {r["grid"] for r in found.rows} == {16, 8}  # a second grid, half the main one
    assert not found.floors and np.allclose(np.diag(found.matrices[("m", "x")]["spearman"]), 1.0)


def test_a_deterministic_model_has_no_seed_floor_and_no_relabelling_test():
    """Seeds that are one fit give identical maps: a cross-seed 'floor' of 1.00 and, with 3 seeds, a relabelling
    test that shows an 'effect' for any drop. Marked deterministic (the summary's deterministic_models), the model
    is one replicate: compared on its first seed, no floor, the test not run, and the sentence says so."""
    where = {32: (0.3, 0.3), 64: (0.5, 0.6), 128: (0.7, 0.4)}
    sweep = _sweep(lambda s, r: _up(_blobs(16, [where[r]] * N), r), (1, 2, 3), (32, 64, 128))
    plain = study(*sweep, CFG)
    # identical maps: a floor of 1.00 (to rounding: on an AVX2 AMD EPYC the Spearman of identical maps is 1 +- 1e-15)
    assert plain.floors["m/x/spearman"] == pytest.approx({"32": 1.0, "64": 1.0, "128": 1.0}, abs=1e-12)
    assert "a resolution effect beyond seed noise shown" in plain.statements[0]
    found = study(*sweep, CFG, deterministic={"m": 3})
    assert not found.floors and not [r for r in found.rows if r["kind"] == "seed"]
    rows = _rows(found, "resolution")
    assert rows and all(r["effect_beyond_noise"] == "n.a." and np.isnan(r["p_value"]) for r in rows)
    assert all(r["seeds"] == "1" and np.isnan(r["floor"]) for r in rows)
    said = "no seed floor and no relabelling test: its 3 seeds are one fit."
    assert found.statements[0].split(" Grid effect")[0].endswith(said) and found.findings[0].endswith(said)
    entry = found.matrices[("m", "x")]
    assert entry["deterministic"] and not entry["floor_on_diagonal"]
    assert entry["effect_beyond_noise"]["spearman"] == "n.a."
    assert [r["value"] for r in rows] == pytest.approx([r["same_seed"] for r in _rows(plain, "resolution")])


# ----------------------------------------------------------------------- fair across resolutions (issue 23)


def _raw_maps(side: int = 16, n: int = N) -> np.ndarray:
    """Positive maps with distinct values (a gradient method's |attribution|), [n, side, side]."""
    return np.random.default_rng(3).random((n, side, side)).astype(np.float32) + 0.1


def test_an_upsampled_copy_gets_the_same_display_scale_and_agreement_one_on_every_grid(tmp_path):
    """A saliency map at 32 px and the same attribution at 64 px (each pixel split over the 4 pixels that cover
    its area: per-pixel values a quarter as large) are the same map up to resolution."""
    from resomap.reports import explain_figures as figures

    m32 = _raw_maps(32)
    m64 = np.kron(m32, np.ones((2, 2), dtype=np.float32)) / 4
    for grid in (64, 16):
        cfg = ExplainabilityConfig(common_grid=grid, top_k_percent=10.0)
        found = study({"m": {1: {32: {"saliency": m32}, 64: {"saliency": m64}}}}, {}, cfg)
        rows = [r for r in found.rows if r["kind"] == "resolution"]
        assert {r["grid"] for r in rows} == {grid, grid // 2} and len(rows) == 2 * len(METRICS)
        for row in rows:
            assert row["value"] == pytest.approx(1.0, abs=1e-5), row  # float32 maps
    # display: one scale (per unit image area) for both, and the same picture
    assert figures._top([m32[0]]) == pytest.approx(figures._top([m64[0]]))
    assert figures._top([m32[0]]) != pytest.approx(figures._top([m64[0] * 4]))  # raw magnitudes would differ
    paths = []
    for res, maps in ((32, m32), (64, m64)):
        images = np.kron(_images(32), np.ones((res // 32, res // 32), dtype=np.uint8))
        paths.append(save_maps(tmp_path / f"{res}.npz", {"saliency": maps, "_probe_images": images},
                               {"methods": ["saliency"], "resolution": res}))  # fmt: skip
    scales = figures.shared_scales(paths)
    small, large = (figures.probe_overlays(p, size=64, scales=scales) for p in paths)
    for a, b in zip(small, large, strict=True):
        assert a.shared_scale and figures.SHARED_SCALE in a.caption
        assert np.array_equal(a.image, b.image)
    assert "per unit image area" in figures.scale_words("saliency", True)


def test_references_are_printed_with_their_own_chance_level_and_the_grid_effect():
    found = study(*_sweep(lambda s, r: _up(_blobs(16, [(0.5, 0.5)] * N), r), (1, 2), (32, 64)), CFG)
    sentence = found.statements[0]
    free = _rows(found, "model_free")[0]
    words = f"model-free edge map {free['value']:.2f} (its chance {free['chance']:.2f}, corrected"
    assert words in sentence and free["corrected"] == pytest.approx(free["value"] - free["chance"])
    centre = _rows(found, "centre")[0]
    assert centre["corrected"] == pytest.approx(0.0, abs=1e-6)  # a map that ignores the image: no agreement
    assert "centre prior" in sentence and "pixel-shuffled maps" in sentence
    row = _rows(found, "resolution")[0]
    assert row["corrected"] == pytest.approx(row["value"] - row["chance"])
    assert f"chance-corrected {row['corrected']:+.2f}" in sentence
    assert "Grid effect (spearman): grid 16:" in sentence and "grid 8:" in sentence


def test_all_zero_maps_are_counted_and_reported_not_dropped_silently():
    def make(seed, res):
        maps = _up(_blobs(16, [(0.3 + 0.05 * i, 0.5) for i in range(N)]), res)
        if res == 32:
            maps[:3] = 0.0  # three blank CAMs at the smallest resolution
        if res == 64 and seed == 2:
            maps[5, 0, 0] = np.nan
        return maps

    found = study(*_sweep(make, (1, 2), (32, 64)), CFG)
    counted = {
        (r["a"], r["seeds"]): (r["constant"], r["nonfinite"], r["value"]) for r in found.rows if r["kind"] == "maps"
    }
    assert counted == {
        (32, "1"): (3, 0, N - 3),
        (32, "2"): (3, 0, N - 3),
        (64, "1"): (0, 0, N),
        (64, "2"): (0, 1, N - 1),
    }
    assert "Maps left out of every measure: 7 of 32 (6 constant or all zero, 1 non-finite" in found.statements[0]
    assert min(r["images"] for r in _rows(found, "resolution")) == N - 4  # 32 px seed 1 vs 64 px seed 2


# ------------------------------------------------------------------------------------------ compare_stage


def test_compare_stage_rows_matrices_floors_and_metrics(tmp_path, monkeypatch):
    from resomap.reports import explain_comparison
    from resomap.stages import compare_stage, compared_trials

    monkeypatch.setattr(explain_comparison, "_probe_figures", lambda *a, **k: [])  # unchanged here; slow to draw

    results = []
    for seed in (1, 2):
        for res in (32, 64):
            rng = np.random.default_rng([seed, res])
            maps = _up(_blobs(16, [(0.5, 0.5)] * 4) + 0.3 * rng.random((4, 16, 16)).astype(np.float32), res)
            folder = tmp_path / f"{seed}_{res}"
            path = save_maps(
                folder / "explanations.npz", {"x": maps, "_probe_images": _images(res, 4)}, {"methods": ["x"]}
            )
            explain = SimpleNamespace(maps=str(path), metrics={"explain/x/pointing_game": 0.5 + seed / 10})
            results.append(SimpleNamespace(model="m", resolution=res, seed=seed, status="FINISHED", explain=explain))
    results.append(SimpleNamespace(model="m", resolution=32, seed=3, status="FAILED", explain=None))
    assert len(compared_trials(results)) == 4  # every seed, not only the lowest
    comp = compare_stage(results, CFG, tmp_path / "out")
    with open(tmp_path / "out" / "agreement.csv") as fh:
        rows = list(csv.DictReader(fh))
    want = {"kind", "grid", "seeds", "floor", "ratio_to_floor", "p_value", "effect_beyond_noise", "value", "raw"}
    assert want <= set(rows[0])
    assert {r["kind"] for r in rows} == {"resolution", "seed", "chance", "model_free", "centre", "random", "maps"}
    entry = comp.matrices["m/x"]
    assert entry["floor_on_diagonal"] and entry["grid"] == 16
    assert entry["spearman"][0][0] == pytest.approx(comp.floors["m/x/spearman"]["32"])
    assert comp.statements and comp.statements[0].startswith("m / x (spearman, grid 16)")
    agree = comp.agreement
    assert {"agreement/m/x/spearman", "agreement_floor/m/x/spearman", "agreement_chance/m/x/spearman"} <= set(agree)
    assert (tmp_path / "out" / "agreement.txt").read_text().strip() == comp.statements[0]
    assert not (tmp_path / "out" / "agreement").exists()  # the stage draws nothing: its caller draws (reports)
    drawn = explain_comparison.draw_comparison(comp)
    assert (tmp_path / "out" / "agreement" / "m_x_agreement.png").exists()
    assert set(drawn) <= set(comp.files) and comp.figure_data is None


# ------------------------------------------------------------------------------------------------ CAM layer


@pytest.mark.parametrize(("name", "per_res"), [("resnet18", ["layer2", "layer3", "layer4"]), ("simple_cnn", None)])
def test_cam_layer_is_common_across_the_sweep_by_default(name, per_res):
    from resomap.explain.methods.cam import sweep_cam_spec
    from resomap.models import build_model

    torch.manual_seed(0)
    model, spec = build_model(name, 2, 3, ModelsConfig())
    cfg = Config(sweep=SweepConfig(models=[name], resolutions=[32, 64, 128]))
    assert cfg.models.cam_layer_policy == "common"
    common = sweep_cam_spec(spec, cfg)
    layers = [common.cam_layer(model, r, 4) for r in (32, 64, 128)]
    assert len({layer.name for layer in layers}) == 1 and common.cam_layer_policy == "common"
    assert [layer.feature_size for layer in layers] == [4, 8, 16]
    assert layers[0].name == spec.common_cam_layer(model, [128, 32, 64], 4).name
    old = sweep_cam_spec(spec, Config(sweep=cfg.sweep, models=ModelsConfig(cam_layer_policy="per_resolution")))
    found = [old.cam_layer(model, r, 4).name for r in (32, 64, 128)]
    assert found == [spec.cam_layer(model, r, 4).name for r in (32, 64, 128)]  # the old deepest-per-resolution
    if per_res:
        assert found == per_res
    assert old.cam_layer_policy == "per_resolution"


def test_gradcam_explainer_hooks_the_common_layer():
    from resomap.explain import build_explainer, explaining
    from resomap.explain.methods.cam import sweep_cam_spec
    from resomap.models import build_model

    torch.manual_seed(0)
    model, spec = build_model("simple_cnn", 2, 1, ModelsConfig())
    spec = sweep_cam_spec(spec, Config(sweep=SweepConfig(models=["simple_cnn"], resolutions=[32, 128])))
    names = []
    with explaining(model):
        for res in (32, 128):
            with build_explainer("gradcam", model, spec=spec, resolution=res, cfg=CFG) as explainer:
                names.append(explainer.layer.name)
                assert explainer(torch.rand(1, 1, res, res), torch.tensor([0])).shape == (1, res, res)
    assert names[0] == names[1]
