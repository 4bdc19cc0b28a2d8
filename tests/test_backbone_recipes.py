"""The recipes of a pretrained backbone for any timm or torchvision model (resomap.models.recipes, `<model>@<recipe>`):
a frozen-feature and a partial fine-tune recipe of a timm ResNet swept at two resolutions through the one pipeline
(random weights: the pipeline is under test, not the weights); the partial fine-tune over cached maps is the fine-tune
on images with the same frozen stages; the layout read from timm's feature_info and torchvision's stages; the fit
kind a typed field of the spec that the Trainer reads (no getattr on a model); bad names and uncuttable models
refused in one line."""

from __future__ import annotations

import ast
import csv
import inspect

import pytest
import torch

from conftest import REPO, run_cli
from resomap.config import load
from resomap.models import MODELS, build_model, get_spec, list_models
from resomap.models.recipes import FrozenLinear, PartialFinetune
from resomap.training import Trainer, feature_head

TIMM = "timm:resnet10t"  # a timm backbone other than EfficientNet-Lite: four feature_info stages (layer1-4)


def test_a_timm_backbones_frozen_and_partial_recipes_sweep_at_two_resolutions(tmp_path):
    from conftest import tiny_sweep_config
    from resomap.sweep.sweep import run_sweep

    models = [f"{TIMM}@linear", f"{TIMM}@partial"]
    cfg = tiny_sweep_config(tmp_path, models, [32, 48], ["gradcam"], 1, "models.partial.freeze_blocks=2")
    outcome = run_sweep(cfg)
    assert not outcome.failed and len(outcome.results) == 4
    for result in outcome.results:
        assert result.status == "FINISHED" and set(result.cross_resolution) == {"32", "48"}
        assert result.explain.maps and not result.explain.failed, result.explain  # Grad-CAM inside the backbone
        assert result.explain.cam_layer.startswith("backbone.layer")
    linear = [r for r in outcome.results if r.model.endswith("@linear")]
    assert all(r.deterministic for r in linear)  # a closed-form fit on frozen features: one replicate
    # the files the sweep wrote: each trial's per-image records at both test resolutions
    tables = sorted(tmp_path.glob("model_summaries/**/predictions.csv"))
    assert len(tables) == 4
    for table in tables:
        with table.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert {row["test_resolution"] for row in rows} == {"32", "48"}, table
    # the caches the two recipes read: pooled features (linear: train/val and test) and the frozen stages' maps
    cached = [torch.load(p, weights_only=True) for p in tmp_path.glob("**/features/*.pt")]
    widths = {int(t.shape[-1]) for c in cached for k, t in c.items() if k != "format"}
    net = build_model(f"{TIMM}@partial", 2, 3, cfg.models)[0]
    assert {net.cached_channels * 4 * 4, net.cached_channels * 6 * 6} <= widths  # layer2 ends at stride 8


def _prepared(tmp_path, model: str):
    from resomap.sweep import plan
    from resomap.sweep.trial import prepare_trial

    extra = ["models.finetune.freeze_blocks=2", "models.partial.freeze_blocks=2", "data.augmentation.enabled=false"]
    extra += ["training.epochs=2", "training.batch_size=16", "system.threads=1"]
    overrides = [f"sweep.models=[{model}]", "sweep.resolutions=[32]", "sweep.seeds=[1]", *extra]
    cfg = load(
        str(REPO / "configs"), "smoke", [*overrides, f"experiment.output_dir={tmp_path}", "mlflow.enabled=false"]
    )
    trial = plan(cfg)[0]
    prepared = prepare_trial(trial, trial.cfg, torch.device("cpu"))
    fit = Trainer(trial.cfg, "cpu", spec=prepared.spec).fit(prepared.model, prepared.bundle)
    prepared.model.eval()
    with torch.no_grad():
        logits = torch.cat([prepared.model(x) for x, *_ in prepared.bundle.test.plain()])
    return prepared, [h["train/loss"] for h in fit.history], logits


def test_the_partial_recipe_of_a_timm_backbone_is_its_fine_tune_on_images(tmp_path, monkeypatch):
    """With a float32 cache, the fit over the cached maps of the stem and layer1-2 is the fine-tune of the same
    (randomly initialised, seeded) ResNet with those stages frozen, on the images: the same losses and test logits
    to float tolerance; the frozen stages unchanged."""
    monkeypatch.setattr(feature_head, "_dtype", lambda single: torch.float32)
    tuned, on_images, images_logits = _prepared(tmp_path / "images", f"{TIMM}@finetune")
    cached, on_maps, maps_logits = _prepared(tmp_path / "maps", f"{TIMM}@partial")
    assert isinstance(cached.model, PartialFinetune) and cached.spec.fit == "feature_head"
    assert on_maps == pytest.approx(on_images, rel=1e-4)
    assert (maps_logits - images_logits).abs().max() < 1e-3
    assert torch.equal(maps_logits.argmax(1), images_logits.argmax(1))
    before, after = tuned.model.backbone.state_dict(), cached.model.backbone.state_dict()
    frozen = [k for k in after if k.startswith(("conv1.", "bn1.", "layer1.", "layer2."))]
    assert frozen and all(torch.equal(after[k], before[k]) for k in frozen)


