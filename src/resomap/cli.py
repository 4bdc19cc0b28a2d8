"""The `resomap` command: argument parsing, printing and exit codes (0 ok, 1 a trial failed, 2 bad input)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from resomap.cli_args import OneLineParser, positive_int
from resomap.errors import ResoMapError

log = logging.getLogger("resomap")


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-dir", default="configs", help="folder of the YAML files (default: configs)")
    p.add_argument("--preset", help="a file of configs/presets/ without .yaml, merged after the config files")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. training.epochs=3")


def _load(args: argparse.Namespace, extra: dict[str, Any] | None = None):
    from resomap.config import load

    return load(args.config_dir, args.preset, args.overrides, extra)


# ---------------------------------------------------------------- commands


def cmd_train(args: argparse.Namespace) -> int:
    """One trial; under torchrun (WORLD_SIZE > 1) one DDP process per rank, rank 0 writes and tracks."""
    from resomap import models
    from resomap.runtime import resolve_device
    from resomap.training import distributed

    extra: dict[str, Any] = {"sweep.models": [args.model], "sweep.resolutions": [args.resolution]}
    if args.epochs is not None:
        extra["training.epochs"] = args.epochs
    cfg = _load(args, extra)
    models.get_spec(args.model)  # unknown names fail before anything is written
    cfg = _single_seed(cfg, cfg.experiment.seed)
    with distributed.process_group(resolve_device(cfg.system)) as device:
        return _train(args, cfg, device)


def _train(args: argparse.Namespace, cfg: Any, device: Any) -> int:
    from resomap.runtime import describe_device
    from resomap.sweep import Trial, run_trial
    from resomap.tracking import NullTracker, make_tracker
    from resomap.training import distributed

    where = distributed.describe()
    print(f"device: {describe_device(device)}" + (f", {where}" if where else ""))
    rank0 = distributed.is_rank0()
    tracker = make_tracker(cfg) if rank0 else NullTracker()
    if tracker.enabled:
        print(f"MLflow: {tracker.uri} (experiment '{tracker.experiment_name}')")
    trial = Trial(args.model.lower(), args.resolution, cfg.experiment.seed, cfg)
    result = run_trial(trial, tracker=tracker, fresh=args.fresh, reraise=True)
    if not rank0:
        return 0 if result.status == "FINISHED" else 1
    print(result.summary_text(), end="")
    print(f"summary: {trial.summary_dir}")
    if result.best_checkpoint:
        print(f"best checkpoint: {result.best_checkpoint}")
    return 0 if result.status == "FINISHED" else 1


def _single_seed(cfg, seed: int):
    from resomap.config import with_overrides

    return with_overrides(cfg, {"sweep.seeds": [seed]}, "command line")


def cmd_sweep(args: argparse.Namespace) -> int:
    from resomap.runtime import describe_device, resolve_device
    from resomap.sweep import describe_plan, plan, run_sweep
    from resomap.training import distributed

    if distributed.env() is not None:
        from resomap.errors import ConfigError

        raise ConfigError("resomap sweep does not run under torchrun; use `torchrun ... resomap.cli train` per trial")
    extra = {"sweep.executor": args.executor} if args.executor else None
    cfg = _load(args, extra)
    if args.dry_run:
        trials = plan(cfg)
        states = describe_plan(trials)
        print(f"sweep '{cfg.experiment.name}': {len(trials)} trials ({cfg.sweep.executor} executor)")
        for trial, state in states:
            print(f"  {trial.name:<28} key {trial.key}  {state}")
        counts = {s: sum(1 for _, st in states if st == s) for s in ("done", "failed", "partial", "pending")}
        print("  " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        return 0
    print(f"device: {describe_device(resolve_device(cfg.system))}")
    outcome = run_sweep(cfg, rerun_failed=args.rerun_failed or None, report=print)
    print(f"summary: {outcome.summary_dir}/summary.csv, figures: {outcome.summary_dir}/figures/")
    for r in outcome.failed:
        print(f"FAILED {r.name}: {r.error}")
    if outcome.parent_run_id:
        from resomap.tracking import default_tracking_uri

        print(f"MLflow: parent run {outcome.parent_run_id} in {default_tracking_uri(cfg)}; browse with: resomap ui")
    return 1 if outcome.failed else 0


def cmd_sync(args: argparse.Namespace) -> int:
    """Log the sweep's results that are not in MLflow yet (trained while the store was unreachable)."""
    from resomap.errors import ConfigError
    from resomap.sweep import sync_sweep
    from resomap.tracking import default_tracking_uri

    cfg = _load(args)
    if not cfg.mlflow.enabled:
        raise ConfigError("mlflow.enabled is false: nothing to sync (set mlflow.enabled=true)")
    report = sync_sweep(cfg)
    print(report.line())
    for name, reason in report.failed.items():
        print(f"not synced {name}: {reason}")
    if report.parent_run_id:
        print(f"MLflow: parent run {report.parent_run_id} in {default_tracking_uri(cfg)}")
    return 0 if report.ok else 1


