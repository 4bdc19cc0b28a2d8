"""Trials and sweeps: plan (plan.py), Trial / TrialResult / run_trial (trial.py), run_sweep / sync_sweep
(sweep.py), executors (executors.py) and the local-gpus worker process (worker.py)."""

from resomap.sweep.executors import EXECUTORS, register_executor  # registers the executors (config group sweep.*)
from resomap.sweep.identity import Trial, trial_key
from resomap.sweep.plan import describe_plan, plan, trial_state
from resomap.sweep.sweep import SweepOutcome, run_sweep, sync_sweep
from resomap.sweep.trial import TrialResult, run_trial

__all__ = [
    "EXECUTORS",
    "SweepOutcome",
    "Trial",
    "TrialResult",
    "describe_plan",
    "plan",
    "register_executor",
    "run_sweep",
    "run_trial",
    "sync_sweep",
    "trial_key",
    "trial_state",
]
