"""Expand sweep.yaml into trials with stable keys, and read each trial's state from disk."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

from resomap.config import Config, with_overrides
from resomap.errors import ConfigError, UnknownNameError
from resomap.layout import Layout
from resomap.models import get_spec
from resomap.sweep.identity import Trial, checkpoint_key, pin_precision
from resomap.sweep.trial import TrialResult
from resomap.trial_result import DISK_FULL, RETRIED_FAILURES

log = logging.getLogger(__name__)
STATES = ("done", "failed", "partial", "pending", "unreadable")


def plan(cfg: Config, check: bool = True) -> list[Trial]:
    """models x resolutions x seeds, plus `include` pairs, minus `exclude` pairs; per-model overrides applied.
    Unknown model names raise here; unknown explainer names and pairs below their model's smallest input side too
    unless `check` is off (see check_plan). With sweep.skip_invalid_resolutions such pairs are left out of the grid
    whatever `check` says (one warning line names them)."""
    cfg = pin_precision(cfg)
    sw = cfg.sweep
    for name in sw.models:
        get_spec(name)  # unknown model names fail here, before anything runs
    if check:
        check_plan(cfg)
    configs = model_configs(cfg)
    pairs = grid_pairs(cfg)
    if sw.skip_invalid_resolutions:
        skipped = check_grid(cfg)
        if skipped:
            _warn_once(f"sweep.skip_invalid_resolutions: left out {skipped_words(skipped)}")
        left_out = {(model, res) for model, res, _ in skipped}
        pairs = [p for p in pairs if p not in left_out]
    trials = []
    for model, res in pairs:
        for seed in sw.seeds:
            trials.append(Trial(model, res, seed, configs[model]))
    return trials


def grid_pairs(cfg: Config) -> list[tuple[str, int]]:
    """The (model, resolution) pairs of the grid: models x resolutions, plus `include`, minus `exclude`."""
    sw = cfg.sweep
    pairs = [(m.lower(), r) for m in sw.models for r in sw.resolutions]
    for model, res in sw.include:
        get_spec(model)
        if (model.lower(), res) not in pairs:
            pairs.append((model.lower(), res))
    excluded = {(m.lower(), r) for m, r in sw.exclude}
    pairs = [p for p in pairs if p not in excluded]
    if not pairs:
        raise ConfigError("sweep: the grid is empty after sweep.exclude; nothing to run")
    return pairs


def model_configs(cfg: Config) -> dict[str, Config]:
    """model -> the config its trials run with (sweep.model_overrides applied), for every model of the grid."""
    sw = cfg.sweep
    for name in sw.model_overrides:  # overrides of models not in this grid are kept for other grids
        try:
            get_spec(name)
        except UnknownNameError as exc:
            raise ConfigError(f"sweep.model_overrides: {exc}") from None
    configs: dict[str, Config] = {}
    for model, _ in grid_pairs(cfg):
        if model not in configs:
            overrides = sw.model_overrides.get(model, {})
            configs[model] = (
                pin_precision(with_overrides(cfg, overrides, f"sweep.model_overrides.{model}")) if overrides else cfg
            )
    return configs


def check_plan(cfg: Config) -> None:
    """The explainer names of the config exist, and every pair of the grid is at or above its model's smallest input
    side (check_grid). Apart from plan() because it imports every explainer's library and builds every model (a
    sweep with nothing left to run skips it: its results were made with these settings)."""
    from resomap.explain.methods.registry import get_explainer

    if cfg.explainability.enabled:
        for method in [*cfg.explainability.methods, *cfg.explainability.sanity_methods]:
            try:
                get_explainer(method)
            except UnknownNameError as exc:
                raise ConfigError(f"explainability.methods: {exc}") from None
    check_grid(cfg)


def check_grid(cfg: Config) -> list[tuple[str, int, int]]:
    """The grid's (model, resolution, smallest side) pairs whose resolution is below the model's smallest input side
    (input_minimum): those sweep.skip_invalid_resolutions leaves out. ConfigError when there are such pairs and the
    setting is off, and in any case when no pair of the grid would be left."""
    pairs, configs = grid_pairs(cfg), model_configs(cfg)
    minima = {model: input_minimum(model, configs[model]) for model in configs}
    below = [(m, r, minima[m]) for m, r in pairs if minima[m] is not None and r < minima[m]]
    if not below:
        return []
    by_model: dict[str, list[int]] = {}
    for m, r, _ in below:
        by_model.setdefault(m, []).append(r)
    parts = "; ".join(
        f"{m} needs inputs of at least {minima[m]} px (its layers shrink smaller ones away), got "
        f"{', '.join(map(str, rs))}"
        for m, rs in by_model.items()
    )
    if len(below) == len(pairs):  # skipping would leave nothing to run
        least = min(smallest for _, _, smallest in below)
        raise ConfigError(f"{_setting(cfg, below)}: {parts}; use resolutions of at least {least} px")
    if cfg.sweep.skip_invalid_resolutions:
        return below
    dropped = ", ".join(map(str, sorted({r for _, r, _ in below})))
    raise ConfigError(f"{_setting(cfg, below)}: {parts}; drop {dropped} or set sweep.skip_invalid_resolutions=true")


def _setting(cfg: Config, below: list[tuple[str, int, int]]) -> str:
    """The setting that put the pairs in the grid: sweep.resolutions, sweep.include, or both."""
    included = {(str(m).lower(), r) for m, r in cfg.sweep.include}
    plain = set(cfg.sweep.resolutions)
    keys = []
    if any(r in plain and (m, r) not in included for m, r, _ in below):
        keys.append("sweep.resolutions")
    if any((m, r) in included for m, r, _ in below):
        keys.append("sweep.include")
    return " / ".join(keys) or "sweep.resolutions"


def skipped_words(skipped: list[tuple[str, int, int]]) -> str:
    """'simple_cnn at 12 px (it needs at least 15 px); vgg11 at 16, 24 px (...)': the pairs check_grid left out."""
    by_model: dict[str, tuple[int, list[int]]] = {}
    for model, res, smallest in skipped:
        by_model.setdefault(model, (smallest, []))[1].append(res)
    parts = [f"{m} at {', '.join(map(str, rs))} px (it needs at least {n} px)" for m, (n, rs) in by_model.items()]
    return "; ".join(parts)


_MINIMA: dict[tuple[str, int, str], int | None] = {}
_WARNED: set[str] = set()


def input_minimum(model: str, cfg: Config) -> int | None:
    """The smallest input side `model` takes with `cfg.models` (models.build.smallest_input_side), or None when no
    side up to 1024 works (an error not of size: left to its trials). One build per model and models settings in a
    process: 2 classes, the dataset's channels where its registry says (else 3, the models' default), no weight
    file read, the random state left as it was."""
    import torch

    from resomap.models import build_model, canonical_name, smallest_input_side

    channels = _input_channels(cfg)
    models = dataclasses.replace(cfg.models, pretrained={})  # the shapes are what matter
    key = (canonical_name(model), channels, repr(models))
    if key not in _MINIMA:
        with torch.random.fork_rng(devices=[]):
            net, _ = build_model(model, 2, channels, models)
        _MINIMA[key] = smallest_input_side(net, channels)
    return _MINIMA[key]


def _input_channels(cfg: Config) -> int:
    """The input channels the dataset gives when its registry entry says (elpv, synthetic: 1), else 3."""
    from resomap.data.registry import DATASETS

    return int(DATASETS.meta(cfg.data.dataset).get("channels") or 3)


def _warn_once(line: str) -> None:
    """A warning logged once per process (plan runs several times in one sweep)."""
    if line not in _WARNED:
        _WARNED.add(line)
        log.warning("%s", line)


def check_memory(trials: list[Trial], channels: int = 1) -> None:
    """DeviceError before anything is created when a trial's training or evaluation batch cannot fit in the
    device's free memory at its resolution (profiling.fits: activations estimated from a small probe forward).
    `channels`: the dataset's input channels when known (1, the fewest, otherwise: the estimate errs low)."""
    from resomap.models import build_model
    from resomap.profiling.fits import check_fits
    from resomap.runtime import resolve_device

    by_model: dict[str, list[Trial]] = {}
    for t in trials:
        by_model.setdefault(t.model, []).append(t)
    for model, group in by_model.items():
        cfg = group[0].cfg
        # the shapes are what matter: no weight file is read here (a missing one fails its own trial, as it does
        # when the trial prepares)
        net, _ = build_model(model, 2, channels, dataclasses.replace(cfg.models, pretrained={}))
        tr = cfg.training
        check_fits(
            model,
            net,
            in_channels=channels,
            resolutions=[t.resolution for t in group],
            batches={"training": tr.batch_size, "evaluation": tr.eval_batch_size},
            precision=cfg.system.precision,
            device=resolve_device(cfg.system),
            settings="training.batch_size / training.eval_batch_size",
        )


