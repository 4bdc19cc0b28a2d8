"""Trials and sweeps: plan, run_trial, run_sweep, executors."""

from resomap.sweep.execute import SweepOutcome, run_sweep
from resomap.sweep.plan import describe_plan, plan, trial_state
from resomap.sweep.runner import run_trial
from resomap.sweep.trial import Trial, TrialResult, trial_key

__all__ = [
    "SweepOutcome",
    "Trial",
    "TrialResult",
    "describe_plan",
    "plan",
    "run_sweep",
    "run_trial",
    "trial_key",
    "trial_state",
]
