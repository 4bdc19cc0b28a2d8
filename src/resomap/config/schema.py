"""The typed config tree. Every section is a frozen dataclass; field comments are the reference docs.

The config reference in docs/config.md is generated from this file (`resomap config --doc`), and a test fails
when the two drift apart. A field's comment is the text after `#` on the line that declares it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from resomap.config.groups import Group, GroupSection
from resomap.errors import UnknownNameError

Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
DEVICES: tuple[str, ...] = get_args(Device)  # the one list of device choices (config, CLI flags)
PRECISIONS: tuple[str, ...] = get_args(Precision)  # the one list of precision choices
PRETRAINED_HUB = "hub"  # the models.pretrained value that asks for the library's published weights (resomap.models.hub)


def is_hub(value: object) -> bool:
    """Whether a models.pretrained value asks for the published weights (`hub`) rather than naming a file."""
    return isinstance(value, str) and value.strip().lower() == PRETRAINED_HUB


MAX_RESOLUTION = 8192  # the largest input side accepted anywhere (config and CLI); memory sets the real limit
# keys that left the schema -> where they are set now: refused at load with a line naming the new key
MOVED_KEYS = {
    "segmentation.tversky_alpha": "loss.focal_tversky.alpha",
    "segmentation.tversky_beta": "loss.focal_tversky.beta",
    "segmentation.tversky_gamma": "loss.focal_tversky.gamma",
}


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "resomap"  # MLflow experiment name; one experiment per sweep name, with folders of its own
    seed: int = 42  # base seed for splits, weight init, shuffling and augmentation
    output_dir: str = "."  # root under which checkpoint_dir, summary_dir and the MLflow store live
    checkpoint_dir: str = "checkpoints"  # holds {experiment}/{family}/{model}/{resolution}/seed{S}/ (under output_dir)
    summary_dir: str = "model_summaries"  # holds {experiment}/{model}/{resolution}/seed{S}/ and _sweep/{experiment}/
    cache_dir: str = ".cache/resomap"  # resized image caches (relative to output_dir)
    task: str = "classification"  # what every model of the sweep learns: a registered task (resomap tasks)


@dataclass(frozen=True)
class AdaptiveConfig:
    # `resomap sweep` in rounds: each round trains more seeds only for the models whose non-inferiority decision is
    # still undecided (as many as the power plan of the undecided step asks), drops resolutions from the first shown
    # inferior down, stops a model that the rounds and budget cannot decide ("cannot decide within the budget: would
    # need k seeds"), and stops when every model is decided or stopped
    enabled: bool = False  # run the sweep adaptively (sweep.seeds: the seeds of the first round)
    max_rounds: int = 3  # the planned looks (>= 1): the alpha-spending rule splits alpha over them
    # an undecided model gets what the power plan of its undecided step is missing at the next look, at least 1 and
    # at most this many seeds a round (1: one seed a round, a fixed cost); "plan": no cap, only max_rounds, budget
    # and budget_hours limit it; new seeds: max(sweep.seeds) + 1, ...
    seeds_per_round: int | Literal["plan"] = 1  # the most seeds one round adds to a model; "plan": what the plan asks
    budget: int | None = None  # the most trials in all (finished ones included); null: only max_rounds limits it
    # the most hours of wall time: a round is not started when the time so far plus its new trials at the seconds
    # per trial measured so far would pass it; null: no time limit
    budget_hours: float | None = None
    spending: str = "obrien_fleming"  # alpha-spending rule over the looks: obrien_fleming, pocock, bonferroni


@dataclass(frozen=True)
class SweepConfig(GroupSection):
    GROUP: ClassVar[Group] = Group("sweep", ("executor",))
    models: list[str] = field(default_factory=lambda: ["tiny_cnn"])  # registry names (resomap models)
    resolutions: list[int] = field(default_factory=lambda: [64])  # square input sizes in pixels
    seeds: list[int] = field(default_factory=lambda: [42])  # one trial per seed
    executor: str = "local"  # how trials are run: a registered executor (local, local-gpus, ray)
    model_overrides: dict[str, dict] = field(default_factory=dict)  # per model: {dotted.key: value}
    include: list[list] = field(default_factory=list)  # extra [model, resolution] pairs to run
    exclude: list[list] = field(default_factory=list)  # [model, resolution] pairs to skip
    # a model x resolution pair below the model's smallest input side (its layers shrink smaller inputs away) is
    # refused before anything runs; true instead leaves it out of the grid and of the model's cross-resolution tests
    skip_invalid_resolutions: bool = False  # true: leave out resolutions a model cannot take (false: refuse them)
    rerun_failed: bool = False  # run trials that failed before again (one the disk was full for is run anyway)
    cost_probe: bool = True  # time a few steps and an explanation of each model x resolution first, for the ETA
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)  # rounds of seeds until decided
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # sweep.<executor>.*: the executor's own


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["adamw", "sgd"] = "adamw"  # optimiser
    lr: float = 1.0e-3  # peak learning rate
    weight_decay: float = 0.05  # decoupled weight decay (adamw) or L2 (sgd)
    momentum: float = 0.9  # sgd momentum
    fused: Literal["auto", "on", "off"] = "auto"  # fused AdamW kernel; auto: on CUDA only


@dataclass(frozen=True)
class SchedulerConfig:
    name: Literal["cosine", "step", "plateau", "onecycle", "none"] = "cosine"  # learning-rate schedule
    warmup_epochs: int = 1  # linear warm-up before cosine (cosine only)
    min_lr: float = 0.0  # floor of the cosine schedule
    step_size: int = 10  # epochs between decays (step)
    gamma: float = 0.1  # decay factor (step)
    patience: int = 2  # epochs without improvement before a decay (plateau, on val/loss)
    factor: float = 0.5  # decay factor (plateau)


@dataclass(frozen=True)
class EarlyStoppingConfig:
    enabled: bool = True  # stop when the monitored metric stops improving
    monitor: str = "val/loss"  # any metric the trainer logs
    mode: Literal["min", "max"] = "min"  # whether lower or higher is better
    patience: int = 5  # epochs without improvement before stopping
    min_delta: float = 0.0  # smallest change that counts as improvement
    # weight of the newest epoch in an exponential moving average of the monitored value (1: no smoothing); a
    # plateau of the smoothed value stops training, so one lucky or unlucky validation epoch does not end a fit
    smoothing: float = 1.0
    min_epochs: int = 0  # epochs always run before early stopping may stop a fit


@dataclass(frozen=True)
class EmaConfig:
    # evaluate (validate, checkpoint, test) an exponential moving average of the weights (torch's AveragedModel,
    # batch-norm statistics averaged with them, as timm's ModelEmaV3 does); the raw weights keep training
    enabled: bool = False  # validate and test the averaged weights
    decay: float = 0.998  # weight of the average per optimiser step, in [0.5, 1)
    warmup: bool = True  # decay min(decay, (1 + n) / (10 + n)) at update n, so early epochs are not the init's


@dataclass(frozen=True)
class LrFindConfig:
    # the LR range test (Smith 2017): a short run with the learning rate rising exponentially on a throw-away copy
    # of the model; the peak learning rate becomes the rate of the lowest smoothed loss / 10. Run once per model x
    # resolution and kept beside the seeds' checkpoints (lr_find.json): resumed and later seeds reuse it
    enabled: bool = False  # find training.optimizer.lr instead of taking it as given
    start_lr: float = 1.0e-6  # first learning rate of the range
    end_lr: float = 1.0  # last learning rate of the range
    steps: int = 60  # optimiser steps of the range test (batches from the training split)


@dataclass(frozen=True)
class CheckpointConfig:
    monitor: str = "val/macro_f1"  # metric that ranks checkpoints
    mode: Literal["min", "max"] = "max"  # whether lower or higher is better
    top_k: int = 1  # best checkpoints kept besides last.pt


@dataclass(frozen=True)
class TrainingConfig:
    epochs: int = 10  # training epochs
    batch_size: int = 32  # images per optimiser micro-batch
    eval_batch_size: int = 128  # images per batch for validation and test
    grad_accum_steps: int = 1  # micro-batches per optimiser step
    grad_clip: float = 0.0  # max gradient norm; 0 turns clipping off
    label_smoothing: float = 0.0  # cross-entropy label smoothing
    class_weights: Literal["none", "balanced"] = "none"  # balanced: inverse class frequency
    sample_weights: Literal["none", "confidence"] = "none"  # confidence: x each image's label confidence (ELPV)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    ema: EmaConfig = field(default_factory=EmaConfig)
    lr_find: LrFindConfig = field(default_factory=LrFindConfig)
    max_minutes: float | None = None  # wall-clock cap per fit: no epoch starts after it; null: none
    # relative improvement of the (smoothed) stop monitor over the last half-patience epochs below which a fit the
    # epoch budget or the time cap ended counts as converged, not undertrained (a schedule annealed to its end
    # creeps on by a fraction of a percent); 0: any improvement there counts as still improving
    convergence_tolerance: float = 0.005
    # test-time augmentation: symmetries the dataset declares (resomap datasets), averaged at test; reported as
    # test_tta/* beside the plain test score, never instead of it; []: off
    tta: list[str] = field(default_factory=list)
    progress: Literal["auto", "bar", "log", "off"] = "auto"  # auto: bars on a terminal, log lines otherwise


@dataclass(frozen=True)
class SystemConfig:
    device: Device = "auto"  # auto: CUDA when available, else CPU
    precision: Precision = "auto"  # autocast dtype; auto: bf16 with native bf16 (CPU or GPU), else fp32
    channels_last: bool | Literal["auto"] = "auto"  # NHWC memory format for model and inputs; auto: with bf16/fp16
    compile: bool = False  # torch.compile the model
    cudnn_benchmark: bool = False  # cudnn autotuner (CUDA only)
    tf32: bool = False  # TF32 matmul and convolutions (CUDA only)
    grad_checkpointing: bool = False  # trade compute for activation memory (models that support it)
    num_workers: int = 0  # DataLoader worker processes
    persistent_workers: bool = False  # keep workers between epochs (num_workers > 0)
    pin_memory: Literal["auto", "on", "off"] = "auto"  # page-locked host batches; auto: on CUDA only
    threads: int = 0  # torch intra-op threads; 0: auto, measured once per training step and machine (performance.md)
    # set by the sweep, not by hand: the keys above it resolved from auto (a model with a faster path of its own on
    # this device, e.g. fp32 for depthwise convolutions on a CPU, takes it only for those keys); in no trial key
    resolved_from_auto: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SplitConfig:
    val: float = 0.15  # fraction of images for validation
    test: float = 0.15  # fraction of images for testing


@dataclass(frozen=True)
class AugmentationConfig:
    enabled: bool = True  # off for evaluation regardless
    crop_scale_min: float = 0.85  # random resized crop (antialiased): smallest area fraction, at every resolution
    hflip: float = 0.5  # probability of a horizontal flip
    vflip: float = 0.0  # probability of a vertical flip
    brightness: float = 0.2  # colour jitter: max relative brightness change
    contrast: float = 0.2  # colour jitter: max relative contrast change
    blur_prob: float = 0.2  # probability of a Gaussian blur (every resolution; resolution_aware: high resolution only)
    blur_sigma_max: float = 1.5  # largest blur sigma, in pixels of a 224 image (scaled with resolution)
    resolution_aware: bool = False  # true: the recipe varies with resolution (a confound of every comparison)
    high_resolution: int = 128  # resolution_aware: at and above this size, crop_scale_min_high and the blur
    crop_scale_min_high: float = 0.6  # resolution_aware: smallest crop area fraction at high resolution
    rot90: float = 0.0  # probability of a quarter, half or three-quarter turn (square images)
    rotate_degrees: float = 0.0  # small rotation: largest angle either way
    translate: float = 0.0  # small shift: largest fraction of the side either way


@dataclass(frozen=True)
class CacheConfig:
    memory_budget_mb: int = 2048  # resized images (uint8; uint16: deeper data) kept in RAM up to this size, else disk
    disk: bool = True  # also write the resized images to cache_dir for reuse across processes


@dataclass(frozen=True)
class DataConfig(GroupSection):
    GROUP: ClassVar[Group] = Group("data", ("dataset",))
    dataset: str = "elpv"  # a registered dataset (resomap datasets); its own keys are data.<dataset>.*
    seed: int | Literal["trial"] | None = (
        None  # split, generated images, probe set: null = experiment.seed (all seeds alike); trial; or an int
    )
    limit: int | None = None  # keep at most this many images (stratified); null keeps all
    max_bad_fraction: float = 0.05  # unreadable images are skipped with a warning up to this fraction
    upsample: Literal["refuse", "bilinear"] = "refuse"  # above a dataset's native side: refuse, or upsample bilinearly
    # image files (imagefolder, csv, segfolder, segcsv): the value read as white, one scale for all the data (never
    # per image); auto: the files' own depth (8 for L/RGB/P, 16 for 16-bit PNG/TIFF; 32-bit integer or float images:
    # the data's largest value rounded up to 12, 16 or 32 bits, or its float range); 12: 12-bit values in 16-bit files
    bit_depth: Literal["auto", 8, 12, 16] = "auto"
    exif_orientation: bool = True  # imagefolder, csv: turn each image upright as its EXIF orientation tag says
    split: SplitConfig = field(default_factory=SplitConfig)
    augmentation: AugmentationConfig = field(default_factory=AugmentationConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # data.<dataset>.*: the dataset's own


@dataclass(frozen=True)
class HogConfig:
    # hog_svm's HOG features (resomap.models.hog): a cell is a fixed share of the side (pixels per cell =
    # resolution // cells_per_side), so the features describe the same image regions at every resolution and their
    # length stays the same (exactly from 8 x cells_per_side px up; a smaller side may fit a cell or two more)
    cells_per_side: int = 8  # hog_svm: HOG cells across the side; a cell is resolution // this px (>= 2 px)
    orientations: int = 9  # hog_svm: unsigned gradient orientation bins over 0-180 degrees


@dataclass(frozen=True)
class FinetuneConfig:
    # lite<N>_finetune (resomap.models.pretrained): which of the pretrained backbone's 7 stages train, and how fast
    freeze_blocks: int = 0  # the stem and the first K stages stay frozen (0: end to end; 7: head conv + classifier)
    backbone_lr_scale: float = 0.1  # the backbone's learning rate: this times training.optimizer.lr (head: 1x)


@dataclass(frozen=True)
class PartialConfig:
    # lite<N>_partial (resomap.models.pretrained): the stem and the first K stages frozen, their maps computed once per
    # image and view and cached; the stages above, the head convolution and the classifier trained over the cache
    freeze_blocks: int = 6  # K, 1 to 7 (6: the last stage trains; >= 5x end-to-end's images/s at 128 px on a CPU)
    backbone_lr_scale: float = 0.1  # the trained stages' learning rate: this times training.optimizer.lr (head: 1x)


@dataclass(frozen=True)
class HeadConfig:
    # lite<N>_head (resomap.models.pretrained): the head trained on the frozen backbone's cached features
    hidden: int = 0  # 0: a linear head; N: an MLP with N hidden units (GELU, models.dropout before each layer)


# the ways of using a pretrained backbone a model name asks for after '@' (resomap.models.recipes):
# `timm:convnext_tiny@partial`, `resnet18@linear`
RECIPE_NAMES = ("linear", "head", "finetune", "partial")
RECIPE_SEP = "@"


def split_recipe(name: str) -> tuple[str, str | None]:
    """'timm:resnet18@Linear' -> ('timm:resnet18', 'linear'); a name without '@' -> (name, None); an unknown recipe
    raises UnknownNameError. Read without torch: the CLI's preflight and the model registry parse names alike."""
    base, sep, recipe = str(name).rpartition(RECIPE_SEP)
    if not sep:
        return str(name), None
    recipe = recipe.strip().lower()
    if recipe not in RECIPE_NAMES:
        raise UnknownNameError(f"no recipe '{recipe}' in '{name}'; use one of {', '.join(RECIPE_NAMES)} after '@'")
    return base, recipe


