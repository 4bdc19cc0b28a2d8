"""Small plain CNNs for fast runs: tiny_cnn (seconds per epoch on CPU at 64 px) and simple_cnn."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.registry import register_model


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ConvNet(nn.Module):
    """conv-BN-ReLU blocks with a 2x max pool between them, global average pool, dropout, linear head.

    Blocks sit at features.0, features.2, ... (even indices); the pools at the odd ones.
    """

    def __init__(self, in_channels: int, num_classes: int, widths: Sequence[int], dropout: float = 0.0):
        super().__init__()
        layers: list[nn.Module] = []
        cin = in_channels
        for i, width in enumerate(widths):
            if i:
                layers.append(nn.MaxPool2d(2))
            layers.append(_block(cin, width))
            cin = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(cin, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))


def _block_names(n_blocks: int) -> tuple[str, ...]:
    return tuple(f"features.{2 * i}" for i in reversed(range(n_blocks)))


TINY_WIDTHS = (16, 32, 64)
SIMPLE_WIDTHS = (32, 64, 128, 128, 256)


@register_model("tiny_cnn", family="cnn", cam_layers=_block_names(len(TINY_WIDTHS)))
def tiny_cnn(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """3 blocks (16-32-64 channels), ~24k parameters."""
    return ConvNet(in_channels, num_classes, TINY_WIDTHS, cfg.dropout)


@register_model("simple_cnn", family="cnn", cam_layers=_block_names(len(SIMPLE_WIDTHS)))
def simple_cnn(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """5 blocks (32-64-128-128-256 channels), ~0.5M parameters."""
    return ConvNet(in_channels, num_classes, SIMPLE_WIDTHS, cfg.dropout)
