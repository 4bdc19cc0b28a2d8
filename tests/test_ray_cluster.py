"""The Ray executor on a real multi-node Ray cluster on this machine: a head and a worker node started as separate
Ray nodes (`ray.cluster_utils.Cluster`: own raylet and object store each) from a folder that is not the driver's,
an MLflow tracking server on 127.0.0.1 (`resomap server`), and a storage folder the driver and the workers share
(`sweep.ray.storage`); the driver runs `resomap sweep` as its own process in a third folder. Then the loss of a
node mid-sweep: its trial runs again on a new node from its last checkpoint and every trial ends exactly once,
equal to the uninterrupted sweep."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port, start_logged, trial_checkpoints, trial_summary, wait_for

REPO = Path(__file__).resolve().parents[1]
MODEL, RESOLUTIONS, SEEDS = "tiny_cnn", (24, 32), (1, 2)
TRIALS = [(r, s) for r in RESOLUTIONS for s in SEEDS]
ARGS = [
    "--preset",
    "smoke",
    "--executor",
    "ray",
    f"sweep.models=[{MODEL}]",
    f"sweep.resolutions=[{','.join(map(str, RESOLUTIONS))}]",
    f"sweep.seeds=[{','.join(map(str, SEEDS))}]",
    "sweep.ray.gpus_per_trial=0",
    "sweep.ray.cpus_per_trial=1",
    "training.epochs=3",
]

# the sweep whose worker node is killed, and its reference: long enough that a trial is still training for seconds
# after its first last.pt (4 epochs took about 1 s once imports were compiled: the trial finished before the kill)
LONG = ["training.epochs=16", "training.early_stopping.enabled=false"]

pytestmark = pytest.mark.slow


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    shutil.copytree(REPO / "configs", path / "configs")
    return path


def _server(procs: list, root: Path) -> str:
    """`resomap server` over a store of its own in `root`: the tracking URI."""
    port = free_port()
    proc = start_logged(procs, [sys.executable, "-m", "resomap.cli", "server", "--port", str(port)], root, "server.log")
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for("the tracking server answers /health", up, proc, timeout=180)
    return url


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[object, Path]]:
    """A head node and one worker node, 1 CPU each, started from `nodes/` (their processes' working folder)."""
    from ray.cluster_utils import Cluster

    home = tmp_path / "nodes"
    home.mkdir()
    with contextlib.chdir(home):  # the nodes' processes start here
        made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        made.add_node(num_cpus=1)
        made.wait_for_nodes()
    yield made, home
    made.shutdown()


def _trial_dir(storage: Path, res: int, seed: int) -> Path:
    return trial_summary(storage, MODEL, res, seed)


def _children(uri: str) -> tuple[list, list]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    children = client.search_runs([exp], "tags.`resomap.kind` = 'trial'")
    parents = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    return children, parents


def test_a_sweep_on_two_ray_nodes_logs_to_the_server_and_writes_to_the_shared_storage(cluster, tmp_path, procs):
    made, home = cluster
    driver, storage = _folder(tmp_path / "driver"), tmp_path / "storage"
    uri = _server(procs, _folder(tmp_path / "server"))
    cmd = [sys.executable, "-m", "resomap.cli", "sweep", *ARGS, f"sweep.ray.address={made.address}"]
    cmd += [f"sweep.ray.storage={storage}", f"mlflow.tracking_uri={uri}"]
    proc = start_logged(procs, cmd, driver, "sweep.log")
    assert proc.wait(timeout=600) == 0, (driver / "sweep.log").read_text()[-3000:]
    log = (driver / "sweep.log").read_text()
    assert "[sweep] Ray: 2 nodes; outputs in " + str(storage) in log, log[-2000:]

    # the workers started elsewhere: nothing relied on the driver's folder, nothing was written there
    import ray

    ray.init(address=made.address, log_to_driver=False)
    try:
        where = ray.remote(num_cpus=1)(lambda: __import__("os").getcwd())  # a lambda travels by value
        cwd = ray.get([where.remote() for _ in range(2)])
    finally:
        ray.shutdown()
    assert all(Path(c) == home for c in cwd), cwd  # where the nodes were started, not the driver's folder
    assert sorted(p.name for p in driver.iterdir()) == ["configs", "sweep.log"]

    # 4 child runs under 1 parent on the server; checkpoints, results and the summary in the storage folder
    children, parents = _children(uri)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(c.info.run_name for c in children) == sorted(f"{MODEL}@{r}/seed{s}" for r, s in TRIALS)
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    assert all(c.info.status == "FINISHED" and "test/accuracy" in c.data.metrics for c in children)
    for res, seed in TRIALS:
        result = json.loads((_trial_dir(storage, res, seed) / "result.json").read_text())
        assert result["status"] == "FINISHED" and result["tracked"] is True
        assert Path(result["best_checkpoint"]).is_relative_to(storage) and Path(result["best_checkpoint"]).is_file()
    summary = storage / "model_summaries" / "_sweep" / "resomap-smoke"
    assert (summary / "summary.csv").is_file() and (summary / "report.html").is_file()
    from mlflow import MlflowClient

    artifacts = {a.path for a in MlflowClient(uri).list_artifacts(parents[0].info.run_id)}
    assert "report.html" in artifacts  # sent through the server, not written to a disk it shares


def test_a_sweep_that_loses_its_worker_node_runs_the_trial_again_from_its_checkpoint(tmp_path, procs):
    """The head takes no trials; the only worker node is killed (SIGKILL of its raylet and workers) once a trial
    there has a checkpoint; a new node joins, the lost trial runs again on it from last.pt, every trial ends once,
    and the results equal an uninterrupted sweep's."""
    from ray.cluster_utils import Cluster

    home = tmp_path / "nodes"
    home.mkdir()
    with contextlib.chdir(home):
        made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        first = made.add_node(num_cpus=1)
        made.wait_for_nodes()
    try:
        driver, storage = _folder(tmp_path / "driver"), tmp_path / "storage"
        uri = _server(procs, _folder(tmp_path / "server"))
        cmd = [sys.executable, "-m", "resomap.cli", "sweep", *ARGS, f"sweep.ray.address={made.address}"]
        cmd += ["explainability.enabled=false", "profiling.enabled=false", *LONG]
        cmd += [f"sweep.ray.storage={storage}", f"mlflow.tracking_uri={uri}"]
        proc = start_logged(procs, cmd, driver, "sweep.log")

        def interrupted() -> tuple[int, int] | None:
            for res, seed in TRIALS:
                ckpt = trial_checkpoints(storage, MODEL, res, seed) / "last.pt"
                if ckpt.exists() and not (_trial_dir(storage, res, seed) / "result.json").exists():
                    return res, seed
            return None

        wait_for("a trial on the worker node has last.pt and no result", lambda: interrupted() is not None, proc, 300)
        lost = interrupted()
        with contextlib.chdir(home):
            made.remove_node(first, allow_graceful=False)  # SIGKILL: the node is gone, its trial with it
            made.add_node(num_cpus=1)
        assert proc.wait(timeout=600) == 0, (driver / "sweep.log").read_text()[-3000:]
    finally:
        made.shutdown()

    children, parents = _children(uri)
    keys = [c.data.tags["resomap.trial_key"] for c in children]
    results = {t: json.loads((_trial_dir(storage, *t) / "result.json").read_text()) for t in TRIALS}
    assert sorted(keys) == sorted(r["key"] for r in results.values())  # one child run per trial key
    assert len(parents) == 1 and all(c.info.status == "FINISHED" for c in children)
    assert any(n.startswith("resumed from last.pt after epoch") for n in results[lost]["notes"]), results[lost]

    # the same sweep uninterrupted, on one local Ray: equal results
    reference = _folder(tmp_path / "reference")
    cmd = [sys.executable, "-m", "resomap.cli", "sweep", *ARGS, "explainability.enabled=false"]
    cmd += ["profiling.enabled=false", *LONG, f"sweep.ray.storage={reference / 'out'}"]
    proc = start_logged(procs, cmd, reference, "sweep.log")
    assert proc.wait(timeout=600) == 0, (reference / "sweep.log").read_text()[-3000:]
    for res, seed in TRIALS:
        want = json.loads((_trial_dir(reference / "out", res, seed) / "result.json").read_text())
        got = results[(res, seed)]
        assert got["test"] == pytest.approx(want["test"], abs=1e-6), (res, seed)
        assert got["best_val"] == pytest.approx(want["best_val"], abs=1e-6), (res, seed)
