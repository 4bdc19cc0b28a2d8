"""The steps after training, shared by `resomap sweep`, `resomap train` and `resomap analyze`.

Each step returns a typed value that resomap.sweep.trial.TrialResult holds:
- test_stage: the model on its test split (+ confusion matrix) -> EvalResult;
- test_matrix: the same model on the test split at every resolution of the sweep it takes (tested_resolutions)
  -> EvalResult each (labels and predictions per image; `.summary` is the EvalMetrics a result keeps);
- profile_stage: cost at its resolution (profile.txt/json written) -> ProfileSummary;
- explain_stage: maps of the probe set, scored (explanations.npz written) -> ExplainSummary;
- evaluate_trained: the four above in order, as a sweep trial and `resomap analyze` run them, keeping the task's
  per-image score table at every test resolution (resomap.tasks: predictions.csv, seg_predictions.csv);
- compare_stage: over many trials, the explanations of each model compared across resolutions -> Comparison.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.tasks.evaluation import EvalMetrics, EvalResult

log = logging.getLogger(__name__)


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `data` that are fields of the dataclass `cls` (older or newer files may hold others)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclasses.dataclass
class ProfileSummary:
    """The figures of a ModelProfile that results, tables and plots use (profile.json keeps all of them)."""

    params_m: float
    gmacs: float
    gflops: float
    latency_median_ms: float
    latency_p90_ms: float
    latency_p99_ms: float | None = None  # absent in results written before it was kept
    throughput_inference_ips: float | None = None
    throughput_train_ips: float | None = None
    peak_memory_mb: float | None = None
    batch_size: int = 1
    device: str = ""
    noisy: bool = False  # the timing stayed disturbed after its re-measurements (profile.json: noise_reasons)
    # every timed inference call (ms): the summary's interval of the median latency (stats.timing_interval); None in
    # results written before they were kept
    latency_calls_ms: list[float] | None = None

    @classmethod
    def from_profile(cls, prof: Any) -> ProfileSummary:
        return cls(
            params_m=prof.params_m,
            gmacs=prof.gmacs,
            gflops=prof.gflops,
            latency_median_ms=prof.latency.median_ms,
            latency_p90_ms=prof.latency.p90_ms,
            latency_p99_ms=prof.latency.p99_ms,
            throughput_inference_ips=prof.inference_images_per_s,
            throughput_train_ips=prof.train_images_per_s,
            peak_memory_mb=prof.memory.peak_mb,
            batch_size=prof.batch_size,
            device=prof.device_name,
            noisy=bool(getattr(prof, "noisy", False)),
            latency_calls_ms=list(prof.latency.calls_ms) or None,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileSummary | None:
        return cls(**known_fields(cls, data)) if data else None


@dataclasses.dataclass
class ExplainSummary:
    """Where the maps are, their quality metrics ('explain/<method>/<metric>', with each method's cost:
    'seconds', 'peak_memory_mb', 'quality_seconds'), what failed, and what the explanation budget skipped."""

    maps: str | None = None
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    cam_layer: str | None = None
    seconds: float = 0.0
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # method -> why (explainability.budget_share)
    reused_from: int | None = None  # a deterministic fit's maps taken from this seed's trial (`reused_explanation`)

    @classmethod
    def from_outcome(cls, outcome: Any) -> ExplainSummary:
        maps = str(outcome.maps_path) if outcome.maps_path else None
        skipped = dict(getattr(outcome, "skipped", {}) or {})
        return cls(
            maps, dict(outcome.failed), outcome.cam_layer, round(outcome.seconds, 2), dict(outcome.metrics), skipped
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExplainSummary | None:
        return cls(**known_fields(cls, data)) if data else None


@dataclasses.dataclass
class Evaluation:
    """What evaluate_trained found for one trained model (`predictions`: the per-image records it wrote;
    `device`: the device it ran on, in words)."""

    test: EvalResult
    cross_resolution: dict[str, EvalMetrics]
    profile: ProfileSummary | None
    explain: ExplainSummary | None
    predictions: Path | None = None
    device: str | None = None


@dataclasses.dataclass
class Comparison:
    """The comparison of a set of trials' maps across resolutions and seeds: files written, tidy agreement rows
    (each with its kind and grid: resolution, seed = the noise floor, chance, model_free, random, method), the
    matrices (main grid; diagonal = cross-seed floor with >= 2 seeds), the floors and one sentence per model x
    method saying whether there is a resolution effect beyond seed noise."""

    files: list[Path] = dataclasses.field(default_factory=list)
    rows: list[dict] = dataclasses.field(default_factory=list)
    matrices: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # '<model>/<method>' -> ...
    floors: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # '<model>/<method>/<metric>'
    statements: list[str] = dataclasses.field(default_factory=list)
    findings: list[str] = dataclasses.field(default_factory=list)  # the statements in short (findings.txt)
    map_rows: list[dict] = dataclasses.field(default_factory=list)  # where it looks, decided (map_decisions.csv)
    map_answers: list[str] = dataclasses.field(default_factory=list)  # one sentence per model (the Answer's)
    # what its figures are drawn from (crossres.ComparisonData) until reports.explain_comparison draws them
    figure_data: Any = dataclasses.field(default=None, repr=False)

    @property
    def agreement(self) -> dict[str, float]:
        """Mean agreement across resolutions per model, method and metric, and its floor, chance level and
        model-free reference (MLflow metric names: agreement/..., agreement_floor/..., ...)."""
        from resomap.explain.evaluation.crossres import mean_agreement

        return mean_agreement(self.rows)


# ---------------------------------------------------------------- stages of one trained model


def evaluate_at(
    model: Any,
    cfg: Any,
    resolution: int,
    seed: int,
    device: Any,
    *,
    trainer: Any = None,
    bundle: Any = None,
    num_classes: int | None = None,
    prefix: str = "test",
) -> EvalResult:
    """The model on the test split at `resolution` (the trial's data and seed; `bundle` when already built)."""
    from resomap import data as data_pkg
    from resomap.training import Trainer

    bundle = bundle if bundle is not None else data_pkg.build(cfg, resolution, seed, device)
    trainer = trainer if trainer is not None else Trainer(cfg, device)
    return _evaluate(trainer, model, bundle, prefix, num_classes)


def _evaluate(
    trainer: Any, model: Any, bundle: Any, prefix: str, num_classes: int | None, cached: bool = True
) -> EvalResult:
    """The model on bundle.test; the loader keeps the order of bundle.splits['test'] (no shuffling). `cached`: the
    trainer's model itself, whose frozen part's test outputs may be read from the cache; False for another module
    around it (the test-time average), which reads the images."""
    from resomap.training.feature_head import test_loader

    loader = test_loader(trainer, model, bundle) if cached else bundle.test  # a frozen part's outputs: cached
    metrics, y_true, y_pred, *more = trainer.evaluate(model, loader, prefix=prefix, num_classes=num_classes)
    index = np.asarray(bundle.splits["test"], dtype=np.int64)
    if len(index) != len(y_true):
        log.warning("test loader gave %d predictions for %d test images; no per-image records", len(y_true), len(index))
        index = None
    score = more[0] if more else None  # a task's per-image ranking score (classification: P(class 1)), if any
    return EvalResult({k: float(v) for k, v in metrics.items()}, y_true, y_pred, prefix, index, score)


def test_stage(
    model: Any, bundle: Any, trainer: Any, title: str, out_dir: Path, num_classes: int | None = None
) -> EvalResult:
    """The model on its own test split; the task's figures of it (confusion_matrix.png, ...) go to `out_dir`."""
    found = _evaluate(trainer, model, bundle, "test", num_classes)
    tta = list(trainer.cfg.training.tta)
    if tta:  # test-time augmentation: its scores beside the plain ones (test_tta/*), never instead of them
        from resomap.data.symmetry import symmetry_average

        averaged = _evaluate(trainer, symmetry_average(model, tta), bundle, "test_tta", num_classes, cached=False)
        found.metrics.update(averaged.metrics)  # every key under the test_tta/ prefix
    log.info("%s test: %s", title, ", ".join(f"{k}={v:.4f}" for k, v in sorted(found.metrics.items())))
    trainer.task.test_outputs(found, trainer.eval_context(model), bundle, title, out_dir)
    return found


def test_matrix(
    model: Any,
    cfg: Any,
    resolutions: Iterable[int],
    own: tuple[int, EvalResult],
    seed: int,
    device: Any,
    *,
    trainer: Any = None,
    num_classes: int | None = None,
) -> dict[int, EvalResult]:
    """The model tested at each resolution (FixRes-style train x test matrix); `own` = (its resolution, its test)."""
    own_res, own_result = own
    out: dict[int, EvalResult] = {}
    for res in sorted(set(resolutions) | {own_res}):
        if res == own_res:
            out[res] = own_result
        else:
            out[res] = evaluate_at(model, cfg, res, seed, device, trainer=trainer, num_classes=num_classes, prefix="x")
    return out


def tested_resolutions(model: Any, cfg: Any, in_channels: int) -> list[int]:
    """The sweep's resolutions the model takes (at or above its smallest input side: sweep.skip_invalid_resolutions
    leaves the others out of the grid), so a trial never fails on a sibling resolution its model cannot take."""
    from resomap.models import unwrap, usable_resolutions

    usable = usable_resolutions(unwrap(model), cfg.sweep.resolutions, in_channels)
    left = sorted(set(cfg.sweep.resolutions) - set(usable))
    if left:
        log.info("cross-resolution test: %s px left out (below the model's smallest input side)", left)
    return usable


def profile_stage(
    model: Any,
    cfg: Any,
    resolution: int,
    in_channels: int,
    device: Any,
    out_dir: Path,
    *,
    model_name: str,
    warmup: int | None = None,
    iters: int | None = None,
) -> ProfileSummary:
    """The model profiled at its resolution with cfg.profiling (warmup/iters may be overridden)."""
    import torch

    from resomap.profiling import profile, save_profile
    from resomap.profiling.profiler import noise_policy
    from resomap.runtime import resolve_channels_last, resolve_precision

    pc = cfg.profiling
    prof = profile(
        model,
        resolution,
        in_channels=in_channels,
        batch_size=pc.batch_size,
        device=device,
        precision=cfg.system.precision,
        warmup=pc.warmup if warmup is None else warmup,
        iters=pc.iters if iters is None else iters,
        train_batch_size=pc.train_batch_size,
        model_name=model_name,
        rounds=pc.rounds,
        noise=noise_policy(cfg),
        cfg=cfg,  # the training step's loss as configured (segmentation.loss, loss.<term>.*)
        task=cfg.experiment.task,  # the trial's task: its labels and its loss, whatever the output's rank
        channels_last=resolve_channels_last(
            cfg.system.channels_last, resolve_precision(cfg.system.precision, device)[0]
        ),
    )
    save_profile(prof, out_dir)
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return ProfileSummary.from_profile(prof)


def explain_stage(
    model: Any,
    spec: Any,
    bundle: Any,
    cfg: Any,
    seed: int,
    out_dir: Path,
    device: Any,
    train_seconds: float | None = None,
) -> ExplainSummary:
    """explain_trial on the probe set: maps saved to out_dir/explanations.npz, scored, each method's cost kept;
    `train_seconds` (the trial's training time) is what explainability.budget_share is a share of. The captioned
    probe images tracking logs are drawn from those maps by the caller (reports.probe_images.trial_probe_images)."""
    from resomap.explain.run import explain_trial

    outcome = explain_trial(model, spec, bundle, cfg, seed, out_dir, device, train_seconds=train_seconds)
    return ExplainSummary.from_outcome(outcome)


def reused_explanation(
    spec: Any, out_dir: Path, seed: int, siblings: Mapping[int, str] | None
) -> ExplainSummary | None:
    """A deterministic model's explanation from a finished trial of another seed at the same resolution (`siblings`:
    seed -> the trial key it must carry, so the current config made it) whose fit is this one (its predictions.csv
    byte for byte this trial's): its explanations.npz copied here with this seed in its meta, and its explain record
    with `reused_from` set and no seconds of this trial; None where there is no such trial (this one explains).
    The summary compares a deterministic model's first seed alone, so explaining an identical fit again is time
    spent for nothing (the quickstart: about 35 s of its 12 trials)."""
    import json

    from resomap.explain.methods.probe import MAPS_FILE, load_maps, save_maps

    mine = out_dir / "predictions.csv"
    if not getattr(spec, "deterministic", False) or not siblings or not mine.is_file():
        return None
    for other, key in sorted(siblings.items()):
        sibling = out_dir.parent / f"seed{int(other)}"
        try:
            record = json.loads((sibling / "result.json").read_text(encoding="utf-8"))
            same = (sibling / "predictions.csv").read_bytes() == mine.read_bytes()
        except (OSError, ValueError):
            continue
        found = ExplainSummary.from_dict(record.get("explain") or {})
        mapped = found is not None and bool(found.maps) and (sibling / MAPS_FILE).is_file()
        if record.get("status") != "FINISHED" or record.get("key") != key or not same or not mapped:
            continue
        arrays, meta = load_maps(sibling / MAPS_FILE)
        path = save_maps(out_dir / MAPS_FILE, arrays, {**meta, "seed": seed, "reused_from": record.get("seed")})
        log.info("%s: seed %s's maps reused (a deterministic fit, the same predictions)", out_dir, record.get("seed"))
        return dataclasses.replace(found, maps=str(path), seconds=0.0, reused_from=record.get("seed"))
    return None


def training_seconds(trainer: Any) -> float | None:
    """The trainer's training time: the sum of its epochs' train/epoch_time_s (resumed epochs included); None
    for a trainer that has not trained (resomap analyze)."""
    history = getattr(trainer, "history", None) or []
    times = [float(h["train/epoch_time_s"]) for h in history if "train/epoch_time_s" in h]
    return sum(times) if times else None


def evaluate_trained(
    model: Any,
    spec: Any,
    bundle: Any,
    cfg: Any,
    *,
    title: str,
    seed: int,
    device: Any,
    out_dir: Path,
    trainer: Any = None,
    num_classes: int | None = None,
    profile_warmup: int | None = None,
    profile_iters: int | None = None,
    siblings: Mapping[int, str] | None = None,
) -> Evaluation:
    """Test, test at every resolution of cfg.sweep the model takes (per-image records in out_dir/predictions.csv),
    profile (profiling.enabled), explain (explainability.enabled; a deterministic model's maps taken from a finished
    trial of `siblings`, seed -> trial key, whose fit is this one: `reused_explanation`)."""
    import torch

    from resomap.models import unwrap
    from resomap.runtime import describe_device
    from resomap.training import Trainer

    trainer = trainer if trainer is not None else Trainer(cfg, device, spec=spec)
    test = test_stage(model, bundle, trainer, title, out_dir, num_classes)
    own = (bundle.resolution, test)
    kw = {"trainer": trainer, "num_classes": num_classes}
    matrix = test_matrix(model, cfg, tested_resolutions(model, cfg, bundle.channels), own, seed, device, **kw)
    cross = {str(res): found.summary for res, found in matrix.items()}
    records = trainer.task.write_records(matrix, out_dir)  # the per-image score table (predictions.csv, ...)
    plain = unwrap(model)
    prof = None
    if cfg.profiling.enabled:
        prof = profile_stage(
            plain,
            cfg,
            bundle.resolution,
            bundle.channels,
            device,
            out_dir,
            model_name=spec.name,
            warmup=profile_warmup,
            iters=profile_iters,
        )
    explain = None
    if cfg.explainability.enabled:
        explain = reused_explanation(spec, out_dir, seed, siblings) or explain_stage(
            plain.to(device), spec, bundle, cfg, seed, out_dir, device, train_seconds=training_seconds(trainer)
        )
    return Evaluation(test, cross, prof, explain, records, describe_device(torch.device(device)))


# ---------------------------------------------------------------- across trials


def compared_trials(results: Iterable[Any]) -> list[Any]:
    """The trials whose maps are compared: every finished trial with maps, all seeds (the probe set follows the
    data seed, so every seed of a model holds the same probe images; seeds are compared with each other for the
    noise floor). A (model, resolution, seed) met twice keeps its last result."""
    done = [r for r in results if r.status == "FINISHED" and r.explain is not None and r.explain.maps]
    return list({(r.model, r.resolution, r.seed): r for r in done}.values())


def compare_stage(
    results: Iterable[Any], ec: Any, out_dir: Path, stats: Any = None, deterministic: Mapping[str, int] | None = None
) -> Comparison:
    """Agreement of the trials' maps across resolutions, seeds and methods with their references (chance,
    model-free, centre prior, random, cross-seed floor) at the main and a second grid: agreement.csv, matrices,
    floors and one sentence per model x method (also written to agreement.txt, and in short to findings.txt); and
    the quality scores with intervals over probe images and seeds (quality.csv/.txt, at `stats`: cfg.stats).
    ``deterministic``: model -> seed count of the models whose seeds are one fit (the summary's
    ``deterministic_models()``): compared as one replicate, with no cross-seed floor and no relabelling test. Its
    figures are drawn by the caller (reports.explain_comparison.draw_comparison)."""
    chosen = compared_trials(results)
    if not chosen or ec is None:
        return Comparison()
    from resomap.atomic import write_text
    from resomap.explain.evaluation.crossres import compare_sweep, write_rows
    from resomap.records import FINDINGS_FILE

    entries = [(r.model, r.resolution, r.seed, Path(r.explain.maps)) for r in chosen]
    files, data = compare_sweep(entries, ec, out_dir, stats=stats, deterministic=deterministic)
    found = data.study
    if found.rows:
        files.append(write_rows(found.rows, out_dir / "agreement.csv"))
    if found.map_rows:
        from resomap.explain.evaluation.where import csv_rows

        files.append(write_rows(csv_rows(found.map_rows), out_dir / "map_decisions.csv"))
    if found.statements:
        files.append(write_text(out_dir / "agreement.txt", "\n".join(found.statements) + "\n"))
        files.append(write_text(out_dir / FINDINGS_FILE, "\n".join(found.findings) + "\n"))
        for line in found.statements:
            log.info("%s", line)
    matrices = _matrices(found.rows)
    return Comparison(
        files, found.rows, matrices, found.floors, found.statements, found.findings, found.map_rows,
        found.map_answers, data,
    )  # fmt: skip


def _finite(values: list[float]) -> bool:
    return bool(values) and all(math.isfinite(x) for x in values)


def _matrices(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """'<model>/<method>' -> {'resolutions', 'grid', 'floor_on_diagonal', '<metric>': [[...]], 'chance': {metric:
    value}} from the rows of the main grid (the largest in the rows): off the diagonal the cross-resolution
    agreement, on it the cross-seed agreement at that resolution (the noise floor) when >= 2 seeds, else 1.0.
    Undefined values are None (JSON null). 'shift_floor': {resolution: the mean agreement of the maps there with
    their shifted-and-undone maps} (Spearman; explain.evaluation.where's floor), where saved."""
    main: dict[str, int] = {}
    for row in rows:
        if row.get("kind") in ("resolution", "seed"):
            name = f"{row['model']}/{row['method']}"
            main[name] = max(main.get(name, 0), int(row.get("grid", 0) or 0))
    pairs: dict[str, dict[str, dict[tuple[int, int], float]]] = defaultdict(lambda: defaultdict(dict))
    chance: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    shift: dict[str, dict[int, float]] = defaultdict(dict)
    for row in rows:
        kind = row.get("kind")
        if kind == "shift_floor" and row.get("metric") == "spearman":
            shift[f"{row['model']}/{row['method']}"][int(row["a"])] = row["value"]
            continue
        if kind not in ("resolution", "seed", "chance") or "method" not in row:
            continue
        name = f"{row['model']}/{row['method']}"
        if name not in main or int(row.get("grid", 0) or 0) != main[name]:
            continue
        if kind == "chance":
            if row.get("of", "resolution") == "resolution":
                chance[name][row["metric"]].append(row["value"])
            continue
        pairs[name][row["metric"]][(row["a"], row["b"])] = row["value"]
    out: dict[str, dict[str, Any]] = {}
    for name, by_metric in sorted(pairs.items()):
        labels = sorted({x for values in by_metric.values() for pair in values for x in pair})
        index = {r: i for i, r in enumerate(labels)}
        floor = any(a == b for values in by_metric.values() for a, b in values)
        entry: dict[str, Any] = {"resolutions": labels, "grid": main[name], "floor_on_diagonal": floor}
        for metric, values in by_metric.items():
            matrix = np.eye(len(labels))
            for (a, b), value in values.items():
                matrix[index[a], index[b]] = matrix[index[b], index[a]] = value
            entry[metric] = [[float(v) if math.isfinite(v) else None for v in line] for line in matrix.tolist()]
        entry["chance"] = {m: (float(np.mean(v)) if _finite(v) else None) for m, v in chance[name].items()}
        entry["shift_floor"] = {str(r): float(v) for r, v in sorted(shift[name].items()) if math.isfinite(v)}
        out[name] = entry
    return out
