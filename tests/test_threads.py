"""system.threads 0 on the CPU: a fit times a few real training steps at 1 and all cores and keeps the fastest
count (resomap.training.threads), once per training step and machine (every later fit of the step takes that
count, whatever the load); a count set in the config wins; the measurement changes no training result; the
count stays set after fit and a resumed fit keeps it; the record reaches result.json and the trial's MLflow run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from conftest import run_cli, trial_summary
from resomap.config import build, load
from resomap.models import build_model
from resomap.training import TopKCheckpoint, Trainer, threads
from resomap.training.bare import in_memory_data

CPU = torch.device("cpu")
TIMING = ("train/epoch_time_s", "train/images_per_s", "train/peak_memory_mb", "val/time_s")


@pytest.fixture(autouse=True)
def threads_put_back(monkeypatch):
    """torch's thread count put back after each test; and the machine's cores as a sweep outside the tests sees
    them: a pytest-xdist worker keeps to one thread (OMP_NUM_THREADS=1, tests/conftest.py), which would leave these
    tests of the thread choice one candidate to measure."""
    from resomap import runtime

    if os.environ.get("PYTEST_XDIST_WORKER"):
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(runtime, "_DEFAULT_THREADS", len(runtime.usable_cpus()))
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def cfg_of(count: int = 0, epochs: int = 1, ema: bool = False):
    return build(
        {
            "experiment": {"seed": 5},
            "training": {
                "epochs": epochs,
                "progress": "off",
                "scheduler": {"name": "onecycle"},
                "ema": {"enabled": ema, "decay": 0.9},
            },
            "system": {"device": "cpu", "threads": count},
        }
    )


def toy_data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(80, 3, 16, 16, generator=gen)
    y = torch.randint(0, 2, (80,), generator=gen)
    return in_memory_data(x + (2.0 * y - 1.0).view(-1, 1, 1, 1) * 0.3, y, batch_size=16, seed=0)


def tiny():
    torch.manual_seed(0)
    return build_model("tiny_cnn", 2, 3, cfg_of().models)[0]  # dropout: the RNG matters too


def fake_step(costs: dict[int, float]):
    """A step whose duration on a fake clock depends only on torch's thread count; records the counts it ran at."""
    clock, seen = [0.0], []

    def step() -> None:
        seen.append(torch.get_num_threads())
        clock[0] += costs[torch.get_num_threads()]

    return step, (lambda: clock[0]), seen


@pytest.mark.parametrize(
    ("costs", "chosen"),
    [({1: 1.0, 2: 4.0}, 1), ({1: 2.0, 2: 1.0}, 2), ({1: 1.0, 2: 0.97}, 1)],  # 3% faster is within the margin
)
def test_the_fastest_count_is_chosen_and_threads_are_put_back(costs, chosen):
    torch.set_num_threads(1)
    step, clock, _ = fake_step(costs)
    record = threads.choose_threads(step, 10, [1, 2], timer=clock)
    assert record["chosen"] == chosen
    assert record["candidates"] == pytest.approx({"1": costs[1] / 10, "2": costs[2] / 10})
    assert record["reason"].startswith("measured") and torch.get_num_threads() == 1


def test_rounds_are_interleaved_rotated_and_bounded_by_the_budget():
    step, clock, seen = fake_step({1: 0.1, 2: 0.1})
    record = threads.choose_threads(step, 1, [1, 2], timer=clock)
    assert seen == [1, 1, 2, 1, 2, 2, 1, 1, 2] and record["rounds"] == 3  # first call, warm-ups, 3 rotated rounds
    step, clock, seen = fake_step({1: 1.0, 2: 1.5})
    record = threads.choose_threads(step, 1, [1, 2], timer=clock)
    assert record["rounds"] == 1 and record["seconds"] == pytest.approx(6.0)  # 2.5 s > the 2 s budget
    step, clock, seen = fake_step({1: 1.0})
    record = threads.choose_threads(step, 1, [1], timer=clock)
    assert seen == [] and record["chosen"] == 1 and record["candidates"] == {}  # one core: nothing to measure


