"""Partial fine-tuning over cached maps (lite<N>_partial: resomap.models.recipes.PartialFinetune through
resomap.training.feature_head): the frozen stem and first K stages run once per image, their maps cached and read
back by a later seed; the fit over the cache is the fit a fine-tune with the same K makes on the images (to float
tolerance with a float32 cache, the same predictions with the float16 one); K = 0 is refused before anything is
built; a sweep of it at two resolutions through the one pipeline."""

from __future__ import annotations

import pytest
import torch

from conftest import REPO, run_cli
from resomap.config import load
from resomap.models.pretrained import lite_net
from resomap.models.recipes import Finetune, PartialFinetune
from resomap.training import Trainer, feature_head


def _count_extracts(monkeypatch) -> list[int]:
    """The views of each pass over the frozen stages (feature_head.extract) from now on, in order."""
    calls: list[int] = []
    real = feature_head.extract

    def counted(trainer, model, loader, transforms, batches=None, **kw):
        calls.append(len(transforms))
        return real(trainer, model, loader, transforms, batches, **kw)

    monkeypatch.setattr(feature_head, "extract", counted)
    return calls


def _prepared(tmp_path, model: str, seed: int = 1, *extra: str):
    from resomap.sweep import plan
    from resomap.sweep.trial import prepare_trial

    cfg = load(
        str(REPO / "configs"),
        "smoke",
        [
            f"sweep.models=[{model}]",
            "sweep.resolutions=[32]",
            f"sweep.seeds=[{seed}]",
            "training.epochs=3",
            "training.batch_size=16",
            "models.finetune.freeze_blocks=4",  # lite0_finetune's K
            "models.partial.freeze_blocks=4",  # lite0_partial's
            "models.dropout=0.2",
            "data.augmentation.enabled=false",  # augmentation draws differ from the cache's views
            f"experiment.output_dir={tmp_path}",
            "mlflow.enabled=false",
            *extra,
        ],
    )
    trial = plan(cfg)[0]
    return trial.cfg, prepare_trial(trial, trial.cfg, torch.device("cpu"))


def _fit_and_test(tmp_path, model: str) -> tuple[list[float], torch.Tensor, torch.nn.Module]:
    cfg, prepared = _prepared(tmp_path, model)
    fit = Trainer(cfg, "cpu", spec=prepared.spec).fit(prepared.model, prepared.bundle)
    prepared.model.eval()
    with torch.no_grad():
        logits = torch.cat([prepared.model(x) for x, *_ in prepared.bundle.test.plain()])
    return [h["train/loss"] for h in fit.history], logits, prepared.model


def test_the_fit_over_cached_maps_is_the_fine_tune_on_images(tmp_path, monkeypatch):
    calls = _count_extracts(monkeypatch)
    on_images, images_logits, tuned = _fit_and_test(tmp_path / "images", "lite0_finetune")
    assert type(tuned) is Finetune and calls == []
    cached, cached_logits, partial = _fit_and_test(tmp_path / "f16", "lite0_partial")
    assert isinstance(partial, PartialFinetune) and calls[:2] == [1, 1]  # the maps of train and val, once each
    files = list((tmp_path / "f16").glob("**/features/*.pt"))
    assert len(files) == 1  # the training and validation maps, in one file
    maps = torch.load(files[0], weights_only=True)
    assert maps["train"].dtype == torch.float16 and maps["train"].shape[2] == partial.cached_channels * 2 * 2  # 32/16
    # float16 maps: the same predictions as on images, the logits within float16's rounding carried through 3 epochs
    assert torch.equal(cached_logits.argmax(1), images_logits.argmax(1))
    assert (cached_logits - images_logits).abs().max() < 0.1 and cached == pytest.approx(on_images, abs=0.03)
    # a float32 cache: the same fit to float tolerance (the batches and the dropout draws are the images'; with 2
    # torch threads it was bit-identical here, with 1 the kernels' sums differ in the last bits: 6e-4 after 3 epochs)
    monkeypatch.setattr(feature_head, "_dtype", lambda single: torch.float32)
    exact, exact_logits, _ = _fit_and_test(tmp_path / "f32", "lite0_partial")
    assert exact == pytest.approx(on_images, rel=1e-4) and torch.equal(exact_logits.argmax(1), images_logits.argmax(1))
    assert (exact_logits - images_logits).abs().max() < 5e-3 < (cached_logits - images_logits).abs().max()
    # the frozen stages unchanged, the ones above them trained
    fresh = Finetune(
        lite_net("efficientnet_lite0", partial.in_channels),
        partial.in_channels,
        2,
        load(str(REPO / "configs"), "smoke", []).models,
    )
    before, after = fresh.backbone.state_dict(), partial.backbone.state_dict()
    frozen = ("conv_stem.", "bn1.", "blocks.0.", "blocks.1.", "blocks.2.", "blocks.3.")
    assert all(torch.equal(after[k], before[k]) for k in after if k.startswith(frozen))
    trained = [k for k in after if not k.startswith(frozen) and k.endswith(".weight")]
    assert trained and all(not torch.equal(after[k], before[k]) for k in trained)


