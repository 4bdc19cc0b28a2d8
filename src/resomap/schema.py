"""The shape of every part of a sweep's summary (summary.json; resomap.summary.build.SweepSummary's fields), one typed
record per row: the keys, in the order the files write them, and what each holds. The CSV files' columns are these
records' keys (resomap.results derives PAIRED_COLUMNS, RECOMMENDATION_COLUMNS, ... from them), so a new column is
one line here.

TypedDicts, not dataclasses: a record is what summary.json and the CSV files hold, read back as a mapping by every
view (report.html and `load_sweep` read summary.json), so the files stay exactly what they were. Keys that are not
Python names ("class") use the functional form.
"""

from __future__ import annotations

from typing import Any, TypedDict

Number = float | None  # a statistic; None where it is not available (never NaN in summary.json)


class Verdict(TypedDict):
    """One resolution's verdict against the reference (stats.decide), a decision's `verdicts` item."""

    resolution: int
    reference: int
    verdict: str  # reference | non-inferior | inferior | undecided | not reached | above reference | not testable
    margin: float
    level: float
    difference: Number
    low: Number
    high: Number
    p_value: Number
    detectable: Number
    n_images: int
    n_seeds: int
    reason: str
    scope: str
    seeds_needed: int | None
    images_needed: int | None
    joint_needed: Any


class PairedTest(TypedDict):
    """paired_tests.csv: one pair of resolutions of a model on the same test images (descriptive)."""

    model: str
    metric: str
    resolution_a: int
    resolution_b: int
    accuracy_a: Number
    accuracy_b: Number
    effect: Number
    ci_low: Number
    ci_high: Number
    p_value: Number
    p_adjusted: Number
    significant: bool
    level: float
    method: str
    correction: str
    n_images: int
    n_seeds: int
    b01: int | None
    b10: int | None
    available: bool
    reason: str


class RecommendationRow(TypedDict):
    """recommendation.csv: a model's decision and whether its decided resolution is its smallest sufficient one (the
    file keeps its name; which configuration to use across models is answer.csv's)."""

    model: str
    metric: str
    resolution: int | None  # the decided resolution (the reference when none below it is shown non-inferior)
    sufficient: bool  # whether the evidence that it is enough is there (summary.uncertainty.sufficiency)
    reference: int | None
    decided: bool
    scope: str  # "model" (the seed the unit of replication) | "checkpoint" (these trained checkpoints)
    accuracy: Number
    reference_accuracy: Number
    level: float
    margin: float
    detectable: Number  # the decided step's detectable margin
    power: float
    n_seeds: int
    n_images: int
    deterministic: bool
    available: bool
    reason: str
    sufficiency: str  # "<res> px is enough (...)" / "needs <ref> px (...)" or "no sufficient resolution shown: <why>"
    sentence: str
    note: str


class SeedEvidence(TypedDict, total=False):
    """A model-scope decision's seeds as evidence (summary.decision.seed_evidence)."""

    differences: dict[str, dict[str, float]]  # resolution -> seed -> mean difference from the reference
    outlying: dict[str, Any]
    without: dict[str, Any]
    words: str


class Recommendation(RecommendationRow, total=False):
    """summary.json's recommendations: the row and what the sentence is built from."""

    verdicts: list[Verdict]
    seeds: SeedEvidence
    reference_flaw: str
    evidence: str  # what shows the decided resolution is its smallest sufficient one ('' where it is not shown)


ClassDecision = TypedDict(
    "ClassDecision",
    {
        "model": str,
        "class": str,
        "rank": int,  # 1: the class with the fewest test images
        "n_images": int,  # the class's test images compared
        "n_seeds": int,
        "metric": str,  # recall:<class>
        "n_classes": int,
        "correction": str,  # "Bonferroni over K classes"
        "alpha": float,  # the one-sided alpha of this class's decision: the model's alpha / K
        "level": float,
        "scope": str,
        "margin": float,
        "reference": "int | None",
        "resolution": "int | None",  # the decided resolution (the reference when none below it is non-inferior)
        "decided": bool,
        "available": bool,
        "recall": Number,
        "reference_recall": Number,
        "reason": str,  # the decision in words, or "not decided: <why>"
        "sentence": str,
        "verdicts": "list[Verdict]",
    },
)


