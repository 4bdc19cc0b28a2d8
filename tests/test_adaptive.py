"""Adaptive sweeps (issue 18 item 4): the error rate of "non-inferior" under repeated looks with the alpha-spending
rules, against 1,000 simulated adaptive null sweeps (numpy, no training), and sweep.adaptive's bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from resomap.cli import main
from resomap.config import load
from resomap.stats import noninferiority
from resomap.stats.spending import RULES, look_alphas, spent
from resomap.sweep.adaptive import run_adaptive
from resomap.sweep.looks import stopped_at
from resomap.sweep.sweep import summary_folder

SIMS, ALPHA, LOOKS = 1000, 0.05, 3
N, MARGIN = 200, 0.05


def _sim_error(p: float) -> float:
    return 3 * np.sqrt(p * (1 - p) / SIMS)  # three binomial standard errors of a rate from SIMS sweeps


def _adaptive_null_sweep(rng, alphas: list[float]) -> bool:
    """One adaptive sweep of one model at 64, 32 and 16 px over N images: 32 px is exactly MARGIN below 64 px on
    every image's probability (the null), 16 px far below. Round k has k seeds; after each look the model stops
    when decided (looks.stopped_at, as the driver reads the decision), else a seed is added. True when any look
    calls 32 px non-inferior (the error)."""
    ease = rng.uniform(0.55, 0.95, N)
    probs = {64: ease, 32: ease - MARGIN, 16: ease - 0.4}
    outcomes = {r: rng.random((LOOKS, N)) < p[None, :] for r, p in probs.items()}  # seed x image, all looks
    for look, alpha in enumerate(alphas, 1):
        scores = {r: o[:look] for r, o in outcomes.items()}
        # checkpoint scope: the seeds here are fresh draws of the same image probabilities (no seed spread), and
        # the rule under test is the alpha spending over looks alone; whole adaptive sweeps at model scope, with a
        # seed spread and the seeds the plan adds, are simulated in tests/test_adaptive_model.py
        decision = noninferiority(scores, margin=MARGIN, level=1 - ALPHA, alpha=alpha, scope="checkpoint")
        if any(v.verdict == "non-inferior" for v in decision.verdicts):
            return True
        if stopped_at(64, [v.to_dict() for v in decision.verdicts])[0]:
            return False
    return False


# the default rule in the default suite; the others, ~25 s each, with the slow suite (CI runs both)
@pytest.mark.parametrize(
    "rule", [r if r == "obrien_fleming" else pytest.param(r, marks=pytest.mark.slow) for r in RULES]
)
def test_adaptive_looks_keep_the_error_at_alpha_with_spending(rule: str):
    rng = np.random.default_rng(18)
    alphas = look_alphas(rule, ALPHA, LOOKS)
    assert sum(alphas) == pytest.approx(ALPHA)
    errors = sum(_adaptive_null_sweep(rng, alphas) for _ in range(SIMS))
    assert errors / SIMS <= ALPHA + _sim_error(ALPHA), (rule, errors)


@pytest.mark.slow
def test_without_spending_the_repeated_looks_exceed_alpha():
    """Evidence the test above can fail: every look at the full alpha calls the null non-inferior too often."""
    rng = np.random.default_rng(18)
    errors = sum(_adaptive_null_sweep(rng, [ALPHA] * LOOKS) for _ in range(SIMS))
    assert errors / SIMS > ALPHA + _sim_error(ALPHA), errors


def test_spending_functions_known_values():
    assert spent("obrien_fleming", 0.05, 1.0) == pytest.approx(0.05)
    assert spent("pocock", 0.05, 1.0) == pytest.approx(0.05)
    assert look_alphas("bonferroni", 0.05, 4) == pytest.approx([0.0125] * 4)
    # O'Brien-Fleming spends almost nothing at the first of 3 looks: 2 - 2 Phi(1.95996 * sqrt(3))
    assert look_alphas("obrien_fleming", 0.05, 3)[0] == pytest.approx(6.869e-4, rel=1e-3)


def test_alpha_override_changes_only_the_threshold():
    rng = np.random.default_rng(3)
    scores = {64: rng.random((2, 100)) < 0.9, 32: rng.random((2, 100)) < 0.9}
    default = noninferiority(scores, margin=0.05)
    same = noninferiority(scores, margin=0.05, alpha=0.05)
    assert default.to_dict() == same.to_dict()
    strict = noninferiority(scores, margin=0.05, alpha=1e-6)
    assert strict.verdicts[1].p_value == default.verdicts[1].p_value
    assert strict.verdicts[1].level == pytest.approx(1 - 1e-6)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("sweep.adaptive.budget=0", "sweep.adaptive.budget: expected null or a positive number of trials, got 0"),
        ("sweep.adaptive.budget=-3", "sweep.adaptive.budget"),
        ("sweep.adaptive.budget_hours=0", "sweep.adaptive.budget_hours: expected null or a positive number of hours"),
        ("sweep.adaptive.budget_hours=-1.5", "sweep.adaptive.budget_hours"),
        ("sweep.adaptive.max_rounds=0", "sweep.adaptive.max_rounds: expected an integer >= 1"),
        ("sweep.adaptive.seeds_per_round=0", "sweep.adaptive.seeds_per_round: expected an integer >= 1 or 'plan'"),
        ("sweep.adaptive.seeds_per_round=all", "sweep.adaptive.seeds_per_round: expected an integer or one of 'plan'"),
        ("sweep.adaptive.spending=pocok", "did you mean 'pocock'?"),
        ("sweep.adaptive.spending=bogus", "one of obrien_fleming, pocock, bonferroni"),
        ("stats.look_alpha={tiny_cnn: 1.5}", "stats.look_alpha.tiny_cnn"),
    ],
)
def test_bad_adaptive_settings_fail_at_load_in_one_line(setting: str, words: str, capsys, tmp_path):
    code = main(["sweep", "--dry-run", f"experiment.output_dir={tmp_path}", setting])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert words in err and "\n" not in err and "Traceback" not in err, err


# ---------------------------------------------------------------- the rounds, driven by a fake executor (no training)

N_IMAGES, N_CLASSES = 60, 3
ONE_SEED_WORSE = range(6)  # images tiny_cnn @ 32 px gets wrong under seed 0 (and 64 px right): 0.1, the margin 0.12


def _right(model: str, res: int, seed: int) -> np.ndarray:
    """Which of the N_IMAGES test images the fake trial gets right. tiny_cnn: 64 px (the reference) right on all;
    32 px under seed 0 wrong on 6, under every other seed right on all: at model scope, seeds 0 and 1 (differences
    -0.1 and 0 against the margin 0.12) disagree too much to decide at look 1, and the power plan asks 6 seeds;
    on 6 seeds (mean -0.017) 32 px is non-inferior. simple_cnn: 64 px wrong on one image, 32 px on another under
    every seed (difference 0, no seed spread: non-inferior at look 1). 16 px: wrong on half the images (inferior),
    both models."""
    right = np.ones(N_IMAGES, dtype=bool)
    if res == 16:
        right[::2] = False
    elif res == 32 and model == "tiny_cnn" and seed == 0:
        right[list(ONE_SEED_WORSE)] = False
    elif model == "simple_cnn":
        right[-1 if res == 32 else -2] = False
    return right


def _fake_executor(calls: list[set[tuple[str, int, int]]], looks: list[dict]):
    """An executor writing, for each trial it is given, a FINISHED result.json and its predictions.csv; it keeps
    the trials of each call, and the previous round's summary.json (the look that asked for them)."""
    from resomap.records import Predictions, write_predictions
    from resomap.trial_result import TrialResult

    index = np.arange(N_IMAGES) * 7
    labels = np.arange(N_IMAGES) % N_CLASSES

    def run(trials, *, cfg, tracker, parent_run_id, progress, report):
        calls.append({(t.model, t.resolution, t.seed) for t in trials})
        previous = summary_folder(cfg) / "summary.json"
        if previous.is_file():
            looks.append(json.loads(previous.read_text()))
        results = []
        for t in trials:
            right = _right(t.model, t.resolution, t.seed)
            preds = np.where(right, labels, (labels + 1) % N_CLASSES)
            acc = float(right.mean())
            data = {
                "key": t.key,
                "name": t.name,
                "model": t.model,
                "family": "cnn",
                "resolution": t.resolution,
                "seed": t.seed,
                "status": "FINISHED",
                "test": {"test/accuracy": acc, "test/macro_f1": acc},
            }
            result = TrialResult.from_dict(data)
            result.save(t.summary_dir)
            write_predictions(t.summary_dir, {t.resolution: Predictions(t.resolution, index, labels, preds)})
            progress.record(result, 0.0)
            results.append(result)
        return results

    return run


