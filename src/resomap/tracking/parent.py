"""The sweep's parent run: one per sweep identity, whatever its grid.

`open_parent` finds it by its sweep-identity tag (the hash of what the sweep computes apart from its models,
resolutions and seeds: `resomap.sweep.identity.sweep_identity`), so adding seeds, resolutions or models to a finished
sweep reuses its parent; a parent made before identities (tagged with the hash of its trial keys) is found by that
key and re-tagged. The grid of the latest round is in the parent's `resomap.grid.*` tags (params cannot change).
It has no params: the few settings a reader compares sweeps by (`PARENT_SETTINGS`) are its `resomap.setting.*` tags
and the whole resolved config is the artifact config/sweep_config.yaml, because MLflow's image cards print a run's
params above its image (eight of them pushed the parent's probe maps out of their cards). `close_parent` tags
the children, moves under the parent any child of a planned trial that an earlier round put
elsewhere, and closes it once every planned trial has a result. `publish_adaptive` puts an adaptive sweep's record
on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from resomap.config import Config, dump_yaml, flatten
from resomap.tracking.mlflow_store import warn_level
from resomap.tracking.origin import ORIGIN_TAG, origin, own_runs

log = logging.getLogger(__name__)

SWEEP_KEY_TAG = "resomap.sweep_key"
GRID_KEYS = ("sweep.models", "sweep.resolutions", "sweep.seeds", "sweep.include", "sweep.exclude")
SETTING_TAG = "resomap.setting."
PARENT_SETTINGS = (
    "experiment.task",
    "data.dataset",
    "data.limit",
    "training.epochs",
    "training.batch_size",
    "training.optimizer.lr",
    "stats.margin",
    "system.precision",  # pinned once for every trial (sweep.identity.pin_precision)
    "system.channels_last",
)
CONFIG_ARTIFACT = "config/sweep_config.yaml"


def open_parent(
    tracker: Any, cfg: Config, key: str, trials: int, reopen: bool = True, legacy_key: str | None = None
) -> str | None:
    """The sweep's run, found by its identity tag `key` (else by `legacy_key`, the older grid hash) or created
    (`trials`: how many the sweep plans); None (and a recorded failure) when the store is unreachable: the sweep
    goes on and the parent is found or made again at its end or by `resomap sync`."""
    if not tracker.enabled:
        return None
    flat = flatten(cfg)
    grid = {f"resomap.grid.{k.split('.', 1)[1]}": flat[k] for k in GRID_KEYS}
    try:
        here = origin(cfg)
        run_id = _find(tracker, key, legacy_key, here)
        if run_id is not None:
            if reopen:
                tracker.reopen_run(run_id)
            tracker.set_tags(run_id, {SWEEP_KEY_TAG: key, "resomap.trials": trials, ORIGIN_TAG: here, **grid})
            return run_id
        tags = {SWEEP_KEY_TAG: key, "resomap.kind": "sweep", "resomap.trials": trials, ORIGIN_TAG: here, **grid}
        run_id = tracker.start_run(f"sweep {cfg.experiment.name}", tags=tags)
    except Exception as exc:
        tracker.failures.append(f"open sweep run: {type(exc).__name__}: {exc}")
        log.log(
            warn_level(tracker),
            "MLflow unreachable (%s); the sweep runs untracked and `resomap sync` logs it later",
            exc,
        )
        return None
    tracker.set_tags(run_id, {SETTING_TAG + k: flat[k] for k in PARENT_SETTINGS if k in flat})
    tracker.log_text(run_id, dump_yaml(cfg), CONFIG_ARTIFACT)
    return run_id


def _find(tracker: Any, key: str, legacy_key: str | None, here: str) -> str | None:
    """This folder's parent (resomap.tracking.origin.own_runs): another folder's of the same sweep is not it."""
    for tag in [key, legacy_key] if legacy_key else [key]:
        found = own_runs(tracker.find_runs(f"tags.`{SWEEP_KEY_TAG}` = '{tag}'"), here)
        if found:
            return min(found, key=lambda r: r.info.start_time).info.run_id  # the first, if a race made two
    return None


def close_parent(tracker: Any, parent: str | None, results: Iterable[Any], planned: int) -> bool:
    """Child-run tags on the parent, every child under it; closed FINISHED / FAILED once every planned trial has a
    result (each with name, run_id and status: resomap.trial_result.TrialResult)."""
    if parent is None:
        return False
    results = list(results)
    children = {f"resomap.child.{r.name.replace('@', ' at ')}": r.run_id for r in results if r.run_id}
    tracker.set_tags(parent, children)
    adopt_children(tracker, parent, {r.run_id for r in results if r.run_id})
    if len(results) != planned:
        return False
    before = len(tracker.failures)
    tracker.end_run(parent, "FINISHED" if all(r.status == "FINISHED" for r in results) else "FAILED")
    return len(tracker.failures) == before


def adopt_children(tracker: Any, parent: str, run_ids: set[str]) -> None:
    """Nest the runs `run_ids` under `parent` where they are not (a trial of an earlier round that opened its own
    parent, or one trained while the parent could not be reached)."""
    try:
        runs = tracker.find_runs("tags.`resomap.kind` = 'trial'")
    except Exception as exc:  # soft: the tags are a view, the results are on disk
        log.log(warn_level(tracker), "MLflow: children of %s not checked (%s)", parent, exc)
        return
    for run in runs:
        if run.info.run_id in run_ids and run.data.tags.get("mlflow.parentRunId") != parent:
            tracker.set_tags(run.info.run_id, {"mlflow.parentRunId": parent})


def publish_adaptive(tracker: Any, parent: str, record: dict[str, Any], files: Iterable[Path]) -> None:
    """An adaptive sweep's record (resomap.sweep.adaptive) on its parent run: how it stopped (tag), trials used
    against the full grid (metrics), each model's look and alpha (tags), and the rewritten summary files and
    report (artifacts)."""
    from resomap.tracking.sweep_run import log_changed, mlflow_name

    metrics = {
        "adaptive/trials_used": record["trials_used"],
        "adaptive/full_grid_trials": record["full_grid_trials"],
        "adaptive/rounds": len(record["rounds"]),
    }
    tags = {"resomap.adaptive": f"{record['stopped']} ({record['spending']}, {record['planned_looks']} looks)"}
    for model, m in record["models"].items():
        at = f"look {m['decided_at']} (alpha {m['alpha']:.4g})" if m["decided_at"] else "undecided"
        stop = f"; {m['stopped']} (look {m['stopped_at']})" if m.get("stopped") else ""
        tags[f"resomap.adaptive.{mlflow_name(model)}"] = f"{at}; seeds {m['seeds']}{stop}"
    log_changed(tracker, parent, metrics, tags)
    for path in files:
        tracker.log_artifact(parent, path, None if path.name == "report.html" else "summary")
