"""Config loading: merge order, overrides, and a one-line error naming file + key for each kind of mistake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from resomap.config import ConfigError, config_hash, flatten, load, load_full, save_resolved, with_overrides
from resomap.config.docs import REFERENCE_PAGE, config_reference

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cfg_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "configs"
    shutil.copytree(REPO / "configs", folder)
    return folder


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_repo_configs_load_and_every_preset_loads():
    cfg = load(REPO / "configs")
    assert cfg.data.dataset == "elpv"
    for preset in sorted((REPO / "configs" / "presets").glob("*.yaml")):
        assert load(REPO / "configs", preset.stem).experiment.name


def test_merge_order_files_then_preset_then_overrides(cfg_dir: Path):
    _write(cfg_dir / "presets", "mine.yaml", "training: {epochs: 7, batch_size: 8}\n")
    loaded = load_full(cfg_dir, "mine", ["training.epochs=3", "sweep.resolutions=[64,128]"])
    cfg = loaded.config
    assert cfg.training.epochs == 3  # override beats preset
    assert cfg.training.batch_size == 8  # preset beats training.yaml
    assert cfg.training.optimizer.lr == 0.001  # from training.yaml, untouched by the preset's partial dict
    assert cfg.sweep.resolutions == [64, 128]
    assert loaded.origins["training.epochs"] == "command line"
    assert loaded.origins["training.batch_size"].endswith("mine.yaml")


def test_defaults_without_any_file():
    cfg = load(None)
    assert cfg.training.epochs == 10 and cfg.system.device == "auto"


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        (["trainig.epochs=3"], ["command line", "unknown key 'trainig.epochs'", "did you mean 'training.epochs'"]),
        (["training.epocs=3"], ["unknown key 'training.epocs'", "did you mean 'training.epochs'"]),
        (["training.epochs=three"], ["training.epochs", "expected an integer", "'three'"]),
        (["training.epochs=2.5"], ["training.epochs", "expected an integer", "2.5"]),
        (["sweep.resolutions=[64,-8]"], ["sweep.resolutions[1]", "positive integer", "-8"]),
        (["sweep.resolutions=[64,12.5]"], ["sweep.resolutions[1]", "expected an integer"]),
        (["sweep.resolutions=64"], ["sweep.resolutions", "expected a list"]),
        (["sweep.models=[]"], ["sweep.models", "at least one model"]),
        (["sweep.models=[resnet18,ResNet18]"], ["sweep.models", "duplicate resnet18"]),
        (["sweep.executor=slurm"], ["sweep.executor", "no executor 'slurm'", "local, local-gpus, ray"]),
        (["sweep.executor=rey"], ["sweep.executor", "did you mean ray"]),
        (["data.dataset=elvp"], ["data.dataset", "no dataset 'elvp'", "did you mean elpv"]),
        (["explainability.methods=[gradcam,gradcm]"], ["explainability.methods[1]", "did you mean gradcam"]),
        (["data.synthetic.num_imgs=3"], ["unknown key 'data.synthetic.num_imgs'", "data.synthetic.num_images"]),
        (["data.task=defect"], ["unknown key 'data.task'", "data.elpv.task"]),
        (["data.elpv.task=cracks"], ["data.elpv.task", "one of 'defect', 'defect4', 'type'"]),
        (["system.device=gpu"], ["system.device", "one of 'auto', 'cpu', 'cuda'"]),
        (["system.channels_last=maybe"], ["system.channels_last", "true or false"]),
        (["data.split.val=1.5"], ["data.split.val", "fraction"]),
        (["training=3"], ["training", "expected a mapping"]),
        (["novalue"], ["not of the form dotted.key=value"]),
    ],
)
def test_override_errors_are_one_line_and_name_the_key(cfg_dir: Path, overrides, needles):
    with pytest.raises(ConfigError) as err:
        load(cfg_dir, overrides=overrides)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_error_in_a_file_names_that_file(cfg_dir: Path):
    _write(cfg_dir, "training.yaml", "training:\n  epochs: ten\n")
    with pytest.raises(ConfigError, match=r"training\.yaml: training\.epochs: expected an integer, got 'ten'"):
        load(cfg_dir)


def test_misspelled_key_in_a_file(cfg_dir: Path):
    _write(cfg_dir, "system.yaml", "system:\n  devise: cpu\n")
    with pytest.raises(ConfigError, match=r"system\.yaml: unknown key 'system\.devise'; did you mean 'system\.device'"):
        load(cfg_dir)


def test_malformed_yaml_names_file_and_line(cfg_dir: Path):
    _write(cfg_dir, "data.yaml", "data:\n  dataset: elpv\n  split: {val: 0.1\n")
    with pytest.raises(ConfigError, match=r"data\.yaml: line \d+, column \d+: malformed YAML"):
        load(cfg_dir)


def test_top_level_not_a_mapping(cfg_dir: Path):
    _write(cfg_dir, "mlflow.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match=r"mlflow\.yaml: expected a mapping"):
        load(cfg_dir)


def test_unknown_preset_suggests(cfg_dir: Path):
    with pytest.raises(ConfigError, match="no preset 'quickstrat'; did you mean 'quickstart'"):
        load(cfg_dir, "quickstrat")


def test_missing_config_dir(tmp_path: Path):
    with pytest.raises(ConfigError, match="config folder not found"):
        load(tmp_path / "nope")


def test_config_is_frozen_and_overrides_make_new_copies():
    cfg = load(None)
    with pytest.raises(AttributeError):
        cfg.training.epochs = 5  # type: ignore[misc]
    other = with_overrides(cfg, {"training.epochs": 5})
    assert other.training.epochs == 5 and cfg.training.epochs == 10
    assert config_hash(other) != config_hash(cfg)
    assert config_hash(load(None)) == config_hash(cfg)


def test_resolved_config_round_trips(tmp_path: Path):
    cfg = load(REPO / "configs", "quickstart", ["training.epochs=2"])
    path = save_resolved(cfg, tmp_path / "run" / "config.yaml")
    again = load(None, overrides=[])
    assert again != cfg
    reloaded = yaml.safe_load(path.read_text())
    from resomap.config import build

    assert build(reloaded) == cfg
    assert not list(tmp_path.glob("run/*.tmp"))


def test_flatten_gives_dotted_keys():
    flat = flatten(load(None))
    assert flat["training.optimizer.lr"] == 0.001
    assert flat["sweep.resolutions"] == [64]


def test_config_reference_page_matches_schema():
    page = (REPO / REFERENCE_PAGE).read_text(encoding="utf-8")
    generated = config_reference()
    begin, end = generated.splitlines()[0], generated.splitlines()[-1]
    assert begin in page and end in page, f"{REFERENCE_PAGE} lacks the generated config reference markers"
    current = page[page.index(begin) : page.index(end) + len(end)] + "\n"
    assert current == generated, (
        f"{REFERENCE_PAGE} is stale: run `resomap config --doc --write {REFERENCE_PAGE}` from the repository root"
    )
    # one copy only, linked from the README: a second, unchecked copy could drift
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert begin not in readme and end not in readme, "README.md holds a copy of the config reference"
    assert f"]({REFERENCE_PAGE})" in readme, f"README.md does not link {REFERENCE_PAGE}"


def test_every_key_of_the_config_reference_has_a_meaning():
    """Each row of `resomap config --doc` (sections and every registered entry's options) says what its key means:
    the comment ending the field's line, or the comment lines right above the field (resomap.config.docs)."""
    rows = [ln for ln in config_reference().splitlines() if ln.startswith("| `")]
    assert len(rows) > 150
    empty = [ln.split("`")[1] for ln in rows if not ln.rstrip().rstrip("|").rsplit("|", 1)[1].strip()]
    assert empty == [], f"keys without a meaning (add a comment to the field in the schema): {empty}"


REGISTRATION = """
import sys
from resomap.config import ConfigError, load
above = [m for m in ("resomap.data", "resomap.explain", "resomap.sweep", "resomap.tasks") if m in sys.modules]
try:
    load(sys.argv[1])
except ConfigError as exc:
    print("before:", exc)
import resomap.sweep.builtins
print("after:", load(sys.argv[1]).data.dataset, "imported above config:", above)
"""


def test_the_config_layer_learns_the_registries_from_the_packages_that_register_them():
    """resomap.config imports nothing above it; a config loaded before the registries are registered is a one-line
    error saying what to do; after resomap.sweep.builtins the same load works."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", REGISTRATION, str(REPO / "configs")], capture_output=True, text=True, check=True
    )
    before, after = proc.stdout.strip().splitlines()
    assert before.startswith("before: config section '") and "register_builtins()" in before, proc.stdout
    assert after == "after: elpv imported above config: []", proc.stdout
