"""Argument helpers shared by the command modules: one-line usage errors, positive integers, config arguments."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def resolution(text: str) -> int:
    """An input side in pixels: a positive integer up to MAX_RESOLUTION."""
    from resomap.config.schema import MAX_RESOLUTION

    value = positive_int(text)
    if value > MAX_RESOLUTION:
        raise argparse.ArgumentTypeError(f"expected a side of at most {MAX_RESOLUTION} px, got {value}")
    return value


def port(text: str) -> int:
    """A TCP port number, 1 to 65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {value}")
    return value


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-dir", default="configs", help="folder of the YAML files (default: configs)")
    p.add_argument("--preset", help="a file of configs/presets/ without .yaml, merged after the config files")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. training.epochs=3")


def load_config(args: argparse.Namespace, extra: dict[str, Any] | None = None, inputs: str | None = None) -> Any:
    """The resolved, validated config of the command's --config-dir, --preset and key=value overrides.

    Checked first without torch (resomap.cli.preflight: names from resomap.catalog); with `inputs` (the setting
    that gave the resolutions, for train and sweep) also whether one batch of input images fits in memory at
    every resolution, and whether the models' pretrained weight files may be loaded at all. Then the full check
    with the live registries."""
    from resomap.cli import preflight

    early = preflight.config(args, extra)
    if inputs is not None and early is not None:
        preflight.train_inputs_fit(early, inputs)
        check_pretrained(early)
        # the data files read before torch: a sweep's for every data seed, train's for experiment.seed (its seed)
        seeds = early.sweep.seeds if inputs == "sweep.resolutions" else [early.experiment.seed]
        check_data_files(early, record=not getattr(args, "dry_run", False), seeds=seeds)
    from resomap.config import load
    from resomap.sweep.builtins import register_builtins

    register_builtins()
    cfg = load(args.config_dir, args.preset, args.overrides, extra)
    if inputs is not None and early is None:
        preflight.train_inputs_fit(cfg, inputs)
        check_pretrained(cfg)
    return cfg


def check_data_files(cfg: Any, record: bool, seeds: Any = None) -> None:
    """The checks of a dataset of the user's files (resomap.data.verify: unreadable images over
    data.max_bad_fraction, an empty class, a split that cannot be made, too few test images for the probe set, a
    data.bit_depth the files exceed), run by `resomap sweep` and `resomap train` before torch is imported: one
    line, nothing written. Once per data seed of `seeds` (default sweep.seeds); a pass is recorded with the
    resolution cache (`record`; not on a dry run), where the sweep's per-trial check reads it (sweep.plan.check_data,
    which also covers the models' data overrides). A dataset registered by a plugin is left to that check."""
    from resomap.cli.preflight import live_data_options
    from resomap.data import list_datasets
    from resomap.data.verify import check_files, data_seed, quiet_log

    if cfg.data.dataset not in list_datasets():
        return
    cfg = live_data_options(cfg)
    seen = set()
    with quiet_log():
        for seed in cfg.sweep.seeds if seeds is None else seeds:
            if data_seed(cfg, seed) not in seen:
                seen.add(data_seed(cfg, seed))
                check_files(cfg, seed, record=record)


def check_pretrained(cfg: Any) -> None:
    """The models.pretrained files of the models the command trains, read as checkpoints before torch loads them
    (resomap.checkpoint_files: truncated, pickled code or no checkpoint at all end the command in one line);
    .safetensors files hold no code and are read by safetensors."""
    from resomap import checkpoint_files
    from resomap.cli.preflight import pretrained_files

    for path in pretrained_files(cfg).values():
        if not path.endswith(".safetensors"):
            checkpoint_files.check(path, "pretrained weights")
