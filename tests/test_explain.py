"""explain: every registered explainer on a tiny CNN, model-state hygiene, probe set, comparison, quality."""

from __future__ import annotations

import gc
import math

import numpy as np
import psutil
import pytest
import torch
from scipy import ndimage
from torch import nn

from resomap.config.schema import ExplainabilityConfig, ModelsConfig
from resomap.errors import ExplainError, UnknownNameError
from resomap.explain import (
    EXPLAINERS,
    build_explainer,
    explainer_meta,
    explainer_options,
    explaining,
    get_explainer,
    guarded,
    list_explainers,
    register_explainer,
)
from resomap.explain.evaluation.compare import compare_all, compare_resolutions
from resomap.explain.evaluation.measures import resample
from resomap.explain.evaluation.quality import deletion_insertion, energy_in_mask, pointing_game, road
from resomap.explain.evaluation.sanity import sanity_check
from resomap.explain.methods.captum import GradientShapOptions, IntegratedGradientsOptions, OcclusionOptions
from resomap.explain.methods.guard import ModelGuard
from resomap.explain.methods.lime import LimeOptions
from resomap.explain.methods.probe import explain_probe_set, load_maps, probe_indices, save_maps
from resomap.explain.methods.shap import ShapOptions
from resomap.models import ModelSpec, build_model

OPTIONS = {  # small settings of each method's own options, for speed
    "integrated_gradients": IntegratedGradientsOptions(steps=8, internal_batch_size=8),
    "occlusion": OcclusionOptions(perturbations_per_eval=16),
    "gradient_shap": GradientShapOptions(samples=4),
    "shap": ShapOptions(samples=4),
    "lime": LimeOptions(samples=16),
}
CFG = ExplainabilityConfig(batch_size=4, options=OPTIONS)
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, spec = build_model("tiny_cnn", 3, 1, ModelsConfig())
    return model, spec


def images(n: int, res: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 1, res, res, generator=torch.Generator().manual_seed(seed))


def _cases() -> list:
    cases = []
    for name in list_explainers():
        slow = explainer_meta(name)["slow"]
        for res in (32, 64):
            marks = [pytest.mark.slow] if slow and res == 64 else []
            cases.append(pytest.param(name, res, marks=marks, id=f"{name}-{res}"))
    return cases


@pytest.mark.parametrize(("name", "res"), _cases())
def test_explainer_returns_finite_maps(tiny, name: str, res: int):
    model, spec = tiny
    out = get_explainer(name)(model, images(2, res), torch.tensor([0, 2]), spec=spec, resolution=res, cfg=CFG)
    assert out.shape == (2, res, res)
    assert out.dtype == torch.float32 and out.device.type == "cpu"
    assert torch.isfinite(out).all()
    assert out.abs().sum() > 0


def _hook_count(model: nn.Module) -> int:
    return sum(len(getattr(m, attr)) for m in model.modules() for attr in HOOK_DICTS)


def test_gradcam_hooks_and_memory_do_not_grow(tiny):
    model, spec = tiny
    x, t = images(2, 32), torch.tensor([0, 1])
    explain = get_explainer("gradcam")
    before = _hook_count(model)
    for _ in range(5):  # warm-up: allocator and lazy imports
        explain(model, x, t, spec=spec, resolution=32, cfg=CFG)
    gc.collect()
    rss = psutil.Process().memory_info().rss
    for _ in range(50):
        explain(model, x, t, spec=spec, resolution=32, cfg=CFG)
    gc.collect()
    assert _hook_count(model) == before
    assert psutil.Process().memory_info().rss - rss < 30 * 2**20


def test_model_state_restored_also_after_error(tiny):
    model, spec = tiny
    model.train()
    model.features[0][0].weight.requires_grad_(False)
    wants = [p.requires_grad for p in model.parameters()]
    hooks = _hook_count(model)
    get_explainer("saliency")(model, images(2, 32), torch.tensor([0, 1]), spec=spec, resolution=32, cfg=CFG)
    assert model.training and [p.requires_grad for p in model.parameters()] == wants

    def broken(model, images, targets, **_):
        assert not model.training and images.requires_grad and torch.is_grad_enabled()
        model.head.register_forward_hook(lambda *a: None)
        model.features[0][0].weight.requires_grad_(True)
        raise RuntimeError("boom")

    with torch.no_grad(), pytest.raises(RuntimeError, match="boom"):
        guarded(broken)(model, images(2, 32), torch.tensor([0, 1]), spec=spec, resolution=32, cfg=CFG)
    assert model.training and [p.requires_grad for p in model.parameters()] == wants
    assert _hook_count(model) == hooks
    assert all(m.inplace for m in model.modules() if isinstance(m, nn.ReLU))
    model.features[0][0].weight.requires_grad_(True)
    model.eval()


