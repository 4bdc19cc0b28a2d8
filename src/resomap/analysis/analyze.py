"""Post-hoc analysis of every trained checkpoint: test metrics, cost, explanations and their cross-resolution
agreement, written as report.json + summary.txt + figures. Nothing is retrained."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from resomap.analysis.checkpoints import CONFIG_FILE, CheckpointSource, TrainedModel, find_checkpoints, peek_meta
from resomap.analysis.explain_one import check_methods, explain_config, load_bundle
from resomap.analysis.report import analysis_folders, write_report
from resomap.checkpoint_files import none_analysed
from resomap.config import with_overrides
from resomap.errors import CheckpointError, ResoMapError
from resomap.layout import trial_part
from resomap.reports.probe_images import trial_probe_images
from resomap.runtime import machine_record
from resomap.stages import Comparison, evaluate_trained
from resomap.summary.rows import SummaryRow
from resomap.sweep.sensitive import SensitiveMaps, aside
from resomap.sweep.summarise import summary_phase
from resomap.trial_result import TrialResult

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AnalyzeRequest:
    checkpoint_dir: Path
    output_dir: Path
    methods: tuple[str, ...] = ()  # empty: each trial's explainability.methods
    num_samples: int | None = None  # probe images; None: each trial's explainability.probe_size
    profile_warmup: int = 2
    profile_iters: int = 10
    source: CheckpointSource = dataclasses.field(default_factory=CheckpointSource)


@dataclasses.dataclass
class AnalysisReport:
    output_dir: Path
    report_path: Path
    summary_path: Path
    results: list[TrialResult]  # one per checkpoint
    rows: list[SummaryRow]  # one per model x resolution
    comparison: Comparison  # explanations across resolutions
    failed: dict[str, str]  # checkpoint -> one-line reason
    figures: list[Path]

    @property
    def agreement(self) -> dict[str, float]:
        return self.comparison.agreement


def analyze_checkpoints(req: AnalyzeRequest) -> AnalysisReport:
    """The best checkpoint of every model x resolution folder through the stages a sweep trial runs after
    training (test, test at every resolution, profile, explain), then the same summary and comparison."""
    methods = check_methods(req.methods) if req.methods else None
    paths = find_checkpoints(req.checkpoint_dir)
    log.info("found %d trained checkpoint(s) under %s", len(paths), req.checkpoint_dir)
    _one_experiment(paths, req.checkpoint_dir)
    resolutions = _resolutions_by_model(paths)
    results: list[TrialResult] = []
    extra: dict[str, dict[str, Any]] = {}  # name -> what report.json adds to the result (checkpoint, epoch)
    failed, first = {}, None
    for path in paths:
        try:
            trained = req.source.load(path)
            result, cfg = _analyze_one(trained, req, methods, resolutions.get(trained.name, []))
        except ResoMapError as exc:  # one bad checkpoint is reported; the others are still analysed
            failed[str(path)] = str(exc).splitlines()[0]
            log.warning("skipped %s: %s", path, failed[str(path)])
            continue
        results.append(result)
        extra[result.name] = {"checkpoint": str(trained.path), "epoch": trained.meta.get("epoch")}
        first = first or cfg  # the first trial's explainability and stats settings
    if not results:
        raise CheckpointError(none_analysed(req.checkpoint_dir, list(failed.values())))
    out = req.output_dir
    models = [r.to_dict() | extra[r.name] for r in results]
    # the sweep's summary phase, at the trials' stats and explainability settings; the maps of the sensitive images
    # made beside it
    with aside() as beside:
        maps = SensitiveMaps(first, out, out, beside)
        summary, _, figures, comparison = summary_phase(
            results, analysis_folders(out, models), first.stats, first.explainability, out, maps=maps,
            summarised=models, files=False,
        )  # fmt: skip
        figures += maps.figures()
    report_path, summary_path = write_report(out, models, summary, comparison, failed)
    rows = summary.rows
    return AnalysisReport(out, report_path, summary_path, results, rows, comparison, failed, figures + comparison.files)


def _one_experiment(paths: list[Path], root: Path) -> None:
    """CheckpointError when the checkpoints are of several experiments (checkpoints/<experiment>/..., resomap.layout):
    their trials would meet in one summary and one output folder; each is analysed on its own."""
    import yaml

    names: dict[str, Path] = {}
    for path in paths:
        try:
            saved = yaml.safe_load((path.parent / CONFIG_FILE).read_text(encoding="utf-8"))
            name = saved["experiment"]["name"]
        except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
            continue  # no config.yaml beside it: its experiment is not known
        names.setdefault(str(name), path)
    if len(names) > 1:
        folders = []
        for name in sorted(names):
            inside = Path(root) / name
            folders.append(str(inside) if inside.is_dir() else str(names[name].parent))
        raise CheckpointError(
            f"{root}: holds checkpoints of {len(names)} experiments ({', '.join(sorted(names))}); analyse one at a "
            f"time: --checkpoint-dir {' or '.join(folders)}"
        )


def _resolutions_by_model(paths: list[Path]) -> dict[str, list[int]]:
    found: dict[str, set[int]] = defaultdict(set)
    for path in paths:
        meta = peek_meta(path)
        if meta.get("model") is not None and meta.get("resolution") is not None:
            found[str(meta["model"])].add(int(meta["resolution"]))
    return {model: sorted(res) for model, res in found.items()}


def _analyze_one(trained: TrainedModel, req: AnalyzeRequest, methods: list[str] | None, resolutions: list[int]):
    """(TrialResult, config used): the model tested at the resolutions it was trained at in this folder,
    profiled and explained whatever its trial's config said, written under output_dir/models/."""
    name = f"{trained.name}@{trained.resolution}"
    log.info("analysing %s (%s)", name, trained.path)
    cfg = explain_config(trained.cfg, methods or list(trained.cfg.explainability.methods), req.num_samples)
    on = {"profiling.enabled": True, "explainability.enabled": True, "sweep.resolutions": resolutions}
    cfg = with_overrides(cfg, on, "resomap analyze")
    bundle = load_bundle(trained, cfg)
    summary_dir = req.output_dir / "models" / trial_part(trained.name, trained.resolution, trained.seed)
    if trained.path.parent.name != f"seed{trained.seed}":  # a checkpoint of the single-seed layout
        summary_dir = summary_dir.parent
    found = evaluate_trained(
        trained.model,
        trained.spec,
        bundle,
        cfg,
        title=name,
        seed=trained.seed,
        device=trained.device,
        out_dir=summary_dir,
        num_classes=trained.num_classes,
        profile_warmup=req.profile_warmup,
        profile_iters=req.profile_iters,
    )
    trial_probe_images(found, summary_dir)
    key = str(trained.meta.get("config_hash") or "")
    result = TrialResult(key, name, trained.name, trained.family, trained.resolution, trained.seed, "FINISHED")
    result.best_checkpoint = str(trained.path)
    result.deterministic = trained.spec.deterministic
    result.task = cfg.experiment.task
    result.environment.update(machine_record(trained.device))  # the machine these numbers were computed on
    result.apply(found)
    result.save(summary_dir)
    return result, cfg
