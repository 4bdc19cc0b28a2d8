"""models: every registry entry builds, runs forward/backward, and finds a CAM layer fit for the resolution."""

from __future__ import annotations

import functools
import logging
import pickle

import pytest
import torch
from torch import nn

from resomap.config import ModelsConfig
from resomap.errors import CheckpointError, ConfigError, ModelError, UnknownNameError
from resomap.models import (
    MODELS,
    ModelSpec,
    build_model,
    families,
    get_spec,
    list_models,
    model_table,
    register_model,
    set_grad_checkpointing,
)

CFG = ModelsConfig()
HEAVY = {"vgg11", "vgg13", "vgg16", "resnet50", "resnet101"}  # their 64 px run is marked slow
VIT = "timm:vit_tiny_patch16_224"


def _cases() -> list:
    cases = []
    for name in list_models():
        if MODELS.meta(name).get("task", "classification") != "classification":
            continue  # segmentation models: tests/test_segmentation.py
        for res in (32, 64):
            marks = [pytest.mark.slow] if res == 64 and name in HEAVY else []
            cases.append(pytest.param(name, res, marks=marks, id=f"{name}-{res}"))
    return cases


@functools.lru_cache(maxsize=1)  # consecutive resolutions of one model share the build
def _built(name: str, in_channels: int = 3, grayscale: str = "adapt") -> tuple[nn.Module, ModelSpec]:
    torch.manual_seed(0)
    return build_model(name, 3, in_channels, ModelsConfig(grayscale=grayscale))


def _forward_backward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.train()
    model.zero_grad(set_to_none=True)
    logits = model(x)
    logits.sum().backward()
    for pname, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, pname
            assert torch.isfinite(p.grad).all(), pname
    return logits


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize(("name", "res"), _cases())
def test_forward_backward_and_cam_layer(name: str, res: int) -> None:
    torch.set_num_threads(1)
    model, spec = _built(name)
    logits = _forward_backward(model, torch.randn(2, 3, res, res))
    assert logits.shape == (2, 3)
    assert torch.isfinite(logits).all()

    hooks = _hook_count(model)
    modes = [m.training for m in model.modules()]
    cam = spec.cam_layer(model, res, CFG.min_cam_size)
    assert cam.name in spec.cam_layers
    assert model.get_submodule(cam.name) is cam.module
    # every module's mode as before; all in training but what the model keeps frozen (a pretrained backbone's eval)
    kept = {id(m) for part in getattr(model, "frozen", list)() for m in part.modules()}
    assert model.training and [m.training for m in model.modules()] == modes
    assert all(m.training for m in model.modules() if id(m) not in kept)
    assert _hook_count(model) == hooks
    largest = spec.cam_layer(model, res, 10**6).feature_size  # the fallback: the candidate with the largest side
    assert cam.feature_size >= min(CFG.min_cam_size, largest)
    assert spec.cam_layer(model, res, 1).name == spec.cam_layers[0]


def test_cam_layer_depends_on_resolution() -> None:
    model, spec = build_model("resnet18", 2, 3, CFG)
    small = spec.cam_layer(model, 32, 4)
    assert small.name != "layer4" and small.name == "layer2" and small.feature_size == 4
    large = spec.cam_layer(model, 224, 4)
    assert (large.name, large.feature_size) == ("layer4", 7)
    assert spec.cam_layer(model, 32, 1).name == "layer4"


def test_cam_layer_restores_modes_and_hooks() -> None:
    model, spec = build_model("resnet18", 2, 3, CFG)
    model.train()
    model.layer1.eval()  # mixed modes must come back exactly
    before = {n: m.training for n, m in model.named_modules()}
    spec.cam_layer(model, 64, 4)
    assert {n: m.training for n, m in model.named_modules()} == before
    assert _hook_count(model) == 0


def test_cam_layer_falls_back_to_largest_and_errors() -> None:
    model, spec = build_model("resnet18", 2, 3, CFG)
    fallback = spec.cam_layer(model, 32, 1000)
    assert (fallback.name, fallback.feature_size) == ("layer1", 8)
    with pytest.raises(ModelError, match="no spatial feature map"):
        ModelSpec("resnet18", "resnet", ("fc",)).cam_layer(model, 32, 4)
    with pytest.raises(ModelError, match="not in the model"):
        ModelSpec("resnet18", "resnet", ("layer9",)).cam_layer(model, 32, 4)


