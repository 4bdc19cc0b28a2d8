"""A trial's identity: the Trial (a model at one resolution and seed, with its config and folders), its key (the
hash of what it computes), the sweep's identity, the model's registered revision and the pinned precision."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from resomap.config import Config, save_resolved, to_dict, with_overrides
from resomap.errors import ResoMapError, UnknownNameError
from resomap.layout import Layout
from resomap.tasks import other_task_sections

# Settings that change how a trial is run or logged but not what it computes: left out of its key.
_KEY_EXCLUDE = (
    "sweep",
    "mlflow",
    "stats",
    "training.progress",
    "system.num_workers",
    "system.persistent_workers",
    "system.resolved_from_auto",
)
# Datasets whose `groups` option came after their sweeps: left empty, it is out of the key. Set, it is in it: each
# trial records its test images' group codes (result.json data.groups), so trials run without them are run again.
_GROUPS_ADDED = ("csv", "imagefolder")
# Data settings that came after sweeps were run, at their defaults: out of the key (set otherwise, in it), so the
# trials of 8-bit images without an EXIF turn keep their keys.
_DATA_ADDED = {"bit_depth": "auto", "exif_orientation": True}


_SEED_FOLDER = re.compile(r"seed\d+")


@dataclasses.dataclass(frozen=True)
class Trial:
    """A model at one resolution and seed. Its folders are its experiment's (resomap.layout:
    model_summaries/<experiment>/<model>/<res>/seed<S>/, checkpoints/<experiment>/<family>/<model>/<res>/seed<S>/)
    and always end in `seed<S>`, whatever the number of seeds, so adding seeds to a finished sweep moves nothing and
    experiments sharing an output folder never meet. Its folders of the seed layout without an experiment level are
    moved into these by `resomap.sweep.migrate` (the sweep, under its lock). A trial of the older single-seed layout
    (the folder `<res>/` itself holding its result.json or last.pt) is found and used in place: `legacy` says which
    layout (None: look on disk; run_trial pins it once, so a run never switches folders half-way)."""

    model: str
    resolution: int
    seed: int
    cfg: Config
    legacy: bool | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # its key and records name the precision it runs: the sweep's, or its model's own fast path where auto
        object.__setattr__(self, "cfg", model_fast_path(pin_precision(self.cfg), self.model))

    @functools.cached_property
    def key(self) -> str:
        """trial_key of this trial, computed on first use (the fields are frozen, so it never changes)."""
        return trial_key(self.cfg, self.model, self.resolution, self.seed)

    @functools.cached_property
    def family(self) -> str:
        """The model's family (its checkpoint folders are grouped by it)."""
        from resomap.models import get_spec

        return get_spec(self.model).family

    @property
    def layout(self) -> Layout:
        return Layout.of(self.cfg)

    @property
    def name(self) -> str:
        """`<model>@<resolution>`, plus `/seed<S>` when the sweep has several seeds."""
        base = f"{self.model}@{self.resolution}"
        return base if len(self.cfg.sweep.seeds) <= 1 else f"{base}/seed{self.seed}"

    def checkpoint_dir(self, family: str | None = None) -> Path:
        family = family or self.family
        if self._in_legacy_folder():
            return self.layout.single_seed_checkpoints(family, self.model, self.resolution)
        return self.layout.trial_checkpoints(family, self.model, self.resolution, self.seed)

    @property
    def summary_dir(self) -> Path:
        if self._in_legacy_folder():
            return self.layout.single_seed_summary(self.model, self.resolution)
        return self.layout.trial_summary(self.model, self.resolution, self.seed)

    def lr_find_file(self, family: str | None = None) -> Path:
        """lr_find.json, shared by the seeds of this model x resolution: beside their folders (in a single-seed
        folder, inside it)."""
        folder = self.checkpoint_dir(family)
        return (folder if self._in_legacy_folder() else folder.parent) / "lr_find.json"

    def seed_layout_dirs(self) -> tuple[Path, Path]:
        """(summary, checkpoint folder) this trial had in the seed layout without an experiment level."""
        lay = self.layout
        return (
            lay.seed_layout_summary(self.model, self.resolution, self.seed),
            lay.seed_layout_checkpoints(self.family, self.model, self.resolution, self.seed),
        )

    def pinned(self) -> Trial:
        """This trial with its layout decided now (see `legacy`)."""
        pinned = dataclasses.replace(self, legacy=self._in_legacy_folder())
        pinned.__dict__["key"] = self.key  # the same trial (legacy is no part of the key): its key carries over
        return pinned

    def _in_legacy_folder(self) -> bool:
        """The trial lives in a folder of the single-seed layout: it has no folder of its experiment's layout nor
        one of the seed layout to be moved there, and `<res>/` holds its result.json (this key) or its last.pt /
        last.json (this config hash)."""
        if self.legacy is not None:
            return self.legacy
        lay = self.layout
        if lay.trial_summary(self.model, self.resolution, self.seed).exists():
            return False
        if lay.trial_checkpoints(self.family, self.model, self.resolution, self.seed).exists():
            return False
        old_summary, old_checkpoints = self.seed_layout_dirs()
        if result_key(old_summary) == self.key or checkpoint_key(old_checkpoints) == self.key:
            return False  # moved into the experiment's folders by the sweep (resomap.sweep.migrate)
        summary = lay.single_seed_summary(self.model, self.resolution)
        if result_key(summary) == self.key:
            return True
        return checkpoint_key(lay.single_seed_checkpoints(self.family, self.model, self.resolution)) == self.key