def _count_calls(monkeypatch, owner, attr: str) -> list[int]:
    calls = [0]
    original = getattr(owner, attr)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attr, counted)
    return calls


def test_cam_explainer_built_once_finds_layer_once(monkeypatch):
    torch.manual_seed(0)
    model, spec = build_model("tiny_cnn", 3, 1, ModelsConfig())
    x, t = images(6, 32), torch.tensor([0, 1, 2, 0, 1, 2])
    lookups = _count_calls(monkeypatch, ModelSpec, "cam_layer")
    forwards = [0]
    model.register_forward_hook(lambda *a: forwards.__setitem__(0, forwards[0] + 1))
    hooks = _hook_count(model)
    with build_explainer("gradcam", model, spec=spec, resolution=32, cfg=CFG) as explainer:
        assert lookups[0] == 1 and forwards[0] == 1  # the one dry forward that finds the layer
        first = explainer(x[:2], t[:2])  # + the cached class-count forward, + the CAM forward
        forwards[0] = 0
        maps = [explainer(x[i : i + 2], t[i : i + 2]) for i in range(0, 6, 2)]
        assert lookups[0] == 1 and forwards[0] == 3  # one CAM forward per batch, no dry passes
    assert torch.allclose(first, maps[0])
    assert _hook_count(model) == hooks  # grad-cam's hooks released on close
    with pytest.raises(ExplainError, match="closed"):
        explainer(x[:2], t[:2])
    lookups[0] = 0
    maps, failed = explain_probe_set(
        model, x, t, ["gradcam", "gradcam++", "saliency"], spec=spec, resolution=32, cfg=CFG, batch_size=2
    )
    assert not failed and lookups[0] == 2  # once per CAM method for the whole probe set (3 batches)


def test_guard_entered_once_per_probe_set(tiny, monkeypatch):
    model, spec = tiny
    model.train()
    wants = [p.requires_grad for p in model.parameters()]
    hooks = _hook_count(model)
    enters = _count_calls(monkeypatch, ModelGuard, "enter")
    maps, failed = explain_probe_set(
        model,
        images(5, 32),
        [0, 1, 2, 0, 1],
        ["saliency", "gradcam", "integrated_gradients", "nosuch"],
        spec=spec,
        resolution=32,
        cfg=CFG,
        batch_size=2,
    )
    assert set(maps) == {"saliency", "gradcam", "integrated_gradients"} and list(failed) == ["nosuch"]
    assert enters[0] == 1
    assert model.training and [p.requires_grad for p in model.parameters()] == wants
    assert _hook_count(model) == hooks
    model.eval()