@dataclass(frozen=True)
class ModelsConfig:
    # the sections read by named models only: part of those models' trial keys, not of the others' (sweep.trial)
    MODEL_SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "hog": ("hog_svm",),
        "finetune": ("lite0_finetune", "lite1_finetune", "lite2_finetune"),
        "partial": ("lite0_partial", "lite1_partial", "lite2_partial"),
        "head": ("lite0_head", "lite1_head", "lite2_head"),
    }

    @classmethod
    def reads(cls, model: str, section: str) -> bool:
        """Whether `model` reads models.<section> (MODEL_SECTIONS): a model named there, or a recipe name
        `<backbone>@<section>` of the finetune, partial and head recipes (resomap.models.recipes)."""
        name = str(model).lower()
        return name in cls.MODEL_SECTIONS[section] or (section != "hog" and name.endswith(f"@{section}"))

    grayscale: Literal["repeat", "adapt"] = "adapt"  # 1-channel input: repeat to 3 channels or adapt conv1
    # model name -> a local state_dict file, or `hub`: timm's / torchvision's published weights from the user's caches
    # (Hugging Face, torch hub; fetched once where online and HF_HUB_OFFLINE is unset: resomap.models.hub)
    pretrained: dict[str, str] = field(default_factory=dict)
    dropout: float = 0.0  # classifier dropout where the model has one
    width: int = 32  # channels of the first stage of the small ResNets (small_resnet*); each stage doubles them
    min_cam_size: int = 4  # smallest feature-map side a CAM target layer may have
    cam_layer_policy: Literal["common", "per_resolution"] = "common"  # common: one CAM layer at all sweep resolutions
    hog: HogConfig = field(default_factory=HogConfig)  # hog_svm's features
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)  # lite<N>_finetune's frozen stages, lr scale
    partial: PartialConfig = field(default_factory=PartialConfig)  # lite<N>_partial's frozen and cached stages
    head: HeadConfig = field(default_factory=HeadConfig)  # lite<N>_head's head on cached features


