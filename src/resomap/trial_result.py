"""What a trial found: `TrialResult`, the one result type (result.json is its JSON), holding the typed parts the
stages produced (resomap.stages: test metrics, cross-resolution metrics, profile, explanation summary) and where it
was computed. It sits below resomap.sweep (which runs trials) and resomap.analysis (which re-evaluates their
checkpoints); `resomap.sweep.trial.TrialResult` is the same class.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.records import environment as current_environment
from resomap.stages import Evaluation, ExplainSummary, ProfileSummary, known_fields
from resomap.tasks.evaluation import EvalMetrics

__all__ = ["DISK_FULL", "RETRIED_FAILURES", "TrialResult"]

DISK_FULL = "disk_full"  # failure_kind of a trial that failed for want of disk space (ENOSPC)
RETRIED_FAILURES = frozenset({DISK_FULL})  # failures a plain rerun of the sweep retries: the cause may be gone


@dataclasses.dataclass
class TrialResult:
    """What a trial (or `resomap analyze` of its checkpoint) found; result.json is its JSON (to_json/from_json)."""

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
    cross_resolution: dict[str, EvalMetrics] = dataclasses.field(default_factory=dict)  # test resolution -> metrics
    profile: ProfileSummary | None = None
    explain: ExplainSummary | None = None
    error: str | None = None
    # why a FAILED trial failed, when it is a kind the sweep knows (DISK_FULL); None: any other error. A plain
    # rerun of the sweep retries the kinds of RETRIED_FAILURES, the others only with --rerun-failed
    failure_kind: str | None = None
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)  # per-epoch metrics
    tracked: bool = False  # every MLflow call for this trial succeeded (else `resomap sync` logs it later)
    notes: list[str] = dataclasses.field(default_factory=list)
    finished_at: float = dataclasses.field(default_factory=time.time)
    predictions: str | None = None  # per-test-image records beside result.json (resomap.records), when written
    # versions of python and the libraries, the platform and the device this result was computed with
    environment: dict[str, str | None] = dataclasses.field(default_factory=current_environment)
    # what it was trained on: name, options, digest of the images and splits, split sizes, classes (data_record)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    task: str = ""  # experiment.task (resomap.tasks); "" in results written before it was recorded
    # did it train enough: best epoch, still improving at the last epoch, stop reason, undertrained (+ reason);
    # resomap.training.convergence's record ({} for results written before it, and for `resomap analyze`)
    convergence: dict[str, Any] = dataclasses.field(default_factory=dict)
    # its fit does not depend on the training seed, by its model's spec (register_model's `deterministic`); False
    # for results written before it was recorded
    deterministic: bool = False

    def apply(self, evaluation: Evaluation) -> None:
        """Take the test, cross-resolution, profile and explanation results of resomap.stages.evaluate_trained."""
        self.test = dict(evaluation.test.metrics)
        self.cross_resolution = dict(evaluation.cross_resolution)
        self.profile, self.explain = evaluation.profile, evaluation.explain
        self.predictions = evaluation.predictions.name if evaluation.predictions else None
        if evaluation.device:
            self.environment["device"] = evaluation.device
        if evaluation.explain is not None:
            self.notes += [f"explainer {m} failed: {r}" for m, r in evaluation.explain.failed.items()]

    @property
    def cause(self) -> str:
        """Why the trial did not finish, in one line: its error; a result without one (written by hand, or an
        interrupted attempt of an earlier version) says its status and where the traceback would be."""
        return self.error or f"ended {self.status} with no error recorded (see failure.txt in its summary folder)"

    def to_dict(self) -> dict[str, Any]:
        """The JSON tree of result.json (a missing profile or explanation is {}, as files have always said)."""
        data = dataclasses.asdict(self)
        data["profile"] = data["profile"] or {}
        data["explain"] = data["explain"] or {}
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        fields = known_fields(cls, data)
        cross = fields.get("cross_resolution") or {}
        fields["cross_resolution"] = {str(r): EvalMetrics.from_dict(m) for r, m in cross.items()}
        fields["profile"] = ProfileSummary.from_dict(fields.get("profile") or {})
        fields["explain"] = ExplainSummary.from_dict(fields.get("explain") or {})
        fields["environment"] = dict(fields.get("environment") or {})  # unknown for results written before it
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str) -> TrialResult:
        return cls.from_dict(json.loads(text))

    def summary_text(self) -> str:
        lines = [f"trial {self.name} ({self.family}), seed {self.seed}, key {self.key}: {self.status}"]
        if self.error:
            lines.append(f"error: {self.error}")
        lines.append(f"epochs run: {self.epochs_run}, training time: {self.train_time_s:.1f} s")
        conv = self.convergence or {}
        if conv:
            flag = f"UNDERTRAINED: {conv.get('undertrained_reason')}" if conv.get("undertrained") else "trained enough"
            lines.append(
                f"convergence: best epoch {conv.get('best_epoch')} by {conv.get('monitor')}, still improving at the "
                f"last epoch: {'yes' if conv.get('still_improving') else 'no'}; stopped: {conv.get('stop_detail')}; "
                + flag
            )
        for k, v in sorted(self.test.items()):
            lines.append(f"{k}: {v:.4f}")
        for res, metrics in sorted(self.cross_resolution.items(), key=lambda kv: int(kv[0])):
            lines.append(f"tested at {res} px: accuracy {metrics.accuracy:.4f}, macro-F1 {metrics.macro_f1:.4f}")
        for k, v in sorted(dataclasses.asdict(self.profile).items() if self.profile else []):
            lines.append(f"profile {k}: {f'{len(v)} values (result.json)' if isinstance(v, list) else v}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines) + "\n"

    def save_summary(self, folder: Path) -> Path:
        """summary.txt (atomically), written before the result is published (its run holds the file)."""
        folder.mkdir(parents=True, exist_ok=True)
        return write_text(folder / "summary.txt", self.summary_text())

    def save(self, folder: Path) -> Path:
        """summary.txt, then result.json (atomically, each): result.json is written last, so a write that fails
        (a full disk) leaves no new result saying more than its folder holds."""
        self.save_summary(folder)
        return self.save_result(folder)

    def save_result(self, folder: Path) -> Path:
        """result.json (atomically). A trial writes it once, after publishing (resomap.sweep.trial): its `tracked`
        and `run_id` then say what the MLflow run holds."""
        return write_text(folder / "result.json", self.to_json())
