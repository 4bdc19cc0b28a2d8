"""Trainer, callbacks, schedulers, resume (in-process and after SIGKILL), metrics."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from resomap.config import build
from resomap.errors import ConfigError, TrainingError
from resomap.training import (
    EarlyStopping,
    TopKCheckpoint,
    Trainer,
    classification_metrics,
    confusion_matrix_figure,
    default_callbacks,
    load_checkpoint,
)
from resomap.training.bare import InMemoryLoader, in_memory_data

CPU = torch.device("cpu")
TIMING = ("train/epoch_time_s", "train/images_per_s", "train/peak_memory_mb", "val/time_s")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import _train_worker  # noqa: E402


def cfg_of(epochs: int = 3, system: dict | None = None, **training):
    training.setdefault("optimizer", {"lr": 0.01})
    raw = {
        "experiment": {"seed": 5},
        "training": {"epochs": epochs, "progress": "off", **training},
        "system": {"device": "cpu", **(system or {})},
    }
    return build(raw)


def toy_data(n: int = 96, batch_size: int = 16, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=gen)
    y = torch.randint(0, 2, (n,), generator=gen)
    x += (2.0 * y - 1.0).view(-1, 1, 1, 1) * 0.3  # a learnable shift per class
    return in_memory_data(x, y, batch_size=batch_size, seed=seed)


def mlp(dropout: float = 0.1, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 2))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # 2 shared cores: torch's 2-thread spin-waits make tiny models ~20x slower under load
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def stable(history):
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


class Crash(Exception):
    pass


class CrashAt:
    """Raises at the start of epoch `n`, like a process dying between epochs."""

    def __init__(self, n: int):
        self.n = n
        self.seen: list = []

    def on_train_epoch_start(self, trainer):
        if trainer.epoch == self.n:
            raise Crash

    def on_exception(self, trainer, exc):
        self.seen.append(type(exc))


def test_loss_decreases_and_metrics_are_named():
    res = Trainer(cfg_of(6), CPU).fit(mlp(), toy_data())
    assert res.epochs_run == 6 and not res.stopped_early
    first, last = res.history[0], res.history[-1]
    assert last["train/loss"] < first["train/loss"] * 0.8
    assert last["val/accuracy"] > 0.7
    names = {"train/loss", "train/accuracy", "train/epoch_time_s", "train/images_per_s", "train/peak_memory_mb"}
    names |= {"lr", "val/loss", "val/accuracy", "val/macro_precision", "val/macro_recall", "val/macro_f1"}
    assert names <= set(last)
    assert last["train/peak_memory_mb"] > 0 and last["train/images_per_s"] > 0


def test_determinism_two_fits():
    a = Trainer(cfg_of(3), CPU).fit(mlp(), toy_data()).history
    b = Trainer(cfg_of(3), CPU).fit(mlp(), toy_data()).history
    assert stable(a) == stable(b)


@pytest.mark.parametrize("scheduler", ["cosine", "plateau", "onecycle"])
def test_resume_equals_uninterrupted(tmp_path: Path, scheduler: str):
    sched = {"name": scheduler, "patience": 0}
    cfg = cfg_of(4, label_smoothing=0.1, class_weights="balanced", grad_clip=1.0, scheduler=sched)
    straight_model = mlp()
    straight = Trainer(cfg, CPU).fit(straight_model, toy_data())

    crash = CrashAt(2)
    with pytest.raises(Crash):
        Trainer(cfg, CPU, [TopKCheckpoint(tmp_path, "val/loss", "min", 1), EarlyStopping(patience=9), crash]).fit(
            mlp(), toy_data()
        )
    assert crash.seen == [Crash]
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1

    torch.manual_seed(123)  # the process state before resuming must not matter
    resumed_model = mlp(seed=99)
    early = EarlyStopping(patience=9)
    trainer = Trainer(cfg, CPU, [TopKCheckpoint(tmp_path, "val/loss", "min", 1), early])
    resumed = trainer.fit(resumed_model, toy_data(), resume_from=tmp_path / "last.pt")
    assert resumed.resumed_from_epoch == 1 and resumed.epochs_run == 2
    assert stable(resumed.history) == stable(straight.history)
    assert resumed.history[-1]["val/loss"] == straight.history[-1]["val/loss"]
    for p, q in zip(straight_model.state_dict().values(), resumed_model.state_dict().values()):
        assert torch.equal(p, q)
    assert early.best == min(h["val/loss"] for h in straight.history)


def _first_step_weights(batch_size: int, accum: int) -> torch.Tensor:
    cfg = cfg_of(
        1,
        system={"precision": "fp32"},  # an exact comparison: bf16 rounds the two orders differently
        grad_accum_steps=accum,
        optimizer={"name": "sgd", "lr": 0.5, "momentum": 0.0, "weight_decay": 0.0},
        scheduler={"name": "none"},
    )
    data = toy_data(n=32, batch_size=batch_size)  # 24 train images
    data.train.shuffle = False
    model = mlp(dropout=0.0)
    data.train = InMemoryLoader(data.train.x[:16], data.train.y[:16], batch_size, shuffle=False)
    Trainer(cfg, CPU).fit(model, data)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_grad_accumulation_matches_full_batch():
    full = _first_step_weights(16, 1)
    accum = _first_step_weights(8, 2)
    start = torch.cat([p.detach().flatten() for p in mlp(dropout=0.0).parameters()])
    assert not torch.allclose(full, start)
    torch.testing.assert_close(accum, full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scheduler", ["cosine", "step", "plateau", "onecycle", "none"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_schedulers_and_optimizers_run(scheduler: str, optimizer: str):
    sched = {"name": scheduler, "step_size": 1, "patience": 0, "warmup_epochs": 1}
    res = Trainer(cfg_of(3, optimizer={"name": optimizer, "lr": 0.05}, scheduler=sched), CPU).fit(mlp(), toy_data())
    lrs = [h["lr"] for h in res.history]
    assert all(math.isfinite(h["train/loss"]) for h in res.history)
    if scheduler == "none":
        assert lrs == [0.05] * 3
    elif scheduler == "step":
        assert lrs == pytest.approx([0.05, 0.005, 0.0005])
    elif scheduler in ("cosine", "onecycle"):
        assert lrs[0] < lrs[1]  # warm-up


def test_bf16_autocast_on_cpu_runs():
    res = Trainer(cfg_of(2, system={"precision": "bf16", "channels_last": True}), CPU).fit(mlp(), toy_data())
    assert math.isfinite(res.history[-1]["val/loss"])


def test_nan_loss_raises_training_error():
    data = toy_data()
    data.train.x = data.train.x.clone()
    data.train.x[5] = float("nan")
    with pytest.raises(TrainingError, match=r"loss became NaN at epoch 0 step \d+; lower training.optimizer.lr"):
        Trainer(cfg_of(2), CPU).fit(mlp(), data)


def test_early_stopping_stops():
    stopper = EarlyStopping(monitor="val/accuracy", mode="max", patience=2, min_delta=10.0)  # nothing improves
    res = Trainer(cfg_of(10), CPU, [stopper]).fit(mlp(), toy_data())
    assert res.stopped_early and res.epochs_run == 3 and stopper.stopped_epoch == 2


def test_fp16_grad_scaler_and_fused_adamw_run():
    cfg = cfg_of(2, optimizer={"lr": 0.01, "fused": "on"}, system={"precision": "fp16"})
    trainer = Trainer(cfg, CPU)
    res = trainer.fit(mlp(), toy_data())
    assert trainer.scaler.is_enabled()
    assert math.isfinite(res.history[-1]["train/loss"])


def test_log_progress_one_line_per_epoch(caplog):
    caplog.set_level(logging.INFO, logger="resomap.training.progress")
    Trainer(cfg_of(3, progress="log"), CPU, run_name="toy").fit(mlp(), toy_data())
    lines = [r.getMessage() for r in caplog.records if r.name == "resomap.training.progress"]
    assert len(lines) == 3 and lines[-1].startswith("[toy] epoch 3/3 train/loss=")


def test_default_callbacks_from_config(tmp_path: Path):
    cfg = build({"training": {"checkpoint": {"top_k": 3}, "early_stopping": {"enabled": True}}})
    cbs = default_callbacks(cfg, tmp_path, {"model": "m"})
    assert [type(c).__name__ for c in cbs] == ["EarlyStopping", "TopKCheckpoint"] and cbs[1].top_k == 3


@pytest.mark.slow
def test_compile_runs():
    res = Trainer(cfg_of(1, system={"compile": True}), CPU).fit(mlp(), toy_data())
    assert math.isfinite(res.history[-1]["val/loss"])


class FakeScores:
    """Overrides val/macro_f1 with a scripted value per epoch before TopK sees it."""

    def __init__(self, scores):
        self.scores = scores

    def on_validation_end(self, trainer, metrics):
        metrics["val/macro_f1"] = self.scores[trainer.epoch]


def test_top_k_keeps_k_best_plus_last(tmp_path: Path):
    scores = [0.5, float("nan"), 0.7, 0.6, 0.4]
    topk = TopKCheckpoint(tmp_path, "val/macro_f1", "max", 2, metadata={"model": "mlp", "resolution": 8})
    res = Trainer(cfg_of(5), CPU, [topk, FakeScores(scores)]).fit(mlp(), toy_data())
    pts = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert pts == ["epoch=2-val_macro_f1=0.7000.pt", "epoch=3-val_macro_f1=0.6000.pt", "last.pt"]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [p.replace(".pt", ".json") for p in pts]
    meta = json.loads((tmp_path / "epoch=2-val_macro_f1=0.7000.json").read_text())
    assert meta["epoch"] == 2 and meta["value"] == 0.7 and meta["metric"] == "val/macro_f1"
    assert meta["model"] == "mlp" and meta["resolution"] == 8 and meta["num_classes"] == 2
    assert len(meta["config_hash"]) == 12 and "time" in meta
    assert res.best_path == tmp_path / "epoch=2-val_macro_f1=0.7000.pt" and res.best_score == 0.7
    ckpt = load_checkpoint(res.best_path, expect={"model": "mlp", "resolution": 8, "num_classes": 2})
    assert ckpt["epoch"] == 2


def test_top_k_nan_ranks_worst(tmp_path: Path):
    topk = TopKCheckpoint(tmp_path, "val/macro_f1", "min", 1)
    Trainer(cfg_of(2), CPU, [topk, FakeScores([float("nan"), 5.0])]).fit(mlp(), toy_data())
    assert [k["epoch"] for k in topk.kept] == [1]  # 5.0 beats NaN even in min mode
    assert not list(tmp_path.glob("epoch=0-*"))


def test_callback_settings_checked_up_front(tmp_path: Path):
    with pytest.raises(ConfigError, match="mode"):
        TopKCheckpoint(tmp_path, mode="best")
    with pytest.raises(ConfigError, match="top_k"):
        TopKCheckpoint(tmp_path, top_k=0)
    with pytest.raises(ConfigError, match=r"'val/f1' is not logged; available: .*val/macro_f1"):
        Trainer(cfg_of(1), CPU, [TopKCheckpoint(tmp_path, monitor="val/f1")]).fit(mlp(), toy_data())


def test_evaluate_restores_mode_and_returns_arrays():
    model = mlp()
    model.train()
    trainer = Trainer(cfg_of(1), CPU)
    metrics, y_true, y_pred, score = trainer.evaluate(model, toy_data().val, prefix="test", num_classes=2)
    assert model.training
    assert set(metrics) == {"test/loss", "test/accuracy", "test/macro_precision", "test/macro_recall", "test/macro_f1"}
    assert y_true.shape == y_pred.shape == score.shape == (24,) and y_true.dtype == np.int64
    # two classes: each image's probability of class 1, which the prediction thresholds at one half
    assert ((score >= 0) & (score <= 1)).all()
    assert np.array_equal(y_pred[np.abs(score - 0.5) > 1e-6], (score > 0.5)[np.abs(score - 0.5) > 1e-6])


def test_classification_metrics_and_figure():
    m = classification_metrics(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 1]), num_classes=3, prefix="val")
    assert m["val/accuracy"] == 0.5
    assert m["val/macro_recall"] == pytest.approx((0.5 + 1 + 0) / 3)
    fig = confusion_matrix_figure([0, 0, 1, 2], [0, 1, 1, 1], ["a", "b", "c"], title="t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1\n50%" in texts and len(texts) == 9


def _wait_for_epoch(folder: Path, proc: subprocess.Popen, epoch: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = folder / "last.json"
        if meta.exists() and json.loads(meta.read_text())["epoch"] >= epoch:
            return
        assert proc.poll() is None, "worker exited before writing last.pt"
        time.sleep(0.02)
    raise AssertionError("worker wrote no last.pt in time")


def test_sigkill_mid_epoch_then_resume_matches(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(HERE / "_train_worker.py"), str(tmp_path)]
    first = subprocess.Popen(cmd, env=env)
    # the resuming process starts now too (importing torch takes seconds) and waits for a line on stdin
    second = subprocess.Popen([*cmd, "--resume", "--wait"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        _wait_for_epoch(tmp_path, first, 1)
        time.sleep(0.1)  # into the next epoch (about 0.4 s long)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
        assert not (tmp_path / "result.json").exists()
        killed_at = load_checkpoint(tmp_path / "last.pt")["epoch"]
        assert 1 <= killed_at < _train_worker.EPOCHS - 1
        assert second.stdout.readline().strip() == b"ready"
        second.stdin.write(b"go\n")
        second.stdin.flush()
        assert second.wait(timeout=120) == 0
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["resumed"] == killed_at

    cfg, model, data = _train_worker.make_run()
    straight = Trainer(cfg, CPU).fit(model, data)
    assert stable(result["history"]) == stable(straight.history)
    assert not list(tmp_path.glob(".*.tmp"))


# ---------------------------------------------------------------- convergence record (issue 23)


def _history(values: list[float], monitor: str = "val/macro_f1") -> list[dict]:
    return [{"epoch": i, monitor: v} for i, v in enumerate(values)]


def test_convergence_flags_a_run_the_budget_or_the_cap_ended_while_improving():
    from resomap.training.convergence import convergence

    kw = {"monitor": "val/macro_f1", "mode": "max", "epochs_planned": 6, "stopped_early": False}
    rising = convergence(_history([0.5, 0.6, 0.7, 0.8, 0.85, 0.9]), **kw)
    assert rising.best_epoch == 5 == rising.last_epoch and rising.still_improving and rising.undertrained
    assert rising.stop_reason == "epoch_budget" and "still improving" in rising.undertrained_reason
    capped = convergence(_history([0.5, 0.6, 0.7, 0.8]), **{**kw, "time_capped": True})
    assert capped.stop_reason == "time_cap" and capped.undertrained and "time cap" in capped.undertrained_reason
    # a plateau is converged, even an early one (a model that did not learn is the baselines' finding)
    early = convergence(_history([0.5, 0.8, 0.7, 0.7, 0.6, 0.7]), **kw)
    assert early.best_epoch == 1 and not early.still_improving and not early.undertrained
    stopped = convergence(_history([0.5, 0.8, 0.7, 0.7]), **{**kw, "stopped_early": True, "patience": 2})
    assert stopped.stop_reason == "early_stopping" and not stopped.undertrained
    settled = convergence(_history([0.5, 0.6, 0.8, 0.9, 0.9, 0.85]), **kw)  # ties keep the earliest epoch
    assert settled.best_epoch == 3 and settled.best_value == 0.9 and not settled.undertrained
    assert settled.undertrained_reason is None
    loss = convergence(_history([0.9, 0.5, 0.4], "val/loss"), **{**kw, "monitor": "val/loss", "mode": "min"})
    assert loss.best_epoch == 2 and loss.undertrained
    nan = convergence(_history([float("nan")] * 4), **kw)
    assert nan.best_epoch is None and nan.undertrained and "never finite" in nan.undertrained_reason


def test_a_model_perfect_on_validation_at_epoch_0_is_converged():
    from resomap.training.convergence import convergence

    kw = {"monitor": "val/macro_f1", "mode": "max", "epochs_planned": 6, "stopped_early": False}
    perfect = convergence(_history([1.0, 1.0, 1.0, 1.0, 1.0, 1.0]), **kw)
    assert perfect.best_epoch == 0 and perfect.perfect and not perfect.undertrained
    last = convergence(_history([0.6, 0.8, 1.0]), **kw)  # best at the last epoch, but nothing left to gain
    assert last.still_improving and last.perfect and not last.undertrained


def test_still_improving_reads_the_smoothed_stop_monitor_over_half_the_patience():
    from resomap.training.convergence import convergence

    # the raw score peaks early by luck; the smoothed loss the stopper watches still falls at the end
    rows = [
        {"epoch": i, "val/macro_f1": f, "val/loss": loss, "val/loss_smoothed": sm}
        for i, (f, loss, sm) in enumerate(
            [(0.6, 0.7, 0.7), (0.9, 0.6, 0.65), (0.7, 0.55, 0.6), (0.75, 0.5, 0.55), (0.8, 0.45, 0.5)]
        )
    ]
    kw = {"monitor": "val/macro_f1", "mode": "max", "epochs_planned": 5, "stopped_early": False}
    rec = convergence(rows, **kw, patience=4, stop_monitor="val/loss", stop_mode="min")
    assert rec.best_epoch == 1 and rec.still_improving and rec.undertrained and "val/loss" in rec.undertrained_reason
    flat = [dict(r, **{"val/loss_smoothed": 0.5 if i >= 1 else 0.7}) for i, r in enumerate(rows)]
    rec = convergence(flat, **kw, patience=4, stop_monitor="val/loss", stop_mode="min")
    assert not rec.still_improving and not rec.undertrained  # its best (epoch 1) is 4 epochs back: past half of 4


def test_a_schedule_annealed_to_its_end_is_converged_and_a_real_climb_is_not():
    """The smoothed val/loss of a cosine schedule's last epochs (tiny_cnn@64 on ELPV, 30 epochs): its best is in the
    last window but only 0.1% below the best before it: converged at the default tolerance 0.005, flagged at 0."""
    from resomap.training.convergence import convergence

    tail = [0.4856, 0.4869, 0.4853, 0.4858, 0.486, 0.4849, 0.4824, 0.4811, 0.4812, 0.4805, 0.4807, 0.4813]
    rows = [{"epoch": i, "val/macro_f1": 0.75, "val/loss": v, "val/loss_smoothed": v} for i, v in enumerate(tail)]
    kw = {"monitor": "val/macro_f1", "mode": "max", "epochs_planned": 12, "stopped_early": False, "patience": 8}
    kw |= {"stop_monitor": "val/loss", "stop_mode": "min"}
    annealed = convergence(rows, **kw, tolerance=0.005)
    assert not annealed.still_improving and not annealed.undertrained
    assert convergence(rows, **kw, tolerance=0.0).undertrained  # any improvement counts: flagged
    climbing = [dict(r, **{"val/loss_smoothed": 0.49 - 0.004 * i}) for i, r in enumerate(rows)]
    rec = convergence(climbing, **kw, tolerance=0.005)  # 3.5% below the best before the last 4 epochs
    assert rec.still_improving and rec.undertrained and "by more than 0.5%" in rec.undertrained_reason


def test_early_stopping_smooths_the_monitor_and_waits_for_min_epochs():
    class Stub:
        epoch, should_stop = 0, False

    stopper = EarlyStopping(monitor="val/loss", mode="min", patience=2, smoothing=0.5, min_epochs=5)
    trainer, seen = Stub(), []
    for epoch, loss in enumerate([1.0, 0.5, 2.0, 0.6, 0.7, 0.8, 0.9]):
        trainer.epoch = epoch
        metrics = {"val/loss": loss}
        stopper.on_validation_end(trainer, metrics)
        seen.append(metrics["val/loss_smoothed"])
        if trainer.should_stop:
            break
    assert seen[:3] == [1.0, 0.75, 1.375]  # 0.5 x new + 0.5 x old
    # no improvement of the smoothed loss after epoch 1, but no stop before 5 epochs ran
    assert trainer.epoch == 4 and stopper.stopped_epoch == 4
    state = stopper.state_dict()
    again = EarlyStopping(monitor="val/loss", mode="min", patience=2, smoothing=0.5, min_epochs=5)
    again.load_state_dict(state)
    assert again.smoothed == stopper.smoothed and again.wait == stopper.wait


def test_the_time_cap_ends_a_fit_between_epochs_and_says_so():
    cfg = cfg_of(50, max_minutes=1e-9)  # any epoch passes it
    res = Trainer(cfg, CPU).fit(mlp(), toy_data())
    assert len(res.history) == 1 and res.convergence.stop_reason == "time_cap"
    assert all("val/time_s" in h for h in res.history)


def test_fit_records_convergence_with_the_early_stopping_reason():
    cfg = cfg_of(10, checkpoint={"monitor": "val/accuracy", "mode": "max"})
    stopper = EarlyStopping(monitor="val/accuracy", mode="max", patience=2, min_delta=10.0)  # nothing improves
    res = Trainer(cfg, CPU, [stopper]).fit(mlp(), toy_data())
    conv = res.convergence
    assert conv.stop_reason == "early_stopping" and conv.epochs_run == 3 and conv.epochs_planned == 10
    assert "did not improve for 2 epochs" in conv.stop_detail and conv.monitor == "val/accuracy"
    best = max(range(3), key=lambda e: (res.history[e]["val/accuracy"], -e))
    assert conv.best_epoch == best and conv.still_improving == (best == 2)
    assert conv.to_dict()["undertrained"] == conv.undertrained
    budget = Trainer(cfg_of(2), CPU).fit(mlp(), toy_data()).convergence
    assert budget.stop_reason == "epoch_budget" and "training.epochs=2" in budget.stop_detail
