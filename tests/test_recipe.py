"""The training recipe of issue 30: the LR range test, weight averaging (EMA), test-time augmentation over the
dataset's declared symmetries, the small ResNets, and their load-time checks."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from torch import nn

from conftest import run_cli, tiny_sweep_config, trial_summary
from resomap.training import Trainer
from test_training import CPU, cfg_of, mlp, one_thread, toy_data  # noqa: F401  (one_thread: autouse)

# ---------------------------------------------------------------- LR range test


def test_the_suggestion_is_a_tenth_of_the_lowest_smoothed_loss():
    from resomap.training.lr_find import suggest

    lrs = [10.0 ** (-6 + i * 0.1) for i in range(60)]
    # a loss that falls until lr = 1e-2 (index 40) and then blows up
    losses = [1.0 - 0.02 * min(i, 40) + (0.5 * (i - 40) if i > 40 else 0.0) for i in range(60)]
    lr, at_min = suggest(lrs, losses)
    assert at_min == pytest.approx(lrs[40], rel=0.3)  # the moving average lags by a step or two
    assert lr == pytest.approx(at_min / 10)


def test_the_range_test_leaves_the_model_and_the_random_streams_as_they_were():
    from resomap.config.schema import LrFindConfig
    from resomap.training.lr_find import lr_range_test

    model, data = mlp(), toy_data()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    state = torch.get_rng_state()
    record = lr_range_test(Trainer(cfg_of(2), CPU), model, data, LrFindConfig(start_lr=1e-5, end_lr=10.0, steps=30))
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert 1e-5 <= record["lr"] < record["lr_min_loss"] <= 10.0 * (1 + 1e-9) and 3 <= record["steps"] <= 30
    assert record["lrs"] == sorted(record["lrs"]) and len(record["losses"]) == record["steps"]


def test_a_sweep_finds_the_learning_rate_once_per_model_and_resolution(tmp_path):
    from resomap.sweep import run_sweep

    cfg = tiny_sweep_config(
        tmp_path, ["tiny_cnn"], [32], ["saliency"], 2, "sweep.seeds=[1,2]", "training.lr_find.enabled=true",
        "training.lr_find.steps=12", "explainability.enabled=false", "profiling.enabled=false",
    )  # fmt: skip
    results = run_sweep(cfg).results
    assert [r.status for r in results] == ["FINISHED", "FINISHED"]
    records = list(tmp_path.glob("checkpoints/**/lr_find.json"))
    assert len(records) == 1 and records[0].parent.name == "32"  # beside the seed folders
    found = json.loads(records[0].read_text())["lr"]
    for seed in (1, 2):
        result = json.loads((trial_summary(tmp_path, "tiny_cnn", 32, seed) / "result.json").read_text())
        assert result["convergence"]["lr_found"] == pytest.approx(found)
        saved = yaml.safe_load((trial_summary(tmp_path, "tiny_cnn", 32, seed) / "config.yaml").read_text())
        assert saved["training"]["optimizer"]["lr"] == pytest.approx(found)  # the rate the trial ran with
        assert result["data"]["recipe"]["learning_rate"] == "the LR range test's (training.lr_find)"
    (summary,) = tmp_path.glob("model_summaries/_sweep/*/summary.md")
    text = " ".join(summary.read_text().split())  # lines wrapped
    assert "## Training Recipe: Class imbalance: the loss weighted by inverse class frequency; learning rate:" in text
    assert "learning rate: the LR range test's" in text


# ---------------------------------------------------------------- weight averaging


def test_ema_weights_are_what_validation_scores_and_the_checkpoint_keeps(tmp_path):
    from resomap.training import TopKCheckpoint, load_checkpoint

    cfg = cfg_of(3, ema={"enabled": True, "decay": 0.9})
    ck = TopKCheckpoint(tmp_path, monitor="val/loss", mode="min")
    trainer, data = Trainer(cfg, CPU, [ck]), toy_data()
    res = trainer.fit(mlp(dropout=0.0), data)
    payload = load_checkpoint(res.last_path)
    averaged, raw = payload["model"], payload["train_model"]
    assert all(torch.equal(averaged[k], v) for k, v in trainer.ema.module.state_dict().items())
    assert any(not torch.equal(averaged[k], raw[k]) for k in raw)
    assert payload["ema_updates"] == trainer._updates == 3 * len(data.train)  # one per optimiser step
    again = Trainer(cfg, CPU).evaluate(_loaded(averaged), toy_data().val)[0]["val/loss"]
    assert again == pytest.approx(res.history[-1]["val/loss"], rel=1e-5)


def _loaded(state: dict) -> nn.Module:
    model = mlp(dropout=0.0)
    model.load_state_dict(state)
    return model


class _Crash:
    order = 200  # after TopKCheckpoint wrote last.pt

    def on_validation_end(self, trainer, metrics):
        if trainer.epoch == 1:
            raise KeyboardInterrupt


def test_ema_resumes_exactly(tmp_path):
    from resomap.training import TopKCheckpoint

    cfg = cfg_of(4, ema={"enabled": True, "decay": 0.9})
    full = Trainer(cfg, CPU, [TopKCheckpoint(tmp_path / "a")]).fit(mlp(dropout=0.0), toy_data())
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, CPU, [TopKCheckpoint(tmp_path / "b"), _Crash()]).fit(mlp(dropout=0.0), toy_data())
    resumed = Trainer(cfg, CPU, [TopKCheckpoint(tmp_path / "b")])
    rest = resumed.fit(mlp(dropout=0.0), toy_data(), resume_from=tmp_path / "b" / "last.pt")
    assert rest.resumed_from_epoch == 1
    assert [h["val/loss"] for h in rest.history] == pytest.approx([h["val/loss"] for h in full.history], rel=1e-6)


def test_the_ema_decay_and_the_time_cap_are_checked_at_load(project, capsys):
    for bad, key in (
        ("training.ema.decay=1.0", "training.ema.decay"),
        ("training.max_minutes=0", "training.max_minutes"),
        ("training.early_stopping.min_epochs=99", "training.early_stopping.min_epochs"),
        ("training.early_stopping.smoothing=0", "training.early_stopping.smoothing"),
        ("training.lr_find.end_lr=1e-9", "training.lr_find.end_lr"),
        ("training.convergence_tolerance=-0.1", "training.convergence_tolerance"),
        ("training.convergence_tolerance=1", "training.convergence_tolerance"),
    ):
        code, _, err = run_cli(["sweep", "--dry-run", "--preset", "smoke", bad], capsys)
        assert code == 2 and key in err and len(err.strip().splitlines()) == 1, (bad, err)


# ---------------------------------------------------------------- test-time augmentation


@pytest.mark.parametrize(
    ("names", "size"), [(["hflip"], 2), (["rot90"], 4), (["hflip", "vflip"], 4), (["hflip", "rot90"], 8)]
)
def test_the_symmetries_generate_their_group_once_each(names, size):
    from resomap.data.symmetry import group

    x = torch.arange(25.0).reshape(1, 1, 5, 5)
    images = [t(x) for t in group(names)]
    assert len(images) == size and torch.equal(images[0], x)
    assert len({im.numpy().tobytes() for im in images}) == size


def test_the_symmetry_average_of_an_invariant_model_is_the_model():
    from resomap.data.symmetry import symmetry_average

    torch.manual_seed(0)
    invariant = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1, 3))
    x = torch.randn(4, 1, 6, 6)
    averaged = symmetry_average(invariant, ["hflip", "rot90"])(x)
    assert torch.allclose(averaged.softmax(1), invariant(x).softmax(1), atol=1e-6)
    directional = nn.Sequential(nn.Flatten(), nn.Linear(36, 3))  # not invariant: averaging changes its output
    assert not torch.allclose(symmetry_average(directional, ["hflip"])(x).softmax(1), directional(x).softmax(1))


@pytest.mark.parametrize(
    "model", ["tiny_cnn", "lite0_linear"]
)  # lite0_linear: its plain score read off cached features
def test_a_trial_reports_the_tta_score_beside_the_plain_one(tmp_path, model):
    from resomap.sweep import run_sweep

    cfg = tiny_sweep_config(
        tmp_path, [model], [32], ["saliency"], 2, "training.tta=[hflip,rot90]", "explainability.enabled=false",
        "profiling.enabled=false",
    )  # fmt: skip
    (result,) = run_sweep(cfg).results
    (found,) = trial_summary(tmp_path, model, 32).parent.glob("**/result.json")
    metrics = json.loads(found.read_text())["test"]
    assert {"test/accuracy", "test_tta/accuracy"} <= set(metrics)
    assert result.status == "FINISHED"


def test_a_tta_symmetry_the_dataset_does_not_declare_is_refused(project, capsys, tmp_path):
    from test_data import write_images

    for name in ("a", "b"):  # readable data: the sweep reads a folder's files at load, before the full config check
        write_images(tmp_path / "imgs" / name, 6)
    code, _, err = run_cli(
        ["sweep", "--dry-run", "data.dataset=imagefolder", f"data.imagefolder.root={tmp_path / 'imgs'}",
         "explainability.probe_size=1", "training.tta=[hflip]"],
        capsys,
    )  # fmt: skip
    assert code == 2 and "training.tta" in err and "declares (none)" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["sweep", "--dry-run", "--preset", "smoke", "training.tta=[shear]"], capsys)
    assert code == 2 and "training.tta" in err and "shear" in err


# ---------------------------------------------------------------- small ResNets


@pytest.mark.parametrize(("name", "blocks"), [("small_resnet10", 1), ("small_resnet18", 2), ("small_resnet26", 3)])
def test_the_small_resnets_take_32_to_300_px(name, blocks):
    from resomap.config.schema import ModelsConfig
    from resomap.models import build_model, check_input_size

    model, spec = build_model(name, 2, 1, ModelsConfig())
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 1 + 4 * 2 * blocks  # the stem and two per basic block
    for side in (32, 300):
        check_input_size(model, name, side, 1)
        assert model.eval()(torch.zeros(2, 1, side, side)).shape == (2, 2)
    assert (spec.cam_layer(model, 64, 4).name, spec.cam_layer(model, 64, 4).feature_size) == ("stage4", 4)
    assert (spec.cam_layer(model, 64, 5).name, spec.cam_layer(model, 64, 5).feature_size) == ("stage3", 8)