def result_key(folder: Path) -> str | None:
    """The trial key of the result.json in `folder` (None: none, unreadable or torn)."""
    try:
        key = json.loads((folder / "result.json").read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) else None


def checkpoint_key(folder: Path) -> str | None:
    """The config hash of the last.pt in `folder` (None: no last.pt / last.json there)."""
    if (folder / "last.json").is_file() or (folder / "last.pt").is_file():
        return _checkpoint_key(folder)
    return None


def trial_key(cfg: Config, model: str, resolution: int, seed: int) -> str:
    """A stable hash of everything that decides what the trial computes."""
    tree = _key_tree(cfg, model)
    tree["trial"] = {"model": model.lower(), "resolution": resolution, "seed": seed}
    revision = model_revision(model)
    if revision > 1:  # the model's architecture changed: results of its earlier revision belong to another trial
        tree["trial"]["revision"] = revision
    return _hash(tree)


def model_revision(model: str) -> int:
    """The registered revision of a model's architecture (register_model(revision=...); 1 for timm models, plugins
    and the first revision of every built-in), read from the catalog without importing torch when it can."""
    from resomap.catalog import registry
    from resomap.errors import UnknownNameError

    reg = registry("model")
    if reg is None:  # no catalog: the live registry
        from resomap.models.registry import MODELS as reg
    try:
        return int(reg.meta(model).get("revision", 1))
    except (UnknownNameError, KeyError):  # timm:<name>, or a name the trial itself rejects
        return 1


def sweep_identity(cfg: Config) -> str:
    """A stable hash of what a sweep computes apart from its grid (sweep.* is in no key): adding models,
    resolutions or seeds keeps it, so the sweep keeps its MLflow parent run."""
    return _hash({**_key_tree(cfg), "sweep": "identity"})


def _key_tree(cfg: Config, model: str | None = None) -> dict[str, Any]:
    """The config as a tree without the settings that do not change what a trial computes: the `models.*` sections
    that named models read (ModelsConfig.MODEL_SECTIONS: models.hog) only in those models' trees (`model`), so
    adding such a section kept every other key."""
    tree = to_dict(cfg)
    for section in type(cfg.models).MODEL_SECTIONS:
        if model is None or not type(cfg.models).reads(model, section):
            tree["models"].pop(section, None)
    for dotted in _KEY_EXCLUDE:
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node.pop(leaf, None)
    task = tree["experiment"].pop("task", "classification")
    for section in other_task_sections(task):  # another task's settings do not change what this trial computes
        tree.pop(section, None)
    _moved_back(cfg, tree)
    for section in ("task", "loss"):  # option groups left empty: the keys stay what they were before these groups
        if not tree.get(section):
            tree.pop(section, None)
    for dataset in _GROUPS_ADDED:  # no groups: the keys stay what they were before data.<dataset>.groups
        options = tree["data"].get(dataset)
        if isinstance(options, dict) and options.get("groups") == []:
            options.pop("groups")
    for key, default in _DATA_ADDED.items():
        if tree["data"].get(key) == default:
            tree["data"].pop(key)
    if task != "classification":  # classification keys stay what they were before the task axis
        tree["experiment"]["task"] = task
    return tree