def test_failed_method_is_reset_before_the_next(tiny):
    model, spec = tiny
    hooks = _hook_count(model)
    seen = []

    @register_explainer("_test_leaky", needs_spatial_layer=False, slow=False)
    def leaky(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
        model.head.register_forward_hook(lambda *a: None)
        model.train()
        raise RuntimeError("leaky boom")

    @register_explainer("_test_probe", needs_spatial_layer=False, slow=False)
    def probe(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
        seen.append((_hook_count(model), model.training, any(p.requires_grad for p in model.parameters())))
        return images.detach()[:, 0].abs()

    try:
        maps, failed = explain_probe_set(
            model, images(2, 32), [0, 1], ["_test_leaky", "_test_probe"], spec=spec, resolution=32, cfg=CFG
        )
    finally:
        EXPLAINERS.unregister("_test_leaky")
        EXPLAINERS.unregister("_test_probe")
    assert failed == {"_test_leaky": "RuntimeError: leaky boom"} and maps["_test_probe"].shape == (2, 32, 32)
    assert seen == [(hooks, False, False)]
    assert _hook_count(model) == hooks and not model.training


def test_plain_function_and_class_explainers_register_and_run(tiny):
    from dataclasses import dataclass

    from resomap.explain import Explainer

    model, spec = tiny

    @register_explainer("_test_fn", needs_spatial_layer=False, slow=False)
    def my_method(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):  # the README's form
        assert not model.training and images.requires_grad and torch.is_grad_enabled()
        return images.detach()[:, 0].abs() * (targets[:, None, None] + 1)

    @dataclass(frozen=True)
    class ScaleOptions:
        scale: float = 2.0  # multiplies the map

    built = []

    @register_explainer("_test_cls", options=ScaleOptions, needs_spatial_layer=False, slow=False)
    class Scaled(Explainer):
        def __init__(self, model, **kw):
            super().__init__(model, **kw)
            built.append(self.options)

        def explain(self, images, targets):
            return images.detach()[:, 0].abs() * self.options.scale

    try:
        x = images(5, 32)
        assert explainer_meta("_test_cls")["options"] is ScaleOptions
        assert explainer_meta("_test_fn")["options"] is None
        out = get_explainer("_test_fn")(model, x[:2], torch.tensor([0, 2]), spec=spec, resolution=32, cfg=CFG)
        assert torch.allclose(out, x[:2, 0].abs() * torch.tensor([1.0, 3.0])[:, None, None])
        cfg = ExplainabilityConfig(batch_size=2, options={"_test_cls": ScaleOptions(scale=3.0)})
        assert explainer_options(cfg, "_test_cls") == ScaleOptions(scale=3.0)
        assert explainer_options(ExplainabilityConfig(), "_test_cls") == ScaleOptions()
        maps, failed = explain_probe_set(
            model, x, [0, 1, 2, 0, 1], ["_test_fn", "_test_cls"], spec=spec, resolution=32, cfg=cfg
        )
        assert not failed and built == [ScaleOptions(scale=3.0)]  # built once for 3 batches
        assert np.allclose(maps["_test_cls"], 3 * x[:, 0].abs().numpy())
        assert maps["_test_fn"].shape == (5, 32, 32)
        with build_explainer("_test_fn", model, spec=spec, resolution=32, cfg=CFG) as fn_built:
            assert isinstance(fn_built, Explainer) and fn_built.name == "_test_fn"  # one type for both forms
    finally:
        EXPLAINERS.unregister("_test_fn")
        EXPLAINERS.unregister("_test_cls")


def test_an_explainer_class_is_an_explainer_subclass_that_releases_in_release():
    from resomap.explain import Explainer

    class NotOne:
        def explain(self, images, targets):
            return images[:, 0]

    with pytest.raises(TypeError, match=r"must subclass resomap\.explain\.Explainer"):
        register_explainer("_test_not_one")(NotOne)
    assert "_test_not_one" not in list_explainers()
    with pytest.raises(TypeError, match=r"override release\(\), not close"):

        class Closing(Explainer):  # close() also exits the guard the explainer may hold: release() is the hook
            def close(self):
                pass


def test_standalone_built_explainer_holds_its_own_guard(tiny):
    model, spec = tiny
    model.train()
    with build_explainer("saliency", model, spec=spec, resolution=32, cfg=CFG) as explainer:
        assert not model.training  # explaining state from build to close
        explainer(images(2, 32), torch.tensor([0, 1]))
    assert model.training
    with explaining(model):  # built inside a guard: that guard is used, closing leaves the state to it
        with build_explainer("saliency", model, spec=spec, resolution=32, cfg=CFG) as explainer:
            explainer(images(2, 32), torch.tensor([0, 1]))
        assert not model.training
    assert model.training
    model.eval()


def test_options_come_from_the_method():
    ig = explainer_options(CFG, "integrated_gradients")
    assert ig == IntegratedGradientsOptions(steps=8, internal_batch_size=8)
    assert explainer_options(ExplainabilityConfig(), "lime") == LimeOptions()
    assert explainer_options(CFG, "saliency") is None
    assert explainer_meta("occlusion")["options"] is OcclusionOptions


def test_import_registers_without_heavy_libraries():
    import subprocess
    import sys

    heavy = ("captum", "pytorch_grad_cam", "shap", "lime", "scipy", "matplotlib", "sklearn")
    code = (
        "import sys, resomap.explain as e\n"
        "names = e.list_explainers(); meta = e.explainer_meta('integrated_gradients')\n"
        "assert 'gradcam' in names and 'lime' in names and meta['options'] is not None\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_unknown_method_lists_methods():
    with pytest.raises(UnknownNameError, match="gradcam"):
        get_explainer("gradcamm")
    with pytest.raises(UnknownNameError, match="saliency"):
        get_explainer("zzzz")


def test_target_out_of_range(tiny):
    model, spec = tiny
    with pytest.raises(ExplainError, match=r"0\.\.2"):
        get_explainer("saliency")(model, images(2, 32), torch.tensor([0, 5]), spec=spec, resolution=32, cfg=CFG)


def test_cam_on_mlp_raises_typed_error():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 8), nn.ReLU(), nn.Linear(8, 2))
    spec = ModelSpec(name="mlp", family="cnn", cam_layers=("2", "1"))
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(ExplainError, match="no spatial feature map") as info:
        get_explainer("gradcam")(mlp, x, torch.tensor([0, 1]), spec=spec, resolution=32, cfg=CFG)
    assert "\n" not in str(info.value)


def test_probe_indices_stratified_and_deterministic():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)
    a = probe_indices(labels, 20, seed=3)
    assert np.array_equal(a, probe_indices(labels, 20, seed=3))
    assert not np.array_equal(np.sort(a), np.sort(probe_indices(labels, 20, seed=4)))
    assert len(set(a.tolist())) == 20
    assert np.bincount(labels[a], minlength=3).tolist() == [12, 6, 2]
    assert set(labels[probe_indices(labels, 3, seed=0)].tolist()) == {0, 1, 2}


