"""Operation counts per image: MACs from fvcore, FLOPs from torch.utils.flop_counter, and their cross-check.

fvcore's FlopCountAnalysis counts one fused multiply-add as one "flop", so its total is reported as MACs.
torch's FlopCounterMode counts two operations per multiply-add, so its total is reported as FLOPs. For conv
nets FLOPs / (2 * MACs) is close to 1; it drifts where only one counter handles an op (fvcore also counts
batch-norm and pooling elementwise work, FlopCounterMode only matmul/conv/attention-style ops).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

log = logging.getLogger(__name__)

RATIO_TOLERANCE = 0.10


@dataclass(frozen=True)
class OpCounts:
    macs: float  # per image (fvcore); NaN when the model cannot be traced
    flops: float  # per image (FlopCounterMode); NaN when counting failed
    ratio: float  # flops / (2 * macs)


def count_macs(model: nn.Module, x: torch.Tensor) -> float:
    """Multiply-accumulates per image of `model(x)` (fvcore FlopCountAnalysis, jit-traced)."""
    from fvcore.nn import FlopCountAnalysis

    fvcore_log = logging.getLogger("fvcore")
    level = fvcore_log.level
    fvcore_log.setLevel(logging.ERROR)  # per-op "unsupported operator" notices would flood the log
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            analysis = FlopCountAnalysis(model, x)
            analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            return float(analysis.total()) / x.shape[0]
    finally:
        fvcore_log.setLevel(level)


def count_flops(model: nn.Module, x: torch.Tensor) -> float:
    """Floating-point operations per image of `model(x)` (torch.utils.flop_counter, 2 per multiply-add)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return float(counter.get_total_flops()) / x.shape[0]


def count_ops(model: nn.Module, x: torch.Tensor) -> OpCounts:
    """MACs and FLOPs per image in eval mode (the caller restores the mode); a counter that fails gives NaN."""
    model.eval()
    macs = flops = math.nan
    try:
        macs = count_macs(model, x)
    except Exception as exc:  # tracing fails on some dynamic models; the other figures are still useful
        log.warning("fvcore could not count MACs (%s: %s); MACs set to NaN", type(exc).__name__, exc)
    try:
        flops = count_flops(model, x)
    except Exception as exc:
        log.warning("FlopCounterMode could not count FLOPs (%s: %s); FLOPs set to NaN", type(exc).__name__, exc)
    ratio = flops / (2 * macs) if macs > 0 else math.nan
    if math.isfinite(ratio) and abs(ratio - 1) > RATIO_TOLERANCE:
        log.warning(
            "FLOPs/(2*MACs) = %.3f: fvcore and FlopCounterMode disagree by more than %d%% on this model",
            ratio,
            round(RATIO_TOLERANCE * 100),
        )
    return OpCounts(macs, flops, ratio)
