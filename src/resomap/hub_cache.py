"""Where the ecosystem's weight caches are, without importing torch, timm or huggingface_hub: the Hugging Face hub
cache and torch's hub folder, resolved from the environment as those libraries resolve them (their own constants
are read when they are imported; tests and users set the variables later). resomap.models.hub locates weights in
them; the preflight (resomap.cli.preflight) refuses an offline model with nothing cached before torch is imported."""

from __future__ import annotations

import os
from pathlib import Path

TIMM_FETCH = "python -c \"import timm; timm.create_model('{arch}', pretrained=True)\""  # fetches timm's weights


def offline() -> bool:
    """HF_HUB_OFFLINE, read when asked (not when huggingface_hub was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hf_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub resolves it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def torch_hub() -> Path:
    """torch.hub.get_dir(): $TORCH_HOME/hub, else $XDG_CACHE_HOME/torch/hub, else ~/.cache/torch/hub."""
    home = os.environ.get("TORCH_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "torch")
    return Path(home).expanduser() / "hub"


def offline_message(model: str, where: str, fetch: str) -> str:
    """The one line for weights not on this machine while HF_HUB_OFFLINE forbids fetching them."""
    return (
        f"{model}: no pretrained weights in {where} and HF_HUB_OFFLINE is set, so nothing is downloaded; on a "
        f"connected machine run: {fetch} (or unset HF_HUB_OFFLINE)"
    )


def timm_surely_missing(arch: str) -> bool:
    """Whether no cache can hold timm's weights of `arch`: no Hugging Face repo named after it (any owner) and
    no file in torch's hub checkpoints. False means timm has to be asked (seconds: it imports torch)."""
    checkpoints = torch_hub() / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        return False
    cache, name = hf_cache(), arch.lower()
    if not cache.is_dir():
        return True
    return not any(entry.name.startswith("models--") and name in entry.name.lower() for entry in cache.iterdir())