@dataclass(frozen=True)
class ExplainabilityConfig(GroupSection):
    GROUP: ClassVar[Group] = Group("explainability", ("methods", "sanity_methods", "always"))
    enabled: bool = True  # explain the probe set after each trial
    # explainers run on the probe set after each trial (resomap explainers); their maps are compared across resolutions
    methods: list[str] = field(default_factory=lambda: ["gradcam", "integrated_gradients", "saliency"])
    probe_size: int = 32  # probe images (class-stratified, same in every trial); 32: quality intervals <= +-0.17
    batch_size: int = 16  # images per explainer call
    common_grid: int = 64  # maps are resampled to this side for cross-resolution comparison
    top_k_percent: float = 10.0  # top-k% IoU agreement
    sanity_methods: list[str] = field(default_factory=lambda: ["gradcam", "saliency"])  # weight-randomisation check
    road: bool = True  # also score ROAD (pytorch-grad-cam): the slowest quality metric on the CPU
    faithfulness_steps: int = 10  # deletion/insertion: steps from the full image to the baseline
    faithfulness_baseline: Literal["auto", "mean", "zeros", "blur", "noise"] = "auto"  # auto: closest to uniform
    baseline_draws: int = 2  # random maps per image for the deletion/insertion and localisation `_random` levels
    pointing_tolerance: float = 0.05  # pointing game: mask dilated by this fraction of the image side
    sanity_seeds: int = 10  # weight-randomisation draws of the sanity check (cheap: small randomised copies)
    sanity_threshold: float = 0.5  # fixed threshold when there is no unrelated-image reference (one image)
    budget_share: float | None = None  # skip a method whose predicted cost exceeds this share of the training time
    always: list[str] = field(default_factory=list)  # methods run whatever the budget (asked for explicitly)
    # the floor every model's maps have (deterministic ones too): each probe image also explained moved floor_shift
    # pixels (edges replicated), its map moved back; the agreement across resolutions is decided against it
    floor: Literal["shift", "none"] = "shift"
    floor_shift: int = 1  # pixels at the model's own resolution (>= 1)
    # "looks at the same places" when the maps' mass agreement (share of |map| mass in the same cells of a map_grid
    # grid) is shown no more than this below its floor, "elsewhere" when shown more
    map_margin: float = 0.1
    map_grid: int = 16  # cells a side of the grid where it looks is decided on (>= 4; at most common_grid is used)
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # explainability.<method>.*: its own

    def __post_init__(self) -> None:
        from resomap.errors import ConfigError

        if self.budget_share is not None and not self.budget_share > 0:
            raise ConfigError(f"explainability.budget_share must be null or a positive number, got {self.budget_share}")
        shift = self.floor_shift
        if isinstance(shift, bool) or not isinstance(shift, int) or shift < 1:
            raise ConfigError(f"explainability.floor_shift must be a whole number of pixels >= 1, got {shift!r}")
        margin = self.map_margin
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise ConfigError(f"explainability.map_margin must be a share of mass in [0, 1), got {margin!r}")
        grid = self.map_grid
        if isinstance(grid, bool) or not isinstance(grid, int) or grid < 4:
            raise ConfigError(f"explainability.map_grid must be a whole number of cells >= 4, got {grid!r}")


