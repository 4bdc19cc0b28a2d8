"""`resomap train`, `resomap sweep` and `resomap sync`."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

from resomap.cli.args import add_config_args, load_config, positive_int, resolution


def cmd_train(args: argparse.Namespace) -> int:
    """One trial; under torchrun (WORLD_SIZE > 1) one DDP process per rank, rank 0 writes and tracks."""
    extra: dict[str, Any] = {"sweep.models": [args.model], "sweep.resolutions": [args.resolution]}
    if args.epochs is not None:
        extra["training.epochs"] = args.epochs
    cfg = load_config(args, extra, inputs="--resolution")  # config mistakes end here, most before torch loads
    from resomap import models
    from resomap.config import with_overrides
    from resomap.runtime import resolve_device
    from resomap.training import distributed

    models.get_spec(args.model)  # unknown names fail before anything is written
    device = resolve_device(cfg.system)  # no GPU for system.device=cuda: fails here, before anything is created
    cfg = with_overrides(cfg, {"sweep.seeds": [cfg.experiment.seed]}, "command line")
    cfg, why = _pinned(cfg)
    _check_size(args, cfg)  # below the model's smallest input side: before anything is created
    _check_memory(args, cfg)  # activations that cannot fit: before anything is created
    with distributed.process_group(device) as device:
        return _train(args, cfg, device, why)


def _check_size(args: argparse.Namespace, cfg: Any) -> None:
    from resomap.errors import ConfigError
    from resomap.sweep.plan import input_minimum

    smallest = input_minimum(args.model, cfg)
    if smallest is not None and args.resolution < smallest:
        raise ConfigError(
            f"--resolution: {args.model} needs inputs of at least {smallest} px (its layers shrink smaller ones "
            f"away), got {args.resolution}"
        )


def _check_memory(args: argparse.Namespace, cfg: Any) -> None:
    from resomap.cli.preflight import dataset_channels
    from resomap.sweep import Trial
    from resomap.sweep.plan import check_memory

    check_memory(
        [Trial(args.model.lower(), args.resolution, cfg.experiment.seed, cfg)], dataset_channels(cfg.data.dataset)
    )


def _check_data(args: argparse.Namespace, trial: Any, device: Any) -> None:
    """The trial's data checks (sweep.trial.prepare_data: unreadable images, the split, the probe set), quietly:
    what the data says on the way (its size, the cache) is said once, by the run, which then finds the images
    decoded in memory."""
    from resomap.sweep.trial import prepare_data

    logger = logging.getLogger("resomap")
    level = logger.level
    if not args.verbose:
        logger.setLevel(logging.ERROR)
    try:
        prepare_data(trial, trial.cfg, device)
    finally:
        logger.setLevel(level)


def _pinned(cfg: Any) -> tuple[Any, str]:
    """The config with system.precision=auto resolved (sweep.identity.pin_precision), and why that precision."""
    from resomap.sweep.identity import pin_precision, precision_choice

    _, why = precision_choice(cfg)
    return pin_precision(cfg), why


def _train(args: argparse.Namespace, cfg: Any, device: Any, why: str) -> int:
    from resomap.runtime import describe_device
    from resomap.sweep import Trial, run_trial
    from resomap.tracking import NullTracker, make_tracker
    from resomap.training import distributed

    trial = Trial(args.model.lower(), args.resolution, cfg.experiment.seed, cfg)
    _check_data(args, trial, device)  # bad data ends here in one line, before anything is printed or written
    where = distributed.describe()
    print(f"device: {describe_device(device)}" + (f", {where}" if where else ""))
    print(f"precision: {cfg.system.precision} ({why})")
    rank0 = distributed.is_rank0()
    tracker = make_tracker(cfg) if rank0 else NullTracker()
    if tracker.enabled:
        print(f"MLflow: {tracker.uri} (experiment '{tracker.experiment_name}')")
    if rank0:  # its folders of the layout before experiment folders, moved into its experiment's
        from resomap.sweep.migrate import migrate_trial

        moved = migrate_trial(trial)
        if moved:
            print(moved)
    result = run_trial(trial, tracker=tracker, fresh=args.fresh, reraise=True)
    if not rank0:
        return 0 if result.status == "FINISHED" else 1
    print(result.summary_text(), end="")
    print(f"summary: {trial.summary_dir}")
    if result.best_checkpoint:
        print(f"best checkpoint: {result.best_checkpoint}")
    return 0 if result.status == "FINISHED" else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    import os

    from resomap.errors import ConfigError

    if os.environ.get("WORLD_SIZE") not in (None, "", "1"):
        raise ConfigError("resomap sweep does not run under torchrun; use `torchrun ... resomap.cli train` per trial")
    extra = {"sweep.executor": args.executor} if args.executor else None
    cfg = load_config(args, extra, inputs="sweep.resolutions")  # config mistakes end here, most before torch loads
    from resomap.runtime import describe_device, resolve_device
    from resomap.sweep import run_sweep
    from resomap.sweep.plan import check_grid
    from resomap.sweep.power import power_lines
    from resomap.trial_result import DISK_FULL

    cfg, why = _pinned(cfg)
    from resomap.sweep.cluster import placed

    cfg = placed(cfg)  # sweep.ray.storage: where the sweep's files are
    skipped = check_grid(cfg)  # pairs below their model's smallest input side: refused here, or left out
    if args.dry_run:
        return _dry_run(cfg, why, skipped, args.rerun_failed)
    if not args.verbose:  # one line per trial (run_sweep's report); each trial's detail with -v
        logging.getLogger("resomap").setLevel(logging.WARNING)

    def preamble() -> list[str]:
        return [
            f"device: {describe_device(resolve_device(cfg.system))}",
            f"precision: {cfg.system.precision} ({why}); every trial of the sweep uses it",
            *power_lines(cfg),
        ]

    report = _said_first(preamble)  # after the sweep's checks and lock: a refusal is the only line
    if cfg.sweep.adaptive.enabled:  # rounds of run_sweep until every model is decided (sweep.adaptive)
        from resomap.sweep.adaptive import run_adaptive
        from resomap.sweep.plan import check_data

        todo = _todo(cfg, args.rerun_failed)
        if todo:  # its first round's line comes before run_sweep's checks: bad data is refused before it
            check_data(todo)
        outcome = run_adaptive(cfg, rerun_failed=args.rerun_failed or None, report=report, wait=args.wait).outcome
    else:
        outcome = run_sweep(cfg, rerun_failed=args.rerun_failed or None, report=report, wait=args.wait)
    print(f"summary: {outcome.summary_dir}/summary.csv, figures: {outcome.summary_dir}/figures/")
    if (outcome.summary_dir / "report.html").is_file():
        print(f"report: {(outcome.summary_dir / 'report.html').resolve().as_uri()}")
    for r in outcome.failed:
        if r.failure_kind == DISK_FULL:  # its line above named the file: what to do instead
            print(
                f"FAILED {r.name}: the disk was full; free some space, then run the sweep again: it retries the trial"
            )
        else:
            print(f"FAILED {r.name}: {r.cause}")
    if outcome.parent_run_id:
        from resomap.tracking import default_tracking_uri

        print(f"MLflow: parent run {outcome.parent_run_id} in {default_tracking_uri(cfg)}; browse with: resomap ui")
    return 1 if outcome.failed else 0


def _dry_run(cfg: Any, why: str, skipped: list[tuple[str, int, int]], rerun_failed: bool) -> int:
    """`resomap sweep --dry-run`: each planned trial with its key and state, the pairs left out, the counts, the
    power plan (and the adaptive plan); nothing is run or written. Data the sweep would refuse is refused here
    the same way (exit 2)."""
    from resomap.sweep import describe_plan, plan
    from resomap.sweep.plan import STATES, check_data
    from resomap.sweep.power import power_lines

    trials = plan(cfg)
    states = describe_plan(trials)
    todo = _todo(cfg, rerun_failed, states)
    said = check_data(todo, record=False) if todo else []
    print(f"sweep '{cfg.experiment.name}': {len(trials)} trials ({cfg.sweep.executor} executor)")
    print(f"precision: {cfg.system.precision} ({why})")
    for line in said:  # the image files' bit depth when deeper than 8 bits
        print(line)
    for trial, state in states:
        print(f"  {trial.name:<28} key {trial.key}  {state}")
    seeds = cfg.sweep.seeds
    for model, res, smallest in skipped:  # named as the trials are (sweep.identity.Trial.name)
        for seed in seeds:
            name = f"{model}@{res}" + (f"/seed{seed}" if len(seeds) > 1 else "")
            print(f"  {name:<28} skipped: {model} needs inputs of at least {smallest} px")
    counts = {s: sum(1 for _, st in states if st == s) for s in STATES}
    counts["skipped"] = len(skipped) * len(seeds)
    shown = [f"{n} {s}" for s, n in counts.items() if n or s not in ("unreadable", "skipped")]
    print("  " + ", ".join(shown))
    print("\n".join(power_lines(cfg)))
    if cfg.sweep.adaptive.enabled:
        from resomap.sweep.adaptive import plan_lines

        print("\n".join(plan_lines(cfg)))
    return 0


def _todo(cfg: Any, rerun_failed: bool, states: list | None = None) -> list[Any]:
    """The trials of the grid a run of the sweep would train (pending, interrupted, failed ones with a rerun)."""
    from resomap.sweep import describe_plan, plan

    rerun = rerun_failed or cfg.sweep.rerun_failed
    states = describe_plan(plan(cfg, check=False)) if states is None else states
    return [t for t, s in states if s in ("pending", "partial") or (s == "failed" and rerun)]


def _said_first(lines: Callable[[], list[str]]) -> Callable[[str], None]:
    """print, preceded once by `lines()` at its first line: the sweep's first report comes after its input checks
    and its lock, so a refusal (bad input, the sweep running elsewhere) is said alone, in one line."""
    said = False

    def report(line: str) -> None:
        nonlocal said
        if not said:
            said = True
            print("\n".join(lines()))
        print(line)

    return report


def cmd_sync(args: argparse.Namespace) -> int:
    """Log the sweep's results that are not in MLflow yet (trained while the store was unreachable)."""
    from resomap.errors import ConfigError
    from resomap.sweep import sync_sweep
    from resomap.tracking import default_tracking_uri

    cfg = load_config(args)
    if not cfg.mlflow.enabled:
        raise ConfigError("mlflow.enabled is false: nothing to sync (set mlflow.enabled=true)")
    report = sync_sweep(cfg)
    print(report.line())
    for name, reason in report.failed.items():
        print(f"not synced {name}: {reason}")
    if report.parent_run_id:
        print(f"MLflow: parent run {report.parent_run_id} in {default_tracking_uri(cfg)}")
    return 0 if report.ok else 1


def add_commands(sub: Any) -> None:
    p = sub.add_parser("train", help="train one model at one resolution")
    p.add_argument("--model", required=True, help="a registry name (resomap models) or timm:<name>")
    p.add_argument("--resolution", required=True, type=resolution, help="input side in pixels")
    p.add_argument("--epochs", type=positive_int, help="shorthand for training.epochs=N")
    p.add_argument("--fresh", action="store_true", help="discard this trial's checkpoints instead of resuming")
    add_config_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sweep", help="train every model x resolution x seed of sweep.yaml (resumable)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and each trial's state, train nothing")
    p.add_argument("--rerun-failed", action="store_true", help="run trials that failed before again")
    p.add_argument("--executor", help="a registered executor (resomap executors; default: sweep.executor)")
    p.add_argument("--wait", action="store_true", help="if this sweep is running in this folder, wait for it to end")
    add_config_args(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("sync", help="log to MLflow the sweep results written while the store was unreachable")
    add_config_args(p)
    p.set_defaults(func=cmd_sync)