def _verdicts(summary: dict) -> dict[str, dict[int, str]]:
    return {r["model"]: {v["resolution"]: v["verdict"] for v in r["verdicts"]} for r in summary["recommendations"]}


def _two_models(tmp_path, *settings: str):
    return load(
        "configs",
        None,
        [
            f"experiment.output_dir={tmp_path}",
            "experiment.name=adaptive",
            "sweep.models=[tiny_cnn,simple_cnn]",
            "sweep.resolutions=[16,32,64]",
            "sweep.seeds=[0,1]",  # model scope (the default): one seed alone decides nothing
            "sweep.adaptive.enabled=true",
            "sweep.adaptive.max_rounds=3",
            "sweep.adaptive.spending=bonferroni",  # alpha 0.05 / 3 at every look
            "stats.margin=0.12",
            "stats.resamples=200",
            "explainability.enabled=false",
            f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
            *settings,
        ],
    )


def test_adaptive_rounds_add_the_seeds_the_plan_asks_only_to_the_undecided_and_drop_the_inferior(tmp_path):
    cfg = _two_models(tmp_path, "sweep.adaptive.seeds_per_round=plan")
    calls: list[set[tuple[str, int, int]]] = []
    looks: list[dict] = []
    out = run_adaptive(cfg, executor=_fake_executor(calls, looks), report=lambda line: None)

    grid = {(m, r, s) for m in ("tiny_cnn", "simple_cnn") for r in (16, 32, 64) for s in (0, 1)}
    # round 1: the whole grid at seeds 0 and 1; round 2: the 4 seeds tiny_cnn's plan is missing (it asks 6), for
    # tiny_cnn only (simple_cnn decided at look 1) and not at 16 px (shown inferior at look 1, so dropped)
    assert calls == [grid, {("tiny_cnn", r, s) for r in (32, 64) for s in (2, 3, 4, 5)}]
    # look 1 (read by round 2's executor): tiny_cnn's sequence stopped undecided at 32 px, 16 px untested in the
    # summary (the driver's own test of it alone showed it inferior); simple_cnn decided
    assert _verdicts(looks[0]) == {
        "tiny_cnn": {64: "reference", 32: "undecided", 16: "not reached"},
        "simple_cnn": {64: "reference", 32: "non-inferior", 16: "inferior"},
    }
    tiny_look1 = next(r for r in looks[0]["recommendations"] if r["model"] == "tiny_cnn")
    assert "not tested" in next(v["reason"] for v in tiny_look1["verdicts"] if v["resolution"] == 16)
    assert "needs 6 seeds" in tiny_look1["sentence"] and tiny_look1["scope"] == "model"

    final = json.loads((out.outcome.summary_dir / "summary.json").read_text())
    record = final["adaptive"]
    assert record["stopped"] == "every model is decided"
    assert [r["look"] for r in record["rounds"]] == [1, 2]
    assert [(r["models"], r["seeds"], r["trials"], r["new_trials"], r["decided"]) for r in record["rounds"]] == [
        (["simple_cnn", "tiny_cnn"], [0, 1], 12, 12, ["simple_cnn"]),
        (["tiny_cnn"], [0, 1, 2, 3, 4, 5], 12, 8, ["tiny_cnn"]),
    ]
    assert record["rounds"][0]["added"] == {"tiny_cnn": {"seeds_needed": 6, "add": 4}}
    assert record["look_alphas"] == pytest.approx([0.05 / 3] * 3)
    # the full grid: every model x resolution at the most seeds "plan" can reach (64, one more at the last round)
    assert record["trials_used"] == 20 < record["full_grid_trials"] == 6 * 65
    assert record["full_grid_trials_seeds_reached"] == 6 * 6
    tiny, simple = record["models"]["tiny_cnn"], record["models"]["simple_cnn"]
    assert (simple["decided_at"], simple["seeds"], simple["dropped"], simple["stopped"]) == (1, [0, 1], {}, "")
    assert (tiny["decided_at"], tiny["seeds"], tiny["stopped"]) == (2, [0, 1, 2, 3, 4, 5], "")
    assert list(tiny["dropped"]) == ["16"] and tiny["dropped"]["16"].startswith("shown inferior at look 1")

    # the last round's verdicts: tiny_cnn's 32 px non-inferior on six seeds (16 px kept from look 1: inferior, not
    # retested on the later seeds, which it does not have), simple_cnn's kept from look 1
    recs = {r["model"]: r for r in final["recommendations"]}
    assert _verdicts(final) == {
        "tiny_cnn": {64: "reference", 32: "non-inferior", 16: "inferior"},
        "simple_cnn": {64: "reference", 32: "non-inferior", 16: "inferior"},
    }
    rows = {(r["model"], r["resolution"]): r for r in final["rows"]}
    assert len(rows) == 6  # the dropped resolution keeps its row in summary.csv/json
    tiny16 = rows[("tiny_cnn", 16)]
    assert tiny16["verdict"] == "inferior" and tiny16["n_seeds"] == 2 and tiny16["reference_difference"] is None
    assert "shown inferior at an earlier look of the adaptive sweep" in tiny16["note"]
    assert rows[("tiny_cnn", 32)]["n_seeds"] == 6 and "dropped earlier: 16 px" in recs["tiny_cnn"]["note"]
    csv_text = (out.outcome.summary_dir / "summary.csv").read_text()
    assert sum(line.startswith("tiny_cnn,") for line in csv_text.splitlines()) == 3
    assert recs["tiny_cnn"]["resolution"] == 32 and recs["simple_cnn"]["resolution"] == 32
    tiny32 = next(v for v in recs["tiny_cnn"]["verdicts"] if v["resolution"] == 32)
    assert tiny32["n_seeds"] == 6 and tiny32["difference"] == pytest.approx(-0.1 / 6)
    assert tiny32["level"] == pytest.approx(1 - 0.05 / 3) and tiny32["scope"] == "model"
    md = (out.outcome.summary_dir / "summary.md").read_text()
    assert "## Adaptive sweep" in md and "seeds for the next round: tiny_cnn +4 (the plan asks 6)" in md
    page = (out.outcome.summary_dir / "report.html").read_text()
    assert '<section id="adaptive">' in page and "Stopped: every model is decided. Trials used: 20" in page

    from mlflow import MlflowClient  # the record on the last round's parent run

    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(out.outcome.parent_run_id)
    assert run.data.metrics["adaptive/trials_used"] == 20 and run.data.metrics["adaptive/full_grid_trials"] == 390
    assert run.data.tags["resomap.adaptive"].startswith("every model is decided (bonferroni, 3 looks)")
    assert run.data.tags["resomap.adaptive.tiny_cnn"] == "look 2 (alpha 0.01667); seeds [0, 1, 2, 3, 4, 5]"
    assert run.data.tags["verdict.tiny_cnn.16"].startswith("inferior")