def test_a_count_far_slower_in_its_warm_up_step_gets_no_rounds():
    step, clock, seen = fake_step({1: 0.5, 2: 6.0})  # two threads collapsed beside a busy process
    record = threads.choose_threads(step, 1, [1, 2], timer=clock)
    assert seen == [1, 1, 2] and record["chosen"] == 1 and record["rounds"] == 0
    assert record["candidates"] == pytest.approx({"1": 0.5, "2": 6.0}) and "2 out after the warm-up" in record["reason"]
    step, clock, seen = fake_step({1: 0.001, 2: 0.004})  # 4x, but milliseconds: measured in rounds all the same
    assert threads.choose_threads(step, 1, [1, 2], timer=clock)["rounds"] == 3


def test_candidates_are_one_torchs_default_and_every_usable_core():
    assert threads.thread_candidates(cores=2, default=2, capped=False) == [1, 2]
    assert threads.thread_candidates(cores=16, default=8, capped=False) == [1, 8, 16]
    assert threads.thread_candidates(cores=32, default=32, capped=False) == [1, 16, 32]
    assert threads.thread_candidates(cores=16, default=4, capped=True) == [1, 4]  # OMP_NUM_THREADS=4
    assert threads.thread_candidates(cores=1, default=1, capped=False) == [1]


