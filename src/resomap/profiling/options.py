"""Benchmark options for compare-opts: a registry of named settings, where each can run, and how it is applied.

grad_checkpointing uses, in order: resomap.models.set_grad_checkpointing, a timm-style
`model.set_grad_checkpointing(True)`, or, for an nn.Sequential model, torch.utils.checkpoint over its
top-level children (checkpoint_sequential, ~sqrt(n) segments; batch-norm running stats are then updated twice
per step, harmless for a benchmark). Other models are skipped with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

from resomap.registry import Registry


class OptionUnsupported(Exception):
    """This option cannot run for this model or device; reported as skipped with the message."""


@dataclass(frozen=True)
class Setup:
    """How one measurement runs (baseline: all off)."""

    channels_last: bool = False
    amp_dtype: torch.dtype | None = None
    compile: bool = False
    fused_adamw: bool = False
    cudnn_benchmark_tf32: bool = False
    cuda_graphs: bool = False  # inference only; no training figure
    grad_checkpointing: bool = False


@dataclass(frozen=True)
class BenchOption:
    name: str
    summary: str
    setup: Setup
    needs_cuda: bool = False


OPTIONS: Registry[BenchOption] = Registry("benchmark option", "resomap bench --help")


def _add(name: str, summary: str, needs_cuda: bool = False, **setup: object) -> None:
    OPTIONS.register(name)(BenchOption(name, summary, Setup(**setup), needs_cuda))


_add("baseline", "fp32, contiguous, eager")
_add("channels_last", "NHWC memory format for model and input", channels_last=True)
_add("amp_bf16", "autocast to bfloat16", amp_dtype=torch.bfloat16)
_add("amp_fp16", "autocast to float16 (+ GradScaler)", amp_dtype=torch.float16)
_add("compile", "torch.compile (default mode)", compile=True)
_add("fused_adamw", "AdamW(fused=True)", fused_adamw=True)
_add("cudnn_benchmark_tf32", "cudnn autotuner + TF32 matmul/conv", needs_cuda=True, cudnn_benchmark_tf32=True)
_add("cuda_graphs", "inference replayed from a captured CUDA graph", needs_cuda=True, cuda_graphs=True)
_add("grad_checkpointing", "recompute activations in backward (memory)", grad_checkpointing=True)

ALL_OPTIONS: tuple[str, ...] = tuple(OPTIONS.names())


def skip_reason(option: BenchOption, device: torch.device) -> str | None:
    """Why `option` cannot run on `device`, or None."""
    if option.needs_cuda and device.type != "cuda":
        return f"needs CUDA (device is {device.type})"
    dtype = option.setup.amp_dtype
    if dtype is None:
        return None
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        return "this GPU has no bfloat16 support"
    try:  # a tiny probe: some builds lack CPU fp16 autocast or kernels
        a = torch.randn(4, 4, device=device)
        with torch.autocast(device_type=device.type, dtype=dtype):
            out = a @ a
        if out.dtype != dtype:
            return f"autocast to {dtype} is not applied on {device.type}"
    except (RuntimeError, TypeError) as exc:
        return f"autocast {dtype} unsupported on {device.type}: {str(exc).splitlines()[0]}"
    return None


@contextmanager
def backend_flags(setup: Setup, device: torch.device) -> Iterator[None]:
    """Set the process-wide backend flags of `setup` and restore the previous values on exit."""
    if not (setup.cudnn_benchmark_tf32 and device.type == "cuda"):
        yield
        return
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        (
            torch.backends.cudnn.benchmark,
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
        ) = saved


class CheckpointedSequential(nn.Module):
    """Runs an nn.Sequential through checkpoint_sequential while training with grad enabled."""

    def __init__(self, seq: nn.Sequential):
        super().__init__()
        self.seq = seq
        self.segments = max(1, round(math.sqrt(len(seq))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return self.seq(x)
        return checkpoint_sequential(self.seq, self.segments, x, use_reentrant=False)


def enable_grad_checkpointing(model: nn.Module) -> nn.Module:
    """The model with gradient checkpointing on (see the module docstring), or OptionUnsupported."""
    try:
        from resomap.models import set_grad_checkpointing
    except ImportError:
        set_grad_checkpointing = None
    if set_grad_checkpointing is not None and set_grad_checkpointing(model, True):
        return model
    if callable(getattr(model, "set_grad_checkpointing", None)):
        model.set_grad_checkpointing(True)
        return model
    if isinstance(model, nn.Sequential) and len(model) > 1:
        return CheckpointedSequential(model)
    raise OptionUnsupported(f"{type(model).__name__} has no gradient-checkpointing support")


def prepare_model(model: nn.Module, setup: Setup) -> nn.Module:
    """Apply the model-side settings of `setup` (the model is a private copy already on its device)."""
    if setup.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if setup.grad_checkpointing:
        model = enable_grad_checkpointing(model)
    if setup.compile:
        model = torch.compile(model)
    return model


def graphed_inference(
    model: nn.Module, x: torch.Tensor, amp_dtype: torch.dtype | None, warmup: int = 3
) -> Callable[[], torch.Tensor]:
    """Capture one inference forward in a CUDA graph; the returned call replays it on the static input."""
    static_x = x.clone()
    side = torch.cuda.Stream(device=x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(warmup):  # warm-up on a side stream, as torch.cuda.graphs requires
            with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                model(static_x)
    torch.cuda.current_stream(x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    amp = torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None, cache_enabled=False)
    with torch.cuda.graph(graph), torch.inference_mode(), amp:  # cached casts would be freed after capture
        static_out = model(static_x)

    def replay() -> torch.Tensor:
        graph.replay()
        return static_out

    return replay