def test_probe_set_records_failures_and_saves(tiny, tmp_path):
    model, spec = tiny
    maps, failed = explain_probe_set(
        model, images(5, 32), [0, 1, 2, 0, 1], ["saliency", "nosuch"], spec=spec, resolution=32, cfg=CFG, batch_size=2
    )
    assert maps["saliency"].shape == (5, 32, 32)
    assert list(failed) == ["nosuch"] and "\n" not in failed["nosuch"]
    path = save_maps(tmp_path / "m.npz", maps, {"resolution": 32})
    loaded, meta = load_maps(path)
    assert np.array_equal(loaded["saliency"], maps["saliency"]) and meta == {"resolution": 32}


def _blob(res: int, cy: float, cx: float, n: int = 3) -> np.ndarray:
    yy, xx = np.mgrid[:res, :res] / res
    one = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 0.02) + 0.05 * yy
    return np.stack([one] * n).astype(np.float32)


def test_compare_identical_and_inverse():
    cfg = ExplainabilityConfig(common_grid=32, top_k_percent=10.0)
    small, big = _blob(32, 0.3, 0.6), _blob(64, 0.3, 0.6)
    agg = compare_resolutions({64: big, 32: small}, cfg)
    assert agg.labels == [32, 64]
    for metric in ("spearman", "topk_iou", "mass"):
        assert agg.matrices[metric][0, 1] > 0.9, metric
    inv = compare_resolutions({32: small, 64: big.max() - big}, cfg)
    assert inv.matrices["spearman"][0, 1] < -0.5
    assert inv.matrices["topk_iou"][0, 1] < 0.1
    assert inv.matrices["mass"][0, 1] < agg.matrices["mass"][0, 1] - 0.3
    same = compare_resolutions({32: small, 33: small.copy()}, cfg)
    assert np.allclose(same.matrices["spearman"], 1) and np.allclose(same.matrices["mass"], 1)


def test_resample_and_compare_all():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    assert np.allclose(resample(x, 2)[0], [[2.5, 4.5], [10.5, 12.5]])
    maps = {"m": {32: {"a": _blob(32, 0.5, 0.5), "b": _blob(32, 0.2, 0.2)}, 64: {"a": _blob(64, 0.5, 0.5)}}}
    by_method, by_res, rows = compare_all(maps, ExplainabilityConfig(common_grid=16))
    assert set(by_method) == {("m", "a")} and set(by_res) == {("m", 32)}
    assert by_method[("m", "a")].matrices["spearman"].shape == (2, 2)
    assert {r["kind"] for r in rows} == {"resolution", "method"} and len(rows) == 6


def test_localisation_scores():
    masks = np.zeros((2, 16, 16), dtype=bool)
    masks[:, 4:8, 4:8] = True
    inside = np.zeros((2, 16, 16))
    inside[:, 5, 5] = 1.0
    outside = np.zeros((2, 16, 16))
    outside[:, 12, 12] = 1.0
    assert pointing_game(inside, masks).tolist() == [1.0, 1.0]
    assert energy_in_mask(inside, masks).min() > 0.9
    assert pointing_game(outside, masks).tolist() == [0.0, 0.0]
    assert energy_in_mask(outside, masks).max() == 0.0


