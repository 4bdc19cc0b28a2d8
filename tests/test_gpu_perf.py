"""GPU checks of profiling, benchmarking and the out-of-memory retry (marker `gpu`: run by scripts/gpu_check.sh,
never in CI)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from resomap.profiling import profile, run_benchmark

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def small_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 4),
    )


def test_cuda_profile_times_with_events_and_counts_no_cpu_threads():
    prof = profile(small_cnn(), 64, in_channels=3, device="cuda", batch_size=4, warmup=3, iters=20, train_iters=5)
    assert prof.device == "cuda" and prof.memory.method == "cuda_allocator"
    assert prof.threads == 0 and prof.others_cpu_cores is None  # the CPU-oversubscription check is CPU-only
    assert 0 < prof.latency.median_low_ms <= prof.latency.median_ms <= prof.latency.median_high_ms
    assert prof.rounds == 5 and prof.train_images_per_s > 0


def test_cuda_options_are_interleaved_with_intervals():
    opts = ["baseline", "channels_last", "amp_bf16", "cudnn_benchmark_tf32", "cuda_graphs", "fused_adamw"]
    flags = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    report = run_benchmark(
        small_cnn(), 64, in_channels=3, num_classes=4, options=opts, batch_sizes=[8], devices=["cuda"], iters=10,
        warmup=2,
    )  # fmt: skip
    by_name = {e.option: e for e in report.section("options")}
    for name in opts:
        entry = by_name[name]
        if name == "amp_bf16" and entry.status == "skipped":
            continue  # a GPU without bf16
        assert entry.status == "ok", (name, entry.reason)
        lo, hi = entry.ratio_intervals["infer_x"][1:]
        assert 0 < lo <= hi
    assert by_name["cuda_graphs"].train_images_per_s is None  # inference only
    # cudnn_benchmark_tf32 sets its process-wide flags per call only (the other options ran without them)
    after = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    assert after == flags


def test_cuda_out_of_memory_is_retried_with_half_the_batch(tmp_path, monkeypatch):
    """A real CUDA out-of-memory error (an allocation of twice the GPU's memory) in the first fit at batch 32:
    the trial is retried with batch 16 x 2 accumulation steps, finishes, and says so in its notes."""
    from resomap.cli import main
    from resomap.training.trainer import Trainer

    real = Trainer._train_epoch
    provoked = []

    def provoke(self, loader, progress):
        if self.cfg.training.batch_size >= 32:
            provoked.append(self.cfg.training.batch_size)
            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.empty(total * 2, dtype=torch.uint8, device=self.device)  # raises torch.cuda.OutOfMemoryError
        return real(self, loader, progress)

    monkeypatch.setattr(Trainer, "_train_epoch", provoke)
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["-q", "sweep", "--config-dir", str(tmp_path / "configs"), "--preset", "smoke", "system.device=cuda",
            f"experiment.output_dir={tmp_path}", "training.batch_size=32", "mlflow.enabled=false",
            "profiling.enabled=false", "explainability.enabled=false"]  # fmt: skip
    assert main(argv) == 0
    assert provoked == [32]
    results = [json.loads(p.read_text()) for p in tmp_path.rglob("result.json")]
    assert results and all(r["status"] == "FINISHED" for r in results)
    notes = " ".join(n for r in results for n in r.get("notes", []))
    assert "CUDA out of memory at batch 32; retried with batch 16 x 2" in notes
