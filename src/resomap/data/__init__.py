"""Datasets, stratified splits, the per-resolution cache (uint8; uint16 for images deeper than 8 bits), batched
augmentation and device loaders.

bundle = build(cfg, resolution=64, seed=42, device=device)
for epoch in range(epochs):
    bundle.train.set_epoch(epoch)
    for x, y in bundle.train: ...

The datasets, their registry, the split and the data's checks (resomap.data.verify) import no torch; the names
that need it (build, the loaders, the cache entries, augmentation) are imported when first used, so `resomap
sweep` can refuse bad data at load before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

# Importing the sources registers the built-in datasets.
from resomap.data import checks, folders, masks, sources, synthetic  # noqa: F401
from resomap.data.registry import RawDataset, get_dataset, list_datasets, open_dataset, register_dataset
from resomap.data.split import SPLITS, limit_subset, split_indices

_WITH_TORCH = {  # name -> the module that defines it (imports torch)
    "BatchAugment": "resomap.data.augment",
    "DataBundle": "resomap.data.bundle",
    "build": "resomap.data.bundle",
    "CacheEntry": "resomap.data.cache",
    "clear_memory_cache": "resomap.data.cache",
    "get_resized": "resomap.data.cache",
    "memory_cache_keys": "resomap.data.cache",
    "BatchLoader": "resomap.data.loader",
    "Normalizer": "resomap.data.loader",
}


def __getattr__(name: str) -> Any:
    if name in _WITH_TORCH:
        value = getattr(importlib.import_module(_WITH_TORCH[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'resomap.data' has no attribute {name!r}")


__all__ = [
    "SPLITS",
    "BatchAugment",
    "BatchLoader",
    "CacheEntry",
    "DataBundle",
    "Normalizer",
    "RawDataset",
    "build",
    "clear_memory_cache",
    "get_dataset",
    "get_resized",
    "limit_subset",
    "list_datasets",
    "memory_cache_keys",
    "open_dataset",
    "register_dataset",
    "split_indices",
]
