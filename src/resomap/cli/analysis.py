"""`resomap explain`, `resomap analyze` and `resomap report`: parsing and printing for resomap.analysis and
resomap.reports.html (exit 2 on bad input)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from resomap.cli.args import positive_int, resolution
from resomap.config.schema import DEVICES


def _class_index(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a class index (integer), got {text!r}") from None


def _source(args: argparse.Namespace) -> Any:
    from resomap.analysis import CheckpointSource

    preset = getattr(args, "preset", None)  # `analyze` has no --preset
    return CheckpointSource(args.config_dir, preset, tuple(args.overrides), args.device)


def cmd_explain(args: argparse.Namespace) -> int:
    from resomap.cli import preflight

    preflight.check_names("explainer", args.method)  # before torch loads
    preflight.check_file(args.checkpoint, "checkpoint")
    from resomap import checkpoint_files

    checkpoint_files.check(args.checkpoint)  # a truncated or unsafe file: refused before torch and the explainers
    from resomap.analysis import ExplainRequest, explain_checkpoint, quality_table

    req = ExplainRequest(
        checkpoint=Path(args.checkpoint),
        methods=tuple(args.method),
        num_samples=args.num_samples,
        output_dir=Path(args.output_dir) if args.output_dir else None,
        target=args.target,
        model=args.model,
        resolution=args.resolution,
        source=_source(args),
    )
    report = explain_checkpoint(req)
    print(f"{report.model} at {report.resolution} px" + (f", CAM layer {report.cam_layer}" if report.cam_layer else ""))
    print(quality_table(report.quality), end="")
    for method, reason in report.failed.items():
        print(f"FAILED {method}: {reason}")
    print(f"maps: {report.maps_path}")
    print(f"metrics: {report.metrics_path}")
    print(f"figures: {', '.join(str(p) for p in report.figures if p.suffix == '.png')}")
    return 1 if report.failed else 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from resomap.cli import preflight

    preflight.check_names("explainer", args.methods or ())  # before torch loads
    preflight.check_file(args.checkpoint_dir, "folder")
    _check_checkpoints(args.checkpoint_dir)
    from resomap.analysis import AnalyzeRequest, analyze_checkpoints

    req = AnalyzeRequest(
        checkpoint_dir=Path(args.checkpoint_dir),
        output_dir=Path(args.output_dir),
        methods=tuple(args.methods or ()),
        num_samples=args.num_samples,
        profile_iters=args.profile_iters,
        source=_source(args),
    )
    report = analyze_checkpoints(req)
    print(report.summary_path.read_text(encoding="utf-8"), end="")
    print(f"report: {report.report_path}")
    print(f"figures: {report.output_dir / 'figures'}/, {report.output_dir / 'explanations'}/")
    return 1 if report.failed else 0


def _check_checkpoints(root: str) -> None:
    """The checkpoints `analyze` would load, read before torch and the explainers are imported: when none of them
    may be loaded (truncated, pickled code, not a checkpoint), the command ends here, in one line. With one that may,
    the others are refused one by one as the analysis reaches them (resomap.analysis.analyze)."""
    import logging

    from resomap import checkpoint_files
    from resomap.errors import CheckpointError

    paths = checkpoint_files.find_checkpoints(root)
    reasons = [checkpoint_files.refusal(path) for path in paths]
    if all(reasons):
        for reason in reasons[1:]:  # the first is the error's line
            logging.getLogger("resomap.analysis").warning("skipped %s", reason)
        raise CheckpointError(checkpoint_files.none_analysed(root, [r for r in reasons if r]))


def cmd_report(args: argparse.Namespace) -> int:
    from resomap.errors import DataError
    from resomap.results import find_sweep
    from resomap.summary_check import check_summary

    # the arguments and the sweep's files checked before the report's libraries (torch among them) are imported
    folder = find_sweep(args.sweep, args.summaries)
    check_summary(folder)  # a file cut short: named with the command that rebuilds it, not a traceback
    if args.out and Path(args.out).is_dir():
        raise DataError(
            f"--out {args.out} is a folder; give the report's file, e.g. --out {Path(args.out) / 'report.html'}"
        )
    from resomap.reports.html import ReportNotWritable, write_report

    try:
        out = write_report(folder, Path(args.out) if args.out else None)
    except ReportNotWritable as exc:  # a sweep folder one may read but not write (a shared, read-only copy)
        raise DataError(f"{exc}; pass --out with a file in a writable folder, e.g. --out /tmp/report.html") from None
    print(f"report: {out} ({out.stat().st_size / 2**20:.1f} MB); open it in a browser: {out.resolve().as_uri()}")
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-samples", type=positive_int, help="probe images (default: explainability.probe_size)")
    p.add_argument("--device", choices=DEVICES[1:], help="default: the trial config's system.device")
    p.add_argument("--config-dir", default="configs", help="config folder for checkpoints without a config.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the trial's config")


def add_commands(subparsers: Any) -> None:
    """Register `explain` and `analyze` on the `resomap` subparsers."""
    p = subparsers.add_parser("explain", help="explain a trained checkpoint's probe images with one or more methods")
    p.add_argument("--checkpoint", required=True, help="a .pt written by resomap train/sweep")
    p.add_argument("--method", action="append", required=True, help="an explainer name; repeat for several")
    p.add_argument("--output-dir", help="default: analysis_results/explain/<model>_<resolution>/")
    p.add_argument("--target", type=_class_index, help="explain this class for every image (default: true class)")
    p.add_argument("--model", help="when given, must match the checkpoint's model")
    p.add_argument("--resolution", type=resolution, help="when given, must match the checkpoint's resolution")
    p.add_argument("--preset", help="preset for --config-dir (checkpoints without a config.yaml)")
    _add_common(p)
    p.set_defaults(func=cmd_explain)

    p = subparsers.add_parser("analyze", help="evaluate, profile and explain every trained checkpoint (no training)")
    p.add_argument(
        "--checkpoint-dir", default="checkpoints", help="folder of trained checkpoints (default: checkpoints)"
    )
    p.add_argument("--output-dir", default="analysis_results", help="default: analysis_results")
    p.add_argument("--methods", nargs="+", help="explainers (default: each trial's explainability.methods)")
    p.add_argument("--profile-iters", type=positive_int, default=10, help="timed profiling calls (default 10)")
    _add_common(p)
    p.set_defaults(func=cmd_analyze)

    p = subparsers.add_parser("report", help="write a finished sweep's one-page HTML report (opens from disk)")
    p.add_argument("--sweep", help="sweep name under <summaries>/_sweep/ or its folder (default: the latest)")
    p.add_argument("--out", help="default: <sweep folder>/report.html")
    p.add_argument("--summaries", default="model_summaries", help="summary root (default: model_summaries)")
    p.set_defaults(func=cmd_report)
