"""Segmentation models (experiment.task=segmentation): each returns logits [B, K, r, r] at its input's size.

- `tiny_segnet`: a compact U-Net (2 down/up levels, ~30k parameters) for tests and the CPU quickstart.
- `unet_resnet18`: segmentation-models-pytorch's Unet with a ResNet-18 encoder (encoder_weights=None: nothing is
  downloaded; local weights through models.pretrained as for classifiers). smp's Unet needs sides divisible by 32,
  so the wrapper pads the input (reflect) to the next multiple and crops the logits back: every resolution works.
- `fcn_resnet50`, `fcn_resnet101`, `deeplabv3_resnet50`: torchvision's, weights=None and weights_backbone=None,
  no auxiliary head; the wrapper returns the `out` tensor instead of torchvision's dict.

CAM layers are the deepest feature maps first (encoder bottleneck, then shallower); ModelSpec picks the deepest whose
side is >= models.min_cam_size at the trial's resolution, exactly as for classifiers. torchvision and smp are
imported when a model is built, never when names are listed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.registry import register_model
from resomap.models.weights import adapt_input_conv_

SEGMENTATION = "segmentation"


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class TinySegNet(nn.Module):
    """A compact U-Net: enc1 (full res) -> enc2 (1/2) -> bottleneck (1/4) -> dec2 (1/2) -> dec1 (full) -> 1x1 head.
    Odd sides work: each skip is upsampled to its partner's exact size."""

    def __init__(self, in_channels: int, num_classes: int, widths: tuple[int, int, int] = (8, 16, 32)):
        super().__init__()
        a, b, c = widths
        self.enc1, self.enc2, self.bottleneck = _block(in_channels, a), _block(a, b), _block(b, c)
        self.dec2, self.dec1 = _block(c + b, b), _block(b + a, a)
        self.head = nn.Conv2d(a, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        z = self.bottleneck(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([F.interpolate(z, size=e2.shape[-2:], mode="bilinear", align_corners=False), e2], 1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, size=e1.shape[-2:], mode="bilinear", align_corners=False), e1], 1))
        return self.head(d1)


class PadToMultiple(nn.Module):
    """Reflect-pads the input to a multiple of `multiple` and crops the logits back to the input's size."""

    def __init__(self, net: nn.Module, multiple: int):
        super().__init__()
        self.net, self.multiple = net, multiple

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        ph, pw = -h % self.multiple, -w % self.multiple
        if ph or pw:
            mode = "reflect" if ph < h and pw < w else "replicate"
            x = F.pad(x, (0, pw, 0, ph), mode=mode)
        return self.net(x)[..., :h, :w]


class OutTensor(nn.Module):
    """torchvision segmentation models return {'out': logits}; this returns the tensor (what losses, profilers
    and CAM libraries expect)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)["out"]


@register_model("tiny_segnet", family="segnet", cam_layers=("bottleneck", "dec2", "enc2", "dec1"), task=SEGMENTATION)
def tiny_segnet(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """Compact U-Net (8-16-32 channels, ~30k parameters): fast tests and the CPU quickstart."""
    return TinySegNet(in_channels, num_classes)


_SMP_UNET_LAYERS = ("net.encoder.layer4", "net.encoder.layer3", "net.decoder.blocks.1", "net.encoder.layer2")


@register_model("unet_resnet18", family="unet", cam_layers=_SMP_UNET_LAYERS, task=SEGMENTATION)
def unet_resnet18(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """segmentation-models-pytorch Unet, ResNet-18 encoder, encoder_weights=None (~14M parameters)."""
    import segmentation_models_pytorch as smp

    net = smp.Unet("resnet18", encoder_weights=None, in_channels=in_channels, classes=num_classes)
    return PadToMultiple(net, 32)


# torchvision's FCN/DeepLabV3 backbones are dilated (output stride 8): layer4 keeps 1/8 of the side.
_TV_SEG_LAYERS = ("net.backbone.layer4", "net.backbone.layer3", "net.backbone.layer2", "net.backbone.layer1")


def _tv_seg(name: str, num_classes: int, in_channels: int) -> nn.Module:
    from torchvision.models import segmentation as tvseg

    net = getattr(tvseg, name)(weights=None, weights_backbone=None, num_classes=num_classes, aux_loss=False)
    adapt_input_conv_(net, in_channels, "backbone.conv1")
    return OutTensor(net)


@register_model("fcn_resnet50", family="fcn", cam_layers=_TV_SEG_LAYERS, task=SEGMENTATION)
def fcn_resnet50(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """torchvision FCN-ResNet50 (weights=None, no auxiliary head)."""
    return _tv_seg("fcn_resnet50", num_classes, in_channels)


@register_model("fcn_resnet101", family="fcn", cam_layers=_TV_SEG_LAYERS, task=SEGMENTATION)
def fcn_resnet101(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """torchvision FCN-ResNet101 (weights=None, no auxiliary head)."""
    return _tv_seg("fcn_resnet101", num_classes, in_channels)


@register_model("deeplabv3_resnet50", family="deeplab", cam_layers=_TV_SEG_LAYERS, task=SEGMENTATION)
def deeplabv3_resnet50(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """torchvision DeepLabV3-ResNet50 (weights=None, no auxiliary head)."""
    return _tv_seg("deeplabv3_resnet50", num_classes, in_channels)