def test_names_case_insensitive_and_unknown() -> None:
    assert get_spec("ResNet18").name == "resnet18"
    _, spec = build_model("TINY_CNN", 2, 3, CFG)
    assert spec.name == "tiny_cnn" and spec.family == "cnn"
    with pytest.raises(UnknownNameError, match="resnet18") as err:
        get_spec("resnet81")
    assert "did you mean" in str(err.value)
    with pytest.raises(UnknownNameError, match="timm:resnet10t"):
        build_model("timm:resnet10x", 2, 3, CFG)


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("tiny_cnn", 0, 3, CFG)
    with pytest.raises(ConfigError, match="grayscale=repeat"):
        build_model("tiny_cnn", 2, 2, ModelsConfig(grayscale="repeat"))
    with pytest.raises(ValueError, match="family"):
        register_model("x_model", family="no such/family", cam_layers=("a",))


def test_families_come_from_the_registered_models() -> None:
    assert {"cnn", "resnet", "vgg", "mobilenet", "efficientnet", "timm"} <= set(families())
    assert "hexnet" not in families()
    register_model("x_hex_model", family="hexnet", cam_layers=("features",))(lambda n, c, cfg: None)
    try:
        assert "hexnet" in families() and get_spec("x_hex_model").family == "hexnet"
    finally:
        MODELS.unregister("x_hex_model")
    assert "hexnet" not in families()


