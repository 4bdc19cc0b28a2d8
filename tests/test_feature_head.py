"""A head trained on a frozen backbone's cached features (lite<N>_head: resomap.models.recipes.FrozenHead,
resomap.training.feature_head): the features of every symmetry view computed once and read back by later seeds, the
Trainer's loop over them, the model the same on images as on its features, seeds as replicates, the cost probe."""

from __future__ import annotations

import pytest
import torch

from conftest import REPO
from resomap.config import load
from resomap.models import get_spec
from resomap.models.pretrained import create_backbone
from resomap.models.recipes import FrozenHead
from resomap.training import Trainer, feature_head
from resomap.training.feature_head import FeatureLoader


def _features() -> torch.Tensor:
    """[3 views, 10 images, 2]: view v of image i is (v, i)."""
    views = torch.arange(3.0).view(3, 1, 1).expand(3, 10, 1)
    images = torch.arange(10.0).view(1, 10, 1).expand(3, 10, 1)
    return torch.cat([views, images], 2)


def _seen(loader: FeatureLoader, epoch: int) -> list[tuple[int, int]]:
    loader.set_epoch(epoch)
    return [(int(v), int(i)) for x, *_ in loader for v, i in x.tolist()]


def test_the_loader_shows_each_image_once_an_epoch_under_a_view_drawn_for_that_epoch():
    labels, weights = torch.arange(10) % 2, torch.linspace(0.5, 1.0, 10)
    loader = FeatureLoader(
        _features(), labels, batch_size=4, device="cpu", shuffle=True, seed=3, random_view=True, weights=weights
    )
    first = _seen(loader, 0)
    assert sorted(i for _, i in first) == list(range(10))  # every image once
    assert len({v for v, _ in first}) > 1 and {v for v, _ in first} <= {0, 1, 2}  # views drawn, not all the first
    assert _seen(loader, 0) == first and _seen(loader, 1) != first  # set by (seed, epoch) only
    x, y, w = next(iter(loader))
    rows = x[:, 1].long()
    assert torch.equal(y, labels[rows]) and torch.equal(w, weights[rows])  # labels and weights follow the image
    assert _seen(loader.plain(), 5) == [(0, i) for i in range(10)]  # in order, the image itself
    assert len(loader) == 3 and loader.num_samples == 10
    shards = [FeatureLoader(_features(), labels, batch_size=4, device="cpu").shard(r, 2) for r in (0, 1)]
    assert {i for shard in shards for _, i in _seen(shard, 0)} == set(range(10))  # every image on some rank
    assert [len(list(shard)) for shard in shards] == [2, 2]  # as many batches on each (padded by wrapping)


def _count_extracts(monkeypatch) -> list[int]:
    """The views of each feature pass (feature_head.extract) from now on, in order."""
    calls: list[int] = []
    real = feature_head.extract
    monkeypatch.setattr(
        feature_head,
        "extract",
        lambda t, m, loader, tr, b=None, **k: calls.append(len(tr)) or real(t, m, loader, tr, b, **k),
    )
    return calls


def _prepared(tmp_path, seed: int, *extra: str):
    from resomap.sweep import plan
    from resomap.sweep.trial import prepare_trial

    cfg = load(
        str(REPO / "configs"),
        "smoke",
        [
            "sweep.models=[lite0_head]",
            "sweep.resolutions=[32]",
            f"sweep.seeds=[{seed}]",
            "training.epochs=4",
            "training.batch_size=16",
            f"experiment.output_dir={tmp_path}",
            "mlflow.enabled=false",
            *extra,
        ],
    )
    trial = plan(cfg)[0]
    return trial.cfg, prepare_trial(trial, trial.cfg, torch.device("cpu"))


def test_the_head_trains_on_cached_views_and_a_later_seed_reads_them_back(tmp_path, monkeypatch):
    calls = []
    real = feature_head.extract

    def counted(trainer, model, loader, transforms, batches=None, **kw):
        calls.append(len(transforms))
        return real(trainer, model, loader, transforms, batches, **kw)

    monkeypatch.setattr(feature_head, "extract", counted)
    cfg, prepared = _prepared(tmp_path, 1)
    model, bundle = prepared.model, prepared.bundle
    assert isinstance(model, FrozenHead)
    fit = Trainer(cfg, "cpu", spec=prepared.spec).fit(model, bundle)
    assert calls == [8, 1]  # the synthetic set declares both flips and quarter turns: 8 views; validation as is
    files = list((tmp_path / cfg.experiment.cache_dir / "features").glob("*.pt"))
    assert len(files) == 1
    cached = torch.load(files[0], weights_only=True)
    assert cached["train"].shape == (8, bundle.train.num_samples, model.feature_size)
    assert [h["epoch"] for h in fit.history] == [0, 1, 2, 3] and "val/loss" in fit.history[-1]
    assert fit.history[-1]["train/loss"] < fit.history[0]["train/loss"]

    # the model on images is the model on the cached features of the image itself (float16 kept: small error)
    model.eval()
    with torch.no_grad():
        x, y = next(iter(bundle.val.plain()))
        on_images = model(x)
        on_features = model(cached["val"][0, : len(y)].float())
    assert torch.allclose(on_images, on_features, atol=0.05), (on_images - on_features).abs().max()
    assert float(model.feature_std.mean()) != 1.0  # standardised by the training features' own spread
    fresh = create_backbone("efficientnet_lite0", model.in_channels).state_dict()
    assert all(torch.equal(model.backbone.state_dict()[k], v) for k, v in fresh.items())  # the backbone frozen

    # a second seed: the cache is read (no backbone pass), the head starts and ends elsewhere (a replicate)
    calls.clear()
    cfg2, prepared2 = _prepared(tmp_path, 2)
    Trainer(cfg2, "cpu", spec=prepared2.spec).fit(prepared2.model, prepared2.bundle)
    assert calls == []
    assert not torch.equal(prepared2.model.head.weight, model.head.weight)

    # a damaged cache file is computed again, not trusted
    files[0].write_bytes(b"not a torch file")
    cfg3, prepared3 = _prepared(tmp_path, 3)
    Trainer(cfg3, "cpu", spec=prepared3.spec).fit(prepared3.model, prepared3.bundle)
    assert calls == [8, 1] and torch.load(files[0], weights_only=True)["format"] == feature_head.FORMAT


