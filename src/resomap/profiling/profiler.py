"""profile(model, resolution) -> ModelProfile: parameters, MACs/FLOPs, latency, throughput and memory."""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from resomap.config import schema
from resomap.config.schema import Config
from resomap.errors import ConfigError, DeviceError
from resomap.profiling.fits import check_fits
from resomap.profiling.flops import OpCounts, count_ops
from resomap.profiling.memory import MemoryStats, forward_memory
from resomap.profiling.timing import (
    LatencyStats,
    Measurement,
    NoisePolicy,
    images_per_s,
    inference_step,
    measure,
    torch_threads,
    training_step,
)
from resomap.runtime import (
    autocast_dtype,
    describe_device,
    resolve_channels_last,
    resolve_device,
    resolve_precision,
)

log = logging.getLogger(__name__)

PRECISIONS = schema.PRECISIONS
CLASSIFICATION = "classification"


@dataclass(frozen=True)
class ModelProfile:
    """What a model costs at one resolution. Counts are per image; latency is per call of `batch_size` images."""

    model_name: str
    resolution: int
    in_channels: int
    batch_size: int
    train_batch_size: int
    device: str
    device_name: str
    precision: str
    torch_version: str
    params_total: int
    params_trainable: int
    macs: float  # per image, fvcore (1 per multiply-add)
    flops: float  # per image, torch FlopCounterMode (2 per multiply-add)
    flops_to_2macs: float  # flops / (2 * macs), ~1 for conv nets
    latency: LatencyStats
    inference_images_per_s: float
    train_images_per_s: float | None  # None when the model has no trainable parameters
    memory: MemoryStats
    # How the timing went (profiling/timing.py): `noisy` when every attempt looked disturbed (the reasons say
    # why); threads: torch intra-op threads of the kept attempt (0 on CUDA); others_cpu_cores: cores other
    # processes kept busy meanwhile. Profiles written before these existed read back as quiet.
    noisy: bool = False
    noise_reasons: list[str] = field(default_factory=list)
    attempts: int = 1
    rounds: int = 1
    threads: int = 0
    others_cpu_cores: float | None = None
    task: str = CLASSIFICATION  # from the model's logits (StepTask); older profiles read back so
    channels_last: bool = False  # NHWC model and inputs (system.channels_last); older profiles read back so

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def gflops(self) -> float:
        return self.flops / 1e9

    @property
    def params_m(self) -> float:
        return self.params_total / 1e6

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelProfile:
        fields = dict(data)
        fields["latency"] = LatencyStats(**fields["latency"])
        fields["memory"] = MemoryStats(**fields["memory"])
        return cls(**fields)

    def as_metrics(self, prefix: str = "profile/") -> dict[str, float]:
        """Flat {name: float} of every numeric figure (for MLflow); None values are left out."""
        out: dict[str, float] = {}

        def add(key: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    add(f"{key}_{k}" if key else k, v)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value is not None:
                out[f"{prefix}{key}"] = float(value)

        add("", self.as_dict())
        out[f"{prefix}noisy"] = 1.0 if self.noisy else 0.0
        out[f"{prefix}gmacs"] = self.gmacs
        out[f"{prefix}gflops"] = self.gflops
        return out


@contextmanager
def preserved_state(model: nn.Module) -> Iterator[None]:
    """Restore every module's training flag and every parameter's requires_grad on exit."""
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.requires_grad) for p in model.parameters()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training
        for p, requires in grads:
            p.requires_grad_(requires)


