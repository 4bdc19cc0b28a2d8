"""Whether a model's activations at a resolution can fit in the memory there is, estimated before anything runs.

One forward of one small probe image (at most 32 px, eval mode, no gradients) records the size of every leaf
module's output; activations of a convolutional network grow with the pixel count, so the sizes scale by
(resolution / probe side)^2. A training step keeps roughly every output for the backward pass (their sum); an
inference step needs about the largest output and its input (twice the largest). The estimate leaves out the
weights, optimizer state, workspace and the allocator's slack, so it errs low: a resolution it refuses would not
have run, and one it passes may still run out of memory later (the trial then fails with the allocator's error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from torch import nn

from resomap.errors import DeviceError

PROBE_SIDE = 32


@dataclasses.dataclass(frozen=True)
class ActivationSizes:
    """Elements per image at the probe side: every leaf module's output summed, and the largest one."""

    side: int
    total: int
    largest: int

    def bytes(self, resolution: int, batch: int, element_size: int, training: bool) -> int:
        scale = (resolution / self.side) ** 2
        per_image = self.total if training else 2 * self.largest
        return int(per_image * scale * batch * element_size)


def activation_sizes(model: nn.Module, in_channels: int, side: int = PROBE_SIDE) -> ActivationSizes | None:
    """The model's activation sizes from one probe forward on the CPU; None when the model does not run at that
    side (a model with a fixed input size): then nothing is estimated."""
    kept: list[torch.Tensor] = []  # held until the end, so no address is reused and counted twice
    seen: set[int] = set()

    def hook(_module: nn.Module, _inputs: object, out: object) -> None:
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:  # an in-place op returns its input
                seen.add(t.data_ptr())
                kept.append(t)

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    modes = [(m, m.training) for m in model.modules()]  # a mixed train/eval state comes back as it was
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, in_channels, side, side, device=device))
    except Exception:  # the model refuses this side: no estimate
        return None
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes:
            m.training = mode
    sizes = [t.numel() for t in kept]
    return ActivationSizes(side, sum(sizes), max(sizes)) if sizes else None


def available_bytes(device: torch.device | str) -> int:
    """Memory free now: the GPU's (torch.cuda.mem_get_info) or the machine's available RAM (psutil)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def check_fits(
    name: str,
    model: nn.Module,
    *,
    in_channels: int,
    resolutions: Iterable[int],
    batches: dict[str, int],
    precision: str,
    device: torch.device | str,
    settings: str,
) -> None:
    """DeviceError (one line, exit 2) when, at some resolution, a batch of `model` needs more activation memory
    than `device` has free; `batches` maps what the batch is for ('training', or anything run without gradients:
    'evaluation', 'inference') to its size. `settings` names what to lower besides the resolution."""
    sizes = activation_sizes(model, in_channels)
    if sizes is None:
        return
    element = 2 if precision in ("bf16", "fp16") else 4
    free = available_bytes(device)
    for r in sorted(set(resolutions), reverse=True):
        for what, batch in batches.items():
            need = sizes.bytes(r, batch, element, training=what == "training")  # evaluation, inference: no grad
            if need > free:
                raise DeviceError(
                    f"{name} at {r} px: one {what} batch of {batch} needs about {_gb(need)} of activations "
                    f"({precision}, estimated from a {sizes.side} px forward), more than the {_gb(free)} free on "
                    f"{torch.device(device).type}; use a smaller resolution (or {settings})"
                )


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
