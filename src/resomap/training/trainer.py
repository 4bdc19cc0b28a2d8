"""A small Trainer: one fit loop, duck-typed callbacks, exact resume from last.pt."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from resomap import interrupts
from resomap.config import config_hash
from resomap.config.schema import Config
from resomap.errors import CheckpointError, TrainingError
from resomap.runtime import apply_system, autocast_dtype, resolve_channels_last, resolve_precision, seed_everything
from resomap.tasks import EvalContext, task_of
from resomap.training import distributed, feature_head, threads
from resomap.training.checkpoint import FORMAT, load_checkpoint, rng_state, set_rng_state
from resomap.training.closed_form import fit_closed_form, peak_memory_mb, probe_closed_form
from resomap.training.convergence import Convergence, convergence
from resomap.training.fit_result import FitResult
from resomap.training.optim import EPOCH, STEP, build_optimizer, build_scheduler
from resomap.training.progress import Progress

if TYPE_CHECKING:
    from resomap.models.spec import FeatureKind, FitKind, ModelSpec

log = logging.getLogger(__name__)

_NAN_CHECK_EVERY = 32  # optimiser-side host syncs: one per this many batches, to fail early on NaN


class Trainer:
    """Trains a model on `data` (train/val loaders, num_classes, train_labels) as `cfg.training` says.

    Attributes for callbacks: epoch, should_stop, model, optimizer, history, meta, checkpoint_payload(). `spec`: the
    model's ModelSpec, whose `fit` and `features` say how it is fitted (none: by gradient on images).
    """

    def __init__(self, cfg: Config, device: torch.device, callbacks=(), run_name="", spec: ModelSpec | None = None):
        self.cfg, self.device, self.run_name = cfg, torch.device(device), run_name
        self.fit_kind: FitKind = spec.fit if spec is not None else "gradient"
        self.features: FeatureKind = spec.features if spec is not None else "none"
        self.threads_store: tuple[Path, str] | None = None  # (file, trial key): a trial's count, measured once
        self.callbacks = sorted(callbacks, key=lambda cb: getattr(cb, "order", 0))
        self.precision, _ = resolve_precision(cfg.system.precision, self.device)  # auto: what the hardware has
        self.amp_dtype = autocast_dtype(self.precision)
        self.channels_last = resolve_channels_last(cfg.system.channels_last, self.precision)
        self.epoch = 0
        self.should_stop = False
        self.history: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {"run_name": run_name, "config_hash": config_hash(cfg)}
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: Any = None
        self.scaler: torch.amp.GradScaler | None = None
        self._forward: nn.Module | None = None
        self._train_forward: nn.Module | None = None  # DistributedDataParallel under torchrun, else _forward
        self.criterion: nn.Module | None = None
        self.task = task_of(cfg)  # loss, training accuracy and evaluation of experiment.task (resomap.tasks)
        self._pixels = 1  # labels per image in train/accuracy: 1 per image, r * r per-pixel labels
        self._sched_when = "never"
        self.stopped_by_time = False  # training.max_minutes ended the fit
        self.ema: Any = None  # the weights' moving average when training.ema.enabled (_build_ema): see eval_model
        self._updates = 0  # optimiser steps so far (the EMA's warm-up counts them)
        self._resumed_threads: dict | None = None  # meta['threads'] of the checkpoint a fit resumed from

    # ------------------------------------------------------------ callbacks and state

    def call_hooks(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            if fn is not None:
                fn(self, *args)

    def _callback_key(self, i: int, cb: Any) -> str:
        return f"{i}:{type(cb).__name__}"

    def checkpoint_payload(self) -> dict[str, Any]:
        """Everything needed to resume after `self.epoch` (only weights_only-safe values)."""
        cbs = {
            self._callback_key(i, cb): cb.state_dict()
            for i, cb in enumerate(self.callbacks)
            if hasattr(cb, "state_dict")
        }
        raw = {"train_model": self.model.state_dict(), "ema_updates": self._updates} if self.ema is not None else {}
        return {
            "format": FORMAT,
            "meta": dict(self.meta),
            "model": self.eval_model.state_dict(),  # the weights validation scored: the EMA's when it is on
            **raw,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None and self.scaler.is_enabled() else None,
            "callbacks": cbs,
            "rng": rng_state(),
            "epoch": self.epoch,
            "history": [dict(h) for h in self.history],
            "should_stop": self.should_stop,
        }

    state_dict = checkpoint_payload

    def _restore(self, path: Path) -> int:
        expect = {k: self.meta[k] for k in ("num_classes", "resolution") if k in self.meta}
        payload = load_checkpoint(path, expect=expect, map_location=self.device)
        try:
            self.model.load_state_dict(payload.get("train_model", payload["model"]))
            if self.ema is not None:
                self.ema.module.load_state_dict(payload["model"])
                self._updates = int(payload.get("ema_updates", 0))
                self.ema.n_averaged.fill_(self._updates)
            self.optimizer.load_state_dict(payload["optimizer"])
            if self.scheduler is not None and payload.get("scheduler") is not None:
                self.scheduler.load_state_dict(payload["scheduler"])
            if self.scaler is not None and payload.get("scaler") is not None:
                self.scaler.load_state_dict(payload["scaler"])
        except (KeyError, RuntimeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise CheckpointError(
                f"{path}: cannot resume from this checkpoint ({first}); resume with the same config"
            ) from None
        saved = payload.get("callbacks") or {}
        for i, cb in enumerate(self.callbacks):
            key = self._callback_key(i, cb)
            if key in saved and hasattr(cb, "load_state_dict"):
                cb.load_state_dict(saved[key])
        set_rng_state(payload["rng"])
        self._resumed_threads = (payload.get("meta") or {}).get("threads")  # the count it ran with (_choose_threads)
        self.history = [dict(h) for h in payload.get("history", [])]
        self.should_stop = bool(payload.get("should_stop", False))
        return int(payload["epoch"])

    # ------------------------------------------------------------ setup

    def setup(self, model: nn.Module, data: Any) -> None:
        cfg, sysc = self.cfg, self.cfg.system
        apply_system(sysc, self.device)
        self.model = model = self.place(model, data)
        self._forward = torch.compile(model) if sysc.compile else model
        self._train_forward = self._forward
        if distributed.is_distributed():
            data.train.shard(distributed.rank(), distributed.world_size())
            ddp = distributed.wrap(model, self.device)
            self._train_forward = torch.compile(ddp) if sysc.compile else ddp
        num_classes = int(data.num_classes)
        self.meta["num_classes"] = num_classes
        if getattr(data, "resolution", None) is not None:
            self.meta["resolution"] = int(data.resolution)
        self.criterion = self.task.criterion(cfg, data, self.device)  # the task's loss (resomap.tasks)
        groups = getattr(model, "param_groups", None)  # a fine-tuned backbone: its own learning-rate scale
        params = groups() if callable(groups) else model.parameters()
        self.optimizer = build_optimizer(params, cfg.training.optimizer, self.device)
        steps = math.ceil(len(data.train) / cfg.training.grad_accum_steps)
        self.scheduler, self._sched_when = build_scheduler(self.optimizer, cfg.training, steps)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.ema, self._updates = self._build_ema(model), 0

    def place(self, model: nn.Module, data: Any) -> nn.Module:
        """`model` given the data's input normalisation (a pretrained backbone: adopt_input_stats), on the device, in
        channels_last where the trial uses it: as it trains, and as its frozen features are computed."""
        adopt = getattr(model, "adopt_input_stats", None)
        if adopt is not None and getattr(data, "mean", None) is not None:
            adopt(data.mean, data.std)
        model = model.to(self.device)
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def _build_ema(self, model: nn.Module) -> Any:
        """torch's AveragedModel as an exponential moving average of the parameters and the batch-norm buffers
        (use_buffers, as timm's ModelEmaV3 averages them too) when training.ema.enabled; torch's own, not timm's,
        because importing timm costs seconds per trial process here. With `warmup` the decay of update n is
        min(decay, (1 + n) / (10 + n)) (TensorFlow's ExponentialMovingAverage with num_updates), so the first epochs
        are not the initial weights'."""
        ec = self.cfg.training.ema
        if not ec.enabled or self.fit_kind == "closed_form":
            return None
        from torch.optim.swa_utils import AveragedModel

        decay, warmup = float(ec.decay), bool(ec.warmup)

        @torch.no_grad()
        def update(averaged: list[torch.Tensor], current: list[torch.Tensor], n: torch.Tensor) -> None:
            d = min(decay, (1.0 + float(n)) / (10.0 + float(n))) if warmup else decay
            floats = [(a, c) for a, c in zip(averaged, current, strict=True) if a.is_floating_point()]
            if floats:
                torch._foreach_lerp_([a for a, _ in floats], [c for _, c in floats], 1.0 - d)
            for a, c in zip(averaged, current, strict=True):
                if not a.is_floating_point():  # batch norm's num_batches_tracked: the latest count
                    a.copy_(c)

        return AveragedModel(model, multi_avg_fn=update, use_buffers=True)

    @property
    def eval_model(self) -> nn.Module:
        """What validation scores and checkpoints keep: the weights' moving average when training.ema is on."""
        return self.ema.module if self.ema is not None else self.model

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def prepare_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def _choose_threads(self, data: Any, resumed: Any) -> None:
        """system.threads 0 on the CPU: the thread count of this training step on this machine
        (resomap.training.threads): its first measurement here (a few real training steps at 1 and all cores,
        taken before the first epoch with the weights, optimizer, scheduler, scaler and RNG put back after, so the
        fit is the one that count fixed in the config gives), kept in the machine's record and reused by every
        later fit of the step, whatever the load. It stays set after fit; the record is meta['threads']
        (checkpoints, result.json); a resumed fit keeps `resumed`, the record of the checkpoint it restored."""
        record = threads.preset_record(self.cfg.system, self.device, resumed, self.threads_store)
        batch = threads.first_batch(data.train) if record is None else None
        if record is None and batch is None:
            record = threads.fixed_record(torch.get_num_threads(), "not measured: no training batch")
        elif record is None:
            x, y, *w = batch
            step = threads.step_key(self.model, x, self.optimizer, self.amp_dtype, self.channels_last)
            kept = threads.machine_record(step)  # this step was measured on this machine before: that count
            if kept is not None:
                record = threads.kept_record(kept, "kept from this machine's first measurement of this step")
            else:
                record = self._measure_threads(x, y, w)
                threads.keep_machine_record(step, record)  # every later fit of this step on this machine keeps it
            log.info("%s: %d torch thread(s), %s", self.run_name or "fit", record["chosen"], record["reason"])
            threads.store_record(self.threads_store, record)  # every later attempt at the trial keeps it
        if self.device.type == "cpu" and torch.get_num_threads() != record["chosen"]:
            torch.set_num_threads(record["chosen"])
        self.meta["threads"] = record

    def _measure_threads(self, x: torch.Tensor, y: torch.Tensor, w: list) -> dict[str, Any]:
        """threads.choose_threads on training steps of the batch (x, y, *w); the schedule, the weights' average and
        the training state are as before it."""
        when, self._sched_when = self._sched_when, "never"  # a one-cycle schedule must not run out of steps
        ema, updates, self.ema = self.ema, self._updates, None  # nor may the weights' average see these steps
        try:
            with threads.training_state_kept(self.model, self.optimizer, self.scheduler, self.scaler):
                self.model.train()
                return threads.choose_threads(lambda: self.train_step(x, y, w, 1, update=True), y.shape[0])
        finally:
            self._sched_when, self.ema, self._updates = when, ema, updates

    # ------------------------------------------------------------ fit

    def fit(self, model: nn.Module, data: Any, resume_from: str | Path | None = None) -> FitResult:
        """Train for cfg.training.epochs (or until a callback sets should_stop); resume from a last.pt. A model
        whose spec's fit is "closed_form" (the classical baselines, resomap.models.classical) is fitted instead."""
        if self.fit_kind == "closed_form":
            return fit_closed_form(self, model, data)
        if self.fit_kind == "feature_head":  # trained on its frozen part's cached outputs
            data = feature_head.feature_data(self, model, data)
        seed = self.cfg.experiment.seed
        seed_everything(seed)
        self.history, self.should_stop, self.epoch, self.stopped_by_time = [], False, 0, False
        self.setup(model, data)
        start, resumed, self._resumed_threads = 0, None, None
        if resume_from is not None:
            resumed = self._restore(Path(resume_from))
            start = resumed + 1
            log.info("resuming %s from %s after epoch %d", self.run_name or "run", resume_from, resumed)
        self._choose_threads(data, self._resumed_threads)
        epochs = self.cfg.training.epochs
        progress = Progress(self.cfg.training.progress, self.run_name)
        try:
            self.call_hooks("on_fit_start")
            progress.start(start, epochs)
            for epoch in range(start, epochs):
                interrupts.check()  # a Ctrl-C lost in a callback stops the fit here (resomap.interrupts)
                if self.should_stop or self._out_of_time():
                    break
                self.epoch = epoch
                self._run_epoch(data, seed, progress)
                if epoch == start:  # a kept count far slower than measured: the machine is busier now
                    threads.warn_if_slower(self.meta.get("threads"), self.history[-1], self.run_name or "fit")
                progress.epoch_end(epoch, epochs, self.history[-1])
            distributed.check_in_sync(self.model)
            self.call_hooks("on_fit_end")
        except BaseException as exc:
            self.call_hooks("on_exception", exc)
            raise
        finally:
            progress.close()
        return self.fit_result(start, resumed)

    def _elapsed(self) -> float:
        """Seconds of training so far, epochs of a resumed attempt included (read from the history)."""
        return sum(float(h.get("train/epoch_time_s", 0.0)) + float(h.get("val/time_s", 0.0)) for h in self.history)

    def _out_of_time(self) -> bool:
        """training.max_minutes: no epoch starts once the fit's epochs (resumed ones included) took that long."""
        cap = self.cfg.training.max_minutes
        if cap is None or not self.history:
            return False
        if self._elapsed() >= cap * 60:
            self.stopped_by_time = True
            return True
        return False

    # ------------------------------------------------------------ cost probe

    def probe_seconds(self, model: nn.Module, data: Any, steps: int = 2) -> tuple[float, float, int]:
        """(predicted training seconds, seconds per image of a training step, the epochs or fits that prediction
        is for) of this trainer on `data`, from a few real steps: one untimed warm-up step (first-call kernels and
        allocations), then `steps` timed ones on the loader's batches, each from asking the loader for its batch
        (the epoch's data path: the cached images indexed, augmented and normalised on the device) to the end of
        the step, at the thread count a fit would choose now (system.threads 0 on the CPU: beside a busy process
        torch's default count runs many times slower than the one thread the trial then takes). A gradient model's
        training is those steps scaled to every batch of every epoch, plus a validation pass per epoch (a forward:
        about a third of a step); a closed-form model (resomap.models.classical) takes no step
        (closed_form.probe_closed_form), a head on cached features prices its feature pass
        (feature_head.probe_seconds). `model` is trained in place: pass one that is thrown away. The sweep's ETA
        weighs trials by these (resomap.sweep.eta)."""
        if self.fit_kind == "feature_head":  # a head on cached features (resomap.training.feature_head)
            return feature_head.probe_seconds(self, model, data, steps)
        closed = self.fit_kind == "closed_form"
        if closed:
            model.prepare_fit(int(data.resolution))
        self.setup(model, data)
        if closed:  # no gradient step: its data pass and solver are timed (resomap.training.closed_form)
            return probe_closed_form(self, model, data)
        self._choose_threads(data, None)  # left set after the probe, as after a fit: the caller may put its own back
        self.model.train()
        data.train.set_epoch(0)
        batches, times = iter(data.train), []
        for i in range(steps + 1):
            t0 = time.perf_counter()
            try:
                x, y, *w = next(batches)
            except StopIteration:
                break
            self.train_step(x, y, w, 1, update=True)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            if i:
                times.append((time.perf_counter() - t0) / max(y.shape[0], 1))
        per_image = float(np.median(times)) if times else 0.0
        epoch = per_image * (data.train.num_samples + data.val.num_samples / 3)
        return epoch * self.cfg.training.epochs, per_image, self.cfg.training.epochs

    def _run_epoch(self, data: Any, seed: int, progress: Progress) -> None:
        # Dropout etc. depend only on (seed, epoch), not on how many epochs ran in this process.
        torch.manual_seed(seed * 100_003 + self.epoch)
        self.call_hooks("on_train_epoch_start")
        metrics = self._train_epoch(data.train, progress)
        self.call_hooks("on_train_epoch_end", metrics)
        t0 = time.perf_counter()
        val = self.evaluate(self.eval_model, data.val, prefix="val")[0]
        metrics.update(val)
        metrics["val/time_s"] = time.perf_counter() - t0
        if self._sched_when == EPOCH:
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(metrics["val/loss"])
            else:
                self.scheduler.step()
        self.history.append(metrics)
        self.call_hooks("on_validation_end", metrics)
        self.should_stop = distributed.share_from_rank0(self.should_stop)  # every rank stops at the same epoch

    def _optimizer_step(self) -> None:
        if self.cfg.training.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.training.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self._updates += 1
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        if self._sched_when == STEP:
            self.scheduler.step()

    def _train_epoch(self, loader: Any, progress: Progress) -> dict[str, Any]:
        self.model.train()
        loader.set_epoch(self.epoch)
        n, k = len(loader), self.cfg.training.grad_accum_steps
        lr = float(self.optimizer.param_groups[0]["lr"])
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        # per-batch losses stay on the device (no per-batch sync) in a list (no indexing kernel per step);
        # batch sizes are known on the host
        losses: list[torch.Tensor] = []
        sizes: list[int] = []
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        checked, seen = 0, 0
        self.optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        for i, (x, y, *w) in enumerate(progress.batches(loader, self.epoch, n)):
            group = min(k, n - (i // k) * k)  # the last accumulation group of an epoch may be shorter
            out, loss = self.train_step(x, y, w, group, update=(i + 1) % k == 0 or i + 1 == n)
            losses.append(loss.detach())
            sizes.append(y.shape[0])
            correct += self.task.correct(out, y)
            seen += y.shape[0]
            self._pixels = y.numel() // max(y.shape[0], 1)
            if (i + 1) % _NAN_CHECK_EVERY == 0:
                checked = self._check_finite(losses, checked, i + 1)
        self._check_finite(losses, checked, n)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        distributed.sync_buffers(self.model)
        loss_total = (
            (torch.stack(losses) * torch.tensor(sizes, device=self.device)).sum()
            if losses
            else torch.zeros((), device=self.device)
        )
        totals = [loss_total, correct, torch.tensor(seen, device=self.device)]
        totals = distributed.all_reduce_sum(torch.stack([t.double() for t in totals]))  # over ranks under DDP
        loss_sum, correct_sum, seen = totals.tolist()
        return {
            "epoch": self.epoch,
            "train/loss": float(loss_sum / max(seen, 1)),
            "train/accuracy": float(correct_sum / max(seen * self._pixels, 1)),  # per-pixel labels: pixel accuracy
            "train/epoch_time_s": elapsed,
            "train/images_per_s": seen / elapsed if elapsed > 0 else float("nan"),
            "train/peak_memory_mb": peak_memory_mb(self.device),
            "lr": lr,
        }

    def train_step(self, x: torch.Tensor, y: torch.Tensor, w: list, group: int, update: bool) -> tuple:
        """Forward, loss and backward of one batch (a 1/group share of an accumulation group); the optimiser
        steps when `update`. Returns (outputs, loss)."""
        with self.autocast():
            out = self._train_forward(self.prepare_inputs(x))
            loss = self.criterion(out.float(), y, *w)  # w: the images' loss weights, when the loader has them
        self.scaler.scale(loss / group if group > 1 else loss).backward()
        if update:
            self._optimizer_step()
        return out, loss

    def _check_finite(self, losses: list[torch.Tensor], start: int, stop: int) -> int:
        if stop <= start:
            return stop
        window = torch.stack(losses[start:stop])
        if not bool(torch.isfinite(window).all()):
            step = start + int((~torch.isfinite(window)).nonzero()[0, 0])
            raise TrainingError(
                f"loss became NaN at epoch {self.epoch} step {step}; lower training.optimizer.lr, set "
                "training.grad_clip, or use system.precision=fp32/bf16"
            )
        return stop

    # ------------------------------------------------------------ evaluation

    def evaluate(
        self, model: nn.Module, loader: Any, prefix: str = "val", num_classes: int | None = None
    ) -> tuple[Any, ...]:
        """The task's evaluation (resomap.tasks: loss and metrics '<prefix>/<name>', the per-image score table as
        y_true / y_pred and, where the task has one, a per-image ranking score); the model's train/eval mode is
        restored."""
        return self.task.evaluate(self.eval_context(model, num_classes), loader, prefix)

    def eval_context(self, model: nn.Module, num_classes: int | None = None) -> EvalContext:
        """What the task sees of this trainer to evaluate or draw `model`: its forward as trained (compiled when the
        model is the one being fitted), the input transform, the autocast of the trial's precision, the device,
        the config and the classes (`num_classes`, else the fitted data's)."""
        forward = self._forward if model is self.model and self._forward is not None else model
        classes = num_classes if num_classes is not None else self.meta.get("num_classes")
        return EvalContext(self.cfg, model, forward, self.prepare_inputs, self.autocast, self.device, classes)

    def fit_result(self, start: int, resumed: int | None, epochs_planned: int | None = None) -> FitResult:
        best_path = last_path = best_score = None
        for cb in self.callbacks:
            if getattr(cb, "last_path", None) is not None:
                best_path, last_path, best_score = cb.best_path, cb.last_path, cb.best_score
                break
        return FitResult(
            best_path=best_path,
            last_path=last_path,
            best_score=best_score,
            epochs_run=len(self.history) - (resumed + 1 if resumed is not None else 0),
            history=[dict(h) for h in self.history],
            stopped_early=self.should_stop,
            resumed_from_epoch=resumed,
            convergence=self._convergence(epochs_planned),
        )

    def _convergence(self, epochs_planned: int | None = None) -> Convergence:
        """The fit's convergence record, by the checkpoint monitor (training.checkpoint) over the whole history."""
        tc = self.cfg.training
        stopper = next((cb for cb in self.callbacks if hasattr(cb, "patience") and hasattr(cb, "wait")), None)
        return convergence(
            self.history,
            monitor=tc.checkpoint.monitor,
            mode=tc.checkpoint.mode,
            epochs_planned=tc.epochs if epochs_planned is None else epochs_planned,
            stopped_early=self.should_stop and len(self.history) < (epochs_planned or tc.epochs),
            patience=getattr(stopper, "patience", None),
            stop_monitor=getattr(stopper, "monitor", None),
            stop_mode=getattr(stopper, "mode", None),
            time_capped=self.stopped_by_time,
            tolerance=tc.convergence_tolerance,
        )
