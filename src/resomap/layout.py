"""Where a sweep's files live under `experiment.output_dir`: the one place their paths are built.

Every experiment (`experiment.name`) has folders of its own, so experiments sharing an output folder never touch
each other's trials:

    <summary_dir>/<experiment>/<model>/<resolution>/seed<S>/         a trial's result.json, predictions, maps
    <checkpoint_dir>/<experiment>/<family>/<model>/<resolution>/seed<S>/   its checkpoints (lr_find.json one up)
    <summary_dir>/_sweep/<experiment>/                                 the sweep summary (swapped in whole)
    <summary_dir>/_sweep/.<experiment>.lock                            the running sweep's lock
    <summary_dir>/_sweep/.<experiment>.eta.csv                         a run's ETA lines until its summary holds them

Two older layouts had no experiment level and are still found: the seed layout (`<summary_dir>/<model>/<res>/
seed<S>/`, `<checkpoint_dir>/<family>/<model>/<res>/seed<S>/`), whose trial folders the next run of their
experiment moves into the layout above (resomap.sweep.migrate), and the single-seed layout (`<res>/` itself holding
a trial), used where it is. The sweep, its summary, `resomap.results.load_sweep`, `resomap analyze` and the tests
take their paths from here. Plain strings and paths only: nothing of resomap is imported.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePath
from typing import Any

SWEEP_DIR = "_sweep"  # under the summary root: every sweep's summary folder and lock


def trial_part(model: str, resolution: int, seed: int) -> PurePath:
    """`<model>/<resolution>/seed<S>`: a trial's folder below its experiment (and below `resomap analyze`'s
    models/ folder)."""
    return PurePath(str(model), str(int(resolution)), f"seed{int(seed)}")


def folder_name_problem(name: str) -> str | None:
    """Why `name` cannot be an experiment's folder (None: it can): it is one folder name under the summary and
    checkpoint roots and beside the sweep summaries."""
    if not name or name.strip() != name:
        return "a non-empty name without leading or trailing spaces"
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        return "one folder name (no '/', '\\', '.' or '..'; an MLflow experiment path goes in mlflow.experiment)"
    if name == SWEEP_DIR:
        return f"a name other than {SWEEP_DIR!r} (the folder of the sweep summaries)"
    return None


@dataclasses.dataclass(frozen=True)
class Layout:
    """The folders of one experiment in one output folder."""

    output_dir: Path
    summary_dir: str
    checkpoint_dir: str
    experiment: str

    @classmethod
    def of(cls, cfg: Any) -> Layout:
        """The layout a config's `experiment` section says (output_dir, summary_dir, checkpoint_dir, name)."""
        ex = cfg.experiment
        return cls(Path(ex.output_dir), ex.summary_dir, ex.checkpoint_dir, ex.name)

    @property
    def summaries(self) -> Path:
        return self.output_dir / self.summary_dir

    @property
    def checkpoints(self) -> Path:
        return self.output_dir / self.checkpoint_dir

    # ------------------------------------------------------------ this layout

    def sweep_folder(self) -> Path:
        """`<summary_dir>/_sweep/<experiment>/`: the sweep's summary, report and state."""
        return self.summaries / SWEEP_DIR / self.experiment

    def lock_file(self) -> Path:
        """`<summary_dir>/_sweep/.<experiment>.lock`, beside the summary folder."""
        return self.summaries / SWEEP_DIR / f".{self.experiment}.lock"

    def pending_estimates(self) -> Path:
        """`<summary_dir>/_sweep/.<experiment>.eta.csv`: the ETA lines of a run whose trials ended, kept there until
        its summary is swapped in (a kill in the summary phase loses nothing: the next run's summary takes them)."""
        return self.summaries / SWEEP_DIR / f".{self.experiment}.eta.csv"

    def trial_summary(self, model: str, resolution: int, seed: int) -> Path:
        return self.summaries / self.experiment / trial_part(model, resolution, seed)

    def trial_checkpoints(self, family: str, model: str, resolution: int, seed: int) -> Path:
        return self.checkpoints / self.experiment / family / trial_part(model, resolution, seed)

    # ------------------------------------------------------------ the layouts before experiment folders

    def seed_layout_summary(self, model: str, resolution: int, seed: int) -> Path:
        """The trial's folder in the seed layout without an experiment level (moved on its experiment's next run)."""
        return self.summaries / trial_part(model, resolution, seed)

    def seed_layout_checkpoints(self, family: str, model: str, resolution: int, seed: int) -> Path:
        return self.checkpoints / family / trial_part(model, resolution, seed)

    def single_seed_summary(self, model: str, resolution: int) -> Path:
        """`<summary_dir>/<model>/<res>/`: the single-seed layout's trial folder (used where it is)."""
        return self.summaries / str(model) / str(int(resolution))

    def single_seed_checkpoints(self, family: str, model: str, resolution: int) -> Path:
        return self.checkpoints / family / str(model) / str(int(resolution))

    def summary_candidates(self, model: str, resolution: int, seed: int) -> list[Path]:
        """Where a trial's summary folder may be, newest layout first (a reader checks result.json's key)."""
        return [
            self.trial_summary(model, resolution, seed),
            self.seed_layout_summary(model, resolution, seed),
            self.single_seed_summary(model, resolution),
        ]

    @classmethod
    def of_sweep_folder(cls, folder: str | Path) -> Layout:
        """The layout a sweep summary folder `<root>/_sweep/<experiment>/` belongs to (its summaries only: the
        checkpoint root is not known from there)."""
        folder = Path(folder)
        summaries = folder.parent.parent
        return cls(summaries.parent, summaries.name, "checkpoints", folder.name)
