"""Groups of a user's own images (issue 35): a CSV manifest's columns (data.csv.groups) and an image folder's levels
below the class folders (data.imagefolder.groups) become groups the summary decides each model on, like ELPV's
cell_type; a column or level that does not exist is one line at load, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import run_cli
from resomap.config.schema import DataConfig
from resomap.data import build, get_dataset
from resomap.data.folders import EMPTY_VALUE, CsvOptions, ImageFolderOptions
from resomap.errors import DataError

SITES = ("north", "south", "west")


def _image(path: Path, seed: int, bright: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 120, (24, 24), dtype=np.uint8)
    if bright:  # the class: a bright square a tiny model learns in a few epochs
        pixels[6:18, 6:18] = 250
    Image.fromarray(pixels, mode="L").save(path)


def _folder(root: Path, per_site: int = 4) -> Path:
    """root/<class>/<site>/<image>: every class has images at every site."""
    for k, label in enumerate(("plain", "square")):
        for s, site in enumerate(SITES):
            for i in range(per_site):
                _image(root / label / site / f"{i}.png", 100 * k + 10 * s + i, bright=bool(k))
    return root


def _manifest(tmp_path: Path, n: int = 60) -> tuple[Path, list[str]]:
    """path,label,site,camera: the site of image i is SITES[i % 3]; the camera is empty for every fifth image."""
    rows, sites = ["path,label,site,camera"], []
    for i in range(n):
        label = ("plain", "square")[i % 2]
        _image(tmp_path / "imgs" / f"{i}.png", i, bright=label == "square")
        sites.append(SITES[i % 3])
        rows.append(f"imgs/{i}.png,{label},{sites[-1]},{'' if i % 5 == 0 else ('a', 'b')[i % 4 < 2]}")
    manifest = tmp_path / "labels.csv"
    manifest.write_text("\n".join(rows) + "\n")
    return manifest, sites


def test_csv_columns_become_groups_with_a_code_per_image(tmp_path):
    manifest, sites = _manifest(tmp_path)
    raw = get_dataset("csv")(DataConfig(), options=CsvOptions(manifest=str(manifest), groups=["site", "camera"]))
    codes, names = raw.groups["site"]
    assert names == sorted(SITES) and [names[c] for c in codes] == sites
    codes, names = raw.groups["camera"]
    assert names == [EMPTY_VALUE, "a", "b"] and all(names[codes[i]] == EMPTY_VALUE for i in range(0, 60, 5))
    assert get_dataset("csv")(DataConfig(), options=CsvOptions(manifest=str(manifest))).groups == {}
    with pytest.raises(DataError, match=r"data.csv.groups names column 'room' that data.csv.manifest .* its columns"):
        get_dataset("csv")(DataConfig(), options=CsvOptions(manifest=str(manifest), groups=["room"]))


def test_folder_levels_become_groups_and_the_split_layout_keeps_them(tmp_path):
    root = _folder(tmp_path / "flat")
    raw = get_dataset("imagefolder")(DataConfig(), options=ImageFolderOptions(root=str(root), groups=["site"]))
    codes, names = raw.groups["site"]
    assert names == sorted(SITES) and len(raw) == 2 * 3 * 4
    assert all(names[c] == Path(raw.name(i)).parent.name for i, c in enumerate(codes))
    # without groups the class folder's subfolders are not read (the layout root/<class>/<image> as before)
    with pytest.raises(DataError, match="has no images"):
        get_dataset("imagefolder")(DataConfig(), options=ImageFolderOptions(root=str(root)))
    split = tmp_path / "split"
    for part in ("train", "test"):
        _folder(split / part, per_site=2)
    raw = get_dataset("imagefolder")(DataConfig(), options=ImageFolderOptions(root=str(split), groups=["site"]))
    codes, names = raw.groups["site"]
    assert set(raw.predefined_splits) == {"train", "test"} and names == sorted(SITES)
    assert all(names[c] == Path(raw.name(i)).parent.name for i, c in enumerate(codes))


def test_the_bundle_keeps_the_groups_for_the_trials(tmp_path):
    from resomap.config import build as build_config

    manifest, sites = _manifest(tmp_path)
    data = {"dataset": "csv", "csv": {"manifest": str(manifest), "groups": ["site"]}}
    cfg = build_config({"data": data, "experiment": {"output_dir": str(tmp_path)}, "explainability": {"probe_size": 4}})
    bundle = build(cfg, 16, seed=0, device="cpu")
    codes, names = bundle.groups["site"]
    assert [names[c] for c in codes] == sites  # a code per raw image: the trial records the test images' own


def test_groups_left_empty_keep_the_trial_key_of_before_the_option(tmp_path):
    """`groups: []` is out of the trial key (csv and imagefolder sweeps from before the option keep their trials);
    set groups are in it (a trial records its test images' codes, so one run without them is run again)."""
    from resomap.config import build as build_config
    from resomap.sweep.identity import _key_tree, trial_key

    manifest, _ = _manifest(tmp_path, n=6)
    plain, grouped = (
        build_config({"data": {"dataset": "csv", "csv": {"manifest": str(manifest), "groups": g}}})
        for g in ([], ["site"])
    )
    assert "groups" not in _key_tree(plain)["data"]["csv"] and _key_tree(grouped)["data"]["csv"]["groups"] == ["site"]
    assert trial_key(plain, "tiny_cnn", 16, 0) != trial_key(grouped, "tiny_cnn", 16, 0)
    folder = build_config({"data": {"dataset": "imagefolder", "imagefolder": {"root": str(tmp_path)}}})
    assert "groups" not in _key_tree(folder)["data"]["imagefolder"]


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["data.csv.groups=[room]"], "data.csv.groups: expected columns of {manifest} (path, label, site, camera), "),
        (["data.csv.groups=[site,site]"], "data.csv.groups: expected distinct names, got ['site', 'site']"),
        (["data.csv.groups=[site]", "stats.groups=[camera]"], "stats.groups: expected groups the dataset declares "),
        (["data.csv.groups=[]", "stats.groups=[site]"], "declares no groups"),
        (["stats.metric=recall:zebra"], "stats.metric: expected recall of a class of the data: recall:plain or"),
    ],
    ids=["missing-column", "twice", "undeclared", "none-declared", "unknown-class"],
)
def test_a_csv_group_that_does_not_exist_is_one_line_at_load(project: Path, capsys, overrides, line):
    manifest, _ = _manifest(project, n=6)
    args = ["config", "--preset", "smoke", "data.dataset=csv", f"data.csv.manifest={manifest}", *overrides]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert line.format(manifest=manifest) in err, err


