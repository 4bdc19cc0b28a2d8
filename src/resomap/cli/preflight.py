"""What the command line checks before torch is imported: the config (files, preset, overrides; every key, type
and value this layer knows; the registry names from resomap.catalog), the models, the task, and whether one
batch of input images at the asked resolution could fit in this machine's memory at all.

A mistake found here ends the command in a fraction of the time the full check needs (which imports torch and
every registry); the full check still runs afterwards, as before, for what only the live registries can tell (the
types of an entry's options, a plugin's names, the explainers' target forms). With plugins installed (their names
are in no catalog) only the memory bound is checked here.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from resomap.config.schema import split_recipe
from resomap.errors import ConfigError, UnknownNameError

TIMM_PREFIX = "timm:"  # resomap.models.registry's; any timm model name is checked when the model is built


def config(args: argparse.Namespace, extra: Mapping[str, Any] | None = None, folder: Any = "") -> Any:
    """The command's config checked without torch, or None when the catalog cannot check it (plugins installed,
    no catalog). Raises the one-line ConfigError / UnknownNameError the full load would raise."""
    from resomap import catalog
    from resomap.config import merge, prebuild

    folder = args.config_dir if folder == "" else folder
    raw, origins = merge(folder, args.preset, args.overrides, extra)  # files, preset and override errors
    registries = None if catalog.plugins_installed() else catalog.group_registries()
    if registries is None:
        return None
    cfg = prebuild(raw, origins, registries)

    def where(path: str) -> str:
        probe = path
        while probe:
            if probe in origins:
                return origins[probe]
            probe = probe.rpartition(".")[0]
        return "defaults"

    _check_task(cfg, where)
    check_device(cfg.system.device)
    _check_paths(cfg)
    _check_data_section(cfg, where)
    return cfg


def live_data_options(cfg: Any) -> Any:
    """The early config with its dataset options as the live registry's options classes: the catalog's stand-ins
    hold the names set (None for the rest); the values set go to config.groups.group_options, as the full load
    gives them."""
    import dataclasses

    from resomap.config.groups import group_options

    stand_ins = cfg.data.__dict__.get("options") or {}
    given = {k: {f: x for f, x in dataclasses.asdict(v).items() if x is not None} for k, v in stand_ins.items()}
    data = dataclasses.replace(cfg.data, options=given)
    data = dataclasses.replace(data, options={k: group_options(data, k) for k in given})
    return dataclasses.replace(cfg, data=data)


def _check_data_section(cfg: Any, where: Any) -> None:
    """The data section's load-time checks (resomap.data.checks: augmentation ranges, each split's size, a probe
    set larger than the test set of a dataset whose size the config gives) before torch is imported; the full load
    runs them again. A dataset of a plugin is left to it."""
    from resomap.config.checks import failing
    from resomap.data import list_datasets
    from resomap.data.checks import check_data

    if cfg.data.dataset in list_datasets():
        check_data(live_data_options(cfg), failing(where))


def _check_paths(cfg: Any) -> None:
    """The selected dataset's `root` folder or `manifest` file, and the models' pretrained weight files, exist
    (the same words as the dataset and weight loaders; what is inside them is checked when they are read)."""
    from resomap.errors import CheckpointError, ConfigError, DataError

    name = cfg.data.dataset
    options = cfg.data.options.get(name)
    root = getattr(options, "root", None)
    if root and not Path(root).expanduser().is_dir():
        raise DataError(f"data.{name}.root {Path(root).expanduser()} does not exist or is not a folder")
    manifest = getattr(options, "manifest", None)
    if manifest and not Path(manifest).expanduser().is_file():
        raise DataError(f"data.{name}.manifest {Path(manifest).expanduser()} does not exist")
    for path in pretrained_files(cfg).values():
        if not Path(path).is_file():
            raise CheckpointError(f"pretrained weights file {path} does not exist; fix models.pretrained")
    out = Path(cfg.experiment.output_dir).expanduser()
    there = next((p for p in (out, *out.parents) if p.exists()), None)  # the output folder or its nearest parent
    if there is not None and not there.is_dir():
        raise ConfigError(
            f"experiment.output_dir {out}: {there} is a file, not a folder; set experiment.output_dir=<a folder>"
        )


def pretrained_files(cfg: Any) -> dict[str, str]:
    """The models.pretrained entries of the models the command trains (model -> weights file), `hub` resolved to the
    published weights in the user's cache: located, fetched where allowed and checked against their hash, before
    anything is created (resomap.models.hub; torch is imported only then)."""
    from resomap.config.schema import is_hub

    named = [str(m) for m in [*cfg.sweep.models, *(pair[0] for pair in cfg.sweep.include)]]
    used = {n.lower() for n in named} | {recipe_base(n).lower() for n in named}  # a recipe reads its backbone's
    files = {}
    for model, path in cfg.models.pretrained.items():
        if str(model).lower() not in used:
            continue
        if is_hub(path):
            _surely_missing(str(model))  # offline with nothing cached: refused before timm and torch are imported
            from resomap.models import canonical_name
            from resomap.models.hub import fetch, locate

            path = fetch(locate(canonical_name(recipe_base(str(model)))))
        files[str(model)] = str(path)
    return files


def _surely_missing(model: str) -> None:
    """A timm model's hub weights while HF_HUB_OFFLINE is set and no cache holds anything of that architecture:
    resomap.models.hub's one line at once (asking timm which file it would read imports torch: seconds)."""
    from resomap import hub_cache

    arch = model[len(TIMM_PREFIX) :] if model.lower().startswith(TIMM_PREFIX) else None
    if arch and hub_cache.offline() and hub_cache.timm_surely_missing(arch):
        from resomap.errors import ModelError

        where = f"the Hugging Face cache ({hub_cache.hf_cache()})"
        raise ModelError(hub_cache.offline_message(model, where, hub_cache.TIMM_FETCH.format(arch=arch)))


