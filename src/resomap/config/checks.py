"""The config checks across keys (a value alone is checked where it is read): this layer's own, and those the
packages above push with `register_check` (resomap.tasks: models, dataset and loss fit the task; resomap.explain:
explainers take the task's targets). The loader runs them on every load; the first failure raises ConfigError."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from resomap.config.schema import MAX_RESOLUTION, Config, ModelsConfig
from resomap.errors import ConfigError
from resomap.layout import folder_name_problem

TAIL_RESAMPLES = 5  # bootstrap resamples wanted beyond each end of an interval (stats.resamples' lower bound)

Check = Callable[[Config, Callable[[str, str, Any], None]], None]
_CHECKS: list[Check] = []


def register_check(check: Check) -> None:
    """A load-time check `check(cfg, fail)` from a package above the config layer; `fail(path, expected, got)`
    raises the one-line ConfigError. Registering the same function twice keeps one."""
    if check not in _CHECKS:
        _CHECKS.append(check)


def failing(where: Callable[[str], str]) -> Callable[[str, str, Any], None]:
    """`fail(path, expected, got)`: raise the one-line ConfigError naming the file that set `path` (`where`)."""

    def fail(path: str, expected: str, got: Any) -> None:
        raise ConfigError(f"{where(path)}: {path}: expected {expected}, got {got!r}")

    return fail


def run_checks(cfg: Config, where: Callable[[str], str], pushed: bool = True) -> None:
    """This layer's checks, then (`pushed`) those of the packages above; `where(path)` names the file that set
    a key. The first failure raises ConfigError."""
    fail = failing(where)

    def need(ok: bool, path: str, expected: str, got: Any) -> None:
        if not ok:
            fail(path, expected, got)

    for part in (_check_sweep, _check_training, _check_rest, _check_hog, _check_finetune):
        part(cfg, need)
    for check in _CHECKS if pushed else ():  # pushed by the packages above (resomap.tasks: models, dataset, ...)
        check(cfg, fail)


def _check_sweep(cfg: Config, need: Callable[[bool, str, str, Any], None]) -> None:
    sw = cfg.sweep
    need(len(sw.models) > 0, "sweep.models", "at least one model", sw.models)
    need(len(sw.resolutions) > 0, "sweep.resolutions", "at least one resolution", sw.resolutions)
    need(len(sw.seeds) > 0, "sweep.seeds", "at least one seed", sw.seeds)
    for i, r in enumerate(sw.resolutions):
        need(0 < r <= MAX_RESOLUTION, f"sweep.resolutions[{i}]", f"a positive integer up to {MAX_RESOLUTION}", r)
    lowered = [m.lower() for m in sw.models]
    dupes = sorted({m for m in lowered if lowered.count(m) > 1})
    need(not dupes, "sweep.models", "each model once", f"duplicate {', '.join(dupes)}")
    need(len(set(sw.resolutions)) == len(sw.resolutions), "sweep.resolutions", "each resolution once", sw.resolutions)
    need(len(set(sw.seeds)) == len(sw.seeds), "sweep.seeds", "each seed once", sw.seeds)
    for name in ("include", "exclude"):
        for i, pair in enumerate(getattr(sw, name)):
            ok = len(pair) == 2 and isinstance(pair[0], str) and type(pair[1]) is int and 0 < pair[1] <= MAX_RESOLUTION
            need(ok, f"sweep.{name}[{i}]", f"a [model, resolution] pair (resolution up to {MAX_RESOLUTION})", pair)


def _check_training(cfg: Config, need: Callable[[bool, str, str, Any], None]) -> None:
    tr = cfg.training
    for key in ("epochs", "batch_size", "eval_batch_size", "grad_accum_steps"):
        need(getattr(tr, key) >= 1, f"training.{key}", "an integer >= 1", getattr(tr, key))
    need(tr.grad_clip >= 0, "training.grad_clip", "a number >= 0", tr.grad_clip)
    need(0 <= tr.label_smoothing < 1, "training.label_smoothing", "a number in [0, 1)", tr.label_smoothing)
    need(tr.optimizer.lr > 0, "training.optimizer.lr", "a positive number", tr.optimizer.lr)
    need(tr.checkpoint.top_k >= 1, "training.checkpoint.top_k", "an integer >= 1", tr.checkpoint.top_k)
    need(
        tr.early_stopping.patience >= 1,
        "training.early_stopping.patience",
        "an integer >= 1",
        tr.early_stopping.patience,
    )
    es = tr.early_stopping
    need(
        0 < es.smoothing <= 1, "training.early_stopping.smoothing", "a weight in (0, 1] (1: no smoothing)", es.smoothing
    )
    need(es.min_epochs >= 0, "training.early_stopping.min_epochs", "an integer >= 0", es.min_epochs)
    need(
        es.min_epochs <= tr.epochs,
        "training.early_stopping.min_epochs",
        f"at most training.epochs ({tr.epochs})",
        es.min_epochs,
    )
    need(
        tr.max_minutes is None or tr.max_minutes > 0,
        "training.max_minutes",
        "null (no cap) or a positive number of minutes",
        tr.max_minutes,
    )
    need(
        0 <= tr.convergence_tolerance < 1,
        "training.convergence_tolerance",
        "a share in [0, 1) (0.005: half a percent; 0: any improvement counts)",
        tr.convergence_tolerance,
    )
    need(0.5 <= tr.ema.decay < 1, "training.ema.decay", "a decay in [0.5, 1) (e.g. 0.998)", tr.ema.decay)
    lf = tr.lr_find
    need(lf.start_lr > 0, "training.lr_find.start_lr", "a positive learning rate", lf.start_lr)
    need(
        lf.end_lr > lf.start_lr, "training.lr_find.end_lr", f"a learning rate above start_lr ({lf.start_lr})", lf.end_lr
    )
    need(lf.steps >= 10, "training.lr_find.steps", "an integer >= 10", lf.steps)
    need(
        tr.scheduler.warmup_epochs >= 0,
        "training.scheduler.warmup_epochs",
        "an integer >= 0",
        tr.scheduler.warmup_epochs,
    )


# the URI schemes MLflow keeps runs under (mlflow.store.tracking's registry; "postgresql+psycopg2" counts as
# postgresql); anything else ends a sweep's tracking in a warning per run, not a refusal
TRACKING_SCHEMES = (
    "file",
    "sqlite",
    "http",
    "https",
    "postgresql",
    "mysql",
    "mssql",
    "databricks",
    "databricks-uc",
    "uc",
)


def _check_rest(cfg: Config, need: Callable[[bool, str, str, Any], None]) -> None:
    problem = folder_name_problem(cfg.experiment.name)  # the experiment's folders are named after it
    need(problem is None, "experiment.name", problem or "", cfg.experiment.name)
    sp = cfg.data.split
    need(0 < sp.val < 1, "data.split.val", "a fraction in (0, 1)", sp.val)
    need(0 < sp.test < 1, "data.split.test", "a fraction in (0, 1)", sp.test)
    need(sp.val + sp.test < 0.9, "data.split", "val + test < 0.9", sp.val + sp.test)
    need(cfg.data.limit is None or cfg.data.limit > 0, "data.limit", "null or a positive integer", cfg.data.limit)
    need(
        0 <= cfg.data.max_bad_fraction <= 1, "data.max_bad_fraction", "a fraction in [0, 1]", cfg.data.max_bad_fraction
    )
    need(cfg.models.width >= 4, "models.width", "an integer >= 4", cfg.models.width)
    need(cfg.system.num_workers >= 0, "system.num_workers", "an integer >= 0", cfg.system.num_workers)
    threads = "0 (chosen per machine and model) or a positive count of torch threads"
    need(cfg.system.threads >= 0, "system.threads", threads, cfg.system.threads)
    uri = cfg.mlflow.tracking_uri or ""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    stores = "a folder, file:, sqlite:///, http(s):// (a resomap server) or a database URI MLflow stores runs in"
    need(not scheme or scheme in TRACKING_SCHEMES, "mlflow.tracking_uri", stores, uri)
    need(
        cfg.explainability.probe_size >= 1,
        "explainability.probe_size",
        "an integer >= 1",
        cfg.explainability.probe_size,
    )
    need(
        cfg.explainability.batch_size >= 1,
        "explainability.batch_size",
        "an integer >= 1",
        cfg.explainability.batch_size,
    )
    need(cfg.mlflow.retries >= 1, "mlflow.retries", "an integer >= 1", cfg.mlflow.retries)
    st = cfg.stats
    need(0 < st.level < 1, "stats.level", "a confidence level in (0, 1) (e.g. 0.95)", st.level)
    least = min_resamples(st.level) if 0 < st.level < 1 else 1
    enough = f"at least {least} at stats.level={st.level} ({TAIL_RESAMPLES} beyond each end of an interval)"
    need(st.resamples >= least, "stats.resamples", enough, st.resamples)
    need(0 < st.margin < 1, "stats.margin", "a non-inferiority margin in (0, 1) on the score's scale", st.margin)
    need(0 < st.power < 1, "stats.power", "a power target in (0, 1) (e.g. 0.8)", st.power)
    need(0 < st.discordance <= 1, "stats.discordance", "a fraction of test images in (0, 1]", st.discordance)
    need(
        0 <= st.seed_sd < 1,
        "stats.seed_sd",
        "a standard deviation of accuracy across training seeds in [0, 1) (e.g. 0.02)",
        st.seed_sd,
    )
    need(0 <= st.seed_correlation <= 1, "stats.seed_correlation", "a correlation in [0, 1]", st.seed_correlation)
    resolutions = list(cfg.sweep.resolutions) + [pair[1] for pair in cfg.sweep.include]
    need(
        st.reference is None or st.reference in resolutions,
        "stats.reference",
        f"null (the largest resolution) or one of the sweep's resolutions {sorted(set(resolutions))}",
        st.reference,
    )
    models = list(cfg.sweep.models) + [str(pair[0]) for pair in cfg.sweep.include]
    unknown = [name for name in st.baselines if name not in models]
    need(not unknown, "stats.baselines", f"models of the sweep ({', '.join(dict.fromkeys(models))})", unknown)


def _check_finetune(cfg: Config, need: Callable[[bool, str, str, Any], None]) -> None:
    fc = cfg.models.finetune
    need(fc.freeze_blocks >= 0, "models.finetune.freeze_blocks", "an integer >= 0 (0: end to end)", fc.freeze_blocks)
    need(fc.backbone_lr_scale > 0, "models.finetune.backbone_lr_scale", "a positive number", fc.backbone_lr_scale)
    hidden = cfg.models.head.hidden
    need(hidden >= 0, "models.head.hidden", "an integer >= 0 (0: a linear head)", hidden)


def _check_hog(cfg: Config, need: Callable[[bool, str, str, Any], None]) -> None:
    """hog_svm's cells (models.hog): at least 2 per side, and at every resolution hog_svm runs at a cell of at
    least 2 px (a 1 px cell has one gradient per histogram) so that a block of 2 x 2 cells fits in the image."""
    hog, sw = cfg.models.hog, cfg.sweep
    need(hog.orientations >= 1, "models.hog.orientations", "an integer >= 1", hog.orientations)
    need(
        hog.cells_per_side >= 2,
        "models.hog.cells_per_side",
        "an integer >= 2 (blocks of 2 x 2 cells)",
        hog.cells_per_side,
    )
    readers = ModelsConfig.MODEL_SECTIONS["hog"]
    sides = [r for r in sw.resolutions if any(m.lower() in readers for m in sw.models)]
    sides += [pair[1] for pair in sw.include if str(pair[0]).lower() in readers]
    if sides:
        side = min(sides)
        most = side // 2
        need(
            hog.cells_per_side <= most,
            "models.hog.cells_per_side",
            f"at most {most} (cells of resolution // cells_per_side >= 2 px at hog_svm's smallest resolution "
            f"{side} px)",
            hog.cells_per_side,
        )


# the model registry metadata check_model_fit reads
MODEL_FIT_KEYS = ("weights", "min_resolution", "blocks", "min_frozen")


def check_model_fit(
    cfg: Config, meta_of: Callable[[str], dict[str, Any]], fail: Callable[[str, str, Any], None]
) -> None:
    """What each model's registry metadata (`meta_of(name)`: live or from the catalog) says the config may ask of
    it: its pretrained weights package installed (found, not imported), no resolution below its smallest input
    side, models.finetune.freeze_blocks within its stages."""
    import importlib.util

    pairs = [(m, r) for m in cfg.sweep.models for r in cfg.sweep.resolutions] + [tuple(p) for p in cfg.sweep.include]
    for model in dict.fromkeys(str(m) for m, _ in pairs):
        meta = meta_of(model) or {}
        weights = meta.get("weights")
        if weights and importlib.util.find_spec(weights["module"]) is None:
            raise ConfigError(
                f"{model} needs its ImageNet weights from the package {weights['package']}; {weights['install']}"
            )
        smallest = meta.get("min_resolution")
        below = sorted({int(r) for m, r in pairs if m == model and smallest and int(r) < int(smallest)})
        if below:
            fail("sweep.resolutions", f"at least {smallest} px for {model} (its smallest input side)", below)
        blocks, fewest = meta.get("blocks"), int(meta.get("min_frozen") or 0)
        section = "partial" if fewest else "finetune"  # a partial fine-tune's frozen stages are its own section's
        frozen = (cfg.models.partial if fewest else cfg.models.finetune).freeze_blocks
        if blocks is not None and not fewest <= frozen <= int(blocks):
            said = (
                "the frozen ones run once and are cached; 0: a *_finetune model, an @finetune recipe"
                if fewest
                else "0: end to end"
            )
            fail(f"models.{section}.freeze_blocks", f"{fewest} to {blocks} for {model} (its stages; {said})", frozen)


def check_dataset_fit(cfg: Config, meta: dict[str, Any], fail: Callable[[str, str, Any], None]) -> None:
    """What the dataset's registry metadata (`meta`: live or from the catalog) says the config may ask of it: no
    resolution above its declared native side unless data.upsample says how, and label-confidence sample weights
    only from a dataset that gives confidences."""
    name, native = cfg.data.dataset, meta.get("native")
    if native and cfg.data.upsample == "refuse":
        resolutions = [*cfg.sweep.resolutions, *(pair[1] for pair in cfg.sweep.include)]
        above = sorted({int(r) for r in resolutions if int(r) > int(native)})
        if above:
            fail(
                "sweep.resolutions",
                f"at most the native {native} px of '{name}', or data.upsample=bilinear to say how to upsample",
                above,
            )
    if cfg.training.sample_weights == "confidence" and not meta.get("confidence"):
        fail("training.sample_weights", f"none: dataset '{name}' gives no label confidences", "confidence")


def min_resamples(level: float) -> int:
    """The fewest bootstrap resamples that put TAIL_RESAMPLES beyond each end of a `level` interval (200 at 0.95):
    with fewer the interval's ends are a handful of resamples, or none, and need not contain the estimate."""
    return math.ceil(round(2 * TAIL_RESAMPLES / (1 - level), 6))
