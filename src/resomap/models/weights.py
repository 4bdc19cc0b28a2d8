"""Input-channel handling (grayscale adapt / repeat) and pretrained weights from a local file (never downloaded)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from resomap.checkpoint_files import check as check_file
from resomap.errors import CheckpointError, ModelError
from resomap.models.backbones import efficientnet_pytorch_to_timm, is_efficientnet_pytorch

log = logging.getLogger(__name__)

_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP / torch.compile state-dict prefixes


def first_conv_name(model: nn.Module) -> str:
    """Dotted name of the first Conv2d in module order (the input convolution)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            return name
    raise ModelError(
        f"{type(model).__name__} has no Conv2d to adapt to the input channels; use models.grayscale=repeat"
    )


def adapt_input_conv_(model: nn.Module, in_channels: int, conv_name: str | None = None) -> nn.Module:
    """Make the input conv take `in_channels` channels in place; its weights are summed / tiled by timm's rule."""
    conv = model.get_submodule(conv_name or first_conv_name(model))
    if conv.in_channels == in_channels:
        return model
    if conv.groups != 1:
        raise ModelError(f"the input conv of {type(model).__name__} is grouped; use models.grayscale=repeat")
    from timm.models import adapt_input_conv

    with torch.no_grad():
        weight = adapt_input_conv(in_channels, conv.weight.detach().clone())
    conv.weight = nn.Parameter(weight)
    conv.in_channels = in_channels
    return model


def _repeat_to_rgb(_module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: a 1-channel batch is repeated to 3 channels; module level so the model pickles."""
    x = args[0]
    if x.dim() == 4 and x.shape[1] == 1:
        return (x.expand(-1, 3, -1, -1), *args[1:])
    return args


def add_grayscale_repeat(model: nn.Module) -> nn.Module:
    """'repeat' mode: the model stays 3-channel and its module tree unchanged; 1-channel input is expanded."""
    model.register_forward_pre_hook(_repeat_to_rgb)
    return model


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from .pt/.pth (weights_only) or .safetensors; also accepts {'state_dict': ...} / {'model': ...}."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"pretrained weights file {path} does not exist; fix models.pretrained")
    if path.suffix != ".safetensors":  # its format and pickled globals first (resomap.checkpoint_files)
        check_file(path, "pretrained weights")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path), device="cpu")
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors have many types; all mean the same to the user
        raise CheckpointError(
            f"cannot read pretrained weights {path} ({type(exc).__name__}); give a state_dict file"
        ) from exc
    for key in ("state_dict", "model_state", "model"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path} is not a state_dict (a mapping of names to tensors); save model.state_dict()")
    state = {}
    for key, value in obj.items():
        for prefix in _WRAPPER_PREFIXES:
            key = key.removeprefix(prefix)
        state[key] = value
    return state


def head_prefix(model: nn.Module, num_classes: int) -> str | None:
    """Name of the classifier head: the last Linear (or 1x1 Conv2d) with num_classes outputs."""
    found = None
    for name, module in model.named_modules():
        if (isinstance(module, nn.Linear) and module.out_features == num_classes) or (
            isinstance(module, nn.Conv2d) and module.out_channels == num_classes
        ):
            found = name
    return found


def load_pretrained(model: nn.Module, path: str | Path, num_classes: int, input_conv: str | None = None) -> None:
    """Load a local state dict into `model`; a head of another class count is skipped, anything else must match."""
    from timm.models import adapt_input_conv

    state = read_state_dict(path)
    own = model.state_dict()
    if is_efficientnet_pytorch(state) and isinstance(getattr(model, "blocks", None), nn.Sequential):
        # EfficientNet-PyTorch's layout (the Lite weight packages') onto timm's EfficientNet
        state = efficientnet_pytorch_to_timm(state, [len(stage) for stage in model.blocks])
        if not any(k.startswith("classifier.") for k in own):  # a backbone without a classifier
            state = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    head = head_prefix(model, num_classes)
    conv_key = f"{input_conv}.weight" if input_conv else None
    skipped, bad = [], []
    for key, value in list(state.items()):
        if key not in own or own[key].shape == value.shape:
            continue
        if key == conv_key and value.dim() == 4 and value.shape[0] == own[key].shape[0]:
            state[key] = adapt_input_conv(own[key].shape[1], value.float()).to(value.dtype)
        elif head is not None and key.startswith(head + "."):
            skipped.append(key)
            del state[key]
        else:
            bad.append(f"{key} {tuple(value.shape)} vs {tuple(own[key].shape)}")
    missing = [k for k in own if k not in state and k not in skipped]
    unexpected = [k for k in state if k not in own]
    if bad or missing or unexpected:
        detail = "; ".join(
            part
            for part in (
                f"shape mismatch: {', '.join(bad[:3])}" if bad else "",
                f"missing: {', '.join(missing[:3])}" if missing else "",
                f"unexpected: {', '.join(unexpected[:3])}" if unexpected else "",
            )
            if part
        )
        raise CheckpointError(f"pretrained weights {path} do not fit {type(model).__name__} ({detail}); check the file")
    model.load_state_dict(state, strict=False)
    if skipped:
        log.info("pretrained %s: head %s skipped (other number of classes than %d)", path, head, num_classes)
    log.info("loaded pretrained weights from %s", path)
