"""Who writes a run: one writer per run (two folders, or two machines, logging one experiment to one tracking server
each keep runs of their own). A run carries its writer in the `resomap.origin` tag; a sweep pins it once
(mlflow.origin), so its Ray workers on other hosts write as the driver's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resomap.config.schema import Config

ORIGIN_TAG = "resomap.origin"  # <host>:<output folder> of the project that writes a run: one writer per run


def origin(cfg: Config) -> str:
    """This project's origin tag: mlflow.origin, else the host and the absolute output folder (two folders, or two
    machines, logging one experiment to one server each keep runs of their own). A sweep pins it once (its workers
    on other hosts write as the driver's folder)."""
    import socket

    if cfg.mlflow.origin:
        return str(cfg.mlflow.origin)
    return f"{socket.gethostname()}:{Path(cfg.experiment.output_dir).expanduser().resolve()}"


def own_runs(runs: list[Any], here: str) -> list[Any]:
    """The runs that the project of origin `here` writes: tagged with it, or untagged (written before runs carried
    an origin; the first to reopen one tags it)."""
    return [run for run in runs if run.data.tags.get(ORIGIN_TAG, here) == here]
