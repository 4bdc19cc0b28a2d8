"""Tests of resomap.profiling on CPU with a tiny CNN and torchvision models (random weights)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from resomap.errors import ConfigError, DeviceError, UnknownNameError
from resomap.profiling import (
    ModelProfile,
    count_flops,
    count_macs,
    count_ops,
    load_profile,
    print_profiling_report,
    profile,
    run_benchmark,
    save_benchmark,
    save_profile,
)
from resomap.profiling import bench as bench_mod
from resomap.profiling.memory import forward_memory, is_oom
from resomap.profiling.options import OPTIONS, CheckpointedSequential, backend_flags, enable_grad_checkpointing
from resomap.profiling.timing import time_calls

ROOT = Path(__file__).resolve().parents[1]


def tiny_cnn(classes: int = 4, channels: int = 3) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, classes),
    )


@pytest.fixture(scope="module")
def tiny_profile() -> ModelProfile:
    return profile(tiny_cnn(), 32, in_channels=3, device="cpu", batch_size=2, warmup=2, iters=12, train_iters=3)


def test_resnet50_params_and_macs_match_published_figures():
    model = torchvision.models.resnet50(weights=None).eval()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    macs = count_macs(model, torch.randn(1, 3, 224, 224))
    assert macs == pytest.approx(4.11e9, rel=0.01)  # fvcore's published resnet50 figure (1 MAC per mul-add)


def test_tiny_cnn_macs_scale_with_resolution_squared():
    model = tiny_cnn().eval()
    m32, m64 = (count_macs(model, torch.randn(1, 3, r, r)) for r in (32, 64))
    # only the 16x4 linear layer does not grow with the image; it is < 1% of the total here
    assert m64 / m32 == pytest.approx(4.0, rel=0.02)


def test_resnet18_macs_scale_with_resolution_squared_except_the_classifier():
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    m32, m64 = (count_macs(model, torch.randn(1, 3, r, r)) for r in (32, 64))
    # every conv map halves exactly from 64 to 32 px, so conv work scales by 4; the fc (512 x 10 MACs, fixed)
    # and adaptive pool (512 x side^2 adds) are what keeps the ratio below 4: about 3.99 here
    fixed = 512 * 10
    expected = (4 * (m32 - fixed) + fixed) / m32
    assert m64 / m32 == pytest.approx(expected, rel=0.005)
    assert 3.9 < m64 / m32 <= 4.0


@pytest.mark.parametrize("make", [tiny_cnn, lambda: torchvision.models.resnet18(weights=None, num_classes=10)])
def test_flops_are_twice_the_macs_for_conv_nets(make):
    counts = count_ops(make(), torch.randn(1, 3, 64, 64))
    assert counts.flops == pytest.approx(count_flops(make().eval(), torch.randn(1, 3, 64, 64)))
    assert counts.ratio == pytest.approx(1.0, abs=0.05)


def test_profile_latency_percentiles_are_ordered(tiny_profile):
    lat = tiny_profile.latency
    assert lat.iters == 12
    assert 0 < lat.min_ms <= lat.median_ms <= lat.p90_ms <= lat.p99_ms <= lat.max_ms
    assert lat.std_ms >= 0 and math.isfinite(lat.std_ms)
    assert tiny_profile.inference_images_per_s > 0 and tiny_profile.train_images_per_s > 0
    assert tiny_profile.train_batch_size == 8  # max(batch_size, 8)


def test_profile_counts_params_and_reports_per_image_macs(tiny_profile):
    model = tiny_cnn()
    assert tiny_profile.params_total == sum(p.numel() for p in model.parameters())
    assert tiny_profile.macs == pytest.approx(count_macs(model.eval(), torch.randn(1, 3, 32, 32)))
    assert tiny_profile.memory.method == "cpu_rss_sampler"
    assert tiny_profile.device == "cpu" and tiny_profile.torch_version == torch.__version__
    assert tiny_profile.task == "classification"  # [B, C] logits: one label per image, cross-entropy


def test_profile_restores_mode_and_requires_grad_and_leaves_weights_alone():
    model = tiny_cnn().train()
    model[1].eval()  # a mixed state must come back exactly
    model[0].weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    grads = [p.requires_grad for p in model.parameters()]
    result = profile(model, 16, in_channels=3, device="cpu", warmup=1, iters=2, train_iters=2)
    assert [m.training for m in model.modules()] == modes
    assert [p.requires_grad for p in model.parameters()] == grads
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # training ran on a copy
    assert result.params_trainable == result.params_total - model[0].weight.numel()


def test_profile_json_round_trips_and_metrics_are_flat_floats(tiny_profile, tmp_path):
    txt, js = save_profile(tiny_profile, tmp_path / "out")
    assert load_profile(js) == tiny_profile
    assert "MACs" in txt.read_text() and "p99" in txt.read_text()
    assert print_profiling_report(tiny_profile) == txt.read_text()
    assert not list((tmp_path / "out").glob("*.tmp"))
    metrics = tiny_profile.as_metrics(prefix="profile/")
    assert all(k.startswith("profile/") and isinstance(v, float) for k, v in metrics.items())
    assert metrics["profile/latency_p90_ms"] == tiny_profile.latency.p90_ms
    assert metrics["profile/params_total"] == float(tiny_profile.params_total)


def test_profile_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="precision"):
        profile(tiny_cnn(), 32, in_channels=3, device="cpu", precision="fp8")
    with pytest.raises(ConfigError, match="resolution"):
        profile(tiny_cnn(), 0, in_channels=3, device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="cpu"):
            profile(tiny_cnn(), 32, in_channels=3, device="cuda")


def test_time_calls_times_each_call():
    calls = []
    seconds = time_calls(lambda: calls.append(1), torch.device("cpu"), warmup=3, iters=5)
    assert len(calls) == 8 and len(seconds) == 5 and all(s >= 0 for s in seconds)


def test_cpu_rss_sampler_sees_a_large_allocation():
    stats = forward_memory(nn.Identity(), lambda: torch.ones(32 * 2**20).add_(1), torch.device("cpu"))
    assert stats.peak_mb > 100  # 128 MB tensor, touched page by page


def test_run_benchmark_on_cpu_measures_skips_and_saves(tmp_path):
    opts = ["baseline", "channels_last", "amp_bf16", "cuda_graphs", "fused_adamw"]
    report = run_benchmark(
        tiny_cnn(), 32, in_channels=3, num_classes=4, options=opts, batch_sizes=[2, 4], devices=["cpu"], iters=2,
        warmup=1,
    )  # fmt: skip
    assert [e.batch_size for e in report.section("batch_sizes")] == [2, 4]
    assert all(e.status == "ok" and e.train_images_per_s > 0 for e in report.section("batch_sizes"))
    by_name = {e.option: e for e in report.section("options")}
    assert list(by_name) == opts and report.options_batch_size == 4
    for name in ("baseline", "channels_last", "amp_bf16", "fused_adamw"):
        entry = by_name[name]
        assert entry.status == "ok", entry.reason
        assert entry.infer_images_per_s > 0 and entry.train_images_per_s > 0 and entry.train_peak_mb is not None
        assert entry.ratios["infer_x"] == pytest.approx(
            entry.infer_images_per_s / by_name["baseline"].infer_images_per_s
        )
    assert by_name["baseline"].ratios["train_x"] == 1.0
    assert by_name["cuda_graphs"].status == "skipped" and "CUDA" in by_name["cuda_graphs"].reason
    js, table = save_benchmark(report, tmp_path)
    data = json.loads(js.read_text())
    assert {e["option"] for e in data["entries"]} == set(opts)
    text = table.read_text()
    assert "channels_last" in text and "needs CUDA" in text and text == report.table()


def test_failing_option_is_reported_and_others_still_run(monkeypatch):
    real = bench_mod.prepare_model

    def prepare(model, setup):
        if setup.channels_last:
            raise RuntimeError("broken kernel\nsecond line")
        return real(model, setup)

    monkeypatch.setattr(bench_mod, "prepare_model", prepare)
    report = run_benchmark(
        tiny_cnn(), 16, in_channels=3, num_classes=4, options=["channels_last", "fused_adamw"], iters=1, warmup=0
    )
    by_name = {e.option: e for e in report.section("options")}
    assert by_name["channels_last"].status == "failed"
    assert by_name["channels_last"].reason == "RuntimeError: broken kernel"
    assert by_name["fused_adamw"].status == "ok"


def test_batch_sweep_stops_growing_after_out_of_memory(monkeypatch):
    def fake_measure(model, option, device, bs, case):
        if bs >= 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return {"infer_images_per_s": 10.0 * bs, "train_images_per_s": 1.0 * bs}

    monkeypatch.setattr(bench_mod, "_measure", fake_measure)
    report = run_benchmark(tiny_cnn(), 16, in_channels=3, num_classes=4, batch_sizes=[1, 2, 4, 8], iters=1)
    sizes = report.section("batch_sizes")
    assert [(e.batch_size, e.status) for e in sizes] == [(1, "ok"), (2, "ok"), (4, "oom")]
    assert is_oom(RuntimeError("CUDA error: out of memory")) and not is_oom(RuntimeError("shape mismatch"))


def test_devices_without_cuda_are_skipped_with_a_reason(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench_mod, "_measure", lambda *a: {"infer_images_per_s": 1.0, "train_images_per_s": 1.0})
    report = run_benchmark(tiny_cnn(), 16, in_channels=3, num_classes=4, devices=["cpu", "cuda"], iters=1)
    skipped = [e for e in report.section("devices") if e.device == "cuda"]
    assert skipped and skipped[0].status == "skipped" and "CUDA" in skipped[0].reason
    with pytest.raises(ConfigError, match="device"):
        run_benchmark(tiny_cnn(), 16, in_channels=3, num_classes=4, devices=["tpu"])


def test_device_ratio_is_cuda_over_cpu(monkeypatch):
    def fake_measure(model, option, device, bs, case):
        speed = 30.0 if device.type == "cuda" else 10.0
        return {"infer_images_per_s": speed * bs, "train_images_per_s": speed}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_mod, "describe_device", lambda d: str(d))
    monkeypatch.setattr(bench_mod, "free_memory", lambda d: None)
    monkeypatch.setattr(bench_mod, "_measure", fake_measure)
    report = run_benchmark(tiny_cnn(), 16, in_channels=3, num_classes=4, batch_sizes=[1, 2], devices=["cpu", "cuda"])
    ratios = report.section("devices")
    assert [e.batch_size for e in ratios] == [1, 2]
    assert all(e.ratios["infer_x"] == pytest.approx(3.0) for e in ratios)
    assert "cuda / cpu" in report.table()


def test_unknown_option_suggests_a_close_name():
    with pytest.raises(UnknownNameError, match="channels_last"):
        run_benchmark(tiny_cnn(), 16, in_channels=3, num_classes=4, options=["chanels_last"])


def test_backend_flags_are_restored_even_after_an_error():
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    setup = OPTIONS.get("cudnn_benchmark_tf32").setup
    with pytest.raises(ValueError), backend_flags(setup, torch.device("cuda")):
        assert torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32
        raise ValueError("inside")
    now = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    assert now == saved


def test_grad_checkpointing_of_a_sequential_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = tiny_cnn().train()
    wrapped = enable_grad_checkpointing(tiny_cnn().train())
    assert isinstance(wrapped, CheckpointedSequential)
    wrapped.seq.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 16, 16)
    plain(x).sum().backward()
    wrapped(x).sum().backward()
    assert torch.allclose(plain[0].weight.grad, wrapped.seq[0].weight.grad, atol=1e-5)


def test_profiling_config_section_loads():
    from resomap.config import load

    cfg = load(ROOT / "configs")
    assert cfg.profiling.iters >= 1 and cfg.profiling.batch_size >= 1


def test_bench_command_prints_json_and_writes_files(tmp_path, monkeypatch, capsys):
    from resomap.cli import main

    monkeypatch.chdir(tmp_path)  # no configs/ here: the defaults apply
    argv = ["bench", "--model", "tiny_cnn", "--resolution", "16", "--num-classes", "4", "--batch-sizes", "1",
            "--devices", "cpu", "--iters", "1", "--warmup", "1", "--json", "--compare-opts", "fused_adamw",
            "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads(out[: out.rindex("}") + 1])
    assert data["model_name"] == "tiny_cnn" and {e["option"] for e in data["entries"]} == {"baseline", "fused_adamw"}
    assert (tmp_path / "out" / "benchmark.json").exists()


def test_benchmark_script_is_the_bench_command():
    script = (ROOT / "scripts/benchmark_performance.py").read_text()
    assert 'main(["bench", *sys.argv[1:]])' in script


def test_profile_command_json(tmp_path, monkeypatch, capsys):
    from resomap.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["profile", "--model", "tiny_cnn", "--resolution", "32", "--in-channels", "1", "--num-classes", "2",
            "--json", "profiling.iters=3", "profiling.warmup=1"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads(out[out.index("{") :])
    assert data["resolution"] == 32 and data["params_total"] > 0 and data["latency"]["iters"] == 3


@pytest.mark.slow
def test_resnet50_full_profile():
    result = profile(torchvision.models.resnet50(weights=None), 224, in_channels=3, device="cpu", warmup=0, iters=2,
                     train_batch_size=2, train_iters=1)  # fmt: skip
    assert result.params_total == 25_557_032 and result.gmacs == pytest.approx(4.11, rel=0.01)
    assert result.flops_to_2macs == pytest.approx(1.0, abs=0.05)


@pytest.mark.slow
def test_compile_option_runs_on_cpu():
    report = run_benchmark(tiny_cnn(), 16, in_channels=3, num_classes=4, options=["compile"], iters=2, warmup=1)
    entry = report.get("options", "cpu", "compile", 1)
    assert entry.status == "ok", entry.reason
    assert entry.ratios["infer_x"] > 0


def test_profile_refuses_a_resolution_whose_activations_cannot_fit_before_any_forward_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    """`resomap profile --model resnet18 --resolution 8192`: refused from a 32 px forward scaled by area, in one line,
    exit 2, in about a second once torch is loaded, without the forward at 8192 px that took about a minute
    (check_input_size is not reached) and without printing the device and precision first."""
    import time

    from resomap import models
    from resomap.cli import main
    from resomap.profiling import fits

    monkeypatch.chdir(tmp_path)
    # whatever this machine has free; 9 GB: one fp32 inference image at 8192 px (about 8.6 GB where the CPU has no
    # native bf16, half that with it) fits, a training batch of 8 does not, on either kind of CPU
    monkeypatch.setattr(fits, "available_bytes", lambda device: 9 * 10**9)

    def no_forward_at_the_side(*args, **kwargs):
        raise AssertionError("check_input_size ran a forward at the full side")

    monkeypatch.setattr(models, "check_input_size", no_forward_at_the_side)
    start = time.perf_counter()
    code = main(["profile", "--model", "resnet18", "--resolution", "8192", "system.threads=1"])
    seconds = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith("resomap: error: resnet18 at 8192 px: one training batch of 8 needs about ")
    assert "more than the 9.0 GB free on cpu; use a smaller resolution" in err
    assert seconds < 10, seconds  # about 0.6 s on a busy 2-core machine