def cmd_ui(args: argparse.Namespace) -> int:
    from resomap.tracking.ui import start_ui

    cfg = _load(args)
    proc = start_ui(cfg, args.host, args.port, args.workers)
    print(f"MLflow UI: http://{args.host}:{args.port}  (Ctrl-C stops it)")
    print("In an experiment, choose 'Model training' to see the runs table (MLflow 3 opens on 'Overview').")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop the server with us
        proc.terminate()
        proc.wait(timeout=30)
        return 0


def cmd_models(args: argparse.Namespace) -> int:
    from resomap.models import model_table

    rows = model_table()
    print(f"{'name':<22}{'family':<14}{'params (M)':>11}  CAM layer")
    for row in rows:
        print(f"{row[0]:<22}{row[1]:<14}{row[2]:>11.2f}  {row[3]}")
    print("any timm model: timm:<name> (e.g. timm:resnet10t)")
    return 0


def cmd_explainers(args: argparse.Namespace) -> int:
    from resomap.explain import explainer_meta, list_explainers

    for name in list_explainers():
        meta = explainer_meta(name)
        notes = ", ".join(k for k in ("needs_spatial_layer", "slow") if meta.get(k))
        print(f"{name:<24}{notes}")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from resomap.data import list_datasets

    for name in list_datasets():
        print(name)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.doc:
        from resomap.config.docs import config_reference, sync_readme

        if args.write:
            changed = sync_readme(args.write)
            print(f"{args.write}: config reference {'updated' if changed else 'already current'}")
        else:
            print(config_reference(), end="")
        return 0
    from resomap.config import dump_yaml

    print(dump_yaml(_load(args)), end="")
    return 0


# ---------------------------------------------------------------- parser and main


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="resomap", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    p = sub.add_parser("train", help="train one model at one resolution")
    p.add_argument("--model", required=True, help="a registry name (resomap models) or timm:<name>")
    p.add_argument("--resolution", required=True, type=positive_int, help="input side in pixels")
    p.add_argument("--epochs", type=positive_int, help="shorthand for training.epochs=N")
    p.add_argument("--fresh", action="store_true", help="discard this trial's checkpoints instead of resuming")
    _add_config_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sweep", help="train every model x resolution x seed of sweep.yaml (resumable)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and each trial's state, train nothing")
    p.add_argument("--rerun-failed", action="store_true", help="run trials that failed before again")
    p.add_argument("--executor", help="local | local-gpus | ray (default: sweep.executor)")
    _add_config_args(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("sync", help="log to MLflow the sweep results written while the store was unreachable")
    _add_config_args(p)
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("ui", help="start the MLflow UI over the project's tracking store")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=positive_int, default=5000, help="port (default 5000)")
    p.add_argument("--workers", type=positive_int, help="server worker processes (default: cores / 2)")
    _add_config_args(p)
    p.set_defaults(func=cmd_ui)

    from resomap import cli_analysis, cli_perf

    cli_perf.add_commands(sub)
    cli_analysis.add_commands(sub)

    p = sub.add_parser("models", help="list the registered models")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("explainers", help="list the registered explanation methods")
    p.set_defaults(func=cmd_explainers)
    p = sub.add_parser("datasets", help="list the registered datasets")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("config", help="print the resolved config (or --doc: the reference)")
    p.add_argument("--doc", action="store_true", help="print the config reference in markdown")
    p.add_argument("--write", metavar="README", help="with --doc: replace the reference block in this file")
    _add_config_args(p)
    p.set_defaults(func=cmd_config)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("mlflow", "alembic", "urllib3", "matplotlib", "PIL", "git"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args)
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # mlflow probes git; stay quiet outside a repo
    warnings.filterwarnings("ignore", category=FutureWarning)  # libraries' deprecation notices, not ours
    try:
        return int(args.func(args) or 0)
    except ResoMapError as exc:
        print(f"resomap: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("resomap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