def check_data(trials: list[Trial], record: bool = True) -> list[str]:
    """The data checks `resomap train` runs (sweep.trial.check_data: the dataset opens, its image files read,
    unreadable ones within data.max_bad_fraction, the split, the probe set) for the trials to run, before anything
    is created: a DataError (one line, exit 2) instead of every trial failing in turn. Once per data setting (the
    data section and data seed: model overrides may change them), quietly: what the data says on the way (its size,
    images skipped under the threshold) each trial says again. `record`: keep a pass with the resolution cache (a
    dry run writes nothing). Returns a line per bit depth of image files deeper than 8 bits
    ("data: 16-bit images, ...") and per set of images skipped as unreadable (within data.max_bad_fraction), what
    the sweep says before its trials."""
    from resomap.data.verify import data_seed, found_count, found_since, quiet_log, said
    from resomap.sweep.trial import check_data as check_trial_data

    seen: set[str] = set()
    lines: list[str] = []
    start = found_count()
    with quiet_log():
        for t in trials:
            ec = t.cfg.explainability
            data = json.dumps(dataclasses.asdict(t.cfg.data), sort_keys=True, default=str)
            same = repr((data, data_seed(t.cfg, t.seed), ec.enabled, ec.probe_size, t.cfg.experiment.output_dir))
            if same not in seen:
                seen.add(same)
                depth = check_trial_data(t, t.cfg, record=record)
                line = f"data: {depth.words}" if depth is not None and depth.deep else None
                if line and line not in lines:
                    lines.append(line)
    skips = found_since(start)
    said(skips, anew=True)  # said once here, by the sweep (and its dry run), not again by each trial
    return lines + [f"data: {line}; every trial skips them" for line in skips]


