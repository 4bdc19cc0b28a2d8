"""What the Trainer does for a closed-form model (ModelSpec.fit "closed_form": resomap.models.classical) instead of
gradient steps: one solver fit per penalty on the unaugmented training images, each scored as an epoch (a history
row with its `train/penalty_C`; MLflow gets these rows as the penalty grid `penalty/*` and the run's own metrics
as the chosen fit's: resomap.tracking.live); and the process's peak memory every epoch records.

Each fit is deterministic (the same rows, labels, weights and penalty give the same solution), so its result (the
fitted linear layer and its training metrics) is kept in `<output_dir>/<cache_dir>/fits/` under a digest of those
inputs and read back by a later seed or a resumed trial instead of solving again. Written here rather than with
joblib.Memory: the fit mutates the model, and the kept result is the layer's state, loaded with weights_only.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from resomap.runtime import seed_everything
from resomap.training.convergence import closed_form_convergence

if TYPE_CHECKING:
    from resomap.training.fit_result import FitResult
    from resomap.training.host import FitHost

log = logging.getLogger(__name__)

FIT_FORMAT = "resomap-fit-1"  # what a kept fit holds; bump when fit_arrays changes what it computes
# seconds this process spent solving fits it kept on disk for the trials (kept_fit): the cost probe says how much
# of its time was such trial work
KEPT_SECONDS = [0.0]


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: max allocated since the last reset. CPU: the process's peak resident set size.

    Not profiling.memory's RssPeakSampler on purpose: that samples the RSS rise during one block from a
    thread; this is the absolute high-water mark of the whole process so far (ru_maxrss, kept by the kernel), read
    once per epoch with no thread beside the training loop (and training sits below profiling in the layers).
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return getattr(info, "peak_wset", info.rss) / 2**20


def fit_closed_form(trainer: FitHost, model: nn.Module, data: Any) -> FitResult:
    """One solver fit per penalty of ``model.penalties`` on the unaugmented training images, each scored on the
    validation split as an epoch (history, checkpoints, early stopping and the convergence record as for
    gradient training). Seconds per fit: a resume refits from the start."""
    seed_everything(trainer.cfg.experiment.seed)
    trainer.history, trainer.should_stop, trainer.epoch = [], False, 0
    model.prepare_fit(int(data.resolution))
    trainer.setup(model, data)
    val = data.val
    if trainer.features == "pooled":  # a frozen backbone: its features from the cache (feature_head)
        from resomap.training.feature_head import closed_form_arrays

        x, y, val = closed_form_arrays(trainer, model, data)
        weights = fit_weights(trainer, y, data.train.weights)
    else:
        x, y, weights = train_arrays(trainer, data)
    inputs = _digest_arrays(model, x, y, weights)
    try:
        trainer.call_hooks("on_fit_start")
        for epoch, penalty in enumerate(model.penalties):
            if trainer.should_stop:
                break
            trainer.epoch = epoch
            trainer.call_hooks("on_train_epoch_start")
            t0 = time.perf_counter()
            metrics = {"epoch": epoch, **kept_fit(trainer, model, inputs, (x, y, penalty, weights))}
            elapsed = time.perf_counter() - t0
            metrics.update({"train/epoch_time_s": elapsed, "train/images_per_s": len(y) / max(elapsed, 1e-9)})
            metrics.update({"train/peak_memory_mb": peak_memory_mb(trainer.device), "train/penalty_C": penalty})
            trainer.call_hooks("on_train_epoch_end", metrics)
            metrics.update(trainer.evaluate(trainer.model, val, prefix="val")[0])
            trainer.history.append(metrics)
            trainer.call_hooks("on_validation_end", metrics)
        trainer.call_hooks("on_fit_end")
    except BaseException as exc:
        trainer.call_hooks("on_exception", exc)
        raise
    fit = trainer.fit_result(0, None, epochs_planned=len(model.penalties))
    fit.convergence = closed_form_convergence(fit.convergence, trainer.history, model.penalties)
    return fit


def train_arrays(
    trainer: FitHost, data: Any, batches: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The unaugmented training images flattened [N, D] (or what the model's `fit_inputs` makes of them), their
    labels [N] and per-image weights (the loader's sample weights times the loss's class weights; None when neither
    applies), for a closed-form fit; `batches`: only the loader's first so many batches (the cost probe)."""
    xs, ys, ws = [], [], []
    pooled = trainer.features == "pooled"  # a frozen backbone: it fits on its pooled features, else on the pixels
    inputs = trainer.model.fit_inputs if pooled else None
    with torch.no_grad():
        for i, (x, y, *w) in enumerate(data.train.plain()):  # w: the images' loss weights (training.sample_weights)
            if batches is not None and i >= batches:
                break
            rows = inputs(trainer.prepare_inputs(x)) if inputs is not None else x
            xs.append(rows.float().flatten(1).cpu().numpy())
            ys.append(y.cpu().numpy())
            ws.extend(t.cpu().numpy() for t in w)
    x, y = np.concatenate(xs), np.concatenate(ys)
    return x, y, fit_weights(trainer, y, np.concatenate(ws) if ws else None)