def check_device(device: str) -> None:
    """system.device=cuda on a machine with no GPU device node at all (runtime.resolve_device's error, before torch
    is there to ask); whether a GPU that is there works is left to torch."""
    import glob
    import os

    if device != "cuda":
        return
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")
    nodes = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg", "/dev/nvhost*", "/dev/nvgpu*")  # NVIDIA, ROCm, WSL, Jetson
    if hidden or not (any(glob.glob(n) for n in nodes) or _not_linux()):
        raise ConfigError(
            "system.device is 'cuda' but no CUDA GPU is visible; set system.device=auto or system.device=cpu"
        )


def _not_linux() -> bool:
    import sys

    return not sys.platform.startswith("linux")  # no /dev nodes to read: leave it to torch


def check_names(kind: str, names: Iterable[str]) -> None:
    """Unknown names of a registry (`kind` of resomap.catalog) raise UnknownNameError with its suggestions."""
    from resomap import catalog

    found = catalog.registry(kind)
    if found is None or catalog.plugins_installed():
        return
    for name in names:
        found.resolve(name)


def check_file(path: str, what: str) -> None:
    """A checkpoint file (what='checkpoint') or folder (what='folder') that is not there (the loaders' words)."""
    if what == "checkpoint" and not Path(path).is_file():
        raise ConfigError(f"{path}: checkpoint not found; check the path or train first")
    if what == "folder" and not Path(path).is_dir():
        raise ConfigError(f"{path}: checkpoint folder not found; train first (resomap sweep) or fix --checkpoint-dir")