def test_layouts_come_from_timm_feature_info_and_torchvisions_stages():
    from resomap.config.schema import ModelsConfig

    cfg = ModelsConfig()
    resnet = build_model(f"{TIMM}@linear", 2, 3, cfg)[0]
    stages = [resnet.layout.sequence[i] for i in resnet.layout.stages]
    assert stages == ["layer1", "layer2", "layer3", "layer4"]  # feature_info's modules with weights (not act1)
    assert [resnet.layout.sequence[i] for i in resnet.layout.taps] == ["layer2", "layer3", "layer4"]  # stride >= 8
    convnext = build_model("timm:convnext_atto@head", 2, 1, cfg)[0]  # a Sequential of stages, one input channel
    assert [convnext.layout.sequence[i] for i in convnext.layout.stages] == [f"stages.{i}" for i in range(4)]
    tv = build_model("resnet18@linear", 2, 3, cfg)[0]
    assert [tv.layout.sequence[i] for i in tv.layout.stages] == ["layer1", "layer2", "layer3", "layer4"]
    assert isinstance(tv, FrozenLinear) and tv.layout.pool == "avg" and isinstance(tv.backbone.fc, torch.nn.Identity)
    x = torch.randn(2, 3, 48, 48)
    assert tv.eval()(x).shape == (2, 2) and tv.feature_size == 2 * (128 + 256 + 512)
    tuned = build_model(f"{TIMM}@finetune", 2, 3, ModelsConfig(dropout=0.5))[0]  # models.dropout once: the recipe's
    assert tuned.dropout.p == 0.5 and tuned.backbone.drop_rate == 0.0


def test_the_fit_kind_is_a_typed_field_of_the_spec():
    kinds = {n: (get_spec(n).fit, get_spec(n).features) for n in ("pixel_logreg", "hog_svm", "tiny_cnn")}
    assert kinds == {
        "pixel_logreg": ("closed_form", "none"),
        "hog_svm": ("closed_form", "none"),
        "tiny_cnn": ("gradient", "none"),
    }
    lite = {r: (get_spec(f"lite0_{r}").fit, get_spec(f"lite0_{r}").features) for r in ("linear", "head", "partial")}
    assert lite == {
        "linear": ("closed_form", "pooled"),
        "head": ("feature_head", "pooled"),
        "partial": ("feature_head", "maps"),
    }
    for recipe, kind in lite.items():
        spec = get_spec(f"TIMM:ResNet10t@{recipe.upper()}")
        assert (spec.name, spec.fit, spec.features) == (f"{TIMM}@{recipe}", *kind)
    assert get_spec(f"{TIMM}@linear").deterministic and not get_spec(f"{TIMM}@head").deterministic


FIT_WORDS = {"closed_form", "feature_head", "frozen_features", "fit_inputs", "pooled", "cache_key"}


def test_no_code_asks_a_model_how_it_is_fitted():
    """No getattr / hasattr of a fit-kind attribute anywhere in resomap, and no model class declares one: the
    Trainer and its strategies read the spec (ModelSpec.fit, .features)."""
    found = []
    for path in (REPO / "src" / "resomap").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                name = node.args[1] if len(node.args) > 1 else None
                if isinstance(name, ast.Constant) and name.value in FIT_WORDS:
                    found.append(f"{path.name}:{node.lineno} {name.value}")
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    targets = item.targets if isinstance(item, ast.Assign) else []
                    declared = {t.id for t in targets if isinstance(t, ast.Name)}
                    found += [
                        f"{path.name}:{item.lineno} {node.name}.{d}"
                        for d in declared & {"closed_form", "feature_head", "frozen_features"}
                    ]
    assert not found, found


def test_every_listed_model_is_named_where_it_is_defined():
    """grep finds each name `resomap models` lists in the file that registers it (no generated names)."""
    missing = []
    for name in list_models():
        source = inspect.getsourcefile(MODELS.get(name))
        with open(source, encoding="utf-8") as handle:
            written = handle.read()
        if f'"{name}"' not in written:
            missing.append(f"{name} ({source})")
    assert not missing, missing


@pytest.mark.parametrize(
    ("model", "frozen", "words"),
    [
        (f"{TIMM}@frozen", 2, "no recipe 'frozen'"),
        ("tiny_cnn@linear", 2, "recipes take timm:<name> or a torchvision model"),
        ("timm:vit_tiny_patch16_224@partial", 2, "does not run as the sequence of its stages"),
        (f"{TIMM}@partial", 6, f"models.partial.freeze_blocks: expected 1 to 4 for {TIMM}@partial"),  # 4 stages
    ],
)
def test_a_recipe_that_cannot_be_built_is_refused_in_one_line(tmp_path, capsys, model, frozen, words):
    args = ["train", "--model", model, "--resolution", "32", "--config-dir", str(REPO / "configs")]
    args += [f"experiment.output_dir={tmp_path}", "mlflow.enabled=false", f"models.partial.freeze_blocks={frozen}"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not any(tmp_path.iterdir())  # nothing written
