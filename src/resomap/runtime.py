"""Device selection and process-wide switches derived from `system` config (passed down, never global)."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch

from resomap.config.schema import SystemConfig
from resomap.errors import DeviceError

log = logging.getLogger(__name__)


def resolve_device(system: SystemConfig) -> torch.device:
    """auto: CUDA when available, else CPU. cuda without a GPU is a DeviceError."""
    if system.device == "cpu":
        return torch.device("cpu")
    if system.device == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                "system.device is 'cuda' but no CUDA GPU is visible; set system.device=auto or system.device=cpu"
            )
        return torch.device("cuda")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe_device(device: torch.device) -> str:
    """One line naming the device, with the GPU's name and memory on CUDA."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        return f"cuda:{idx} ({props.name}, {props.total_memory / 2**30:.1f} GiB)"
    return f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def apply_system(system: SystemConfig, device: torch.device) -> None:
    """Backend switches that torch keeps per process (threads, cudnn autotuner, TF32)."""
    if system.threads > 0:
        torch.set_num_threads(system.threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = system.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = system.tf32
        torch.backends.cudnn.allow_tf32 = system.tf32


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