@dataclass(frozen=True)
class MlflowConfig:
    enabled: bool = True  # log to MLflow
    tracking_uri: str | None = None  # null: MLFLOW_TRACKING_URI, else sqlite:///<output_dir>/mlflow.db
    experiment: str | None = None  # null: experiment.name
    log_model: bool = True  # mlflow.pytorch.log_model of the best model
    log_checkpoint: bool = True  # the best checkpoint file as an artifact
    retries: int = 5  # attempts per tracking call (exponential backoff)
    # who writes this folder's runs (their resomap.origin tag): null: <host>:<output folder>, fixed once by the sweep;
    # runs of the same trials from another origin are never written to (name the old one after moving a folder)
    origin: str | None = None


@dataclass(frozen=True)
class ProfilingConfig:
    enabled: bool = True  # profile each trial's model: params, MACs, FLOPs, latency, throughput, memory
    batch_size: int = 1  # images per timed inference call
    train_batch_size: int | None = None  # images per timed training step; null: max(batch_size, 8)
    warmup: int = 10  # untimed calls before timing (autotuning, allocator warm-up)
    iters: int = 50  # timed calls; latency median/p90/p99 are over these
    rounds: int = 5  # timed calls are split into this many interleaved rounds (inference, training step)
    spread_threshold: float = 0.5  # IQR/median of the calls above this: disturbed, re-measured, then marked noisy
    retries: int = 2  # re-measurements of a disturbed profile (CPU: with threads lowered to the free cores)