@pytest.mark.parametrize("name", ["tiny_cnn", "resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("grayscale", ["adapt", "repeat"])
def test_one_channel_input(name: str, grayscale: str) -> None:
    model, spec = build_model(name, 2, 1, ModelsConfig(grayscale=grayscale))
    first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first_conv.in_channels == (1 if grayscale == "adapt" else 3)
    assert first_conv.weight.shape[1] == first_conv.in_channels
    logits = _forward_backward(model, torch.randn(2, 1, 32, 32))
    assert logits.shape == (2, 2)
    cam = spec.cam_layer(model, 64, 4)  # the dry forward feeds the channels the model expects
    assert model.get_submodule(cam.name) is cam.module
    reference, _ = build_model(name, 2, 3, CFG)
    assert [n for n, _ in model.named_modules()] == [n for n, _ in reference.named_modules()]


def test_repeat_model_pickles_and_takes_rgb() -> None:
    model, _ = build_model("tiny_cnn", 2, 1, ModelsConfig(grayscale="repeat"))
    model.eval()
    x = torch.rand(2, 1, 32, 32)
    restored = pickle.loads(pickle.dumps(model))
    assert torch.allclose(restored(x), model(x))
    assert torch.allclose(model(x), model(x.expand(-1, 3, -1, -1)))


def test_dropout_from_config() -> None:
    cfg = ModelsConfig(dropout=0.3)
    for name in ("tiny_cnn", "mobilenet_v3_small"):
        model, _ = build_model(name, 2, 3, cfg)
        drops = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
        assert drops and all(p == 0.3 for p in drops), name


def test_timm_cnn_builds_runs_and_checkpoints() -> None:
    model, spec = build_model("timm:ResNet10t", 2, 1, CFG)
    assert spec.family == "timm" and spec.name == "timm:resnet10t"
    assert spec.cam_layers[0] == "layer4" and spec.reshape_transform(64) is None
    assert _forward_backward(model, torch.randn(2, 1, 64, 64)).shape == (2, 2)
    assert spec.cam_layer(model, 64, 4).name == "layer3"
    assert set_grad_checkpointing(model, True) is True
    assert get_spec("timm:resnet10t") == spec


def test_vit_reshape_grid_derived_from_resolution() -> None:
    model, spec = build_model(VIT, 2, 3, CFG)
    assert spec.patch_size == 16 and spec.num_prefix_tokens == 1
    assert get_spec(VIT) == spec  # the meta-device spec matches the built one
    assert spec.reshape_transform(64)(torch.zeros(2, 1 + 16, 8)).shape == (2, 8, 4, 4)
    assert spec.reshape_transform(96)(torch.zeros(2, 1 + 36, 8)).shape == (2, 8, 6, 6)
    with pytest.raises(ModelError, match="patch tokens"):
        spec.reshape_transform(64)(torch.zeros(2, 1 + 36, 8))

    cam = spec.cam_layer(model, 64, 4)
    assert (cam.name, cam.feature_size) == ("blocks.11.norm1", 4)
    assert _forward_backward(model, torch.randn(2, 3, 64, 64)).shape == (2, 2)
    acts = []
    handle = cam.module.register_forward_hook(lambda _m, _i, out: acts.append(out))
    try:
        logits = model(torch.randn(2, 3, 64, 64))
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(logits[:, 0].sum(), acts[0])
    assert grad[:, 1:].abs().sum() > 0  # patch tokens get gradient at norm1 (not at the last block's output)


def test_model_table_matches_registry() -> None:
    rows = model_table()
    assert [r.name for r in rows] == list_models()
    by_name = {r.name: r for r in rows}
    assert by_name["tiny_cnn"].params_m < 0.1 and 0.1 < by_name["simple_cnn"].params_m < 1.0
    assert 11.0 < by_name["resnet18"].params_m < 11.3
    assert all(r.cam_layer == get_spec(r.name).cam_layers[0] for r in rows)
    assert model_table()[0] is rows[0]  # cached


def _tiny(num_classes: int = 3, in_channels: int = 3, **cfg) -> nn.Module:
    return build_model("tiny_cnn", num_classes, in_channels, ModelsConfig(**cfg))[0]


def test_pretrained_loads_equal_weights(tmp_path) -> None:
    source = _tiny()
    path = tmp_path / "w.pt"
    torch.save({"module." + k: v for k, v in source.state_dict().items()}, path)  # DDP prefix is stripped
    loaded = _tiny(pretrained={"TINY_CNN": str(path)})
    for (name, a), b in zip(source.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_pretrained_safetensors_and_grayscale_sum(tmp_path) -> None:
    from safetensors.torch import save_file

    source = _tiny()
    path = tmp_path / "w.safetensors"
    save_file(source.state_dict(), str(path))
    gray = _tiny(in_channels=1, pretrained={"tiny_cnn": str(path)})
    w_rgb, w_gray = source.features[0][0].weight, gray.features[0][0].weight
    assert w_gray.shape[1] == 1
    assert torch.allclose(w_gray[:, 0], w_rgb.sum(dim=1))


def test_pretrained_other_head_is_skipped(tmp_path, caplog) -> None:
    source = _tiny(num_classes=3)
    path = tmp_path / "w.pt"
    torch.save(source.state_dict(), path)
    with caplog.at_level(logging.INFO, logger="resomap.models"):
        loaded = _tiny(num_classes=5, pretrained={"tiny_cnn": str(path)})
    assert "head" in caplog.text and "skipped" in caplog.text
    assert loaded.head[2].weight.shape == (5, 64)
    assert torch.equal(loaded.features[4][0].weight, source.features[4][0].weight)


def test_pretrained_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        _tiny(pretrained={"tiny_cnn": str(tmp_path / "missing.pt")})

    body = tmp_path / "body.pt"
    state = _tiny().state_dict()
    state["features.2.0.weight"] = torch.zeros(32, 8, 3, 3)
    torch.save(state, body)
    with pytest.raises(CheckpointError, match=r"features\.2\.0\.weight"):
        _tiny(pretrained={"tiny_cnn": str(body)})

    other = tmp_path / "other.pt"
    torch.save(build_model("simple_cnn", 3, 3, CFG)[0].state_dict(), other)
    with pytest.raises(CheckpointError, match="do not fit"):
        _tiny(pretrained={"tiny_cnn": str(other)})

    not_state = tmp_path / "list.pt"
    torch.save([1, 2, 3], not_state)
    with pytest.raises(CheckpointError, match="not a state_dict"):
        _tiny(pretrained={"tiny_cnn": str(not_state)})

    pickled = tmp_path / "module.pt"
    torch.save(_tiny(), pickled)  # a whole pickled module is code: refused before torch.load reads it
    with pytest.raises(CheckpointError, match=r"pretrained weights .*module\.pt: refused: .*pickled code that calls"):
        _tiny(pretrained={"tiny_cnn": str(pickled)})


def test_grad_checkpointing_unsupported_returns_false() -> None:
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))  # no stages and no `features`: nothing to checkpoint
    assert set_grad_checkpointing(mlp, True) is False


@pytest.mark.parametrize("name", ["resnet18", "tiny_cnn", "vgg11", "mobilenet_v2", "efficientnet_b0"])
def test_grad_checkpointing_keeps_gradients_and_names(name):
    from resomap.config import load
    from resomap.models import build_model, set_grad_checkpointing

    model, _ = build_model(name, 2, 1, load(None).models)
    names = [n for n, _ in model.named_modules()]
    x = torch.randn(2, 1, 32, 32)

    def grads() -> list[torch.Tensor]:
        model.zero_grad()
        torch.manual_seed(0)  # stochastic depth draws the same in both passes
        model(x).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = grads()
    assert set_grad_checkpointing(model, True)
    checkpointed = grads()
    # torch.allclose's rule (|a - b| <= atol + rtol |b|, rtol 1e-5) with two temporaries, in place: allclose took
    # 6-9 s on vgg11's 100M-element classifier weight here (a fresh 400 MB tensor per step), this 0.6 s; stricter
    # only where a gradient is infinite
    assert all(bool((a - b).abs_().le_(b.abs().mul_(1e-5).add_(1e-4)).all()) for a, b in zip(plain, checkpointed))
    assert [n for n, _ in model.named_modules()] == names
    assert set_grad_checkpointing(model, False)
    assert all(not hasattr(m, "_plain_forward") for m in model.modules())


def test_vgg_cam_layers_are_the_stage_ends_of_torchvision_layouts() -> None:
    from torchvision.models.vgg import cfgs

    from resomap.models.zoo import VGG_CAM_LAYERS

    for name, key in (("vgg11", "A"), ("vgg13", "B"), ("vgg16", "D")):
        ends, idx = [], 0
        for item in cfgs[key]:
            if item == "M":
                ends.append(f"features.{idx - 1}")  # the ReLU just before each max pool
                idx += 1
            else:
                idx += 2  # conv + ReLU (no batch norm)
        assert VGG_CAM_LAYERS[name] == tuple(reversed(ends))
        model, spec = build_model(name, 2, 3, CFG)
        assert all(isinstance(model.get_submodule(layer), torch.nn.ReLU) for layer in spec.cam_layers)


def test_a_models_revision_is_part_of_its_trial_key_from_2_on() -> None:
    from resomap.config import build
    from resomap.sweep.identity import _hash, _key_tree, model_revision, trial_key

    cfg = build({})

    def unrevised(model: str) -> str:
        tree = _key_tree(cfg)
        tree["trial"] = {"model": model, "resolution": 32, "seed": 42}
        return _hash(tree)

    assert model_revision("simple_cnn") == 2 and MODELS.meta("simple_cnn")["revision"] == 2
    assert model_revision("tiny_cnn") == 1 and model_revision("timm:resnet18") == 1
    assert trial_key(cfg, "tiny_cnn", 32, 42) == unrevised("tiny_cnn")  # revision 1: keys as before revisions
    assert trial_key(cfg, "simple_cnn", 32, 42) != unrevised("simple_cnn")  # its revision-1 results are not its own
    with pytest.raises(ValueError, match="revision"):
        register_model("bad_revision", family="cnn", cam_layers=("x",), revision=0)


def test_simple_cnn_stem_downsamples_like_the_pool_it_replaces() -> None:
    model, spec = build_model("simple_cnn", 2, 1, CFG)
    blocks = [model.get_submodule(layer) for layer in spec.cam_layers]
    assert all(isinstance(b, nn.Sequential) and isinstance(b[0], nn.Conv2d) for b in blocks)
    assert model.features[0][0].stride == (2, 2) and not isinstance(model.features[1], nn.MaxPool2d)
    out = model.features(torch.zeros(1, 1, 64, 64))
    assert out.shape[-2:] == (4, 4)  # 64 / 16, as with a pool after every block but the last