def test_faithfulness_metrics_run(tiny):
    model, spec = tiny
    x, t = images(2, 32), torch.tensor([0, 1])
    maps = get_explainer("saliency")(model, x, t, spec=spec, resolution=32, cfg=CFG).numpy()
    dele, ins = deletion_insertion(model, x, t, maps, steps=4)
    assert dele.shape == ins.shape == (2,)
    assert np.all((dele >= 0) & (dele <= 1) & (ins >= 0) & (ins <= 1))
    scores = road(model, x, t, maps)
    assert scores.shape == (2,) and np.isfinite(scores).all()


def _sobel(model, images, targets, **_):
    """Weight-independent edge map of the input: must fail the sanity check."""
    x = images.detach()[:, 0].numpy()
    return torch.from_numpy(np.hypot(ndimage.sobel(x, axis=1), ndimage.sobel(x, axis=2)))


@pytest.mark.parametrize("name", ["saliency", "gradcam"])
def test_sanity_passes_for_model_dependent_maps(tiny, name: str):
    model, spec = tiny
    x, t = images(24, 32), torch.arange(24) % 3  # some CAMs of the untrained model are all zero: left out
    result = sanity_check(get_explainer(name), model, x, t, spec=spec, resolution=32, cfg=CFG, seeds=range(4))
    assert len(result.similarities) == len(result.layers) > 3
    assert result.images_used + result.images_constant == 24 and result.images_used >= 10
    assert result.passed and result.verdict == 1, (result.reason, result.similarities)


def test_sanity_flags_weight_independent_map(tiny):
    model, spec = tiny
    x, t = images(12, 32), torch.arange(12) % 3
    result = sanity_check(guarded(_sobel), model, x, t, spec=spec, resolution=32, cfg=CFG, seeds=range(4))
    assert not result.passed and result.verdict == -1 and min(result.similarities) > 0.99, result.reason


def test_sanity_of_maps_that_are_all_constant_is_inconclusive_not_a_crash(tiny):
    """Every trained map constant (a small model whose CAM is all zero): no image can be compared, so the check is
    inconclusive and says so (it crashed reshaping an empty array)."""
    model, spec = tiny
    x, t = images(6, 32), torch.arange(6) % 3

    def zeros(model, images, targets, **_):
        return torch.zeros(images.shape[0], images.shape[2], images.shape[3])

    result = sanity_check(guarded(zeros), model, x, t, spec=spec, resolution=32, cfg=CFG, seeds=range(2))
    assert result.images_used == 0 and result.images_constant == 6
    assert not result.passed and result.verdict == 0 and result.reason.startswith("inconclusive"), result.reason


def _quality_rows():
    """quality.csv rows of one model: two methods x two resolutions, one without an interval."""
    rows = []
    for method, base in (("gradcam", 0.10), ("saliency", -0.02)):
        for res, step in ((32, 0.0), (64, 0.05)):
            est = base + step
            low, high = (est - 0.04, est + 0.03) if (method, res) != ("saliency", 64) else (math.nan, math.nan)
            rows.append({"model": "tiny_cnn", "resolution": res, "method": method,
                         "score": "deletion_auc_vs_random", "estimate": est, "low": low, "high": high,
                         "level": 0.9, "images": 12, "seeds": 2})  # fmt: skip
    return rows


def test_quality_figure_draws_each_methods_interval_and_the_random_map_baseline():
    from matplotlib.container import ErrorbarContainer

    from resomap.reports.explain_figures import quality_vs_resolution

    fig = quality_vs_resolution(_quality_rows(), "tiny_cnn", [32, 64])
    (ax,) = fig.axes
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert sorted(c.get_label() for c in bars) == ["gradcam", "saliency"]
    gradcam = next(c for c in bars if c.get_label() == "gradcam")
    segments = gradcam.lines[2][0].get_segments()  # one vertical segment per resolution: low to high
    assert [tuple(np.round(sorted(seg[:, 1]), 3)) for seg in segments] == [(0.06, 0.13), (0.11, 0.18)]
    saliency = next(c for c in bars if c.get_label() == "saliency")
    spans = [np.ptp(seg[:, 1]) for seg in saliency.lines[2][0].get_segments()]
    assert spans[0] == pytest.approx(0.07) and spans[1] == 0.0  # no interval: no bar, never an invented one
    xs = {c.get_label(): c.lines[0].get_xdata() for c in bars}
    assert all(xs["gradcam"] < xs["saliency"])  # side by side, not on top of each other
    zero = [ln for ln in ax.get_lines() if list(ln.get_ydata()) == [0.0, 0.0]]
    assert len(zero) == 1 and zero[0].get_linestyle() == "--"  # random maps: the baseline every score is from
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["gradcam", "saliency", "random maps (baseline)"]
    assert legend.get_title().get_text() == "90% interval"
    assert "random maps" in ax.get_ylabel() and ax.get_xlabel() == "resolution (px)"