def _moved_back(cfg: Config, tree: dict[str, Any]) -> None:
    """Keys that moved (config.schema.MOVED_KEYS: segmentation.tversky_* -> loss.focal_tversky.*) put back where they
    were in the key tree, set or not, so the trial keys of sweeps from before the move stay the same."""
    from resomap.config.groups import group_options
    from resomap.config.schema import MOVED_KEYS

    for old, new in MOVED_KEYS.items():
        section, leaf = old.split(".")
        if section not in tree:  # another task's section: out of this key
            continue
        group, entry, field = new.split(".")
        tree[section][leaf] = getattr(group_options(getattr(cfg, group), entry), field)
        moved = tree.get(group, {}).get(entry)
        if moved is not None:
            moved.pop(field, None)
            if not moved:
                tree[group].pop(entry)


def _hash(tree: dict[str, Any]) -> str:
    text = json.dumps(tree, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def precision_choice(cfg: Config) -> tuple[str, str]:
    """(precision, why) that `system.precision` means on the device this config resolves to (auto: bf16 where
    the hardware computes it natively, else fp32; runtime.resolve_precision)."""
    from resomap.runtime import resolve_device, resolve_precision

    if cfg.system.precision != "auto":
        return cfg.system.precision, "set in the config"
    return resolve_precision("auto", resolve_device(cfg.system))


def pin_precision(cfg: Config) -> Config:
    """The config with `system.precision: auto` replaced by what it resolves to here, and `system.channels_last:
    auto` by what goes with that precision (runtime.resolve_channels_last), once per sweep: every trial then runs,
    records and is keyed by the same settings (a trial's key hashes its config, so trials of one precision are
    never taken for those of another, and auto resolving to fp32 keeps the keys of the fp32 runs before auto)."""
    from resomap.runtime import resolve_channels_last

    sysc = cfg.system
    if sysc.precision != "auto" and isinstance(sysc.channels_last, bool):
        return cfg
    precision, _ = precision_choice(cfg)
    pinned = {
        "system.precision": precision,
        "system.channels_last": resolve_channels_last(sysc.channels_last, precision),
    }
    was_auto = [key for key in ("precision", "channels_last") if getattr(sysc, key) == "auto"]
    pinned["system.resolved_from_auto"] = sorted({*sysc.resolved_from_auto, *was_auto})
    return with_overrides(cfg, pinned, "system auto settings")


def model_fast_path(cfg: Config, model: str) -> Config:
    """The config a trial of `model` runs with: where the model declares a faster path of its own on the CPU
    (registry metadata `cpu_fast_path`, e.g. fp32 and channels_last for depthwise convolutions, where bf16 autocast
    is several times slower) and the sweep resolved those keys from auto for a CPU, its values instead. Settings
    given in the config are kept."""
    from resomap.models.registry import MODELS, is_timm_name
    from resomap.runtime import resolve_device

    if is_timm_name(model) or not cfg.system.resolved_from_auto:
        return cfg
    try:
        fast = MODELS.meta(model).get("cpu_fast_path") or {}
    except UnknownNameError:
        return cfg
    wanted = {f"system.{k}": v for k, v in fast.items() if k in cfg.system.resolved_from_auto}
    wanted = {k: v for k, v in wanted.items() if getattr(cfg.system, k.split(".")[1]) != v}
    if not wanted or resolve_device(cfg.system).type != "cpu":
        return cfg
    return with_overrides(cfg, wanted, f"{model}'s fast path on the CPU")


def save_trial_config(cfg: Config, folder: Path) -> Path:
    """config.yaml of the config a trial runs with (after an out-of-memory retry: the halved batch that ran)."""
    return save_resolved(cfg, folder / "config.yaml")


def _checkpoint_key(folder: Path) -> str | None:
    """The config hash last.pt was written for: from last.json, or from last.pt itself when a kill came between
    the two writes."""
    from resomap.training import load_checkpoint

    try:
        return json.loads((folder / "last.json").read_text(encoding="utf-8")).get("config_hash")
    except (OSError, ValueError):
        pass
    try:
        return load_checkpoint(folder / "last.pt").get("meta", {}).get("config_hash")
    except ResoMapError:  # a torn or foreign file: start afresh
        return None