def test_a_model_the_rounds_cannot_decide_stops_and_says_how_many_seeds_it_would_need(tmp_path):
    """One seed a round (the default) over 3 rounds reaches 4 seeds; tiny_cnn's plan asks 6: it stops at look 1,
    and the sentence reaches the adaptive record, summary.md and the MLflow parent."""
    cfg = _two_models(tmp_path)
    calls: list[set[tuple[str, int, int]]] = []
    out = run_adaptive(cfg, executor=_fake_executor(calls, []), report=lambda line: None)
    assert len(calls) == 1  # simple_cnn decided, tiny_cnn out of reach: no round 2
    record = out.record
    sentence = "cannot decide within the budget: would need 6 seeds"
    assert record["stopped"] == (
        "no undecided model can be decided within the budget (3 planned rounds adding at most 1 seed(s) each)"
    )
    tiny = record["models"]["tiny_cnn"]
    assert (tiny["decided_at"], tiny["stopped_at"], tiny["stopped"], tiny["seeds"]) == (None, 1, sentence, [0, 1])
    assert tiny["alpha"] == pytest.approx(0.05 / 3)  # kept for its later summaries, as a decided model's
    assert record["rounds"][0]["stopped"] == ["tiny_cnn"] and record["rounds"][0]["added"] == {}
    summary_dir = out.outcome.summary_dir
    assert json.loads((summary_dir / "summary.json").read_text())["adaptive"]["models"]["tiny_cnn"]["stopped"] == (
        sentence
    )
    md = (summary_dir / "summary.md").read_text().split("## Adaptive sweep")[1]
    assert f"- tiny_cnn: undecided, seeds [0, 1]; {sentence} (look 1); tiny_cnn: undecided" in md
    assert "out of reach: tiny_cnn" in md

    from mlflow import MlflowClient

    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(out.outcome.parent_run_id)
    assert run.data.tags["resomap.adaptive.tiny_cnn"] == f"undecided; seeds [0, 1]; {sentence} (look 1)"