def fit_weights(trainer: FitHost, y: np.ndarray, weights: Any) -> np.ndarray | None:
    """Per-image weights of a closed-form fit: the loader's sample weights (`weights`, aligned with `y`) times the
    loss's class weights; None when neither applies."""
    if weights is not None:
        weights = np.asarray(weights.cpu().numpy() if isinstance(weights, torch.Tensor) else weights, np.float32)
    classes = getattr(trainer.criterion, "weight", None)  # the class weights the deep models' loss applies
    if classes is not None:  # the same weighting as theirs (scikit-learn's class_weight is this product too)
        per_class = classes.detach().cpu().numpy()[y]
        weights = per_class if weights is None else weights * per_class
    return weights


PROBE_FEATURE_BATCHES = 4  # the cost probe's batches of a frozen backbone's features (the rest priced per image)


def probe_closed_form(trainer: FitHost, model: nn.Module, data: Any) -> tuple[float, float, int]:
    """The cost probe of a closed-form fit (Trainer.probe_seconds, the trainer set up on `model`): it takes no
    gradient step; its pass over the training images is timed (a frozen backbone's features, most of such a fit:
    on PROBE_FEATURE_BATCHES batches, priced per image for all) and its fits predicted with its
    `probe_fit_seconds` (else one fit at its middle penalty x the number of penalties), on those rows scaled to all
    (lbfgs' cost grows about linearly with rows). Fits timed on all the training rows are the trial's own: they are
    kept (kept_fit), so the trial reads them back."""
    few = PROBE_FEATURE_BATCHES if trainer.features == "pooled" else None
    t0 = time.perf_counter()
    x, y, weights = train_arrays(trainer, data, few)
    per_image = (time.perf_counter() - t0) / max(len(y), 1)  # seconds per training image of the data pass
    scale = max(1.0, data.train.num_samples / max(len(y), 1))
    arrays = per_image * len(y) * scale
    fits = len(model.penalties)
    fit = model.fit_arrays
    if few is None:  # every row: the same fits as the trial's, kept for it
        inputs = _digest_arrays(model, x, y, weights)

        def keep(x: np.ndarray, y: np.ndarray, penalty: float, w: np.ndarray | None = None) -> dict[str, float]:
            return kept_fit(trainer, model, inputs, (x, y, penalty, w))

        fit = keep
    if hasattr(model, "probe_fit_seconds"):  # the model knows its solver's cost best
        return arrays + scale * float(model.probe_fit_seconds(x, y, weights, fit=fit)), per_image, fits
    t0 = time.perf_counter()
    fit(x, y, model.penalties[fits // 2], weights)
    return arrays + scale * (time.perf_counter() - t0) * fits, per_image, fits


def _digest_arrays(model: nn.Module, x: np.ndarray, y: np.ndarray, weights: np.ndarray | None) -> Any:
    """A running digest of what a fit of `model` on (x, y, weights) depends on besides its penalty."""
    import sklearn

    h = hashlib.blake2b(digest_size=16)
    kind = type(model)
    h.update(repr([FIT_FORMAT, kind.__module__, kind.__qualname__, sklearn.__version__, x.shape, x.dtype.str]).encode())
    h.update(repr([tuple(model.linear.weight.shape), getattr(model, "num_classes", None)]).encode())
    for part in (x, y, weights):
        h.update(b"none" if part is None else np.ascontiguousarray(part).tobytes())
    return h


def kept_fit(trainer: FitHost, model: nn.Module, inputs: Any, fit: tuple) -> dict[str, float]:
    """model.fit_arrays(x, y, penalty, weights) (`fit`), or the same fit kept from an earlier trial or the cost
    probe: its linear layer loaded into `model` and its training metrics returned. `inputs`: _digest_arrays of
    (x, y, weights)."""
    x, y, penalty, weights = fit
    h = inputs.copy()
    h.update(repr(float(penalty)).encode())
    cfg = trainer.cfg
    path = Path(cfg.experiment.output_dir) / cfg.experiment.cache_dir / "fits" / f"{h.hexdigest()}.pt"
    if path.is_file():
        try:
            found = torch.load(path, map_location=model.linear.weight.device, weights_only=True)
            if found.get("format") == FIT_FORMAT:
                model.linear.load_state_dict(found["linear"])
                return {k: float(v) for k, v in found["metrics"].items()}
        except Exception as exc:  # a damaged file is solved again, not trusted
            log.warning("kept fit %s unreadable (%s): fitting again", path, exc)
    start = time.perf_counter()
    metrics = model.fit_arrays(x, y, penalty, weights)
    if cfg.data.cache.disk:
        from resomap.atomic import save_atomic

        kept = {"format": FIT_FORMAT, "linear": model.linear.state_dict(), "metrics": metrics}
        path.parent.mkdir(parents=True, exist_ok=True)
        save_atomic(path, lambda tmp: torch.save(kept, tmp))
        KEPT_SECONDS[0] += time.perf_counter() - start
    return metrics
