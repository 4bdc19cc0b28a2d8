"""The symmetries a dataset declares (transforms that keep every image's label) and test-time augmentation over them.

A dataset declares its symmetries in its registry meta (`symmetries=("hflip", "vflip", "rot90")` for ELPV's square
cells, as Deitsch et al. augment them), or, for users' folders and CSV files, in its options
(`data.imagefolder.symmetries`). `training.tta` may only name declared ones (checked at load). The transforms used
at test are the group the named symmetries generate (hflip + rot90: the 8 of the square's dihedral group), each once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

SYMMETRIES = ("hflip", "vflip", "rot90")  # the names a dataset may declare and training.tta may use


def declared(cfg: Any) -> tuple[str, ...]:
    """The symmetries the config's dataset declares: its options' `symmetries` field, else its registry meta."""
    from resomap.config.groups import group_options
    from resomap.data.registry import DATASETS

    dc = cfg.data
    options = group_options(dc, dc.dataset)
    found = getattr(options, "symmetries", None)
    if found is None:
        found = DATASETS.meta(dc.dataset).get("symmetries", ())
    return tuple(found)


def _generators(names: Sequence[str]) -> list[Callable]:
    import torch

    table = {
        "hflip": lambda x: torch.flip(x, dims=(-1,)),
        "vflip": lambda x: torch.flip(x, dims=(-2,)),
        "rot90": lambda x: torch.rot90(x, 1, dims=(-2, -1)),
    }
    return [table[name] for name in names]


def group(names: Sequence[str]) -> list[Callable]:
    """Every distinct transform the symmetries generate, the identity first: the closure of the generators,
    told apart by what they do to a 4 x 4 image with distinct pixels."""
    import torch

    probe = torch.arange(16.0).reshape(1, 1, 4, 4)
    found: list[tuple[Callable, bytes]] = [(lambda x: x, probe.numpy().tobytes())]
    frontier = list(found)
    gens = _generators(names)
    while frontier:
        grown = []
        for fn, _ in frontier:
            for g in gens:

                def composed(x, f=fn, h=g):
                    return h(f(x))

                key = composed(probe).numpy().tobytes()
                if all(key != k for _, k in found):
                    found.append((composed, key))
                    grown.append((composed, key))
        frontier = grown
    return [fn for fn, _ in found]


def symmetry_average(model: Any, names: Sequence[str]) -> Any:
    """A module whose logits are the log of the class probabilities averaged over the symmetry group of `names`
    (classification: logits [B, K])."""
    import torch
    from torch import nn

    transforms = group(names)

    class SymmetryAverage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            probs = sum(torch.softmax(self.model(t(x)).float(), dim=1) for t in transforms) / len(transforms)
            return torch.log(probs.clamp_min(1e-12))

    return SymmetryAverage()
