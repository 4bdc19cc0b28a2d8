"""system.precision: auto picks bf16 where the hardware computes it natively (detected, never guessed), fp32
elsewhere; it is decided once per sweep, every trial runs, records and is keyed by the same precision, and a
sweep finished at one precision is never taken for the other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import trial_summary
from resomap import runtime
from resomap.cli import main
from resomap.config import load
from resomap.sweep import Trial, plan
from resomap.sweep.identity import pin_precision, trial_key


def _cfg(*overrides: str):
    return load("configs", "smoke", list(overrides))


@pytest.fixture
def cpu_without_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cpu_bf16_feature", lambda: None)


@pytest.fixture
def cpu_with_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cpu_bf16_feature", lambda: "avx512_bf16")


def test_cpu_flags_name_the_native_bf16_feature():
    assert runtime.bf16_flag("flags\t\t: fpu sse avx512f avx512_bf16 avx512_vnni\n") == "avx512_bf16"
    assert runtime.bf16_flag("flags : fpu amx_tile amx_bf16 avx512_bf16\n") == "amx_bf16"
    assert runtime.bf16_flag("flags : fpu sse avx2 avx512f avx512bw\n") is None  # AVX-512 alone emulates bf16
    assert runtime.bf16_flag("") is None


def test_auto_follows_the_hardware_and_explicit_values_stay(cpu_with_bf16):
    assert runtime.resolve_precision("auto", "cpu")[0] == "bf16"
    assert "avx512_bf16" in runtime.resolve_precision("auto", "cpu")[1]
    for explicit in ("fp32", "bf16", "fp16"):
        assert runtime.resolve_precision(explicit, "cpu") == (explicit, "set in the config")
    assert runtime.autocast_dtype("auto", "cpu") is torch.bfloat16
    assert runtime.autocast_dtype("fp32", "cpu") is None


def test_auto_is_fp32_without_native_bf16(cpu_without_bf16):
    precision, why = runtime.resolve_precision("auto", "cpu")
    assert precision == "fp32" and "no native bf16" in why
    assert runtime.autocast_dtype("auto") is None


def test_every_trial_of_a_sweep_gets_the_same_resolved_precision(project: Path, cpu_with_bf16):
    cfg = _cfg("sweep.models=[tiny_cnn,simple_cnn]", "sweep.resolutions=[16,24]", "sweep.seeds=[1,2]")
    assert cfg.system.precision == "auto"
    precisions = {t.cfg.system.precision for t in plan(cfg)}
    assert precisions == {"bf16"}


def test_the_resolved_precision_is_part_of_the_trial_key(project: Path, monkeypatch: pytest.MonkeyPatch):
    fp32_key = Trial("tiny_cnn", 32, 42, _cfg("system.precision=fp32")).key
    bf16_key = Trial("tiny_cnn", 32, 42, _cfg("system.precision=bf16")).key
    assert fp32_key != bf16_key  # a sweep finished in fp32 is not reused by bf16 trials, nor the reverse
    monkeypatch.setattr(runtime, "cpu_bf16_feature", lambda: None)
    assert Trial("tiny_cnn", 32, 42, _cfg()).key == fp32_key  # auto -> fp32 keeps the keys of fp32 runs
    monkeypatch.setattr(runtime, "cpu_bf16_feature", lambda: "amx_bf16")
    assert Trial("tiny_cnn", 32, 42, _cfg()).key == bf16_key
    # the key of an unpinned config is never used: a Trial pins it first
    assert trial_key(_cfg(), "tiny_cnn", 32, 42) not in (fp32_key, bf16_key)
    assert pin_precision(_cfg()).system.precision == "bf16"


def test_a_trial_records_its_precision_and_the_cli_prints_it(project: Path, capsys, cpu_with_bf16):
    args = ["train", "--model", "tiny_cnn", "--resolution", "16", "--preset", "smoke", "mlflow.enabled=false"]
    args += ["explainability.enabled=false", "profiling.enabled=false", "data.synthetic.num_images=48"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "precision: bf16 (auto: native bf16 on this CPU, avx512_bf16)" in out
    result = json.loads((trial_summary(project, "tiny_cnn", 16) / "result.json").read_text())
    assert result["environment"]["precision"] == "bf16"
    saved = (trial_summary(project, "tiny_cnn", 16) / "config.yaml").read_text()
    assert "precision: bf16" in saved


def test_channels_last_auto_goes_with_reduced_precision(project: Path, cpu_with_bf16):
    assert runtime.resolve_channels_last("auto", "bf16") and runtime.resolve_channels_last("auto", "fp16")
    assert not runtime.resolve_channels_last("auto", "fp32")
    assert runtime.resolve_channels_last(True, "fp32") and not runtime.resolve_channels_last(False, "bf16")
    sysc = pin_precision(_cfg()).system
    assert (sysc.precision, sysc.channels_last) == ("bf16", True)
    sysc = pin_precision(_cfg("system.precision=fp32")).system
    assert (sysc.precision, sysc.channels_last) == ("fp32", False)  # the settings (and keys) of fp32 runs before


def test_a_channels_last_profile_leaves_the_callers_model_alone():
    from resomap.config import load as load_cfg
    from resomap.models import build_model
    from resomap.profiling import profile

    model, _ = build_model("tiny_cnn", 2, 1, load_cfg(None).models)
    prof = profile(model, 16, in_channels=1, device="cpu", precision="auto", iters=2, warmup=1, rounds=1,
                   channels_last=True)  # fmt: skip
    assert prof.channels_last and prof.precision in ("bf16", "fp32")
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous()  # NCHW as it was


def test_a_sweep_logs_its_precision_to_mlflow(project: Path, capsys, cpu_with_bf16):
    from mlflow import MlflowClient

    args = ["sweep", "--preset", "smoke", "explainability.enabled=false", "profiling.enabled=false"]
    assert main([*args, "data.synthetic.num_images=48", "sweep.resolutions=[16]"]) == 0
    assert "precision: bf16 (auto: native bf16 on this CPU, avx512_bf16); every trial" in capsys.readouterr().out
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    (parent,) = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    setting = parent.data.tags  # the parent's settings are tags (resomap.tracking.parent.SETTING_TAG)
    assert setting["resomap.setting.system.precision"] == "bf16"
    assert setting["resomap.setting.system.channels_last"] == "True"
    (child,) = client.search_runs([exp], "tags.`resomap.kind` != 'sweep'")
    assert child.data.tags["resomap.env.precision"] == "bf16"
    # the trial's whole config is its config.yaml artifact (its params are what identifies it)
    import yaml

    saved = client.download_artifacts(child.info.run_id, "config.yaml", str(project))
    assert yaml.safe_load(Path(saved).read_text())["system"]["precision"] == "bf16"
