"""Small residual networks sized for small data and a CPU, at 32-300 px: small_resnet10, small_resnet18, small_resnet26.

In the manner of He et al.'s (2016) CIFAR ResNets (n basic blocks per stage), with a stride-2 3x3 stem (the widest
activations at half the input side, where a small CNN at full resolution spends its time in memory-bound work) and
four stages, so the last feature map is 1/16 of the input side (8 px at 128, 19 at 300): depth 8n + 2. Widths
32-64-128-256 by default (`models.width` sets the first; each stage doubles it): 1.2M parameters at n = 1.
torchvision's and timm's ResNets open with a 7x7 stride-2 convolution and a max pool (a quarter of the side before
the first block) and have 5M (timm's resnet10t) to 11M parameters and more: sized for ImageNet, not for 1,700 images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.registry import register_model

STAGES = 4
CAM_LAYERS = tuple(f"stage{i}" for i in range(STAGES, 0, -1))  # deepest first


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        nn.init.zeros_(self.bn2.weight)  # each block starts as the identity (Goyal et al. 2017): steadier from scratch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x), inplace=True)


class SmallResNet(nn.Module):
    """stem (3x3, stride 2) -> `STAGES` stages of `blocks` basic blocks (the first of each stage after the first with
    stride 2) -> global average pool -> dropout -> linear."""

    def __init__(self, in_channels: int, num_classes: int, blocks: int, width: int = 32, dropout: float = 0.0):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        cin = width
        for i in range(STAGES):
            cout = width * 2**i
            layers = [BasicBlock(cin if j == 0 else cout, cout, 2 if i and j == 0 else 1) for j in range(blocks)]
            self.add_module(f"stage{i + 1}", nn.Sequential(*layers))
            cin = cout
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(cin, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for i in range(STAGES):
            x = getattr(self, f"stage{i + 1}")(x)
        return self.head(F.adaptive_avg_pool2d(x, 1))


def _register(name: str, blocks: int) -> None:
    def build(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return SmallResNet(in_channels, num_classes, blocks, cfg.width, cfg.dropout)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"Small ResNet, {blocks} basic block(s) per stage x {STAGES} stages (models.width: first stage)."
    register_model(name, family="resnet_small", cam_layers=CAM_LAYERS)(build)


for _name, _blocks in (("small_resnet10", 1), ("small_resnet18", 2), ("small_resnet26", 3)):
    _register(_name, _blocks)
