"""DDP for one trial: batch sharding and the no-process-group helpers (fast), and `resomap train` under torchrun
with 2 gloo processes on CPU (slow): same weights on both ranks, one MLflow run, one set of checkpoints."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import free_port, trial_checkpoints
from resomap.data.loader import BatchLoader, Normalizer
from resomap.training import distributed, load_checkpoint

REPO = Path(__file__).resolve().parents[1]
DIGEST = re.compile(r"rank (\d) of 2: final state sha256 ([0-9a-f]{64})")


def _loader(n: int, batch_size: int = 4) -> BatchLoader:
    images, labels = torch.zeros(n, 1, 4, 4, dtype=torch.uint8), torch.zeros(n)
    norm = Normalizer(torch.zeros(1), torch.ones(1))
    return BatchLoader(
        images, labels, torch.arange(n), batch_size=batch_size, device="cpu", normalizer=norm, shuffle=True, seed=3
    )


@pytest.mark.parametrize("n", [40, 38, 44, 3])
def test_shards_split_the_same_epoch_order_evenly(n: int):
    whole = _loader(n, 4)
    whole.set_epoch(2)
    order = torch.cat(whole.batch_positions()).tolist()
    assert sorted(order) == list(range(n)) and len(whole) == -(-n // 4)  # one process: unchanged
    shards = []
    for rank in range(2):
        loader = _loader(n, 4).shard(rank, 2)
        loader.set_epoch(2)
        shards.append(loader.batch_positions())
        assert len(shards[-1]) == len(loader) == -(-len(whole) // 2)  # equal counts: collectives line up
    seen = [i for shard in shards for batch in shard for i in batch.tolist()]
    assert set(seen) == set(range(n))  # together the ranks cover the epoch...
    assert len(seen) - n <= 4  # ...with at most one padded (repeated) batch
    assert torch.equal(shards[0][0], whole.batch_positions()[0])  # rank r takes batches r::2 of that order
    if len(whole) > 1:
        assert torch.equal(shards[1][0], whole.batch_positions()[1])


def test_bad_shard_is_refused():
    with pytest.raises(ValueError, match="bad shard"):
        _loader(8, 4).shard(2, 2)


def test_single_process_helpers_create_no_group(monkeypatch: pytest.MonkeyPatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.env() is None
    with distributed.process_group(torch.device("cpu")) as device:
        assert device == torch.device("cpu") and not torch.distributed.is_initialized()
        assert distributed.is_rank0() and distributed.world_size() == 1 and distributed.describe() == ""
        assert distributed.share_from_rank0("x") == "x"
        assert distributed.check_in_sync(torch.nn.Linear(2, 2)) is None
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.env() == distributed.DistEnv(rank=3, local_rank=1, world_size=4)


def test_state_digest_sees_every_byte():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    before = distributed.state_digest(model.state_dict())
    assert before == distributed.state_digest(model.state_dict())
    model[1].num_batches_tracked += 1  # a 0-d integer buffer counts too
    assert distributed.state_digest(model.state_dict()) != before


# ---------------------------------------------------------------- torchrun, 2 gloo processes


def _torchrun(project: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    cmd += ["--master_port", str(free_port()), "-m", "resomap.cli", "train", "--model", "tiny_cnn"]
    cmd += ["--resolution", "32", "--preset", "smoke", "training.epochs=2", "explainability.enabled=false", *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "WORLD_SIZE", "RANK")}
    # a new session, so a timeout kills torchrun and both ranks
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"torchrun did not finish in 420 s:\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _rank_digests(stderr: str) -> dict[int, str]:
    return {int(r): d for r, d in DIGEST.findall(stderr)}


@pytest.mark.slow
def test_train_under_torchrun_two_gloo_ranks(tmp_path: Path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    first = _torchrun(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "rank 0 of 2 (gloo)" in first.stdout and "rank 1 of 2 (gloo)" in first.stdout
    assert first.stdout.count("trial tiny_cnn@32") == 1  # the summary comes from rank 0 only
    digests = _rank_digests(first.stderr)
    assert set(digests) == {0, 1} and len(set(digests.values())) == 1, digests  # same weights on both ranks

    folder = trial_checkpoints(tmp_path, "tiny_cnn", 32)
    last = load_checkpoint(folder / "last.pt")
    assert last["epoch"] == 1
    assert distributed.state_digest(last["model"]) == digests[1]  # rank 1 ends on exactly what rank 0 saved
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "mlartifacts" not in p.parts]
    assert [p.name for p in written if p.name == "last.pt"] == ["last.pt"]  # one set of checkpoint files
    assert [p.name for p in written if p.name == "result.json"] == ["result.json"]

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("resomap-smoke").experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/loss")] == [0, 1]

    again = _torchrun(tmp_path)  # same command: every rank resumes from the same last.pt
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from last.pt after epoch 1" in again.stdout
    assert _rank_digests(again.stderr) == digests
    assert len(client.search_runs([run.info.experiment_id])) == 1
