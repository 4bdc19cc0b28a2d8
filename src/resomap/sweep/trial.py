"""One trial: a model at one resolution and seed, from data to a tracked, evaluated, summarised run."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.config import Config, save_resolved, to_dict

log = logging.getLogger(__name__)

TRIAL_KEY_TAG = "resomap.trial_key"
# Settings that change how a trial is run or logged but not what it computes: left out of its key.
_KEY_EXCLUDE = ("sweep", "mlflow", "training.progress", "system.num_workers", "system.persistent_workers")


@dataclasses.dataclass(frozen=True)
class Trial:
    model: str
    resolution: int
    seed: int
    cfg: Config

    @property
    def key(self) -> str:
        return trial_key(self.cfg, self.model, self.resolution, self.seed)

    @property
    def name(self) -> str:
        """`<model>@<resolution>`, plus the seed when the sweep has several."""
        base = f"{self.model}@{self.resolution}"
        return base if len(self.cfg.sweep.seeds) <= 1 else f"{base}#s{self.seed}"

    def checkpoint_dir(self, family: str) -> Path:
        out = Path(self.cfg.experiment.output_dir) / self.cfg.experiment.checkpoint_dir
        folder = out / family / self.model / str(self.resolution)
        return folder if len(self.cfg.sweep.seeds) <= 1 else folder / f"seed{self.seed}"

    @property
    def summary_dir(self) -> Path:
        out = Path(self.cfg.experiment.output_dir) / self.cfg.experiment.summary_dir
        folder = out / self.model / str(self.resolution)
        return folder if len(self.cfg.sweep.seeds) <= 1 else folder / f"seed{self.seed}"


def trial_key(cfg: Config, model: str, resolution: int, seed: int) -> str:
    """A stable hash of everything that decides what the trial computes."""
    tree = to_dict(cfg)
    for dotted in _KEY_EXCLUDE:
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node.pop(leaf, None)
    tree["trial"] = {"model": model.lower(), "resolution": resolution, "seed": seed}
    text = json.dumps(tree, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclasses.dataclass
class TrialResult:
    key: str
    name: str
    model: str
    family: str
    resolution: int
    seed: int
    status: str  # FINISHED | FAILED
    test: dict[str, float] = dataclasses.field(default_factory=dict)
    best_val: float | None = None
    epochs_run: int = 0
    train_time_s: float = 0.0
    best_checkpoint: str | None = None
    run_id: str | None = None
    cross_resolution: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    profile: dict[str, Any] = dataclasses.field(default_factory=dict)
    explain: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str | None = None
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)  # per-epoch metrics
    tracked: bool = False  # every MLflow call for this trial succeeded (else `resomap sync` logs it later)
    notes: list[str] = dataclasses.field(default_factory=list)
    finished_at: float = dataclasses.field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, default=str)

    @classmethod
    def from_json(cls, text: str) -> TrialResult:
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary_text(self) -> str:
        lines = [f"trial {self.name} ({self.family}), seed {self.seed}, key {self.key}: {self.status}"]
        if self.error:
            lines.append(f"error: {self.error}")
        lines.append(f"epochs run: {self.epochs_run}, training time: {self.train_time_s:.1f} s")
        for k, v in sorted(self.test.items()):
            lines.append(f"{k}: {v:.4f}")
        for res, metrics in sorted(self.cross_resolution.items(), key=lambda kv: int(kv[0])):
            acc = metrics.get("accuracy", float("nan"))
            f1 = metrics.get("macro_f1", float("nan"))
            lines.append(f"tested at {res} px: accuracy {acc:.4f}, macro-F1 {f1:.4f}")
        for k, v in sorted(self.profile.items()):
            lines.append(f"profile {k}: {v}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines) + "\n"

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "result.json"
        write_text(path, self.to_json())
        write_text(folder / "summary.txt", self.summary_text())
        return path


def save_trial_config(trial: Trial, folder: Path) -> Path:
    return save_resolved(trial.cfg, folder / "config.yaml")
