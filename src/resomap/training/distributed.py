"""DDP for one trial under torchrun: process group from the environment, rank helpers, model wrapping, syncs.

Every helper is a no-op (or the single-process answer) when no process group is initialised, so a plain
`resomap train` never creates one. Rank 0 owns every side effect (checkpoints, result files, MLflow); the other
ranks train on their shard of each epoch's batches and keep the same parameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from resomap.errors import DeviceError, TrainingError

log = logging.getLogger(__name__)
T = TypeVar("T")
_TIMEOUT = timedelta(minutes=30)  # collectives wait this long for a slow rank before failing


@dataclass(frozen=True)
class DistEnv:
    """What torchrun put in the environment."""

    rank: int
    local_rank: int
    world_size: int


def env() -> DistEnv | None:
    """The torchrun environment when WORLD_SIZE > 1, else None."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise DeviceError(f"bad torchrun environment (WORLD_SIZE/RANK/LOCAL_RANK): {exc}") from None
    return DistEnv(rank, local, world) if world > 1 else None


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_rank0() -> bool:
    return rank() == 0


def describe() -> str:
    """`rank R of W (backend)`, or an empty string in a single process."""
    if not is_distributed():
        return ""
    return f"rank {rank()} of {world_size()} ({dist.get_backend()})"


def barrier() -> None:
    if is_distributed():
        dist.barrier()


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[torch.device]:
    """Under torchrun: init the group (nccl on CUDA, gloo on CPU), yield this rank's device, destroy it at the end
    (also on error). Without torchrun: yield `device` unchanged and create nothing."""
    info = env()
    if info is None or is_distributed():
        yield device
        return
    if device.type == "cuda":
        if info.local_rank >= torch.cuda.device_count():
            raise DeviceError(
                f"LOCAL_RANK {info.local_rank} but only {torch.cuda.device_count()} GPU(s) visible; "
                "lower torchrun --nproc_per_node"
            )
        torch.cuda.set_device(info.local_rank)
        device = torch.device("cuda", info.local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=_TIMEOUT)
    log.info("process group up: %s", describe())
    try:
        yield device
    finally:
        dist.destroy_process_group()


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel around `model` (already on `device`); parameters start as rank 0's."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def share_from_rank0(value: T) -> T:
    """Rank 0's `value` on every rank (picklable objects); the value itself in a single process."""
    if not is_distributed():
        return value
    box = [value if is_rank0() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks (in place, returned); unchanged in a single process."""
    if is_distributed():
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def sync_buffers(model: nn.Module) -> None:
    """Average floating buffers (BatchNorm running stats) over ranks and take rank 0's integer ones, so evaluation
    and checkpoints see the same model on every rank."""
    if not is_distributed():
        return
    with torch.no_grad():
        for buf in model.buffers():
            if buf.is_floating_point():
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
                buf.div_(world_size())
            else:
                dist.broadcast(buf, src=0)


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 of a state_dict (names, dtypes, shapes and bytes of every tensor, in order)."""
    h = hashlib.sha256()
    for name, tensor in state.items():
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_in_sync(model: nn.Module) -> str | None:
    """Compare the state_dict digest of every rank; TrainingError when they differ. None in a single process."""
    if not is_distributed():
        return None
    digest = state_digest(model.state_dict())
    found: list[Any] = [None] * world_size()
    dist.all_gather_object(found, digest)
    log.info("rank %d of %d: final state sha256 %s", rank(), world_size(), digest)
    if len(set(found)) != 1:
        raise TrainingError(f"model state differs across ranks after training ({', '.join(d[:12] for d in found)})")
    return digest
