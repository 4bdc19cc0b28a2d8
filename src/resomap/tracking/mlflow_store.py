"""MLflow runs through an explicit MlflowClient (no global active run), with retries and backoff.

The default store is a SQLite file in the project's output folder, so nothing needs a server; any tracking URI
from mlflow.yaml or MLFLOW_TRACKING_URI works too. Tracking failures never stop training: a call that still
fails after its retries is logged as a warning and reported by `Tracker.failures`.

A store that stays unreachable costs seconds, not minutes: MLflow's own HTTP retries are bounded (HTTP_ENV, set
unless the user set them), errors that a retry cannot fix (a bad value, a missing run) are not retried, and after
a call gives up the tracker is offline for `offline_s`: calls fail at once, then one is tried again. Results
logged while offline keep `tracked: false` and `resomap sync` sends them later.

A full disk (ENOSPC anywhere in the error, or SQLite's "database or disk is full": resomap.atomic.disk_full) is
not retried either: the first such call says it in one warning line (`disk_full` keeps it) and the tracker is
offline as above; the calls that fail while it is are recorded in `failures` without a line each.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from resomap.atomic import disk_full
from resomap.config.schema import Config
from resomap.tracking.views import config_view_tags

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_PARAM_LEN = 6000  # MLflow's limit on a param value is 6000 characters in recent versions
# MLflow's HTTP client retries a dead server for minutes by default (7 retries, backoff x2, 120 s timeout);
# the Tracker retries with its own backoff, so each HTTP request gets one quick retry and a 10 s timeout.
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
# MLflow error codes that mean the request itself is wrong: retrying cannot help.
PERMANENT_ERRORS = frozenset(
    {"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST", "INVALID_STATE", "BAD_REQUEST"}
)


class TrackingUnavailable(RuntimeError):
    """The store failed recently and the tracker is waiting before it tries again."""


def default_tracking_uri(cfg: Config) -> str:
    if cfg.mlflow.tracking_uri:
        return cfg.mlflow.tracking_uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return "sqlite:///" + str((Path(cfg.experiment.output_dir) / "mlflow.db").resolve())


def store_lock(uri: str) -> contextlib.AbstractContextManager:
    """Held while a SQLite store is opened (MLflow creates and migrates its tables then) and while an experiment is
    looked up or made: two processes starting on a fresh store do it one after the other, not racing (which ends
    in SQL warnings and an untracked run). Other stores (servers) need no lock."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    from resomap.locks import hold

    db = Path(uri[len("sqlite:///") :])
    db.parent.mkdir(parents=True, exist_ok=True)
    return hold(db.with_name(db.name + ".lock"), f"MLflow store set-up of {db}", wait=600.0)


def artifact_root(cfg: Config) -> str:
    """Where a new experiment keeps artifacts when the store is a local SQLite file."""
    return (Path(cfg.experiment.output_dir) / "mlartifacts").resolve().as_uri()