def test_figures_write_png_and_pdf(tmp_path):
    from resomap.reports.explain_figures import agreement_matrix, probe_grid, quality_vs_resolution, save_figure

    imgs = {32: np.random.rand(1, 32, 32), 64: np.random.rand(1, 64, 64)}
    maps = {"gradcam": {32: _blob(32, 0.5, 0.5)[0], 64: _blob(64, 0.5, 0.5)[0]}, "saliency": {32: np.zeros((32, 32))}}
    figs = {
        "grid": probe_grid(imgs, maps, title="probe 0"),
        "agree": agreement_matrix(np.array([[1.0, 0.4], [0.4, 1.0]]), [32, 64], "spearman"),
        "quality": quality_vs_resolution(_quality_rows(), "tiny_cnn: explanation quality"),
    }
    assert len(figs["grid"].axes) == 2 * 2 + 1  # panels + colour bar
    for stem, fig in figs.items():
        paths = save_figure(fig, tmp_path, stem)
        assert all(p.stat().st_size > 1000 for p in paths) and [p.suffix for p in paths] == [".png", ".pdf"]


@pytest.mark.slow
def test_trained_model_localises_better_than_baselines(tmp_path):
    """tiny_cnn trained on the synthetic shapes: Grad-CAM points inside the object more than a random map and the
    centre prior; Integrated Gradients more than a random map.

    IG is not held to the centre prior: on this data its pixel-level maxima sit on single checkerboard edges, and over
    three training seeds x 8/12 epochs (2-core AMD EPYC, fp32) its pointing game on the 30 textured test images was
    0.33-0.67 against the centre prior's 0.42 and its energy in the mask 0.11-0.12 against 0.17: not a property of
    the method to test, and the earlier 12-image version of this check passed or failed with the CPU.
    """
    from resomap.config import build as build_config
    from resomap.data import build

    cfg = build_config(
        {
            "data": {
                "dataset": "synthetic",
                "synthetic": {"num_images": 400, "size": 64, "detail_size": 4},
                "augmentation": {"enabled": False},  # the recipe is not what this test is about
            },
            "experiment": {"output_dir": str(tmp_path)},
            "training": {"batch_size": 32},
        }
    )
    torch.manual_seed(0)
    bundle = build(cfg, resolution=64, seed=0)
    model, spec = build_model("tiny_cnn", 2, 1, ModelsConfig())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(8):
        bundle.train.set_epoch(epoch)
        model.train()
        for x, y in bundle.train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    model.eval()
    # the whole test split (60 images, 30 textured): 12 probe images decided a 0.04 difference by one image
    x = bundle.normalize(bundle.images("test"))
    masks = bundle.masks("test").numpy()
    y = bundle.labels("test")
    with torch.no_grad():
        assert (model(x).argmax(1) == y).float().mean() > 0.9  # the model learned the texture
    maps, failed = explain_probe_set(
        model, x, y, ["gradcam", "integrated_gradients"], spec=spec, resolution=64, cfg=CFG, batch_size=8
    )
    assert not failed
    # scored on the textured class: its checkerboard is the object's only localised evidence (a plain object has
    # the background's mean, so "plain" is read from the absence of the checkerboard, not from a place)
    textured = (y == 1).numpy()
    masks = masks[textured]
    assert len(masks) >= 25
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:64, :64]
    noise = rng.random(masks.shape)
    centre = np.broadcast_to(np.exp(-((yy - 31.5) ** 2 + (xx - 31.5) ** 2) / (2 * 12.0**2)), masks.shape)
    for score in (pointing_game, energy_in_mask):
        random_chance, centre_prior = score(noise, masks).mean(), score(centre, masks).mean()
        assert centre_prior > random_chance  # the objects sit near the centre: the prior is a real competitor
        assert score(maps["gradcam"][textured], masks).mean() > centre_prior, score.__name__
        assert score(maps["integrated_gradients"][textured], masks).mean() > random_chance, score.__name__