@dataclass(frozen=True)
class StatsConfig:
    level: float = 0.95  # confidence level of every interval and test (in (0, 1)); tests use alpha = 1 - level
    resamples: int = 2000  # bootstrap resamples (intervals over test images, paired bootstrap test)
    seed: int = 0  # random seed of the bootstrap resamples (the same summary every time)
    # test between two resolutions on the same images: mcnemar (exact with one seed; clustered, images as units, with
    # several: an exact sign-flip test over images) or bootstrap (paired image bootstrap + sign-flip test, exact on
    # 0/1 outcomes)
    paired_test: Literal["mcnemar", "bootstrap"] = "mcnemar"
    correction: Literal["holm", "none"] = "holm"  # multiple-comparison correction over a model's resolution pairs
    # non-inferiority: a resolution is "non-inferior" when shown no more than `margin` below the reference on the
    # score decided on (stats.metric), one-sided at alpha, in a fixed sequence from the reference down
    margin: float = 0.02  # in (0, 1), on the score's scale (0.02: two accuracy points)
    # the score decided on: null (the task's headline: accuracy; segmentation: mIoU per image) or, for
    # classification, accuracy, balanced_accuracy, macro_f1, recall:<class name> (one class's recall, e.g.
    # recall:defective) or auroc (two classes); a segmentation task may name its other per-image score (boundary_f1)
    metric: str | None = None  # null: the task's headline score; balanced_accuracy, macro_f1, recall:<class>, auroc
    reference: int | None = None  # the reference resolution, fixed before testing; null: the sweep's largest
    power: float = 0.8  # the power at which the smallest detectable margin is stated
    discordance: float = 0.2  # planning assumption: fraction of test images whose outcome changes between resolutions
    seed_correlation: float = 0.5  # planning assumption: correlation of one image's differences across seeds
    # decisions about the model at a resolution, training seeds as replicates (model) or about these trained
    # checkpoints, the test images the only source of variation (checkpoint); stats.scope holds the tests
    scope: Literal["model", "checkpoint"] = "model"  # model: seeds as replicates; checkpoint: these trained checkpoints
    seed_sd: float = 0.02  # planning assumption: sd of a model's accuracy across training seeds (model scope)
    # the groups of test images each model is also decided on, one group value at a time (the summary's "Per group"):
    # names the dataset declares (ELPV: cell_type, defect_probability; synthetic with coarse_share > 0: detail; csv and
    # imagefolder: data.<dataset>.groups); null: every group it declares; []: none. A group's values are one family
    # (Bonferroni over them)
    groups: list[str] | None = None
    # models of the sweep every other model is also compared with, each at its own best resolution (its highest
    # headline test score pooled over seeds), as with a classical baseline at the same resolution: "shown above" by
    # the one-sided sign-flip test, and needed for a recommendation (e.g. [small_resnet10] beside a pretrained
    # model); classical models (pixel_logreg, hog_svm) are compared at every resolution without being named
    baselines: list[str] = field(default_factory=list)
    # per model: the one-sided alpha of its non-inferiority decision in place of 1 - level; set by an adaptive
    # sweep at each look from its spending rule (leave empty)
    look_alpha: dict[str, float] = field(default_factory=dict)
    # per model: resolutions an adaptive sweep showed inferior at an earlier look and stopped running (leave empty);
    # the summary keeps their rows, marked inferior, and decides on the other resolutions' seeds
    dropped: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class SegmentationConfig:
    # summed loss terms (resomap tasks: ce, dice, focal_tversky, focal); a term's options are loss.<term>.*
    loss: list[str] = field(default_factory=lambda: ["ce", "dice"])  # summed terms: ce, dice, focal_tversky, focal
    loss_weights: list[float] = field(default_factory=list)  # one weight per loss term; empty: all 1
    reference_resolution: int | None = None  # metrics on masks of this side; null: the dataset's, else the largest
    boundary_tolerance: float = 0.01  # boundary F1 tolerance as a fraction of the reference side (>= 1 px)


@dataclass(frozen=True)
class TaskConfig(GroupSection):
    # The options of experiment.task, for a task registered with an options dataclass (register_task(name,
    # options=...)): task.<task>.<field>; a task's options on another task are refused
    GROUP: ClassVar[Group] = Group("task", ())
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # task.<task>.*: the task's own


@dataclass(frozen=True)
class LossConfig(GroupSection):
    # The options of loss terms registered with an options dataclass (register_loss(name, options=...)):
    # loss.<term>.<field>, e.g. loss.focal_tversky.gamma; the terms are chosen by the task (segmentation.loss)
    GROUP: ClassVar[Group] = Group("loss", ())
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # loss.<term>.*: the term's own


@dataclass(frozen=True)
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    data: DataConfig = field(default_factory=DataConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    explainability: ExplainabilityConfig = field(default_factory=ExplainabilityConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    task: TaskConfig = field(default_factory=TaskConfig)  # task.<task>.*: experiment.task's own options
    loss: LossConfig = field(default_factory=LossConfig)  # loss.<term>.*: the options of loss terms