@pytest.mark.parametrize(("levels", "depth"), [("[site,floor]", 1), ("[]", None)], ids=["too-deep", "flat"])
def test_a_folder_level_that_does_not_exist_is_one_line_at_load(project: Path, capsys, levels, depth):
    root = _folder(project / "images")
    args = ["config", "--preset", "smoke", "data.dataset=imagefolder", f"data.imagefolder.root={root}"]
    code, _, err = run_cli([*args, f"data.imagefolder.groups={levels}"], capsys)
    if depth is None:  # no groups: the folder is not checked for levels at load
        assert code == 0, err
        return
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "data.imagefolder.groups: expected 2 folder level(s) between each class folder and its images" in err
    assert f"is {depth} below {root}" in err


def test_a_sweep_on_a_csv_decides_each_model_per_site(project: Path, capsys):
    """A real tiny sweep on a user's CSV with a group column: summary.json's group_decisions hold each site with
    its test images (those the trials recorded), load_sweep gives the per-group table."""
    from resomap.results import load_sweep

    manifest, sites = _manifest(project, n=90)
    args = [
        "-q", "sweep", "--preset", "smoke", "experiment.name=sites", "data.dataset=csv",
        f"data.csv.manifest={manifest}", "data.csv.groups=[site]", "sweep.resolutions=[16,24]", "sweep.seeds=[1,2]",
        "training.epochs=2", "mlflow.enabled=false", "explainability.enabled=false", "profiling.enabled=false",
    ]  # fmt: skip
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    sweep = load_sweep("sites", root=project / "model_summaries")
    data = json.loads((sweep.folder / "summary.json").read_text())
    recorded = data["trials"][0]["data"]["groups"]["site"]
    assert recorded["names"] == sorted(SITES)
    assert all(sorted(SITES)[c] == sites[i] for i, c in zip(recorded["index"], recorded["code"], strict=True))
    test = set(sweep.predictions["index"])
    rows = {r["value"]: r for r in data["group_decisions"]}
    assert set(rows) == set(SITES) and {r["group"] for r in rows.values()} == {"site"}
    for site, row in rows.items():
        assert row["n_images"] == sum(1 for i in test if sites[i] == site)
        assert row["correction"] == "Bonferroni over the 3 values of site"
    assert set(sweep.groups.value) == set(SITES) and set(sweep.groups.resolution) == {16, 24}