def _check_task(cfg: Any, where: Any) -> None:
    """experiment.task names a task, and the models and the dataset serve it (resomap.tasks.check, on the catalog)."""
    from resomap import catalog
    from resomap.config.checks import check_dataset_fit, check_model_fit, failing

    tasks, models, datasets = catalog.registry("task"), catalog.registry("model"), catalog.registry("dataset")
    if tasks is None or models is None or datasets is None:
        return
    task = cfg.experiment.task
    if task not in tasks:
        hint = tasks.hint(task).lstrip("; ")
        raise ConfigError(
            f"{where('experiment.task')}: experiment.task: expected a registered task, see resomap tasks ({hint}), "
            f"got {task!r}"
        )
    name = tasks.resolve(task)
    for model in [*cfg.sweep.models, *(pair[0] for pair in cfg.sweep.include)]:
        check_model(model)
        base = recipe_base(model)
        found = "classification" if base.lower().startswith(TIMM_PREFIX) else models.meta(base).get("task")
        if (found or "classification") != name:
            raise ConfigError(
                f"{where('sweep.models')}: sweep.models: expected {name} models (experiment.task={name}), "
                f"got '{model} ({found} model)'"
            )
    meta = datasets.meta(cfg.data.dataset)
    found = meta.get("task") or "classification"
    if found != name:
        raise ConfigError(
            f"{where('data.dataset')}: data.dataset: expected a {name} dataset (experiment.task={name}), "
            f"got '{cfg.data.dataset} ({found})'"
        )
    check_dataset_fit(cfg, meta, failing(where))
    check_model_fit(
        cfg,
        lambda model: (
            {} if recipe_base(model) != model or model.lower().startswith(TIMM_PREFIX) else models.meta(model)
        ),
        failing(where),
    )


def check_model(name: str) -> None:
    """An unknown model name raises UnknownNameError with the registry's suggestions (timm: names pass)."""
    from resomap import catalog

    models = catalog.registry("model")
    base = recipe_base(name)
    if models is None or base.lower().startswith(TIMM_PREFIX) or catalog.plugins_installed():
        return
    models.resolve(base)
    if base != str(name) and models.meta(base).get("hub") != "torchvision":
        raise UnknownNameError(f"'{name}': recipes take timm:<name> or a torchvision model of `resomap models`")


def recipe_base(name: str) -> str:
    """The backbone of a recipe name ('resnet18@linear' -> 'resnet18'; resomap.models.recipes), else the name; an
    unknown recipe raises UnknownNameError."""
    return split_recipe(name)[0]


def dataset_channels(name: str) -> int:
    """The input channels a dataset is known to give (catalog), else 1: the fewest any dataset gives."""
    from resomap import catalog

    datasets = catalog.registry("dataset")
    try:
        return int((datasets.meta(name) if datasets is not None else {}).get("channels") or 1)
    except UnknownNameError:
        return 1


def check_inputs_fit(resolutions: Iterable[int], batch: int, channels: int, what: str, settings: str) -> None:
    """ConfigError when one batch of `batch` float32 input images of `channels` x r x r alone exceeds the memory
    available now (psutil): no model can run there. `what` names the setting, `settings` what else to lower."""
    import psutil

    available = psutil.virtual_memory().available
    for r in resolutions:
        need = 4 * batch * channels * int(r) * int(r)
        if need > available:
            raise ConfigError(
                f"{what}: {r} px cannot fit in memory: one batch of {batch} input images alone is {_size(need)} "
                f"({batch} x {channels} x {r} x {r} float32) and this machine has {_size(available)} available; "
                f"use a smaller resolution (or {settings})"
            )


def train_inputs_fit(cfg: Any, what: str) -> None:
    """check_inputs_fit for every resolution a train or sweep command would train and test at."""
    tr = cfg.training
    resolutions = [*cfg.sweep.resolutions, *(pair[1] for pair in cfg.sweep.include)]
    batch = max(tr.batch_size, tr.eval_batch_size)
    check_inputs_fit(
        resolutions, batch, dataset_channels(cfg.data.dataset), what, "training.batch_size / eval_batch_size"
    )


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def config_folder(args: argparse.Namespace) -> Path | None:
    """profile/bench need no project files: their --config-dir is used when it exists."""
    return Path(args.config_dir) if Path(args.config_dir).is_dir() else None
