"""Small plain CNNs for fast runs: tiny_cnn (seconds per epoch on CPU at 64 px) and simple_cnn."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.registry import register_model


def _block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ConvNet(nn.Module):
    """conv-BN-ReLU blocks with a 2x max pool between them, global average pool, dropout, linear head.

    With `stem=True` the first block's convolution has stride 2 and takes the place of the first pool (the same
    downsampling overall): the widest activations, then, are at half the input side, which is where a small CNN at
    full resolution spends its time in memory-bound work (batch norm, ReLU and the pool over 32 x r x r) rather than
    in arithmetic. `block_indices` names where the blocks sit in `features`.
    """

    def __init__(
        self, in_channels: int, num_classes: int, widths: Sequence[int], dropout: float = 0.0, stem: bool = False
    ):
        super().__init__()
        layers: list[nn.Module] = []
        cin = in_channels
        for i, width in enumerate(widths):
            if i and not (stem and i == 1):
                layers.append(nn.MaxPool2d(2))
            layers.append(_block(cin, width, stride=2 if stem and i == 0 else 1))
            cin = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(cin, num_classes))

    @staticmethod
    def block_indices(n_blocks: int, stem: bool = False) -> list[int]:
        """The positions of the blocks in `features`: 0, 2, 4, ... (a pool between each two), or 0, 1, 3, 5, ...
        with a stem (no pool after the first block)."""
        return [0, *range(1, 2 * n_blocks - 2, 2)] if stem else list(range(0, 2 * n_blocks, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))


def _block_names(n_blocks: int, stem: bool = False) -> tuple[str, ...]:
    return tuple(f"features.{i}" for i in reversed(ConvNet.block_indices(n_blocks, stem)))


TINY_WIDTHS = (16, 32, 64)
SIMPLE_WIDTHS = (32, 64, 128, 128, 256)


@register_model("tiny_cnn", family="cnn", cam_layers=_block_names(len(TINY_WIDTHS)))
def tiny_cnn(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """3 blocks (16-32-64 channels), ~24k parameters."""
    return ConvNet(in_channels, num_classes, TINY_WIDTHS, cfg.dropout)


# revision 2: a stride-2 stem (revision 1 ran its first block at full resolution, at ~40% of resnet18's share of the
# CPU's peak; scripts/benchmark_efficiency.py)
@register_model("simple_cnn", family="cnn", cam_layers=_block_names(len(SIMPLE_WIDTHS), stem=True), revision=2)
def simple_cnn(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """5 blocks (32-64-128-128-256 channels), the first a stride-2 stem, ~0.5M parameters."""
    return ConvNet(in_channels, num_classes, SIMPLE_WIDTHS, cfg.dropout, stem=True)