def test_a_later_seed_reads_the_cached_maps_back(tmp_path, monkeypatch):
    calls = _count_extracts(monkeypatch)
    cfg, prepared = _prepared(tmp_path, "lite0_partial", 1)
    Trainer(cfg, "cpu", spec=prepared.spec).fit(prepared.model, prepared.bundle)
    assert calls == [1, 1]
    calls.clear()
    cfg2, prepared2 = _prepared(tmp_path, "lite0_partial", 2)
    Trainer(cfg2, "cpu", spec=prepared2.spec).fit(prepared2.model, prepared2.bundle)
    assert calls == []  # no pass over the frozen stages: the maps read back
    assert not torch.equal(prepared2.model.classifier.weight, prepared.model.classifier.weight)  # a replicate
    # another K is another cache
    cfg3, prepared3 = _prepared(tmp_path, "lite0_partial", 1, "models.partial.freeze_blocks=5")
    Trainer(cfg3, "cpu", spec=prepared3.spec).fit(prepared3.model, prepared3.bundle)
    assert calls == [1, 1]


def test_nothing_frozen_is_refused_before_anything_is_built(tmp_path, capsys):
    args = ["train", "--model", "lite0_partial", "--resolution", "32", "--config-dir", str(REPO / "configs")]
    args += ["models.partial.freeze_blocks=0", f"experiment.output_dir={tmp_path}", "mlflow.enabled=false"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "models.partial.freeze_blocks" in err and "1 to 7 for lite0_partial" in err, err
    assert not any(tmp_path.iterdir())


def test_a_partial_fine_tune_sweeps_at_two_resolutions(tmp_path):
    from conftest import tiny_sweep_config
    from resomap.sweep.sweep import run_sweep

    cfg = tiny_sweep_config(
        tmp_path,
        ["lite0_partial"],
        [32, 48],
        ["gradcam"],
        1,
        "models.partial.freeze_blocks=5",
        "data.synthetic.size=48",
    )
    outcome = run_sweep(cfg)
    assert not outcome.failed and len(outcome.results) == 2
    for result in outcome.results:
        assert result.status == "FINISHED" and set(result.cross_resolution) == {"32", "48"}
        assert result.explain.maps and not result.explain.failed, result.explain  # its Grad-CAM maps
        assert result.explain.cam_layer is not None


def test_the_cost_probe_prices_the_cache_pass_and_leaves_the_frozen_stages_as_they_were(tmp_path, monkeypatch):
    """Trainer.probe_seconds of a partial fine-tune: the frozen part timed on PROBE_BATCHES batches (priced per image),
    steps of the trained part on maps of the right size; the frozen stages' weights and batch-norm statistics are
    the pretrained ones afterwards."""
    calls = []
    real = feature_head.extract
    monkeypatch.setattr(
        feature_head, "extract", lambda t, m, loader, tr, b=None, **k: calls.append(b) or real(t, m, loader, tr, b, **k)
    )
    cfg, prepared = _prepared(tmp_path, "lite0_partial")
    model = prepared.model
    before = {k: v.clone() for k, v in model.backbone.state_dict().items() if k.startswith(("conv_stem", "bn1"))}
    seconds, per_step, epochs = Trainer(cfg, "cpu", spec=prepared.spec).probe_seconds(model, prepared.bundle)
    assert calls == [feature_head.PROBE_BATCHES] and epochs == 3 and seconds > 0 and per_step > 0
    after = model.backbone.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_partial_options_are_in_the_partial_models_trial_keys_only():
    """models.partial is read by lite<N>_partial alone: its K changes their trial keys, and every other model's key
    and the sweep's identity stay what they were before the section existed (a finished sweep is not run again)."""
    from resomap.config import with_overrides
    from resomap.sweep.identity import sweep_identity, trial_key

    cfg = load(None, "smoke")
    other = with_overrides(cfg, {"models.partial.freeze_blocks": 5})
    assert trial_key(cfg, "lite0_partial", 32, 42) != trial_key(other, "lite0_partial", 32, 42)
    for model in ("tiny_cnn", "pixel_logreg", "lite0_linear", "lite0_finetune"):
        assert trial_key(cfg, model, 32, 42) == trial_key(other, model, 32, 42), model
    assert sweep_identity(cfg) == sweep_identity(other)
    finetuned = with_overrides(cfg, {"models.finetune.freeze_blocks": 3})  # lite0_finetune's section, not partial's
    assert trial_key(cfg, "lite0_partial", 32, 42) == trial_key(finetuned, "lite0_partial", 32, 42)
