"""Post-hoc analysis of every trained checkpoint: test metrics, cost, explanations and their cross-resolution
agreement, written as report.json + summary.txt + figures. Nothing is retrained."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from resomap import data as data_pkg
from resomap.analysis.checkpoints import TrainedModel, find_checkpoints, load_trained, peek_meta
from resomap.analysis.explain_one import check_methods, explain_config, load_bundle
from resomap.analysis.report import agreement_matrices, write_report
from resomap.config import Config
from resomap.errors import CheckpointError, ResoMapError
from resomap.explain.crossres import compare_sweep, mean_agreement, write_rows
from resomap.explain.run import explain_trial
from resomap.profiling import profile, save_profile
from resomap.reports import summary_rows, sweep_figures
from resomap.training import Trainer

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AnalyzeRequest:
    checkpoint_dir: Path
    output_dir: Path
    methods: tuple[str, ...] = ()  # empty: each trial's explainability.methods
    num_samples: int | None = None  # probe images; None: each trial's explainability.probe_size
    profile_warmup: int = 2
    profile_iters: int = 10
    config_dir: str | None = "configs"  # used only for checkpoints without a config.yaml beside them
    overrides: tuple[str, ...] = ()
    device: str | None = None


@dataclasses.dataclass
class AnalysisReport:
    output_dir: Path
    report_path: Path
    summary_path: Path
    results: list[dict[str, Any]]  # one TrialResult-like dict per checkpoint
    rows: list[dict[str, Any]]  # reports.summary_rows
    agreement: dict[str, float]  # mean agreement across resolutions, per model/method/metric
    failed: dict[str, str]  # checkpoint -> one-line reason
    figures: list[Path]


def analyze_checkpoints(req: AnalyzeRequest) -> AnalysisReport:
    """Evaluate, profile and explain the best checkpoint of every model x resolution folder, then compare."""
    methods = check_methods(req.methods) if req.methods else None
    paths = find_checkpoints(req.checkpoint_dir)
    resolutions = _resolutions_by_model(paths)
    results, failed, ec = [], {}, None
    for path in paths:
        try:
            trained = load_trained(path, config_dir=req.config_dir, overrides=req.overrides, device=req.device)
            cfg = explain_config(trained.cfg, methods or list(trained.cfg.explainability.methods), req.num_samples)
            results.append(_analyze_one(trained, cfg, req, resolutions.get(trained.name, [])))
            ec = ec or cfg.explainability
        except ResoMapError as exc:  # one bad checkpoint is reported; the others are still analysed
            failed[str(path)] = str(exc).splitlines()[0]
            log.warning("skipped %s: %s", path, failed[str(path)])
    if not results:
        first = next(iter(failed.values()))
        raise CheckpointError(f"{req.checkpoint_dir}: no checkpoint could be analysed; first problem: {first}")
    out = req.output_dir
    rows = summary_rows(results)
    figures = sweep_figures(rows, out / "figures")
    explain_files, agreement_rows = _compare(results, ec, out / "explanations")
    matrices = agreement_matrices(_entries(results), ec)
    report_path, summary_path = write_report(out, results, rows, agreement_rows, matrices, failed)
    return AnalysisReport(
        out, report_path, summary_path, results, rows, mean_agreement(agreement_rows), failed, figures + explain_files
    )


def _resolutions_by_model(paths: list[Path]) -> dict[str, list[int]]:
    found: dict[str, set[int]] = defaultdict(set)
    for path in paths:
        meta = peek_meta(path)
        if meta.get("model") is not None and meta.get("resolution") is not None:
            found[str(meta["model"])].add(int(meta["resolution"]))
    return {model: sorted(res) for model, res in found.items()}


def _analyze_one(trained: TrainedModel, cfg: Config, req: AnalyzeRequest, resolutions: list[int]) -> dict[str, Any]:
    name = f"{trained.name}@{trained.resolution}"
    log.info("analysing %s (%s)", name, trained.path)
    bundle = load_bundle(trained, cfg)
    trainer = Trainer(cfg, trained.device)
    metrics, _, _ = trainer.evaluate(trained.model, bundle.test, prefix="test", num_classes=trained.num_classes)
    summary_dir = req.output_dir / "models" / trained.name / str(trained.resolution)
    if trained.path.parent.name == f"seed{trained.seed}":  # a sweep of several seeds
        summary_dir = summary_dir / f"seed{trained.seed}"
    outcome = explain_trial(trained.model, trained.spec, bundle, cfg, trained.seed, summary_dir, trained.device)
    return {
        "key": trained.meta.get("config_hash"),
        "name": name,
        "model": trained.name,
        "family": trained.family,
        "resolution": trained.resolution,
        "seed": trained.seed,
        "status": "FINISHED",
        "checkpoint": str(trained.path),
        "epoch": trained.meta.get("epoch"),
        "test": {k: float(v) for k, v in metrics.items()},
        "cross_resolution": _cross_resolution(trained, cfg, trainer, metrics, resolutions),
        "profile": _profile(trained, cfg, req, summary_dir),
        "explain": outcome.summary(),
    }


def _cross_resolution(
    trained: TrainedModel, cfg: Config, trainer: Trainer, own: dict[str, float], resolutions: list[int]
) -> dict[str, dict[str, float]]:
    """The model tested at every resolution it was trained at in this folder (train x test matrix)."""
    out = {str(trained.resolution): {"accuracy": own["test/accuracy"], "macro_f1": own["test/macro_f1"]}}
    for res in resolutions:
        if res == trained.resolution:
            continue
        other = data_pkg.build(cfg, res, trained.seed, trained.device)
        found, _, _ = trainer.evaluate(trained.model, other.test, prefix="x", num_classes=trained.num_classes)
        out[str(res)] = {"accuracy": float(found["x/accuracy"]), "macro_f1": float(found["x/macro_f1"])}
    return out


def _profile(trained: TrainedModel, cfg: Config, req: AnalyzeRequest, folder: Path) -> dict[str, Any]:
    pc = cfg.profiling
    prof = profile(
        trained.model,
        trained.resolution,
        in_channels=int(trained.meta["in_channels"]),
        batch_size=pc.batch_size,
        device=trained.device,
        precision=cfg.system.precision,
        warmup=req.profile_warmup,
        iters=req.profile_iters,
        train_batch_size=pc.train_batch_size,
        model_name=trained.name,
    )
    save_profile(prof, folder)
    if trained.device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "params_m": prof.params_m,
        "gmacs": prof.gmacs,
        "gflops": prof.gflops,
        "latency_median_ms": prof.latency.median_ms,
        "latency_p90_ms": prof.latency.p90_ms,
        "throughput_inference_ips": prof.inference_images_per_s,
        "throughput_train_ips": prof.train_images_per_s,
        "peak_memory_mb": prof.memory.peak_mb,
        "batch_size": prof.batch_size,
        "device": prof.device_name,
    }


def _lowest_seed(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results of each model's lowest seed that have maps: the sweep compares one seed's maps."""
    seed = {r["model"]: min(x["seed"] for x in results if x["model"] == r["model"]) for r in results}
    return [r for r in results if r["seed"] == seed[r["model"]] and r["explain"].get("maps")]


def _entries(results: list[dict[str, Any]]) -> list[tuple[str, int, Path]]:
    return [(r["model"], r["resolution"], Path(r["explain"]["maps"])) for r in _lowest_seed(results)]


def _compare(results: list[dict[str, Any]], ec: Any, out_dir: Path) -> tuple[list[Path], list[dict]]:
    quality = {(r["model"], r["resolution"]): r["explain"].get("metrics", {}) for r in _lowest_seed(results)}
    files, rows = compare_sweep(_entries(results), quality, ec, out_dir)
    if rows:
        files.append(write_rows(rows, out_dir / "agreement.csv"))
    return files, rows
