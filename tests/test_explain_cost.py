"""Per-method explanation cost (seconds, peak memory) in a trial's metrics, the explanation budget
(explainability.budget_share / always), and what the model said about each probe image in explanations.npz."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from resomap.config.schema import ModelsConfig
from resomap.errors import ConfigError
from resomap.explain.methods.probe import load_maps
from resomap.models import build_model


def _setup(tmp_path, **explain):
    from resomap.config import build as build_config
    from resomap.data import build

    ec = {
        "methods": ["saliency", "gradcam"],
        "sanity_methods": [],
        "probe_size": 6,
        "baseline_draws": 1,
        "faithfulness_steps": 3,
        "road": False,
        **explain,
    }
    cfg = build_config(
        {
            "data": {"dataset": "synthetic", "synthetic": {"num_images": 40, "size": 32}},
            "experiment": {"output_dir": str(tmp_path)},
            "explainability": ec,
        }
    )
    torch.manual_seed(0)
    bundle = build(cfg, 32, seed=0, device="cpu")
    model, spec = build_model("tiny_cnn", 2, 1, ModelsConfig())
    return cfg, bundle, model, spec


def test_each_method_has_its_cost_and_the_npz_the_models_answers(tmp_path):
    from resomap.explain.run import explain_trial

    cfg, bundle, model, spec = _setup(tmp_path)
    out = explain_trial(model, spec, bundle, cfg, 0, tmp_path, torch.device("cpu"), train_seconds=10.0)
    assert not out.failed and not out.skipped
    for method in ("saliency", "gradcam"):
        seconds = out.metrics[f"explain/{method}/seconds"]
        assert 0 < seconds < out.seconds
        assert out.metrics[f"explain/{method}/peak_memory_mb"] >= 0
        assert 0 < out.metrics[f"explain/{method}/quality_seconds"] < out.seconds
        assert f"explain/{method}/predicted_seconds" not in out.metrics  # no budget: nothing predicted
    _, meta = load_maps(out.maps_path)
    assert meta["budget"].startswith("off")
    # the prediction, its probability and the true class's probability are the model's own softmax
    images = bundle.normalize(bundle.images("test")[[list(bundle.splits["test"]).index(i) for i in meta["index"]]])
    with torch.no_grad():
        probs = torch.softmax(model.eval()(images), dim=1).numpy()
    assert meta["pred"] == probs.argmax(1).tolist()
    np.testing.assert_allclose(meta["prob"], probs.max(1), rtol=1e-5)
    np.testing.assert_allclose(meta["true_prob"], probs[np.arange(6), meta["targets"]], rtol=1e-5)
    assert meta["class_names"] == list(bundle.class_names)
    assert set(meta["costs"]) == {"saliency", "gradcam"}


def test_the_budget_skips_methods_predicted_over_it_unless_always(tmp_path):
    from resomap.explain.run import explain_trial
    from resomap.stages import ExplainSummary

    cfg, bundle, model, spec = _setup(tmp_path, budget_share=1e-9, always=["gradcam"])
    out = explain_trial(model, spec, bundle, cfg, 0, tmp_path, torch.device("cpu"), train_seconds=1.0)
    assert set(out.skipped) == {"saliency"}
    assert "> budget" in out.skipped["saliency"] and "explainability.always" in out.skipped["saliency"]
    assert out.metrics["explain/saliency/skipped"] == 1.0
    assert out.metrics["explain/saliency/predicted_seconds"] > 0
    assert "explain/saliency/seconds" not in out.metrics and "explain/saliency/deletion_auc" not in out.metrics
    assert out.metrics["explain/gradcam/seconds"] > 0  # asked for explicitly: run whatever the budget
    maps, meta = load_maps(out.maps_path)
    assert "saliency" not in maps and "gradcam" in maps
    assert meta["skipped"] == out.skipped and meta["methods"] == ["gradcam"]
    summary = ExplainSummary.from_outcome(out)
    assert ExplainSummary.from_dict(dict(summary.__dict__)).skipped == out.skipped  # result.json round trip

    # a generous budget runs everything, each method checked against its prediction
    cfg, bundle, model, spec = _setup(tmp_path / "b", budget_share=1e6)
    out = explain_trial(model, spec, bundle, cfg, 0, tmp_path / "b", torch.device("cpu"), train_seconds=1.0)
    assert not out.skipped
    assert out.metrics["explain/saliency/predicted_seconds"] > 0


def test_the_budget_needs_a_training_time_and_a_positive_share(tmp_path):
    from resomap.explain.run import budget_seconds

    ec = SimpleNamespace(budget_share=0.5)
    assert budget_seconds(ec, 20.0)[0] == pytest.approx(10.0)
    budget, words = budget_seconds(ec, None)
    assert budget is None and words.startswith("not applied")
    assert budget_seconds(SimpleNamespace(budget_share=None), 20.0)[0] is None
    with pytest.raises(ConfigError, match="budget_share"):
        budget_seconds(SimpleNamespace(budget_share=0.0), 20.0)


def test_training_seconds_sums_the_epochs():
    from resomap.stages import training_seconds

    trainer = SimpleNamespace(history=[{"train/epoch_time_s": 1.5}, {"train/epoch_time_s": 2.0, "lr": 0.1}])
    assert math.isclose(training_seconds(trainer), 3.5)
    assert training_seconds(SimpleNamespace()) is None


def test_budget_config_errors_are_one_line():
    from resomap.config import load

    with pytest.raises(ConfigError, match="budget_share must be null or a positive number"):
        load("configs", None, ["explainability.budget_share=-1"])
    with pytest.raises(ConfigError, match="did you mean gradcam"):
        load("configs", None, ["explainability.always=[gradcm]"])
    cfg = load("configs", None, ["explainability.budget_share=0.25", "explainability.always=[saliency]"])
    assert cfg.explainability.budget_share == 0.25 and cfg.explainability.always == ["saliency"]


def test_explain_benchmark_reads_the_profiling_rss_sampler(monkeypatch):
    """explain.bench.peak_rss_mb is profiling.memory's RssPeakSampler (one RSS sampler), and it sees an allocation."""
    from resomap.explain.bench import peak_rss_mb
    from resomap.profiling import memory

    held = []
    grown = peak_rss_mb(lambda: held.append(np.ones(64 * 2**20, dtype=np.uint8)))
    assert 48 <= grown <= 256  # the 64 MiB block (page granularity; other threads count too)
    entered = []
    monkeypatch.setattr(memory.RssPeakSampler, "__enter__", lambda self: entered.append(self) or self)
    monkeypatch.setattr(memory.RssPeakSampler, "__exit__", lambda self, *exc: None)
    monkeypatch.setattr(memory.RssPeakSampler, "increase_bytes", 5 * memory.MB)
    assert peak_rss_mb(lambda: None, interval_s=0.002) == 5.0
    assert len(entered) == 1 and entered[0].interval_s == 0.002
