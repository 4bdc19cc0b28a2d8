"""`resomap profile` and `resomap bench`: argument parsing and printing for the profiling package."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from resomap.cli.args import positive_int, resolution
from resomap.config.schema import DEVICES, PRECISIONS


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a registry name (resomap models) or timm:<name>")
    p.add_argument("--resolution", required=True, type=resolution, help="input side in pixels")
    p.add_argument(
        "--num-classes", type=positive_int, help="outputs (default: 1000 for classifiers, 21 for segmentation models)"
    )
    p.add_argument("--in-channels", type=positive_int, default=3, help="input channels (default 3)")
    p.add_argument("--device", choices=DEVICES, help="default: system.device")
    p.add_argument(
        "--precision", choices=PRECISIONS, help="default: system.precision (bench --compare-opts: fp32, the baseline)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--config-dir", default="configs", help="folder of the YAML files")
    p.add_argument("--preset", help="a file of configs/presets/ without .yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")


def _num_classes(args: argparse.Namespace) -> int:
    """--num-classes, else the model's task's default (1000, ImageNet, for a classifier; 21, torchvision's Pascal VOC
    default, for a segmentation model)."""
    if args.num_classes:
        return int(args.num_classes)
    from resomap.models import model_task
    from resomap.tasks import get_task

    return get_task(model_task(args.model)).default_classes


def _config(args: argparse.Namespace) -> Any:
    """The config, checked without torch first (resomap.cli.preflight: names, the model, whether one batch of
    inputs at --resolution fits in memory), then fully."""
    from resomap.cli import preflight

    extra: dict[str, Any] = {}
    if args.device:
        extra["system.device"] = args.device
    if args.precision:
        extra["system.precision"] = args.precision
    folder = preflight.config_folder(args)  # profiling needs no project files
    early = preflight.config(args, extra, folder)
    preflight.check_model(args.model)
    if early is not None:
        _inputs_fit(args, early)
    from resomap.config import load
    from resomap.sweep.builtins import register_builtins

    register_builtins()
    cfg = load(folder, args.preset, args.overrides, extra)
    if early is None:
        _inputs_fit(args, cfg)
    return cfg


def _inputs_fit(args: argparse.Namespace, cfg: Any) -> None:
    """One batch of the largest timed batch (a profile's training step: at least 8) fits in memory."""
    from resomap.cli import preflight

    if getattr(args, "batch_sizes", None):
        batch = max(args.batch_sizes)
    else:
        pc = cfg.profiling
        infer = args.batch_size or pc.batch_size
        batch = max(infer, pc.train_batch_size or max(infer, 8))
    preflight.check_inputs_fit([args.resolution], batch, args.in_channels, "--resolution", "a smaller batch size")


def cmd_profile(args: argparse.Namespace) -> int:
    cfg = _config(args)  # mistakes end here, most before torch loads
    from resomap.profiling import print_profiling_report, profile_by_name, save_profile
    from resomap.runtime import describe_device, measurement_threads, resolve_device, resolve_precision

    device = resolve_device(cfg.system)
    measurement_threads(cfg.system)  # system.threads, or auto: the cores other processes leave free

    def ready() -> None:  # after the input checks (size, memory): a refusal is the only line
        print(f"device: {describe_device(device)}")
        print("precision: {} ({})".format(*resolve_precision(cfg.system.precision, device)))

    overrides = {"batch_size": args.batch_size} if args.batch_size else {}
    prof = profile_by_name(
        args.model,
        args.resolution,
        num_classes=_num_classes(args),
        in_channels=args.in_channels,
        cfg=cfg,
        device=device,
        on_ready=ready,
        **overrides,
    )
    print(json.dumps(prof.as_dict(), indent=2, default=str) if args.json else print_profiling_report(prof))
    if args.output_dir:
        for path in save_profile(prof, Path(args.output_dir)):
            print(f"wrote {path}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    cfg = _config(args)  # mistakes end here, most before torch loads
    from resomap.models import build_model, check_input_size
    from resomap.profiling import ALL_OPTIONS, run_benchmark, save_benchmark
    from resomap.profiling.profiler import noise_policy
    from resomap.runtime import measurement_threads

    if args.vs_bare:
        return _vs_bare(args, cfg)
    measurement_threads(cfg.system)  # system.threads, or auto: the cores other processes leave free
    options = ["baseline"] if args.compare_opts is None else (args.compare_opts or list(ALL_OPTIONS))
    num_classes = _num_classes(args)
    model, _ = build_model(args.model, num_classes, args.in_channels, cfg.models)
    check_input_size(model, args.model, args.resolution, args.in_channels)
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    report = run_benchmark(
        model,
        args.resolution,
        in_channels=args.in_channels,
        num_classes=num_classes,
        options=options,
        batch_sizes=args.batch_sizes,
        devices=devices,
        precision=_bench_precision(args, cfg),
        iters=args.iters,
        warmup=args.warmup,
        options_batch_size=args.options_batch_size,
        model_name=args.model,
        rounds=args.rounds,
        noise=noise_policy(cfg),
        cfg=cfg,  # a segmenter's training step uses the configured loss
    )
    print(report.as_json() if args.json else report.table(), end="")
    if args.output_dir:
        for path in save_benchmark(report, Path(args.output_dir)):
            print(f"wrote {path}")
    return 0


def _bench_precision(args: argparse.Namespace, cfg: Any) -> str:
    """--precision, else fp32 when options are compared (each option against plain fp32, as amp_bf16 expects),
    else system.precision."""
    if args.precision:
        return args.precision
    return "fp32" if args.compare_opts is not None else cfg.system.precision


def _vs_bare(args: argparse.Namespace, cfg: Any) -> int:
    from resomap.profiling.bare import benchmark_vs_bare
    from resomap.runtime import resolve_device

    result = benchmark_vs_bare(
        model=args.model,
        resolution=args.resolution,
        batch_size=max(args.batch_sizes),
        epochs=1,
        rounds=max(args.rounds, 5),
        device=resolve_device(cfg.system),
        overrides={
            "system": {
                "precision": cfg.system.precision,
                "channels_last": cfg.system.channels_last,
                "threads": cfg.system.threads,
            }
        },
    )
    if args.json:
        print(json.dumps(dataclasses.asdict(result), indent=2, default=str))
    else:
        print(f"bare loop: {result.bare_images_per_s:.1f} images/s (rounds: {_runs(result.bare_runs)})")
        print(f"Trainer:   {result.trainer_images_per_s:.1f} images/s (rounds: {_runs(result.trainer_runs)})")
        print(
            f"ratio Trainer / bare: {result.ratio:.3f} [{result.ratio_low:.3f}, {result.ratio_high:.3f}] "
            f"(median of {len(result.ratios)} interleaved rounds, 95% interval)"
        )
        verdict = "PASS" if result.ratio >= 0.97 else "MISS"
        print(
            f"trainer/bare {args.model}@{args.resolution}: {result.ratio:.3f} [{result.ratio_low:.3f}, "
            f"{result.ratio_high:.3f}] (target >= 0.97) {verdict}"
        )
    return 0


def _runs(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def add_commands(sub: Any) -> None:
    from resomap import catalog  # the options' names without importing torch (resomap.profiling)

    found = catalog.registry("benchmark option")
    all_options = found.names() if found is not None else []
    p = sub.add_parser("profile", help="params, MACs/FLOPs, latency, throughput and memory of one model")
    _model_args(p)
    p.add_argument("--batch-size", type=positive_int, help="images per timed call (default: profiling.batch_size)")
    p.add_argument("--output-dir", help="also write profile.txt and profile.json here")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("bench", help="optimisation options, batch sizes and devices side by side")
    _model_args(p)
    p.add_argument(
        "--compare-opts",
        nargs="*",
        metavar="OPT",
        help=f"options beside the baseline; no value: all ({', '.join(all_options) or 'resomap.profiling.OPTIONS'})",
    )
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 8, 32], help="default: 1 8 32")
    p.add_argument("--options-batch-size", type=positive_int, help="batch for --compare-opts (default: largest)")
    p.add_argument("--devices", default="cpu,cuda", help="comma-separated, e.g. cpu,cuda (missing ones are skipped)")
    p.add_argument("--iters", type=positive_int, default=20, help="timed iterations per measurement")
    p.add_argument(
        "--rounds", type=positive_int, default=5, help="interleaved rounds the iterations are split into (default 5)"
    )
    p.add_argument("--warmup", type=positive_int, default=5, help="untimed iterations first")
    p.add_argument("--vs-bare", action="store_true", help="the Trainer against a bare PyTorch loop, same options")
    p.add_argument("--output-dir", help="also write benchmark.json and benchmark.txt here")
    p.set_defaults(func=cmd_bench)