def test_an_adaptive_sweep_stops_before_a_round_that_would_pass_its_hours(tmp_path):
    cfg = load(
        "configs",
        None,
        [
            f"experiment.output_dir={tmp_path}",
            "sweep.models=[tiny_cnn]",
            "sweep.resolutions=[16,32,64]",
            "sweep.seeds=[0]",
            "sweep.adaptive.enabled=true",
            "sweep.adaptive.budget_hours=0.000001",  # 3.6 ms: round 1 alone takes longer
            "stats.margin=0.1",
            "stats.resamples=200",
            "explainability.enabled=false",
            "mlflow.enabled=false",
        ],
    )
    calls: list[set[tuple[str, int, int]]] = []
    out = run_adaptive(cfg, executor=_fake_executor(calls, []), report=lambda line: None)
    assert len(calls) == 1  # tiny_cnn is undecided after look 1, but the time left pays for no more trials
    record = out.record
    assert record["stopped"].startswith("no undecided model can be decided within the budget (")
    assert "h of 1e-06 h used at" in record["stopped"] and record["budget_hours"] == 1e-06
    assert record["models"]["tiny_cnn"]["stopped"].startswith("cannot decide within the budget: ")
    assert record["rounds"][0]["seconds"] > 0


def test_a_resumed_adaptive_sweep_says_which_trials_of_a_round_an_earlier_run_finished(tmp_path):
    """(issue 49, item 6) The trials of round 1 finished by an earlier run (killed before its record): the round's
    line says they are there and that none is new, and none is run again; run once more, it has nothing to do."""
    from resomap.sweep.sweep import run_sweep

    cfg = _two_models(tmp_path, "sweep.adaptive.max_rounds=1", "mlflow.enabled=false")
    calls: list[set[tuple[str, int, int]]] = []
    run_sweep(cfg, executor=_fake_executor(calls, []), report=lambda line: None)  # the earlier run's trials
    said: list[str] = []
    run_adaptive(cfg, executor=_fake_executor(calls, []), report=said.append)
    assert len(calls) == 1  # the earlier run's only
    (line,) = [ln for ln in said if ln.startswith("[adaptive] round")]
    assert line == "[adaptive] round 1: 12 trial(s), 12 finished by an earlier run, 0 new, at one-sided alpha 0.05"
    said.clear()  # the record it added to the summary is in state.json's sizes: finished, nothing rebuilt
    run_adaptive(cfg, executor=_fake_executor(calls, []), report=said.append)
    assert said[0].startswith("[adaptive] nothing to do: ") and len(calls) == 1, said