def sweep_key(trials: list[Trial]) -> str:
    text = json.dumps(sorted(t.key for t in trials))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_result(trial: Trial) -> TrialResult | None:
    """The trial's result (for its exact key) from its folder, else from its folder of the seed layout without an
    experiment level that the sweep has not moved yet (resomap.sweep.migrate); None when neither holds it."""
    return _read_result(trial)[0]


def _result_folders(trial: Trial) -> tuple[Path, ...]:
    """Where the trial's result.json may be: its folder, then its folder of the seed layout not moved yet."""
    return (trial.summary_dir, trial.seed_layout_dirs()[0])


def _read_result(trial: Trial) -> tuple[TrialResult | None, str | None, Path | None]:
    """(the trial's result on disk for its exact key, else None; what is wrong with its result.json when it is
    there but does not read: cut short or not a result; the folder of that result.json)."""
    torn: tuple[str, Path] | None = None
    for folder in _result_folders(trial):
        path = folder / "result.json"
        if not path.exists():
            continue
        try:
            result = TrialResult.from_json(path.read_text(encoding="utf-8"))
        except PermissionError:  # another user's file: the unreadable state (trial_state)
            continue
        except (OSError, ValueError, TypeError) as exc:  # torn (a copy or a hand cut it short) or not a result
            first = str(exc).splitlines()[0] if str(exc) else exc
            torn = torn or (f"not a whole result ({type(exc).__name__}: {first})", folder)
            continue
        if result.key == trial.key:
            return result, None, folder
    return None, *(torn or (None, None))


def unreadable_result(trial: Trial) -> Path | None:
    """The result.json this user may not read where the trial's result would be (its folder, else its folder of
    the seed layout, whose owner cannot be told without reading it); None when there is none."""
    for folder in _result_folders(trial):
        path = folder / "result.json"
        if path.is_file():
            return None if os.access(path, os.R_OK) else path
    return None


# why a failure of RETRIED_FAILURES is retried, in words
_RETRY_WORDS = {DISK_FULL: "the disk was full"}