class Tracker:
    """One MLflow experiment; creates runs and logs to them by run id."""

    enabled = True

    def __init__(self, cfg: Config, retries: int | None = None, backoff_s: float = 0.5, offline_s: float = 60.0):
        self.cfg = cfg
        self.uri = default_tracking_uri(cfg)
        self.retries = max(1, retries if retries is not None else cfg.mlflow.retries)
        self.backoff_s = backoff_s
        self.offline_s = offline_s
        self._offline_until = 0.0
        self.failures: list[str] = []
        self.disk_full: str | None = None  # the full disk a call met (one line), until a call succeeds again
        self.experiment_name = cfg.mlflow.experiment or cfg.experiment.name
        if self.uri.startswith(("http:", "https:")):
            for name, value in HTTP_ENV.items():
                os.environ.setdefault(name, value)

    @functools.cached_property
    def client(self) -> Any:
        """Made on first use: opening a SQLite store creates its file and tables."""
        from mlflow import MlflowClient

        _quiet_disk_full_logs()
        db = self._store_file()
        try:
            with store_lock(self.uri):
                fresh = db is not None and not Path(db).exists()
                try:
                    return MlflowClient(tracking_uri=self.uri)
                except Exception:
                    if fresh:  # a store whose creation failed half-way (its tables half-migrated) holds nothing:
                        for leftover in (db, f"{db}-journal", f"{db}-wal", f"{db}-shm"):  # made afresh next time
                            Path(leftover).unlink(missing_ok=True)
                    raise
        except Exception as exc:
            self._note_disk_full("open the store", exc)
            raise

    @functools.cached_property
    def experiment_id(self) -> str:
        """Looked up (or created) on first use, so a run that fails its checks never touches the store."""
        return self._call("get experiment", self._experiment_id)

    # ---------------------------------------------------------------- plumbing
    @property
    def offline(self) -> bool:
        return time.monotonic() < self._offline_until

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.offline:
            why = f"the disk is full ({self.disk_full})" if self.disk_full else f"store {self.uri} unreachable"
            raise TrackingUnavailable(f"{why} a moment ago; not retried for {self.offline_s:.0f} s")
        delay = self.backoff_s
        for attempt in range(1, self.retries + 1):
            try:
                result = fn(*args, **kwargs)
                self._offline_until, self.disk_full = 0.0, None
                return result
            except Exception as exc:
                if self._note_disk_full(what, exc):
                    raise
                if _permanent(exc):
                    raise
                if attempt == self.retries:
                    self._offline_until = time.monotonic() + self.offline_s
                    raise
                log.warning("MLflow %s failed (%s); retry %d/%d in %.1fs", what, exc, attempt, self.retries, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise RuntimeError("unreachable")

    def _note_disk_full(self, what: str, exc: BaseException) -> bool:
        """True when `exc` is a full disk (resomap.atomic.disk_full): no retry can make room, so the tracker is
        offline for `offline_s` and says so in one warning line, the first time (`disk_full` keeps it)."""
        full = disk_full(exc, self._store_file())
        if full is None:
            return False
        self._offline_until = time.monotonic() + self.offline_s
        if self.disk_full is None:
            log.warning(
                "MLflow %s: %s; nothing more is logged to %s for now (`resomap sync` logs it later)",
                what,
                full,
                self.uri,
            )
        self.disk_full = str(full)
        return True

    def _store_file(self) -> str | None:
        """The SQLite file of a local store (what a full disk fails to write), else None."""
        return self.uri[len("sqlite:///") :] if self.uri.startswith("sqlite:///") else None

    def _soft(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A tracking call that must not stop training: retried, then recorded as a failure."""
        try:
            return self._call(what, fn, *args, **kwargs)
        except Exception as exc:
            msg = f"{what}: {type(exc).__name__}: {exc}"
            if self.disk_full is None:
                log.warning("MLflow gave up on %s", msg)
            else:  # the full disk is said once (_call)
                log.debug("MLflow gave up on %s", msg)
            self.failures.append(msg)
            return None

    def _experiment_id(self) -> str:
        """The experiment's id (created when missing), tagged as model training so the UI opens on its runs."""
        client = self.client
        with store_lock(self.uri):
            return self._get_or_create_experiment(client)

    def _get_or_create_experiment(self, client: Any) -> str:
        exp = client.get_experiment_by_name(self.experiment_name)
        if exp is None:
            location = artifact_root(self.cfg) if self.uri.startswith("sqlite:") else None
            exp_id = client.create_experiment(self.experiment_name, artifact_location=location)
            self._tag_experiment(client, exp_id, config_view_tags(self.cfg))
            return exp_id
        wanted = config_view_tags(self.cfg, exp.tags)  # an experiment made before ResoMap tagged it, or by hand
        self._tag_experiment(client, exp.experiment_id, {k: v for k, v in wanted.items() if exp.tags.get(k) != v})
        return exp.experiment_id

    def _tag_experiment(self, client: Any, exp_id: str, tags: Mapping[str, str]) -> None:
        """Set the experiment's `tags`; a store that refuses them (an older server, a file store's limits) gets one
        warning line and its runs are logged as ever (the UI then opens on MLflow's default runs table)."""
        try:
            for key, value in tags.items():
                client.set_experiment_tag(exp_id, key, value)
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            log.warning(
                "MLflow: the sweep view was not saved on experiment %s (%s); runs are logged as ever", exp_id, msg
            )

    def experiment_tags(self) -> dict[str, str]:
        """The experiment's tags (empty when the store cannot be reached)."""
        found = self._soft("read the experiment", self.client.get_experiment, self.experiment_id)
        return dict(found.tags) if found is not None else {}

    def tag_experiment(self, tags: Mapping[str, str]) -> None:
        """Set the experiment's `tags` (the sweep view's y ranges once a summary is made); refused: one warning."""
        self._tag_experiment(self.client, self.experiment_id, tags)

    # ---------------------------------------------------------------- runs
    def start_run(self, name: str, tags: Mapping[str, Any] | None = None, parent_run_id: str | None = None) -> str:
        tags = {k: str(v) for k, v in (tags or {}).items()}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run = self._call("create run", self.client.create_run, self.experiment_id, tags=tags, run_name=name)
        return run.info.run_id

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self._soft("end run", self.client.set_terminated, run_id, status)

    def reopen_run(self, run_id: str) -> None:
        """Mark a run RUNNING again (an interrupted attempt's run is reused, not duplicated)."""
        self._soft("reopen run", self.client.update_run, run_id, status="RUNNING")

    def find_runs(self, filter_string: str) -> list[Any]:
        return self._call("search runs", self.client.search_runs, [self.experiment_id], filter_string, max_results=1000)

    def get_run(self, run_id: str) -> Any:
        """The run (info, params, latest metrics, tags); raises when the store cannot be reached."""
        return self._call("get run", self.client.get_run, run_id)

    def metric_history(self, run_id: str, key: str) -> list[Any]:
        """Every logged point of one metric (.step, .value); raises when the store cannot be reached."""
        return self._call("metric history", self.client.get_metric_history, run_id, key)

    def artifact_paths(self, run_id: str) -> set[str]:
        """Paths of the run's artifacts, two levels deep ('summary.txt', 'figures/x.png'); raises when the store
        cannot be reached."""
        paths: set[str] = set()
        for item in self._call("list artifacts", self.client.list_artifacts, run_id):
            paths.add(item.path)
            if item.is_dir:
                paths |= {f.path for f in self._call("list artifacts", self.client.list_artifacts, run_id, item.path)}
        return paths

    def has_logged_model(self, run_id: str) -> bool:
        found = self._soft(
            "search models",
            self.client.search_logged_models,
            [self.experiment_id],
            filter_string=f"source_run_id = '{run_id}'",
        )
        return bool(found)

    # ---------------------------------------------------------------- logging
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_text(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self._soft("log params", self.client.log_batch, run_id, params=items[i : i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if is_number(v)]
        for i in range(0, len(items), 1000):
            self._soft("log metrics", self.client.log_batch, run_id, metrics=items[i : i + 1000])

    def replace_metrics(self, run_id: str, points: Mapping[str, Mapping[int, float]]) -> bool:
        """Make each key's logged points exactly ``points[key]`` ({step: value}; empty: the key removed), so that a
        value that changed is not a second point at its step. False (nothing done) where the store cannot: MLflow's
        API has no way to delete or overwrite a logged metric, so this deletes the key's rows in a SQL store
        (sqlite, PostgreSQL, MySQL: its `metrics` and `latest_metrics` tables) and logs the points again; an HTTP or
        file store keeps what it holds."""
        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        maker = getattr(store, "ManagedSessionMaker", None)
        if maker is None or not points:
            return False
        if not self._soft("rewrite metrics", self._delete_metrics, maker, run_id, list(points)):
            return False
        log_points(self, run_id, points)
        return True

    @staticmethod
    def _delete_metrics(maker: Any, run_id: str, keys: list[str]) -> bool:
        from sqlalchemy import text

        try:
            session_scope = maker(read_only=False)  # MLflow >= 3 marks write sessions
        except TypeError:
            session_scope = maker()
        with session_scope as session:
            for table in ("metrics", "latest_metrics"):
                for key in keys:
                    session.execute(
                        text(f"DELETE FROM {table} WHERE run_uuid = :run AND key = :key"), {"run": run_id, "key": key}
                    )
        return True

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in tags.items()]
        if items:
            self._soft("set tags", self.client.log_batch, run_id, tags=items)

    def delete_tag(self, run_id: str, key: str) -> None:
        """Remove a tag the run holds (a summary's tag that no longer applies)."""
        self._soft("delete tag", self.client.delete_tag, run_id, key)

    def log_artifact(self, run_id: str, path: str | Path, artifact_path: str | None = None) -> None:
        self._soft("log artifact", self.client.log_artifact, run_id, str(path), artifact_path)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._soft("log text", self.client.log_text, run_id, text, artifact_file)

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        self._soft("log figure", self.client.log_figure, run_id, figure, artifact_file)

    def log_images(self, run_id: str, images: Iterable[tuple[str, int, Any]]) -> None:
        """Step-indexed images (key, step, a PIL image or an image file) as MLflow's log_image(key=, step=) writes
        them (MLflow's image grid; ResoMap's step is the resolution), in one upload (resomap.tracking.images)."""
        from resomap.tracking.images import upload_step_images

        images = list(images)
        if images:
            self._soft("log images", upload_step_images, self.client, run_id, images)

    def log_inputs(self, run_id: str, datasets: list[tuple[Any, str]]) -> None:
        """(mlflow.data Dataset, context) pairs as the run's inputs: the table's Dataset column."""
        from mlflow.entities import DatasetInput, InputTag

        inputs = [
            DatasetInput(ds._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", context)])
            for ds, context in datasets
        ]
        if inputs:
            self._soft("log inputs", self.client.log_inputs, run_id, datasets=inputs)

    def log_model(self, run_id: str, model: Any, example: Any, name: str = "model") -> None:
        """mlflow.pytorch.log_model in MLflow's pt2 format (torch.export): a graph and weights, no pickle, so loading
        it runs no stored code (as checkpoints load with weights_only=True). Exported in eval mode, it computes in
        eval mode when reloaded. A model torch.export cannot capture is not logged: the run gets a
        `resomap.model_not_logged` tag with the reason, and the checkpoint stays the trained model's record."""
        try:
            self._call("log model", self._log_model, run_id, model, example, name)
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            if self.disk_full is not None:  # said once (_call); torch's error on a full disk is no export failure
                self.failures.append(f"log model: {self.disk_full}")
                return
            if _export_error(exc):
                log.warning("model of run %s not logged: torch.export failed (%s)", run_id, msg)
                self.set_tags(run_id, {"resomap.model_not_logged": msg})
                return
            log.warning("MLflow gave up on log model: %s", msg)
            self.failures.append(f"log model: {msg}")

    def _log_model(self, run_id: str, model: Any, example: Any, name: str) -> None:
        import mlflow
        import mlflow.pytorch

        previous, env_before = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")
        mlflow.set_tracking_uri(self.uri)
        # without pip in the environment (uv venvs) MLflow warns on every model that it cannot read pip's version
        env_log = logging.getLogger("mlflow.utils.environment")
        level = env_log.level
        env_log.setLevel(logging.ERROR)
        try:
            with mlflow.start_run(run_id=run_id), warnings.catch_warnings():
                # torch's pt2 packager warns that weights not on the CPU may load wrongly; the model is on the CPU here
                warnings.filterwarnings("ignore", message="No complete tensor found in the group", category=UserWarning)
                mlflow.pytorch.log_model(
                    model.eval(),
                    name=name,
                    input_example=example,
                    serialization_format="pt2",
                    pip_requirements=["torch", "torchvision", "timm"],
                )
        finally:
            env_log.setLevel(level)
            mlflow.set_tracking_uri(previous)
            # MLflow's setter also writes MLFLOW_TRACKING_URI: left set, every later Tracker of this process (an
            # adaptive sweep's next round, `resomap sync`) would take that store instead of its config's
            if env_before is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = env_before


class NullTracker:
    """The Tracker's public methods doing nothing: what a trial or sweep logs to when MLflow is off."""

    enabled = False
    uri = ""
    experiment_name = ""
    disk_full = None

    def __init__(self) -> None:
        self.failures: list[str] = []

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    def _no_runs(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    def _false(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def artifact_paths(self, run_id: str) -> set[str]:
        return set()

    def experiment_tags(self) -> dict[str, str]:
        return {}

    start_run = get_run = tag_experiment = _nothing
    find_runs = metric_history = _no_runs
    has_logged_model = replace_metrics = _false
    end_run = reopen_run = log_params = log_metrics = set_tags = delete_tag = _nothing
    log_artifact = log_text = log_figure = log_model = log_images = log_inputs = _nothing


class _NoDiskFullTraceback(logging.Filter):
    """Drops MLflow's own ERROR record (with the SQLAlchemy traceback) of a store write that failed on a full disk:
    MLflow raises the error after logging it, and the Tracker says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or disk_full(error) is None


_DB_LOGGER = "mlflow.store.db.utils"  # logs every SQLAlchemy error with its traceback, then raises it


def _quiet_disk_full_logs() -> None:
    """Install _NoDiskFullTraceback on MLflow's database logger (once per process)."""
    logger = logging.getLogger(_DB_LOGGER)
    if not any(isinstance(f, _NoDiskFullTraceback) for f in logger.filters):
        logger.addFilter(_NoDiskFullTraceback())


def warn_level(tracker: Any) -> int:
    """The level of a line saying that a tracking call failed: WARNING, or DEBUG once the tracker has said that the
    disk is full (one line for the whole stop, not one per call)."""
    return logging.DEBUG if getattr(tracker, "disk_full", None) else logging.WARNING


def make_tracker(cfg: Config) -> Tracker | NullTracker:
    """A Tracker when mlflow.enabled, else a NullTracker."""
    return Tracker(cfg) if cfg.mlflow.enabled else NullTracker()


def _permanent(exc: Exception) -> bool:
    """An error in the request itself (MLflow's 4xx codes), not in reaching the store."""
    return getattr(exc, "error_code", None) in PERMANENT_ERRORS or _export_error(exc)


def _export_error(exc: BaseException) -> bool:
    """torch.export could not capture the model (an error of torch, not of the store): retrying cannot help."""
    while exc is not None:
        if type(exc).__module__.split(".")[0] == "torch":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def log_points(tracker: Any, run_id: str, points: Mapping[str, Mapping[int, float]]) -> None:
    """Log key -> {step: value} with one batch per step (the tracker's log_metrics)."""
    by_step: dict[int, dict[str, float]] = {}
    for key, steps in points.items():
        for step, value in steps.items():
            by_step.setdefault(int(step), {})[key] = value
    for step, metrics in sorted(by_step.items()):
        tracker.log_metrics(run_id, metrics, step=step)


def is_number(value: Any) -> bool:
    """A metric value MLflow takes: an int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _param_text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_LEN else text[: MAX_PARAM_LEN - 3] + "..."
