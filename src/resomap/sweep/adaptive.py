"""Adaptive sweeps (sweep.adaptive): rounds that add seeds only where the non-inferiority decision is undecided,
as many as its power plan says are missing.

Round k (look k of ``max_rounds`` planned looks) is an ordinary run_sweep over the trials planned so far: finished
trials are reused by their keys, and only the new trials of the undecided models are trained (the others stay
unplanned for this round's executor). The round's summary is built with each undecided model's decision tested at
the look's alpha from the spending rule (stats.spending; the increments of the spending function, summing to
1 - stats.level), and each model decided earlier keeps the alpha of the look that decided it (its data no longer
change, so its verdicts stay). After each look, each undecided model's per-image scores go through
:func:`resomap.sweep.looks.look_step` (the same decision, then what to do next):

- decided (the fixed sequence ends at a resolution shown inferior, or every resolution is shown non-inferior): no
  more seeds;
- undecided at resolution s: the resolutions below s are tested alone against the reference at the look's alpha;
  from the first shown inferior down they are dropped (no more seeds; later summaries keep their rows, marked
  inferior, and decide on the other resolutions: stats.dropped); the other resolutions get the seeds the power plan
  of step s is missing at the next look's alpha (at least 1, at most ``seeds_per_round``; "plan": no cap) in the
  next round, as far as the trials left allow (``budget``, and ``budget_hours`` at the seconds per trial so far;
  shared out to the models in name order);
- out of reach (no later look's plan can be met by the rounds and trials left): stopped, with "cannot decide within
  the budget: would need k seeds" in the record; no more seeds.

It stops when every model is decided or stopped, after ``max_rounds`` looks, or before a round that would exceed
``budget`` trials or ``budget_hours`` of wall time. The rounds, the spending rule and its per-look alphas, the seeds
each round adds, and the trials used against the full grid (every model x resolution x every seed the plan allows)
are added to summary.md and summary.json ("adaptive"), the report and the MLflow parent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from resomap.atomic import write_text
from resomap.config import Config, config_hash, with_overrides
from resomap.errors import ConfigError
from resomap.stats.design import MAX_SEEDS
from resomap.sweep.looks import CANNOT, PLAN, look_step
from resomap.sweep.plan import plan, summary_folder
from resomap.sweep.summarise import record_files, trial_folders
from resomap.sweep.sweep import SweepOutcome, finished_outcome, run_sweep
from resomap.sweep.trial import TrialResult

log = logging.getLogger(__name__)
TrialId = tuple[str, int, int]


@dataclasses.dataclass
class ModelState:
    """One model across the rounds: its seeds, its dropped resolutions, once decided or out of reach the look and
    its alpha (later summaries test its unchanged data at that alpha, so its verdicts stay), and why it stopped."""

    model: str
    resolutions: list[int]
    seeds: list[int]
    dropped: dict[int, str] = dataclasses.field(default_factory=dict)  # resolution -> why
    decided_at: int | None = None
    alpha: float | None = None
    sentence: str = ""
    stopped_at: int | None = None
    stopped: str = ""  # "cannot decide within the budget: ..."

    def active(self) -> list[int]:
        return [r for r in self.resolutions if r not in self.dropped]

    def open(self) -> bool:
        return self.decided_at is None and self.stopped_at is None

    def wanted(self) -> set[TrialId]:
        return {(self.model, r, s) for r in self.active() for s in self.seeds}


@dataclasses.dataclass
class AdaptiveOutcome:
    outcome: SweepOutcome
    record: dict[str, Any]

    @property
    def failed(self) -> list[TrialResult]:
        return self.outcome.failed


def look_alphas(cfg: Config) -> list[float]:
    from resomap.stats.spending import look_alphas as split

    ad = cfg.sweep.adaptive
    return split(ad.spending, 1 - cfg.stats.level, ad.max_rounds)


def most_seeds(cfg: Config) -> int:
    """The most seeds a model can reach over the planned rounds: the first round's plus ``seeds_per_round`` per
    later round; with "plan", the plan asks at most MAX_SEEDS, and a round adds at least 1."""
    ad, first = cfg.sweep.adaptive, len(cfg.sweep.seeds)
    if ad.seeds_per_round == PLAN:
        return first if ad.max_rounds == 1 else max(first + ad.max_rounds - 1, MAX_SEEDS + ad.max_rounds - 2)
    return first + ad.seeds_per_round * (ad.max_rounds - 1)


def plan_lines(cfg: Config) -> list[str]:
    """What `resomap sweep --dry-run` prints of the adaptive plan: the looks, their alphas, the seeds, the budget."""
    ad = cfg.sweep.adaptive
    alphas = ", ".join(f"{a:.4g}" for a in look_alphas(cfg))
    grid = len({(t.model, t.resolution) for t in plan(cfg, check=False)})
    limits = ([] if ad.budget is None else [f"{ad.budget} trials"]) + (
        [] if ad.budget_hours is None else [f"{ad.budget_hours:g} h"]
    )
    budget = f"budget {' and '.join(limits)}" if limits else "no budget"
    per_round = "with no cap per round" if ad.seeds_per_round == PLAN else f"at most {ad.seeds_per_round} per round"
    return [
        f"adaptive: up to {ad.max_rounds} rounds, {len(cfg.sweep.seeds)} seed(s) in the first; then, for undecided "
        f"models only, the seeds their power plan is missing (at least 1, {per_round}); {budget}; a model the "
        f"rounds and budget cannot decide stops ('{CANNOT}: would need k seeds'); the full grid would be "
        f"{grid * most_seeds(cfg)} trials; alpha {1 - cfg.stats.level:.2g} spent by {ad.spending}: one-sided alpha "
        f"per look {alphas}"
    ]


def run_adaptive(
    cfg: Config,
    *,
    executor: Callable[..., list[TrialResult]] | None = None,
    rerun_failed: bool | None = None,
    report: Callable[[str], None] = log.info,
    wait: bool = False,
) -> AdaptiveOutcome:
    """The rounds (module doc); the last round's sweep outcome and the adaptive record. ``wait``: wait for another
    run of the same sweep to finish instead of refusing (each round takes the sweep's lock)."""
    finished = _finished(cfg, bool(rerun_failed if rerun_failed is not None else cfg.sweep.rerun_failed))
    if finished is not None:
        report(f"[adaptive] nothing to do: {finished.record['stopped']}, and the summary is current")
        return finished
    ad, alphas = cfg.sweep.adaptive, look_alphas(cfg)
    states = _first_states(cfg)
    used: set[TrialId] = set()
    rounds: list[dict[str, Any]] = []
    clock = _Clock(ad.budget_hours)
    outcome, stopped = None, f"the {ad.max_rounds} planned rounds are done"
    for look in range(1, ad.max_rounds + 1):
        open_models = [s for s in states.values() if s.open()]
        wanted = set().union(*(s.wanted() for s in open_models))
        if ad.budget is not None and len(used | wanted) > ad.budget:
            stopped = f"the budget of {ad.budget} trials would be exceeded by round {look}"
            break
        overrides = _round_overrides(states, alphas[look - 1])
        round_cfg = with_overrides(cfg, overrides, "adaptive round")
        done = _done_before(round_cfg, wanted - used)  # a resumed sweep's: reused, not trained
        over = clock.over(len(wanted - used - done))
        if over:
            stopped = f"round {look} would pass the budget of {ad.budget_hours:g} h ({over})"
            break
        report(_round_line(look, len(wanted - used), len(done), alphas[look - 1]))
        outcome = run_sweep(
            round_cfg, executor=executor, rerun_failed=rerun_failed, report=report, wait=wait, only=used | wanted
        )
        rounds.append(_look(look, alphas[look - 1], wanted, used, open_models))
        rounds[-1]["seconds"] = clock.lap(len(wanted - used - done))
        used |= wanted
        left = _trials_left(ad.budget, used, clock)
        rounds[-1]["added"] = _decide(outcome, round_cfg, open_models, look, alphas, left)
        rounds[-1]["decided"] = sorted(s.model for s in open_models if s.decided_at == look)
        rounds[-1]["stopped"] = sorted(s.model for s in open_models if s.stopped_at == look)
        if all(s.decided_at is not None for s in states.values()):
            stopped = "every model is decided"
            break
        if not any(s.open() for s in states.values()):
            if look < ad.max_rounds:
                stopped = f"no undecided model can be decided within the budget ({_budget_words(ad, used, clock)})"
            break
    record = _record(cfg, alphas, rounds, states, used, stopped)
    if outcome is not None:
        publish_record(cfg, outcome, record, write_record(outcome.summary_dir, record))
        _save_finished(cfg, outcome, overrides, used)
    report(f"[adaptive] {stopped}: {record['trials_used']} trials used, the full grid is {record['full_grid_trials']}")
    return AdaptiveOutcome(outcome, record)


def _done_before(cfg: Config, ids: set[TrialId]) -> set[TrialId]:
    """The trials of `ids` an earlier run of this sweep finished (their results on disk for their keys)."""
    from resomap.sweep.sweep import planned_states

    return {(t.model, t.resolution, t.seed) for t, state in planned_states(cfg, ids) if state == "done"}


def _round_line(look: int, trials: int, done: int, alpha: float) -> str:
    """'[adaptive] round 2: 6 new trial(s) at ...', or with trials an earlier run finished: 'round 1: 8 trial(s),
    8 finished by an earlier run, 0 new, at ...'."""
    what = (
        f"{trials} trial(s), {done} finished by an earlier run, {trials - done} new,"
        if done
        else f"{trials} new trial(s)"
    )
    return f"[adaptive] round {look}: {what} at one-sided alpha {alpha:.4g}"


def _first_states(cfg: Config) -> dict[str, ModelState]:
    """Each planned model's state before the first round (its resolutions, the configured seeds); a budget below
    the first round's trials is a ConfigError."""
    grid: dict[str, list[int]] = {}
    for t in plan(cfg):
        grid.setdefault(t.model, [])
        if t.resolution not in grid[t.model]:
            grid[t.model].append(t.resolution)
    states = {m: ModelState(m, sorted(rs), list(cfg.sweep.seeds)) for m, rs in grid.items()}
    first = sum(len(s.wanted()) for s in states.values())
    budget = cfg.sweep.adaptive.budget
    if budget is not None and budget < first:
        raise ConfigError(f"sweep.adaptive.budget {budget} is below the first round's {first} trials")
    return states


FINISHED_FILE = "adaptive_state.json"  # in the summary folder: a finished adaptive sweep, for a rerun to find


def _save_finished(cfg: Config, outcome: SweepOutcome, last: dict[str, Any], used: set[TrialId]) -> None:
    """What a rerun of this adaptive sweep needs to find it finished (`_finished`): the sweep's config, its last
    round's seeds, alphas and dropped resolutions, and the trials the rounds used. Written after the record, in the
    summary folder: the next summary a round builds replaces the folder, and the file with it."""
    state = {
        "config": config_hash(cfg, 64),
        "last_round": last,
        "trials": sorted(used),
    }
    write_text(outcome.summary_dir / FINISHED_FILE, json.dumps(state, indent=2))
    record_files(outcome.summary_dir)  # the record and this file changed the folder: state.json's sizes follow


def _finished(cfg: Config, rerun_failed: bool) -> AdaptiveOutcome | None:
    """The outcome of this adaptive sweep when it finished before with this config and nothing changed since
    (its last round's trials, results and published summary: sweep.finished_outcome); else None (the rounds run,
    reusing every trial done)."""
    try:
        state = json.loads((summary_folder(cfg) / FINISHED_FILE).read_text(encoding="utf-8"))
        record = json.loads((summary_folder(cfg) / "summary.json").read_text(encoding="utf-8"))["adaptive"]
    except (OSError, ValueError, KeyError):
        return None
    if state.get("config") != config_hash(cfg, 64):
        return None
    last = with_overrides(cfg, state["last_round"], "adaptive round")
    outcome = finished_outcome(last, {tuple(t) for t in state["trials"]}, rerun_failed)
    return None if outcome is None else AdaptiveOutcome(outcome, record)


def _trials_left(budget: int | None, used: set[TrialId], clock: _Clock) -> int | None:
    """The trials the later rounds may still add: the trial budget left and what budget_hours leaves at the
    seconds per trial so far, the smaller; None without a budget."""
    limits = [x for x in (None if budget is None else budget - len(used), clock.trials_left()) if x is not None]
    return max(0, min(limits)) if limits else None


def _budget_words(ad: Any, used: set[TrialId], clock: _Clock) -> str:
    words = [f"{max(0, ad.budget - len(used))} of {ad.budget} trials left"] if ad.budget is not None else []
    words += [clock.words()] if ad.budget_hours is not None else []
    per_round = "the seeds the plan asks" if ad.seeds_per_round == PLAN else f"at most {ad.seeds_per_round} seed(s)"
    return "; ".join([*words, f"{ad.max_rounds} planned rounds adding {per_round} each"])


class _Clock:
    """Wall time of the rounds, for sweep.adaptive.budget_hours: the seconds per new trial measured so far predict
    the next round (trials reused from an earlier run cost no time and are not counted)."""

    def __init__(self, hours: float | None) -> None:
        self.limit = None if hours is None else hours * 3600.0
        self.start = self.mark = time.monotonic()
        self.trained, self.training_s = 0, 0.0

    def lap(self, new_trials: int) -> float:
        now = time.monotonic()
        seconds, self.mark = now - self.mark, now
        self.trained += new_trials
        self.training_s += seconds
        return seconds

    def trials_left(self) -> int | None:
        """The new trials the time left pays for at the seconds per trial so far (None: no limit, or none measured)."""
        if self.limit is None or not self.trained or self.training_s <= 0:
            return None
        left = self.limit - (time.monotonic() - self.start)
        return max(0, math.floor(left / (self.training_s / self.trained)))

    def words(self) -> str:
        elapsed = (time.monotonic() - self.start) / 3600
        per = f" at {self.training_s / self.trained:.3g} s per trial" if self.trained else ""
        return f"{elapsed:.3g} h of {(self.limit or 0) / 3600:g} h used{per}"

    def over(self, new_trials: int) -> str | None:
        """Why the next round of ``new_trials`` would pass the limit, or None."""
        if self.limit is None or not self.trained:
            return None
        elapsed = time.monotonic() - self.start
        expected = elapsed + new_trials * self.training_s / self.trained
        if expected <= self.limit:
            return None
        return f"{elapsed / 3600:.2f} h so far + {new_trials} trials at {self.training_s / self.trained:.0f} s each"


def _round_overrides(states: dict[str, ModelState], alpha: float) -> dict[str, Any]:
    """What this round's sweep sets on the config: every seed so far, each model's alpha for this look and its
    dropped resolutions (kept in the plan so the summary keeps their rows, marked inferior; the round runs only the
    trials asked for: run_sweep's ``only``)."""
    seeds = sorted(set().union(*(s.seeds for s in states.values())))
    dropped = {m: sorted(s.dropped) for m, s in states.items() if s.dropped}
    look_alpha = {m: (alpha if s.open() else s.alpha) for m, s in states.items()}
    return {"sweep.seeds": seeds, "stats.look_alpha": look_alpha, "stats.dropped": dropped}


def _look(look: int, alpha: float, wanted: set[TrialId], used: set[TrialId], open_models: list[ModelState]):
    return {
        "look": look,
        "alpha": alpha,
        "models": sorted(s.model for s in open_models),
        "seeds": sorted({seed for _, _, seed in wanted}),
        "trials": len(wanted),
        "new_trials": len(wanted - used),
        "seeds_by_model": {s.model: len(s.seeds) for s in sorted(open_models, key=lambda s: s.model)},
    }


# ---------------------------------------------------------------- reading each model's decision


def _recommendations(outcome: SweepOutcome) -> dict[str, dict[str, Any]]:
    """{model: its recommendation row} from the round's summary.json."""
    try:
        payload = json.loads((outcome.summary_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"adaptive sweep: the round's summary.json cannot be read ({exc})") from None
    return {r["model"]: r for r in payload.get("recommendations") or []}


def _decide(
    outcome: SweepOutcome,
    cfg: Config,
    open_models: list[ModelState],
    look: int,
    alphas: list[float],
    trials_left: int | None,
) -> dict[str, dict[str, int | None]]:
    """Each open model's look (looks.look_step on its scores of the round): decided, the resolutions to drop, the
    seeds of the next round (the trials left shared out in name order) or out of reach; the sentence from the
    round's summary.json. Returns {model: {"seeds_needed", "add"}} of the models given seeds."""
    recs = _recommendations(outcome)
    ad = cfg.sweep.adaptive
    scores = _scores(outcome, cfg, {s.model: s.active() for s in open_models})
    added: dict[str, dict[str, int | None]] = {}
    for state in sorted(open_models, key=lambda s: s.model):
        rec = recs.get(state.model) or {}
        state.sentence = rec.get("sentence") or f"{state.model}: no decision"
        found = scores.get(state.model)
        step = None
        ref = cfg.stats.reference
        if found is not None and not isinstance(found, str) and (ref is None or ref in found.scores):
            step = look_step(  # (else the summary says why: no decision)
                found.scores,
                cfg.stats,
                alphas,
                look,
                seeds_per_round=ad.seeds_per_round,
                trials_left=trials_left,
                binary=found.binary,
                words=found.words,
                images=found.images,
            )
            if step.decided:
                state.decided_at, state.alpha = look, alphas[look - 1]
                continue
            for r, why in step.drop.items():
                state.dropped.setdefault(r, why)
            if step.stopped:
                state.stopped_at, state.stopped, state.alpha = look, step.stopped, alphas[look - 1]
                continue
            add = step.add
        elif look == ad.max_rounds:
            continue
        else:  # no decision available (the sentence says why): more seeds may not help; the budget bounds it
            add = 1 if ad.seeds_per_round == PLAN else ad.seeds_per_round
            if trials_left is not None:
                add = min(add, trials_left // max(1, len(state.active())))
            if add == 0:
                state.stopped_at, state.alpha = look, alphas[look - 1]
                state.stopped = f"{CANNOT}: no decision to plan from, and no trials left"
                continue
        if trials_left is not None:
            trials_left -= add * len(state.active())
        first = max(state.seeds) + 1
        state.seeds += list(range(first, first + add))
        added[state.model] = {"seeds_needed": None if step is None else step.seeds_needed, "add": add}
    return added


def _scores(outcome: SweepOutcome, cfg: Config, active: dict[str, list[int]]) -> dict[str, Any]:
    """{model: the decision metric (stats.metric) on its ``active`` resolutions (summary.decision.MetricScores),
    or a reason} of the round's results, as the summary's decision reads them."""
    from resomap.summary.aligned import group_records, load_records
    from resomap.summary.decision import metric_scores

    folders = trial_folders(plan(cfg, check=False))
    records = load_records([r.to_dict() for r in outcome.results], folders)
    by_model: dict[str, dict[int, list[Any]]] = {}
    for (model, res), members in group_records(records).items():
        if res in active.get(model, ()):
            by_model.setdefault(model, {})[res] = members
    return {m: metric_scores(by_res, cfg.stats.metric) for m, by_res in by_model.items()}


# ---------------------------------------------------------------- the record in the summary


def _record(cfg, alphas, rounds, states: dict[str, ModelState], used: set[TrialId], stopped: str) -> dict[str, Any]:
    ad = cfg.sweep.adaptive
    planned_seeds = most_seeds(cfg)
    pairs = sum(len(s.resolutions) for s in states.values())
    reached = len({seed for _, _, seed in used})
    return {
        "spending": ad.spending,
        "alpha": 1 - cfg.stats.level,
        "planned_looks": ad.max_rounds,
        "look_alphas": alphas,
        "seeds_per_round": ad.seeds_per_round,
        "budget": ad.budget,
        "budget_hours": ad.budget_hours,
        "rounds": rounds,
        "stopped": stopped,
        "trials_used": len(used),
        "full_grid_trials": pairs * planned_seeds,
        "full_grid_trials_seeds_reached": pairs * reached,
        "models": {
            m: {"decided_at": s.decided_at, "alpha": s.alpha, "seeds": s.seeds, "dropped": s.dropped}
            | {"stopped_at": s.stopped_at, "stopped": s.stopped, "sentence": s.sentence}
            for m, s in sorted(states.items())
        },
    }


def write_record(out_dir: Any, record: dict[str, Any]) -> list[Any]:
    """The record into summary.json ("adaptive") and, as the summary's "adaptive" section in its place (after the
    decisions), into summary.json's sections, summary.md, summary.txt and report.html (written again); the files
    written."""
    from resomap.blocks import section_to_dict
    from resomap.summary.build import SweepSummary, assemble, section_texts

    path = out_dir / "summary.json"
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["adaptive"] = record
    sections = assemble(**SweepSummary.from_dict(payload).parts()).sections or []  # the record's section in place
    payload["sections"] = [section_to_dict(x) for x in sections]
    write_text(path, json.dumps(payload, indent=2, allow_nan=False, default=str))
    written = [path]
    for name, text in section_texts(sections).items():
        written.append(write_text(out_dir / name, text))
    try:
        from resomap.reports.html import write_report

        written.append(write_report(out_dir))
    except Exception as exc:  # the report is a view; the summary files are the record
        log.warning("report.html not rewritten with the adaptive record: %s", exc)
    return written


def publish_record(cfg: Config, outcome: SweepOutcome, record: dict[str, Any], files: list[Any]) -> None:
    """The record on the last round's MLflow parent run (resomap.tracking.parent.publish_adaptive). Soft, like
    every tracking call: an unreachable store never fails the sweep."""
    if outcome.parent_run_id is None or not cfg.mlflow.enabled:
        return
    from resomap.tracking import make_tracker
    from resomap.tracking.parent import publish_adaptive

    publish_adaptive(make_tracker(cfg), outcome.parent_run_id, record, files)