def trial_state(trial: Trial) -> str:
    """done / failed (a result on disk for this exact key), partial, pending, or unreadable (a result.json this
    user has no permission to read). Partial: to resume or redo, with its checkpoints when they are whole (run_trial
    decides): a last.pt of an interrupted attempt; a result.json that does not read; a finished result a file of
    which is damaged (`damaged_file`); a failure a plain rerun retries (its `failure_kind` in RETRIED_FAILURES: the
    disk was full); a result neither finished nor failed (RUNNING: an interrupt wrote it, as older versions did).
    The last four are named in one warning line each (once per process). A trial still in the
    seed layout without an experiment level has the state its folders there give: the sweep moves them before it
    runs anything."""
    if unreadable_result(trial) is not None:
        return "unreadable"
    result, torn, where = _read_result(trial)
    if result is not None and result.status == "FINISHED":
        damage = damaged_file(trial, result, where)
        if damage is None:
            return "done"
        _warn_once(f"{trial.name}: {damage}; the sweep does the trial again")
        return "partial"
    if result is not None and result.status != "FAILED":  # RUNNING: an interrupt wrote it in earlier versions
        _warn_once(f"{trial.name}: {where / 'result.json'} is of an interrupted attempt; the sweep resumes it")
        return "partial"
    if result is not None:
        if result.failure_kind not in RETRIED_FAILURES:
            return "failed"
        why = _RETRY_WORDS.get(result.failure_kind, result.failure_kind)
        _warn_once(f"{trial.name} failed because {why} ({result.error}); the sweep runs it again")
        return "partial"
    if torn is not None:
        _warn_once(f"{trial.name}: {where / 'result.json'}: {torn}; the sweep does the trial again")
        return "partial"
    if (trial.checkpoint_dir() / "last.pt").exists():
        return "partial"
    if checkpoint_key(trial.seed_layout_dirs()[1]) == trial.key:
        return "partial"
    return "pending"


def damaged_file(trial: Trial, result: TrialResult, folder: Path | None = None) -> str | None:
    """'<path>: <what is wrong>' for the first file a finished trial needs that is not whole, else None; cheap
    checks (resomap.filecheck), each file's verdict kept while the file is unchanged:
    - its per-image table (result.predictions; the task's `check_records`): whole rows, as many per test resolution
      as the test set has images (result.data's split sizes), at every resolution it was tested at;
    - explanations.npz, when it has maps, and its best checkpoint: zip archives whose members lie whole in the file.
    A best checkpoint that is not there at all is no damage (its folder removed to free space: the summary needs no
    checkpoint, and retraining every trial for it would cost the whole sweep)."""
    from resomap.filecheck import check_zip
    from resomap.tasks import Task, get_task

    old_layout = folder is not None and folder != trial.summary_dir  # not moved yet: its files are still there
    folder = folder or trial.summary_dir
    if result.predictions:
        images = (result.data.get("splits") or {}).get("test")
        resolutions = tuple(sorted(int(r) for r in result.cross_resolution))
        try:
            check = get_task(result.task or None).check_records
        except UnknownNameError:  # a plugin's task not installed here: the default check
            check = Task().check_records
        path = folder / Path(result.predictions).name
        what = _checked(check, path, images if isinstance(images, int) else None, resolutions)
        if what:
            return f"{path}: {what}"
    needed = []
    if result.explain is not None and result.explain.maps:
        needed.append(folder / Path(result.explain.maps).name)
    if result.best_checkpoint:
        checkpoints = trial.seed_layout_dirs()[1] if old_layout else trial.checkpoint_dir(result.family)
        best = checkpoints / Path(result.best_checkpoint).name
        if best.exists():
            needed.append(best)
    for path in needed:
        what = _checked(check_zip, path)
        if what:
            return f"{path}: {what}"
    return None


_VERDICTS: dict[tuple, str | None] = {}


def _checked(check, path: Path, *args) -> str | None:
    """check(path, *args), kept per file version (size and modification time): a sweep reads each trial's state
    more than once."""
    try:
        st = path.stat()
    except OSError:
        return check(path, *args)
    key = (getattr(check, "__qualname__", repr(check)), str(path.resolve()), st.st_size, st.st_mtime_ns, args)
    if key not in _VERDICTS:
        _VERDICTS[key] = check(path, *args)
    return _VERDICTS[key]


def describe_plan(trials: list[Trial]) -> list[tuple[Trial, str]]:
    return [(t, trial_state(t)) for t in trials]


def summary_folder(cfg: Config) -> Path:
    """Where the sweep's summary lives: <output_dir>/<summary_dir>/_sweep/<experiment name> (resomap.layout)."""
    return Layout.of(cfg).sweep_folder()