class TrainTestPair(TypedDict):
    """A model trained at `trained` px tested at `tested` px against itself tested at `trained` px (same images and
    seeds), a TrainTest's `pairs` item (summary.train_test)."""

    trained: int
    tested: int
    score_trained: float  # the decision metric tested at the training resolution (mean over seeds and images)
    score_tested: float
    images: str  # what the images counted are, in words
    verdict: str  # better | non-inferior | worse | undecided (stats.ABOVE_VERDICTS)
    difference: float  # score_tested - score_trained
    low: Number  # its one-sided bounds at the row's alpha
    high: Number
    p_noninferior: Number  # one-sided p of H0 "difference <= -margin"
    p_better: Number  # one-sided p of H0 "difference <= 0"
    detectable: Number
    n_images: int
    n_seeds: int  # replicates tested (1 for a deterministic model)
    untestable: str | None  # why no test ran, where none did


class TrainTest(TypedDict):
    """One model tested above the resolutions it was trained at (summary.train_test): its pairs, one family."""

    model: str
    metric: str  # the decision metric in words
    n_pairs: int
    alpha: float  # the one-sided alpha of each pair: the model's alpha / n_pairs
    level: float
    correction: str  # "Bonferroni over K pairs"
    margin: float
    scope: str
    deterministic: bool
    pairs: list[TrainTestPair]
    notes: list[str]  # trained resolutions not compared, and why
    sentence: str


class Interval(TypedDict):
    estimate: Number
    low: Number
    high: Number


class GroupDecision(TypedDict):
    """summary.json's group_decisions: a model decided on one group value's test images (summary.groups)."""

    model: str
    group: str
    n_values: int
    alpha: float  # one-sided: the model's alpha / the group's number of values (Bonferroni)
    correction: str
    scope: str
    margin: float
    metric: str
    value: str
    n_images: int
    n_seeds: int
    reference: int | None
    resolution: int | None
    decided: bool
    available: bool
    reason: str
    verdicts: list[Verdict]
    sentence: str
    scores: dict[str, Interval]  # resolution -> the score on those images with its interval


class GroupInteraction(TypedDict):
    """summary.json's group_interactions: does a step's difference differ between a group's values."""

    model: str
    group: str
    resolution: int
    reference: int
    means: dict[str, float]
    sizes: dict[str, int]
    p: Number
    method: str
    p_holm: Number
    alpha: float
    shown: bool
    steps: int


class Sensitivity(TypedDict):
    """summary.json's sensitivity: the test images lost and gained against the reference (summary.sensitivity)."""

    model: str
    resolution: int
    reference: int
    metric: str
    n_seeds: int
    n_images: int  # the test images both resolutions have under every compared seed: the shares' denominator
    lost: int  # right at the reference in every seed, wrong at this resolution in every seed
    lost_share: Number
    lost_low: Number
    lost_high: Number
    gained: int  # the reverse
    gained_share: Number
    gained_low: Number
    gained_high: Number
    seed_dependent: int  # right in some seeds and wrong in others at either resolution: the noise to compare with
    seed_dependent_share: Number
    seed_dependent_low: Number
    seed_dependent_high: Number
    level: float  # of the Wilson intervals
    available: bool
    reason: str  # why nothing is counted, or what to read the counts with (one seed, a deterministic fit)


class SensitiveImage(TypedDict):
    """sensitive_images.csv: one test image lost or gained at a resolution."""

    model: str
    resolution: int
    reference: int
    index: int  # the image's index in the raw dataset (predictions.csv, the probe set's explanations.npz)
    label: int
    class_name: str
    status: str  # lost | gained
    seeds_right_reference: int
    seeds_right: int  # at this resolution
    n_seeds: int


class FrontAxis(TypedDict):
    name: str  # score | cost | quality
    words: str
    interval: str
    test: str


class FrontPoint(TypedDict):
    resolution: int
    on_front: bool
    score: list[Number] | None  # estimate, low, high
    cost: list[Number] | None
    quality: list[Number] | None
    dropped_by: int | None
    better_on: list[str]
    exact_on: list[str]
    p_holm: list[float]
    standing: str


class FrontTest(TypedDict):
    """Every test of the front: a pair of resolutions on an axis (effect = b - a)."""

    axis: str
    resolution_a: str
    resolution_b: str
    effect: Number
    p_value: Number
    p_holm: Number
    shown_better: int | None  # the resolution shown better; None: no difference shown
    test: str
    reason: str


