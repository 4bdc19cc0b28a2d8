"""torchvision architectures, built with weights=None; their pretrained weights come from models.pretrained (a local
file, or `hub`: torchvision's published weights through torch's hub cache, resomap.models.hub).

torchvision is imported when a model is built, not when the names are registered: it takes seconds to import
(it pulls in torch._dynamo), and listing models or checking a config must not wait for it.
"""

from __future__ import annotations

from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.registry import register_model
from resomap.models.weights import adapt_input_conv_

# The ReLU closing each VGG stage (just before its max pool), deepest first: torchvision's layouts A, B, D
# (written out so that listing models needs no torchvision import; a test checks them against torchvision's cfgs).
VGG_CAM_LAYERS = {
    "vgg11": ("features.19", "features.14", "features.9", "features.4", "features.1"),
    "vgg13": ("features.23", "features.18", "features.13", "features.8", "features.3"),
    "vgg16": ("features.29", "features.22", "features.15", "features.8", "features.3"),
}


def _tv(name: str, num_classes: int, in_channels: int, cfg: ModelsConfig, dropout: bool = True) -> nn.Module:
    from torchvision import models as tvm

    kwargs = {"dropout": cfg.dropout} if dropout else {}
    model = tvm.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    return adapt_input_conv_(model, in_channels)


def _register_tv(name: str, family: str, cam_layers: tuple[str, ...], dropout: bool = True) -> None:
    def build(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return _tv(name, num_classes, in_channels, cfg, dropout)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"torchvision {name} (weights=None)."
    register_model(name, family=family, cam_layers=cam_layers, hub="torchvision")(build)


for _name, _layers in VGG_CAM_LAYERS.items():
    _register_tv(_name, "vgg", _layers)

_RESNET_LAYERS = ("layer4", "layer3", "layer2", "layer1")
for _name in ("resnet18", "resnet34", "resnet50", "resnet101"):
    _register_tv(_name, "resnet", _RESNET_LAYERS, dropout=False)

# the last block of each stride stage (/32, /16, /8, /4, /2), deepest first
_register_tv("mobilenet_v2", "mobilenet", ("features.18", "features.13", "features.6", "features.3", "features.1"))
_register_tv("mobilenet_v3_small", "mobilenet", ("features.12", "features.8", "features.3", "features.1"))
_register_tv(
    "mobilenet_v3_large", "mobilenet", ("features.16", "features.12", "features.6", "features.3", "features.1")
)
_register_tv("efficientnet_b0", "efficientnet", ("features.8", "features.5", "features.3", "features.2", "features.1"))