def test_views_follow_the_augmentation_switch_and_an_mlp_head_is_a_config_away(tmp_path, monkeypatch):
    calls = _count_extracts(monkeypatch)
    cfg, prepared = _prepared(tmp_path, 1, "data.augmentation.enabled=false", "models.head.hidden=16")
    assert isinstance(prepared.model.head, torch.nn.Sequential) and prepared.model.head[0].out_features == 16
    Trainer(cfg, "cpu", spec=prepared.spec).fit(prepared.model, prepared.bundle)
    assert calls == [1, 1]  # no augmentation: the images as they are


def test_the_cost_probe_prices_every_view_and_takes_no_backbone_step(tmp_path, monkeypatch):
    cfg, prepared = _prepared(tmp_path, 1)
    batches = []
    real = feature_head.extract
    monkeypatch.setattr(
        feature_head,
        "extract",
        lambda t, m, loader, tr, b=None, **k: batches.append(b) or real(t, m, loader, tr, b, **k),
    )
    seconds, per_step, epochs = Trainer(cfg, "cpu", spec=prepared.spec).probe_seconds(prepared.model, prepared.bundle)
    assert batches == [feature_head.PROBE_BATCHES] and epochs == 4
    assert seconds > 0 and per_step > 0
    fresh = create_backbone("efficientnet_lite0", prepared.model.in_channels).state_dict()
    assert all(torch.equal(prepared.model.backbone.state_dict()[k], v) for k, v in fresh.items())


class _Crash(Exception):
    pass


class _CrashAfter:
    order = 200  # after the checkpoint callback has written last.pt

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_validation_end(self, trainer, metrics) -> None:
        if trainer.epoch == self.epoch:
            raise _Crash


def test_a_resumed_head_fit_ends_where_the_uninterrupted_one_does(tmp_path):
    """Views and order depend on (seed, epoch) only, the RNG and optimiser state come back from last.pt: a fit
    stopped after its second epoch and resumed gives the uninterrupted fit's head, to the bit."""
    from resomap.training.callbacks import TopKCheckpoint

    one = ("system.threads=1", "models.dropout=0.3")  # one thread: the same sums in the same order; dropout: RNG
    cfg, straight = _prepared(tmp_path, 1, *one)
    plain = Trainer(cfg, "cpu", spec=straight.spec).fit(straight.model, straight.bundle)
    ck = tmp_path / "ck"
    cfg, crashed = _prepared(tmp_path, 1, *one)
    with pytest.raises(_Crash):
        Trainer(cfg, "cpu", [TopKCheckpoint(ck, "val/loss", "min", 1), _CrashAfter(1)], spec=crashed.spec).fit(
            crashed.model, crashed.bundle
        )
    cfg, again = _prepared(tmp_path, 1, *one)
    resumed = Trainer(cfg, "cpu", [TopKCheckpoint(ck, "val/loss", "min", 1)], spec=again.spec).fit(
        again.model, again.bundle, resume_from=ck / "last.pt"
    )
    assert resumed.resumed_from_epoch == 1 and len(resumed.history) == len(plain.history) == 4
    assert resumed.history[-1]["val/loss"] == plain.history[-1]["val/loss"]
    assert torch.equal(again.model.head.weight, straight.model.head.weight)
    assert torch.equal(again.model.feature_mean, straight.model.feature_mean)


def test_a_frozen_backbones_test_features_are_computed_once_and_predict_as_the_images_do(tmp_path, monkeypatch):
    """The test evaluation of a head on a frozen backbone reads the test images' features, computed on the first
    evaluation at a resolution and cached: every later evaluation there (another seed's trial, another resolution's
    cross-resolution test) runs no backbone pass, and its scores and predictions are the images' to the bit."""
    from resomap.stages import evaluate_at

    calls = _count_extracts(monkeypatch)
    cfg, prepared = _prepared(tmp_path, 1, "training.epochs=1")
    model, bundle = prepared.model, prepared.bundle
    trainer = Trainer(cfg, "cpu", spec=prepared.spec)
    trainer.fit(model, bundle)
    calls.clear()
    first = evaluate_at(model, cfg, 32, 1, "cpu", trainer=trainer, bundle=bundle)
    assert calls == [1]  # the test images as they are, once
    again = evaluate_at(model, cfg, 32, 1, "cpu", trainer=trainer, bundle=bundle)
    assert calls == [1]  # read back
    metrics, y_true, y_pred, score = trainer.evaluate(model, bundle.test, prefix="test")  # through the backbone
    for found in (first, again):
        assert found.metrics == {k: float(v) for k, v in metrics.items()}
        assert (list(found.y_true), list(found.y_pred)) == (list(y_true), list(y_pred))
        assert list(found.score) == list(score)
    unfrozen = torch.nn.Linear(2, 2)  # a model whose spec names no frozen features (a gradient model): the images
    assert feature_head.test_loader(Trainer(cfg, "cpu", spec=get_spec("tiny_cnn")), unfrozen, bundle) is bundle.test