class Front(TypedDict):
    """summary.json's front3: a model's three-way trade-off (summary.front)."""

    model: str
    level: float
    alpha: float
    family: str
    axes: list[FrontAxis]
    note: str
    points: list[FrontPoint]
    tests: list[FrontTest]


class Machine(TypedDict):
    """A machine the finished trials ran on (resomap.records.machines)."""

    machine: str
    cpu: str
    cpu_capability: str
    cpu_bf16: str
    gpu: str
    trials: int


class Trial(TypedDict, total=False):
    """A trial's result.json tree (resomap.trial_result.TrialResult.to_dict) with its folder: the dataclass's fields
    in its order (the schema is the bottom layer and cannot import it; tests/test_sections.py holds the two equal)."""

    key: str
    name: str
    model: str
    family: str
    resolution: int
    seed: int
    status: str  # FINISHED | FAILED | ...
    test: dict[str, float]
    best_val: Number
    epochs_run: int
    train_time_s: Number
    best_checkpoint: str | None
    run_id: str | None
    cross_resolution: dict[str, float]
    profile: dict[str, Any]
    explain: dict[str, Any]
    error: str | None
    failure_kind: str | None
    history: list[dict[str, Any]]
    tracked: bool
    notes: list[str]
    finished_at: str | None
    predictions: str | None
    environment: dict[str, Any]
    data: dict[str, Any]
    task: str
    convergence: dict[str, Any]
    deterministic: bool  # by its model's spec: the fit does not depend on the training seed
    folder: str | None  # relative to the summary folder in summary.json


class Stats(TypedDict, total=False):
    """The settings the statistics used (config `stats`, resomap.config.schema.StatsConfig)."""

    level: float
    resamples: int
    seed: int
    paired_test: str
    correction: str
    margin: float
    metric: str
    reference: int | None
    power: float
    discordance: float
    seed_correlation: float
    scope: str
    seed_sd: float
    groups: list[str]
    baselines: list[str]
    look_alpha: float | None
    dropped: list[Any]


class AnswerStep(TypedDict):
    """answer.csv: one configuration of the answer across models (summary.answer): the reference, each cheaper
    configuration in the order the fixed sequence tested it (by cost, the most costly first), then those above it."""

    configuration: str  # model@resolution
    model: str
    resolution: int
    cost: float  # MACs per image (GMACs) or latency at batch 1 (ms): Answer's `cost`
    cost_ratio: float  # the reference's cost / this configuration's
    latency_ms: Number
    val_score: Number  # the decision metric on the validation split (the kept fit, mean over seeds)
    score: Number  # the decision metric on the test images, pooled over seeds
    verdict: str  # reference | non-inferior | inferior | undecided | not reached | above reference
    difference: Number  # score - the reference's, on the same test images
    low: Number  # one-sided bounds at the level
    high: Number
    p_value: Number  # one-sided p of "more than margin below the reference"
    detectable: Number
    n_seeds: int
    reason: str


class Answer(TypedDict, total=False):
    """The answer across models (summary.answer): the configuration to use (chosen on validation) and the cheapest
    configuration of any model shown non-inferior to it; `available` False with the `reason` where there is none."""

    available: bool
    reason: str
    margin: float
    level: float
    metric: str  # the decision metric in words
    chosen_by: str  # how the configuration to use was chosen, in words
    tie: str  # how a tie on the validation score was broken, in words ('' without one)
    cost: str  # MACs | latency: what orders the sequence
    use: str  # model@resolution
    use_model: str
    use_resolution: int
    cheapest: str | None  # model@resolution of the cheapest configuration shown non-inferior; None: none is
    n_configurations: int
    n_images: int
    scope: str
    steps: list[AnswerStep]
    classes: list[dict[str, Any]]  # the class that matters at each named configuration (summary.answer)
    models: list[dict[str, Any]]  # each other model's decided resolution against the configuration to use


class Adaptive(TypedDict, total=False):
    """An adaptive sweep's record (sweep.adaptive): its looks, rounds and each model's decision."""

    alpha: float
    spending: str
    planned_looks: int
    look_alphas: list[float]
    budget_hours: float | None
    rounds: list[dict[str, Any]]
    stopped: str
    trials_used: int
    full_grid_trials: int
    full_grid_trials_seeds_reached: int
    models: dict[str, dict[str, Any]]


def keys(record: Any) -> tuple[str, ...]:
    """A record's keys in order: the columns of its CSV file."""
    return tuple(record.__annotations__)