def _check_args(
    resolution: int, in_channels: int, batch_size: int, precision: str, iters: int, warmup: int, rounds: int = 1
) -> None:
    if resolution < 1 or in_channels < 1 or batch_size < 1:
        raise ConfigError(
            f"profile: resolution, in_channels and batch_size must be >= 1, got {resolution}, {in_channels}, "
            f"{batch_size}"
        )
    if precision not in PRECISIONS:
        raise ConfigError(f"profile: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if rounds < 1:
        raise ConfigError(f"profile: need rounds >= 1, got {rounds}")
    if iters < 1 or warmup < 0:
        raise ConfigError(f"profile: need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")


def _on_device(model: nn.Module, device: torch.device) -> nn.Module:
    """The model itself when it already lives on `device`, else a copy moved there (the caller's is untouched)."""
    tensors = [*model.parameters(), *model.buffers()]
    if all(t.device.type == device.type and (device.index is None or t.device == device) for t in tensors):
        return model
    return copy.deepcopy(model).to(device)


@dataclass
class StepTask:
    """What a timed training step needs: the task (resomap.tasks: the trial's, else the one whose models give
    outputs of the rank of the model's), random labels for the batch and the task's loss under the config
    (Task.step_targets). Classification: logits [B, C], labels [B], cross-entropy. Segmentation: logits
    [B, K, H, W], labels [B, H, W], the loss of the `segmentation` config section (ce + dice by default)."""

    task: str
    targets: torch.Tensor
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def step_task(model: nn.Module, x: torch.Tensor, cfg: Config | None = None, task: str | None = None) -> StepTask:
    """The StepTask of `model` on the batch `x` (one untimed eval forward of x[:1]; every module's mode is
    restored): `task`'s labels and loss under `cfg` (None: the defaults); without a task, the task whose models
    give outputs of that rank (a bare model), and logits of a rank no task has raise ConfigError."""
    from resomap.tasks import for_output, get_task

    with preserved_state(model), torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        out = model.eval()(x[:1])
    chosen = get_task(task) if task is not None else for_output(out)
    batch = out.expand(x.shape[0], *out.shape[1:])
    y, loss = chosen.step_targets(batch, cfg)
    return StepTask(chosen.name, y, loss)


def _train_step(
    model: nn.Module, x: torch.Tensor, amp: torch.dtype | None, task: StepTask
) -> Callable[[], None] | None:
    """A full training step on a deep copy (the caller's weights and optimizer state are untouched), or None
    when the model has nothing to train."""
    trainee = copy.deepcopy(model).train()
    for module in _frozen(trainee):  # a frozen backbone whose weights keep requires_grad for the explainers
        module.requires_grad_(False)
    if not any(p.requires_grad for p in trainee.parameters()):
        log.warning("model has no trainable parameters; training throughput not measured")
        return None
    return training_step(trainee, x, task.targets, amp_dtype=amp, loss_fn=task.loss)


def profile(
    model: nn.Module,
    resolution: int,
    *,
    in_channels: int,
    batch_size: int = 1,
    device: torch.device | str,
    precision: str = "fp32",
    warmup: int = 10,
    iters: int = 50,
    train_batch_size: int | None = None,
    train_iters: int | None = None,
    model_name: str | None = None,
    rounds: int = 5,
    noise: NoisePolicy | None = None,
    cfg: Config | None = None,
    task: str | None = None,
    channels_last: bool = False,
) -> ModelProfile:
    """Profile `model` on square `resolution` inputs. The model's mode and requires_grad flags are restored; with
    `channels_last` a copy of it runs in NHWC, on NHWC inputs, as a trial with system.channels_last trains it.

    The training step is `task`'s (the trial's: its labels and its loss under `cfg`; StepTask); without a task,
    the task of the model's logits: one label per image for [B, C] logits, a label per pixel for [B, K, H, W].

    Inference calls and training steps are timed in `rounds` interleaved rounds and re-measured while the machine
    looks disturbed (`noise`, see profiling/timing.py); a figure no attempt measured cleanly comes back noisy.
    """
    _check_args(resolution, in_channels, batch_size, precision, iters, warmup, rounds)
    device = _visible_device(device)
    precision, _ = resolve_precision(precision, device)  # auto: bf16 where the device computes it natively
    amp = autocast_dtype(precision)
    train_bs = train_batch_size or max(batch_size, 8)
    _fits(model, model_name, (batch_size, train_bs, in_channels, resolution), precision, device)
    with preserved_state(model):
        net, x, xt = _inputs(model, device, (batch_size, train_bs, in_channels, resolution), channels_last)
        counts = count_ops(net, x[:1])
        step = step_task(net, xt, cfg, task)
        train = _train_step(net, xt, amp, step)
        net.eval()
        infer = inference_step(net, x, amp)
        timed = _time_steps(infer, train, device, iters, train_iters or iters, warmup, rounds, noise or NoisePolicy())
        memory = forward_memory(net, infer, device)
    result = ModelProfile(
        model_name=model_name or type(model).__name__,
        resolution=resolution,
        task=step.task,
        in_channels=in_channels,
        batch_size=batch_size,
        train_batch_size=train_bs,
        device=str(device),
        precision=precision,
        channels_last=channels_last,
        torch_version=torch.__version__,
        memory=memory,
        **_size_fields(model, counts),  # requires_grad flags as restored by preserved_state
        **_timing_fields(timed, device, batch_size, train_bs if train is not None else None),
    )
    _log_profile(result, timed)
    return result


def _fits(model: nn.Module, name: str | None, shape: tuple[int, int, int, int], precision: str, device) -> None:
    """DeviceError when the inference or training batch (shape as in `_inputs`) cannot fit (profiling.fits)."""
    batch, train_batch, channels, side = shape
    check_fits(
        name or type(model).__name__,
        model,
        in_channels=channels,
        resolutions=[side],
        batches={"inference": batch, "training": train_batch},
        precision=precision,
        device=device,
        settings="a smaller batch size",
    )


def _inputs(
    model: nn.Module, device: torch.device, shape: tuple[int, int, int, int], channels_last: bool
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """(the model on `device`, a random inference batch, a random training batch); shape = (inference batch,
    training batch, channels, side). With channels_last, an NHWC copy of the model (the caller's is untouched)
    and NHWC batches."""
    batch, train_batch, channels, side = shape
    net, fmt = _on_device(model, device), torch.channels_last if channels_last else torch.contiguous_format
    if channels_last:
        net = (copy.deepcopy(net) if net is model else net).to(memory_format=fmt)
    x = torch.randn(batch, channels, side, side, device=device).contiguous(memory_format=fmt)
    xt = torch.randn(train_batch, channels, side, side, device=device).contiguous(memory_format=fmt)
    return net, x, xt


def _visible_device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("profile: device is cuda but no CUDA GPU is visible; pass device='cpu'")
    return device


def _time_steps(
    infer: Callable[[], object],
    train: Callable[[], None] | None,
    device: torch.device,
    iters: int,
    train_iters: int,
    warmup: int,
    rounds: int,
    noise: NoisePolicy,
) -> Measurement:
    """Time the inference call (and the training step, when there is one: at most 3 warm-up steps) in `rounds`
    interleaved rounds under the noise policy; an exception a step raised is raised here."""
    variants: dict[str, Callable[[], object]] = {"inference": infer}
    counts_per = {"inference": iters}
    warm = {"inference": warmup}
    if train is not None:
        variants["training"] = train
        counts_per["training"] = train_iters
        warm["training"] = max(1, min(warmup, 3))
    timed = measure(variants, device, iters=counts_per, warmup=warm, rounds=rounds, policy=noise)
    for exc in timed.rounds.errors.values():
        raise exc
    return timed


def _frozen(model: nn.Module) -> list[nn.Module]:
    """The modules training leaves as they are (a model's own `frozen()`: a pretrained backbone), else none."""
    frozen = getattr(getattr(model, "_orig_mod", model), "frozen", None)  # torch.compile wraps
    return list(frozen()) if callable(frozen) else []


def _size_fields(model: nn.Module, counts: OpCounts) -> dict[str, Any]:
    """ModelProfile's parameter counts and per-image MACs/FLOPs."""
    params = list(model.parameters())
    kept = {id(p) for module in _frozen(model) for p in module.parameters()}
    return {
        "params_total": sum(p.numel() for p in params),
        "params_trainable": sum(p.numel() for p in params if p.requires_grad and id(p) not in kept),
        "macs": counts.macs,
        "flops": counts.flops,
        "flops_to_2macs": counts.ratio,
    }


def _timing_fields(timed: Measurement, device: torch.device, batch_size: int, train_bs: int | None) -> dict[str, Any]:
    """ModelProfile's latency, throughputs and how the timing went (train_bs None: no training step was timed)."""
    seconds = timed.rounds.samples("inference")
    train_ips = images_per_s(train_bs, timed.rounds.samples("training")) if train_bs is not None else None
    return {
        "device_name": _device_name(device, timed.threads),
        "latency": LatencyStats.from_seconds(seconds),
        "inference_images_per_s": images_per_s(batch_size, seconds),
        "train_images_per_s": train_ips,
        "noisy": timed.noisy,
        "noise_reasons": list(timed.reasons),
        "attempts": timed.attempts,
        "rounds": len(timed.rounds.calls["inference"]),
        "threads": timed.threads,
        "others_cpu_cores": round(timed.others_cores, 3) if device.type == "cpu" else None,
    }


def _log_profile(result: ModelProfile, timed: Measurement) -> None:
    if timed.noisy:
        log.warning(
            "profile of %s @ %d px is noisy: %s", result.model_name, result.resolution, "; ".join(timed.reasons)
        )
    log.info(
        "profiled %s @ %d px: %.2f GMACs, %.2f ms median",
        result.model_name,
        result.resolution,
        result.gmacs,
        result.latency.median_ms,
    )


def _device_name(device: torch.device, threads: int) -> str:
    """describe_device, with the thread count the kept attempt ran with (a retry may have lowered it)."""
    with torch_threads(threads or None):
        return describe_device(device)


def noise_policy(cfg: Config) -> NoisePolicy:
    """The interference policy of cfg.profiling (retries, spread threshold); threads adapt only when
    system.threads is auto (0): a fixed thread count is measured as set."""
    pc = cfg.profiling
    return NoisePolicy(pc.spread_threshold, pc.retries, adapt_threads=cfg.system.threads == 0)


def profile_by_name(
    name: str,
    resolution: int,
    *,
    num_classes: int,
    in_channels: int,
    cfg: Config | None = None,
    device: torch.device | str | None = None,
    on_ready: Callable[[], object] | None = None,
    **overrides: Any,
) -> ModelProfile:
    """Build a registered model (resomap.models) and profile it with the `profiling` and `system` config.
    `on_ready` is called once the input checks passed, before anything is measured (`resomap profile` prints its
    device and precision there: a refusal is its only line)."""
    from resomap.models import build_model, check_input_size  # lazy: models may import heavy optional backends

    cfg = cfg or Config()
    model, _spec = build_model(name, num_classes, in_channels, cfg.models)
    pc = cfg.profiling
    kwargs: dict[str, Any] = {
        "batch_size": pc.batch_size,
        "train_batch_size": pc.train_batch_size,
        "warmup": pc.warmup,
        "iters": pc.iters,
        "precision": cfg.system.precision,
        "rounds": pc.rounds,
        "noise": noise_policy(cfg),
        "cfg": cfg,
    }
    dev = torch.device(device) if device is not None else resolve_device(cfg.system)
    kwargs["channels_last"] = resolve_channels_last(
        cfg.system.channels_last, resolve_precision(cfg.system.precision, dev)[0]
    )
    kwargs.update(overrides)
    # activations that cannot fit, from a small forward scaled by area (seconds), before check_input_size's
    # forward at the full side (resnet18 at 8192 px: about a minute and more memory than the machine has)
    precision = resolve_precision(kwargs["precision"], _visible_device(dev))[0]
    batch = kwargs["batch_size"]
    _fits(model, name, (batch, kwargs["train_batch_size"] or max(batch, 8), in_channels, resolution), precision, dev)
    check_input_size(model, name, resolution, in_channels)  # too small for its layers: one line, not a traceback
    if on_ready is not None:
        on_ready()
    return profile(model, resolution, in_channels=in_channels, device=dev, model_name=name, **kwargs)