def test_a_count_set_in_the_config_wins_and_nothing_is_measured(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("measured although system.threads is set")

    monkeypatch.setattr(threads, "choose_threads", never)
    trainer = Trainer(cfg_of(1), CPU)
    trainer.fit(tiny(), toy_data())
    record = trainer.meta["threads"]
    assert record["chosen"] == 1 and record["candidates"] == {} and "system.threads=1" in record["reason"]
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("ema", [False, True])
def test_measuring_changes_no_training_result(monkeypatch, ema):
    """1 epoch of tiny_cnn with the count measured (steps that update weights, optimizer, one-cycle schedule, the
    weights' moving average, and consume RNG) gives the same weights and history as the same count fixed in the
    config."""
    monkeypatch.setattr(threads, "thread_candidates", lambda *a, **k: [1, 2])
    steps, real_step = [], Trainer.train_step

    def counted(self, *args, **kwargs):
        steps.append(1)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train_step", counted)
    measured_model, trainer = tiny(), Trainer(cfg_of(0, ema=ema), CPU)
    measured = trainer.fit(measured_model, toy_data())
    record = trainer.meta["threads"]
    assert set(record["candidates"]) == {"1", "2"} and record["reason"].startswith("measured")
    assert len(steps) >= 3 + 4  # the measurement's steps (first call, 2 warm-ups, rounds) and the epoch's 4
    assert torch.get_num_threads() == record["chosen"]  # the count stays set after fit

    fixed_model, again = tiny(), Trainer(cfg_of(record["chosen"], ema=ema), CPU)
    fixed = again.fit(fixed_model, toy_data())
    if ema:
        averaged = zip(trainer.eval_model.state_dict().values(), again.eval_model.state_dict().values(), strict=True)
        assert all(torch.equal(p, q) for p, q in averaged) and trainer._updates == again._updates
    strip = [{k: v for k, v in h.items() if k not in TIMING} for h in (measured.history + fixed.history)]
    assert strip[0] == strip[1]
    for (name, p), q in zip(measured_model.state_dict().items(), fixed_model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def fixed_choice(chosen: int):
    def choose(step, images, *args, **kwargs):
        step()  # one real step: it must not show in the training either
        return {"chosen": chosen, "candidates": {"1": 2.0, "2": 1.0}, "reason": "fake", "rounds": 1, "seconds": 0.0}

    return choose


def test_the_chosen_count_stays_set_after_fit_and_a_resume_keeps_it(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(threads, "choose_threads", fixed_choice(1))
    trainer = Trainer(cfg_of(0, epochs=2), CPU, [TopKCheckpoint(tmp_path, "val/loss", "min", 1)])
    torch.set_num_threads(2)
    trainer.fit(tiny(), toy_data())
    assert torch.get_num_threads() == 1 and trainer.meta["threads"]["chosen"] == 1

    monkeypatch.setattr(threads, "choose_threads", fixed_choice(2))  # what a new measurement would say now
    torch.set_num_threads(2)
    resumed = Trainer(cfg_of(0, epochs=2), CPU, [TopKCheckpoint(tmp_path, "val/loss", "min", 1)])
    resumed.fit(tiny(), toy_data(), resume_from=tmp_path / "last.pt")
    record = resumed.meta["threads"]
    assert record["chosen"] == 1 and record["reason"].startswith("kept from the checkpoint resumed (fake")
    assert torch.get_num_threads() == 1


def test_a_trial_measures_once_and_every_later_attempt_keeps_its_count(tmp_path: Path, monkeypatch):
    """The stored record (threads.STORE) is written when the count is measured and read by a fit that has no
    checkpoint to resume (a kill before the first one): the count does not follow the load of the later attempt."""
    store = (tmp_path / threads.STORE, "key-a")
    monkeypatch.setattr(threads, "choose_threads", fixed_choice(1))
    first = Trainer(cfg_of(0), CPU)
    first.threads_store = store
    first.fit(tiny(), toy_data())
    saved = json.loads(store[0].read_text())
    assert saved["key"] == "key-a" and saved["record"]["chosen"] == 1 == first.meta["threads"]["chosen"]

    def never(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(threads, "choose_threads", never)
    torch.set_num_threads(2)
    again = Trainer(cfg_of(0), CPU)
    again.threads_store = store
    again.fit(tiny(), toy_data())
    record = again.meta["threads"]
    assert record["chosen"] == 1 and record["reason"] == "kept from the trial's first measurement (fake)"
    assert torch.get_num_threads() == 1
    assert json.loads(store[0].read_text()) == saved  # a kept record is not written again

    # another trial's record, a cut-short file or a config count: not used (nor this machine's record of the step)
    for key, text, count in [("key-b", None, 0), ("key-a", store[0].read_text()[:20], 0), ("key-a", None, 2)]:
        (threads.cache_dir() / threads.MACHINE_FILE).unlink(missing_ok=True)
        if text is not None:
            store[0].write_text(text)
        monkeypatch.setattr(threads, "choose_threads", fixed_choice(2))
        trainer = Trainer(cfg_of(count), CPU)
        trainer.threads_store = (store[0], key)
        trainer.fit(tiny(), toy_data())
        assert trainer.meta["threads"]["chosen"] == 2, (key, text, count)
        assert "kept" not in trainer.meta["threads"]["reason"]


def never_measured(*args, **kwargs):
    raise AssertionError("measured although this machine has a record of the step")


def test_a_step_measured_on_this_machine_is_kept_by_every_later_fit_whatever_the_load(monkeypatch, caplog):
    """The first fit of a step measures and keeps its record for this machine; a later fit of the same step (another
    trial, another sweep) trains at that count without measuring; another step, another machine or a cut-short
    record file measures again; a cache folder that cannot be written costs a warning, not the fit."""
    monkeypatch.setattr(threads, "choose_threads", fixed_choice(1))
    first = Trainer(cfg_of(0), CPU)
    first.fit(tiny(), toy_data())
    path = threads.cache_dir() / threads.MACHINE_FILE
    saved = json.loads(path.read_text())
    assert list(saved) == [threads.machine_key()] and len(saved[threads.machine_key()]) == 1
    (step,) = saved[threads.machine_key()]
    params = sum(p.numel() for p in tiny().parameters())
    assert step.startswith(f'["resomap.models.small.ConvNet",{params},[16,3,16,16],') and "AdamW" in step, step

    monkeypatch.setattr(threads, "choose_threads", never_measured)
    torch.set_num_threads(2)  # what torch's default would be: the kept count is set instead
    again = Trainer(cfg_of(0), CPU)
    again.fit(tiny(), toy_data())
    record = again.meta["threads"]
    assert record["chosen"] == 1 and torch.get_num_threads() == 1
    assert record["reason"] == "kept from this machine's first measurement of this step (fake)"
    assert json.loads(path.read_text()) == saved  # a kept record is not written again

    monkeypatch.setattr(threads, "choose_threads", fixed_choice(2))
    gen = torch.Generator().manual_seed(1)
    other = in_memory_data(torch.randn(40, 3, 16, 16, generator=gen), torch.arange(40) % 2, batch_size=8, seed=0)
    trainer = Trainer(cfg_of(0), CPU)
    trainer.fit(tiny(), other)  # another step: batches of 8
    assert trainer.meta["threads"]["chosen"] == 2 and len(json.loads(path.read_text())[threads.machine_key()]) == 2

    monkeypatch.setattr(threads, "machine_key", lambda: "another CPU")
    trainer = Trainer(cfg_of(0), CPU)
    trainer.fit(tiny(), toy_data())
    assert trainer.meta["threads"]["chosen"] == 2 and set(json.loads(path.read_text())) == {
        "another CPU",
        next(k for k in saved),
    }

    path.write_text(path.read_text()[:30])  # cut short (a full disk, a kill mid-write by another tool)
    trainer = Trainer(cfg_of(0), CPU)
    trainer.fit(tiny(), toy_data())
    assert trainer.meta["threads"]["chosen"] == 2 and list(json.loads(path.read_text())) == ["another CPU"]

    blocked = path.parent / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv(threads.CACHE_ENV, str(blocked / "cache"))
    trainer = Trainer(cfg_of(0), CPU)
    with caplog.at_level("WARNING", logger="resomap.training.threads"):
        trainer.fit(tiny(), toy_data())
    assert trainer.meta["threads"]["chosen"] == 2
    assert "the next fit of this step measures its thread count again" in caplog.text


def test_a_kept_count_that_now_runs_far_slower_than_measured_is_said_once(tmp_path: Path, monkeypatch, caplog):
    """A count kept from the trial's (or the machine's) measurement whose first epoch runs more than KEPT_SLOWER
    times slower per image than measured: one warning naming the count and the way to speed up; the count kept."""
    store = (tmp_path / threads.STORE, "key-a")
    for per_image, warned in [(1e-9, True), (10.0, False)]:  # far faster than any real step, far slower
        record = {"chosen": 1, "candidates": {"1": per_image, "2": per_image}, "reason": "measured", "rounds": 1}
        threads.store_record(store, record)
        monkeypatch.setattr(threads, "choose_threads", never_measured)
        trainer = Trainer(cfg_of(0, epochs=2), CPU)
        trainer.threads_store = store
        caplog.clear()
        with caplog.at_level("WARNING", logger="resomap.training.threads"):
            trainer.fit(tiny(), toy_data())
        said = [r.getMessage() for r in caplog.records if "busier now" in r.getMessage()]
        assert trainer.meta["threads"]["chosen"] == 1 and len(said) == int(warned), (per_image, said)
        if warned:
            assert "1 torch thread(s) kept" in said[0] and "system.threads=1" in said[0]
            assert float(said[0].split("run ")[1].split("x slower")[0]) > threads.KEPT_SLOWER


def test_the_machine_record_lives_in_the_users_cache(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(threads.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert threads.cache_dir() == tmp_path / "xdg" / "resomap"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert threads.cache_dir() == tmp_path / "home" / ".cache" / "resomap"
    monkeypatch.setenv(threads.CACHE_ENV, str(tmp_path / "mine"))
    assert threads.cache_dir() == tmp_path / "mine"


@pytest.mark.slow
def test_a_sweep_run_idle_and_again_beside_busy_processes_gives_identical_predictions(tmp_path: Path, procs):
    """Default settings (system.threads 0, OMP_NUM_THREADS unset): the sweep run on an idle machine measures each
    step's count and keeps it for the machine; the same sweep in another folder while two CPU-bound processes keep
    both cores busy trains every trial at the kept count (a new measurement would pick for that load) and writes
    byte-identical predictions."""
    import subprocess
    import sys

    from conftest import project_at

    args = ["sweep", "--preset", "smoke", "explainability.enabled=false", "profiling.enabled=false"]
    args += ["mlflow.enabled=false", "sweep.models=[simple_cnn]", "sweep.resolutions=[16,24]"]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MLFLOW_TRACKING_URI")}
    env["RESOMAP_CACHE_DIR"] = str(tmp_path / "machine")
    folders = []
    for name in ("idle", "busy"):
        root = project_at(tmp_path / name)
        busy = []
        if name == "busy":
            burn = [sys.executable, "-c", "while True: pass"]
            busy = [subprocess.Popen(burn, start_new_session=True) for _ in range(2)]
            procs.extend(busy)
        run = subprocess.run([sys.executable, "-m", "resomap.cli", *args], cwd=root, env=env, capture_output=True,
                             text=True, timeout=900)  # fmt: skip
        for p in busy:
            p.kill()
        assert run.returncode == 0, run.stderr[-3000:]
        folders.append(root)
    for res in (16, 24):
        idle, busy = (trial_summary(root, "simple_cnn", res) for root in folders)
        first = json.loads((idle / "result.json").read_text())["environment"]
        second = json.loads((busy / "result.json").read_text())["environment"]
        assert second["threads"] == first["threads"], (res, first, second)
        if len(threads.thread_candidates(default=len(os.sched_getaffinity(0)), capped=False)) > 1:
            assert "s/image" in first["threads_measured"], first  # measured on the idle machine
        assert (busy / "predictions.csv").read_bytes() == (idle / "predictions.csv").read_bytes(), res


def test_a_rerun_of_a_trial_after_its_checkpoints_are_gone_keeps_the_measured_count(project: Path, capsys):
    """Through the sweep: the trial's first attempt stores its count beside the checkpoints; a rerun (the
    checkpoints and result removed, as after a kill before the first checkpoint) keeps it."""
    from conftest import trial_checkpoints

    args = ["sweep", "--preset", "smoke", "explainability.enabled=false", "profiling.enabled=false"]
    args += ["data.synthetic.num_images=48", "sweep.resolutions=[16]", "mlflow.enabled=false"]
    assert run_cli(args, capsys)[0] == 0
    folder, summary = trial_checkpoints(project, "tiny_cnn", 16), trial_summary(project, "tiny_cnn", 16)
    stored = json.loads((folder / threads.STORE).read_text())
    first = json.loads((summary / "result.json").read_text())
    if len(threads.thread_candidates()) < 2:
        pytest.skip("one usable core: nothing is measured")
    assert str(stored["record"]["chosen"]) == first["environment"]["threads"]
    other = 1 if stored["record"]["chosen"] != 1 else max(threads.thread_candidates())
    stored["record"]["chosen"] = other  # what a first attempt under other load would have stored
    (folder / threads.STORE).write_text(json.dumps(stored))
    for path in folder.glob("*.pt"):
        path.unlink()
    (summary / "result.json").unlink()
    assert run_cli(args, capsys)[0] == 0
    again = json.loads((summary / "result.json").read_text())
    assert again["environment"]["threads"] == str(other)


def test_the_choice_is_in_result_json_and_the_mlflow_run(project: Path, capsys):
    from mlflow import MlflowClient

    args = ["sweep", "--preset", "smoke", "explainability.enabled=false", "profiling.enabled=false"]
    assert run_cli([*args, "data.synthetic.num_images=48", "sweep.resolutions=[16]"], capsys)[0] == 0
    result = json.loads((trial_summary(project, "tiny_cnn", 16) / "result.json").read_text())
    env = result["environment"]
    assert int(env["threads"]) >= 1 and env["threads"] == str(torch.get_num_threads())
    if len(threads.thread_candidates()) > 1:
        assert "1: " in env["threads_measured"] and "s/image" in env["threads_measured"]
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    (child,) = client.search_runs([exp], "tags.`resomap.kind` != 'sweep'")
    assert child.data.tags["resomap.env.threads"] == env["threads"]
    assert child.data.tags["resomap.env.threads_measured"] == env["threads_measured"]


def test_the_cost_probe_leaves_torchs_thread_count_as_it_was(project: Path):
    from resomap.sweep import plan
    from resomap.sweep.eta import probe

    cfg = load("configs", "smoke", ["data.synthetic.num_images=48", "sweep.resolutions=[16]", "mlflow.enabled=false"])
    torch.set_num_threads(3)  # not torch's default: the probe's apply_system sets that
    assert len(probe(plan(cfg))) == 1 and torch.get_num_threads() == 3


def test_the_cost_probe_times_its_steps_at_the_count_a_fit_would_choose(project: Path):
    # beside a busy process torch's default count runs many times slower than the one thread the trial then takes
    from resomap.sweep import plan
    from resomap.sweep.trial import prepare_trial

    cfg = load("configs", "smoke", ["data.synthetic.num_images=48", "sweep.resolutions=[16]", "mlflow.enabled=false"])
    trial = plan(cfg)[0]
    prepared = prepare_trial(trial, trial.cfg, torch.device("cpu"))
    trainer = Trainer(trial.cfg, "cpu")
    trainer.probe_seconds(prepared.model, prepared.bundle)
    record = trainer.meta["threads"]
    assert record["chosen"] == torch.get_num_threads()
    if len(threads.thread_candidates()) > 1:
        assert record["reason"].startswith("measured") and len(record["candidates"]) > 1, record


def test_environment_fields_are_strings():
    measured = {"chosen": 1, "candidates": {"1": 0.001, "2": 0.004}, "reason": "measured: ..."}
    assert threads.environment_fields(measured) == {
        "threads": "1",
        "threads_measured": "1: 0.001 s/image, 2: 0.004 s/image",
    }
    fields = threads.environment_fields(threads.fixed_record(4, "system.threads=4 set in the config"))
    assert fields == {"threads": "4", "threads_measured": "not measured: system.threads=4 set in the config"}
