"""Datasets, stratified splits, the per-resolution uint8 cache, batched augmentation and device loaders.

bundle = build(cfg, resolution=64, seed=42, device=device)
for epoch in range(epochs):
    bundle.train.set_epoch(epoch)
    for x, y in bundle.train: ...
"""

# Importing the sources registers the built-in datasets.
from resomap.data import checks, folders, masks, sources, synthetic  # noqa: F401
from resomap.data.augment import BatchAugment
from resomap.data.bundle import DataBundle, build
from resomap.data.cache import CacheEntry, clear_memory_cache, get_resized, memory_cache_keys
from resomap.data.loader import BatchLoader, Normalizer
from resomap.data.registry import RawDataset, get_dataset, list_datasets, open_dataset, register_dataset
from resomap.data.split import SPLITS, limit_subset, split_indices

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
