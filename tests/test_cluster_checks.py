"""The Ray executor's cluster checks, each a one-line error before any trial: an address or tracking server that
does not answer, per-trial resources no node has, relative paths on a cluster of several nodes, a node that cannot
write the output folder or see a data file, object storage given as sweep.ray.storage. (The cluster itself:
tests/test_ray_cluster.py, slow.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import free_port, run_cli  # free_port: released, so nothing answers there
from resomap.config import load
from resomap.errors import ConfigError
from resomap.sweep.cluster import check_address, check_cluster, check_tracking, data_paths, node_probe, placed

CONFIGS = str(Path(__file__).resolve().parents[1] / "configs")


class FakeRay:
    """ray.nodes() of a cluster, and the probe tasks run in this process (ray.remote / wait / get)."""

    def __init__(self, nodes: list[dict]):
        self._nodes = nodes

    def nodes(self) -> list[dict]:
        return self._nodes

    def remote(self, **_):
        def wrap(fn):
            class Task:
                def options(self, **_):
                    return self

                def remote(self, *args):
                    return ("ref", id(args), fn(*args))

            return Task()

        return wrap

    def wait(self, refs, num_returns, timeout):
        return refs, []

    def get(self, ref):
        return ref[2]


def _node(i: int, cpus: float = 2, gpus: float = 0) -> dict:
    return {
        "Alive": True,
        "NodeID": f"{i:02x}" * 28,
        "NodeManagerAddress": f"10.0.0.{i}",
        "Resources": {"CPU": cpus, "GPU": gpus},
    }


def test_an_address_nothing_answers_on_fails_within_seconds():
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"sweep.ray.address='127.0.0.1:\d+': no Ray head answers there"):
        check_address(f"127.0.0.1:{free_port()}")
    assert time.monotonic() - start < 6
    with pytest.raises(ConfigError, match="expected host:port"):
        check_address("head-node")
    check_address(None)
    check_address("auto")  # left to ray.init (RAY_ADDRESS, a running local head)


@pytest.mark.parametrize(
    ("address", "env", "joined"),
    [(None, None, "local"), (None, "10.0.0.5:6379", None), ("auto", None, "auto"), ("auto", "10.0.0.5:6379", "auto")],
)
def test_a_null_address_starts_a_ray_of_its_own_unless_ray_address_names_one(address, env, joined, monkeypatch):
    """ray.init(address=None) joins the newest Ray started on the machine (another sweep's, or a stale record of a
    dead one): a null sweep.ray.address asks for a local Ray of its own; RAY_ADDRESS (ray job submit) still joins."""
    import sys
    import types

    from resomap.sweep.executors import _start_ray

    asked = []
    fake = types.SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda address, **_: asked.append(address),
        cluster_resources=lambda: {"CPU": 2.0},
    )
    monkeypatch.setitem(sys.modules, "ray", fake)
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    cfg = load(CONFIGS, preset="smoke", overrides=["sweep.executor=ray", f"sweep.ray.address={address or 'null'}"])
    assert _start_ray(cfg) == (fake, True) and asked == [joined]


def test_a_tracking_server_that_does_not_answer_fails_within_seconds():
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"mlflow.tracking_uri=http://127.0.0.1:\d+: the tracking server does not"):
        check_tracking(f"http://127.0.0.1:{free_port()}")
    assert time.monotonic() - start < 6
    check_tracking("sqlite:///x.db")  # a file store: nothing to reach


def test_sweep_with_an_unreachable_ray_head_is_one_line_and_writes_nothing(project: Path, capsys):
    start = time.monotonic()
    code, _out, err = run_cli(
        ["sweep", "--preset", "smoke", "--executor", "ray", f"sweep.ray.address=127.0.0.1:{free_port()}"], capsys
    )
    assert code == 2 and "no Ray head answers there" in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and time.monotonic() - start < 60
    assert not (project / "mlflow.db").exists() and not (project / "model_summaries").exists()
    code, _out, err = run_cli(
        ["sweep", "--preset", "smoke", "--executor", "ray", f"mlflow.tracking_uri=http://127.0.0.1:{free_port()}"],
        capsys,
    )
    assert code == 2 and "the tracking server does not answer" in err and len(err.strip().splitlines()) == 1, err


def test_resources_no_node_has_are_refused_before_any_probe():
    cfg = load(CONFIGS, "smoke", ["sweep.executor=ray"])
    ray = FakeRay([_node(1, cpus=4, gpus=1), _node(2, cpus=2, gpus=0)])
    with pytest.raises(
        ConfigError, match=r"sweep.ray.gpus_per_trial=2: no node of the cluster has that many GPUs \(the most: 1\)"
    ):
        check_cluster(ray, cfg, cpus=1, gpus=2)
    with pytest.raises(ConfigError, match=r"sweep.ray.cpus_per_trial=8: .* CPUs \(the most: 4\)"):
        check_cluster(ray, cfg, cpus=8, gpus=0)


def test_a_sqlite_store_or_relative_paths_on_several_nodes_are_refused(tmp_path: Path):
    two = FakeRay([_node(1), _node(2)])
    server = "mlflow.tracking_uri=http://10.0.0.1:5000"
    cfg = load(CONFIGS, "smoke", ["sweep.executor=ray"])  # the project's mlflow.db: no other node can write it
    with pytest.raises(ConfigError, match=r"mlflow.tracking_uri is the SQLite file .*mlflow.db and the cluster has 2"):
        check_cluster(two, cfg, cpus=1, gpus=0)
    cfg = load(CONFIGS, "smoke", ["sweep.executor=ray", server])  # experiment.output_dir '.'
    with pytest.raises(
        ConfigError, match=r"experiment.output_dir='.' is relative and the cluster has 2 nodes: set sweep.ray.storage"
    ):
        check_cluster(two, cfg, cpus=1, gpus=0)
    folder = ["data.dataset=imagefolder", "data.imagefolder.root=cells"]
    cfg = load(CONFIGS, "smoke", ["sweep.executor=ray", f"sweep.ray.storage={tmp_path}", server, *folder])
    with pytest.raises(
        ConfigError, match=r"data.imagefolder.root='cells' is relative .* absolute path every node sees"
    ):
        check_cluster(two, placed(cfg), cpus=1, gpus=0)
    one = placed(load(CONFIGS, "smoke", ["sweep.executor=ray", f"sweep.ray.storage={tmp_path}"]))
    assert check_cluster(FakeRay([_node(1)]), one, cpus=1, gpus=0) == 1  # one node: its own SQLite store is fine


def test_a_node_that_cannot_write_the_output_folder_or_see_a_data_file_is_named(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    problem = node_probe(str(blocker / "out"), {})  # a folder under a file: cannot be made
    assert problem.startswith(f"cannot write the output folder {blocker / 'out'}") and "sweep.ray.storage" in problem
    problem = node_probe(str(tmp_path / "out"), {"data.imagefolder.root": str(tmp_path / "missing")})
    assert (
        problem
        == f"data.imagefolder.root={tmp_path / 'missing'} does not exist there; put it on a path every node sees"
    )
    assert node_probe(str(tmp_path / "out"), {"data.imagefolder.root": str(tmp_path)}) == ""
    assert not list((tmp_path / "out").iterdir())  # the probe's file is gone
    cfg = placed(load(CONFIGS, "smoke", ["sweep.executor=ray", f"sweep.ray.storage={blocker / 'out'}"]))
    with pytest.raises(ConfigError, match=r"node 10.0.0.2: cannot write the output folder"):
        check_cluster(FakeRay([_node(2)]), cfg, cpus=1, gpus=0)


def test_storage_becomes_the_output_folder_and_object_storage_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the project's own store, not one the environment names
    cfg = placed(load(CONFIGS, "smoke", ["sweep.executor=ray", f"sweep.ray.storage={tmp_path / 'shared'}"]))
    assert cfg.experiment.output_dir == str(tmp_path / "shared")
    assert (
        cfg.mlflow.tracking_uri == f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    )  # the store stays where `resomap ui` looks
    assert placed(cfg) == cfg  # idempotent: each round of an adaptive sweep places it again
    local = load(CONFIGS, "smoke", [f"sweep.ray.storage={tmp_path}"])  # another executor: unchanged
    assert placed(local).experiment.output_dir == "."
    with pytest.raises(ConfigError, match=r"sweep.ray.storage='s3://bucket/x': .* mount it"):
        placed(load(CONFIGS, "smoke", ["sweep.executor=ray", "sweep.ray.storage=s3://bucket/x"]))


def test_hub_weights_are_no_file_the_nodes_must_share(tmp_path: Path):
    weights = tmp_path / "w.pt"
    cfg = load(CONFIGS, "smoke", ["models.pretrained.resnet18=hub", f"models.pretrained.tiny_cnn={weights}"])
    assert data_paths(cfg) == {"models.pretrained.tiny_cnn": str(weights)}  # hub: each node's own cache
