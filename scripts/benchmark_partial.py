"""Partial fine-tuning over cached maps (lite0_partial) against fine-tuning on images, on the CPU: images/s of one
training step (forward, cross-entropy, backward, AdamW; fp32 channels_last, the models' CPU fast path) of

  e2e      lite0_finetune trained end to end (models.finetune.freeze_blocks 0), on images;
  frozen   lite0_finetune with the first K stages frozen, on images (the uncached partial fine-tune);
  cached   lite0_partial with the same K, on the cached maps of its frozen part (what its epochs run);

the pass that fills the cache (the frozen stem and K stages, eval mode, no_grad, per image and view), the cache's
size per image and view (float16), and what a whole fit costs per training image: `--epochs` epochs over the
cache after one pass per view (`--views`: ELPV's 8 flips and quarter turns) against `--epochs` epochs on images.

In interleaved rounds (order rotated each round, `--iters` timed calls per variant per round after a warm-up call),
median images/s (the median of the per-round medians), per resolution; ratios against e2e. E.g.

    python scripts/benchmark_partial.py                          # 64 and 128 px, K = 4, 3 rounds
    python scripts/benchmark_partial.py --resolutions 128 --freeze 5 --rounds 1

Threads: torch's default unless --threads N. Exit status 0; --json PATH writes the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def _models(freeze: int, channels: int):
    from resomap.config.schema import FinetuneConfig, ModelsConfig, PartialConfig
    from resomap.models.pretrained import lite_net
    from resomap.models.recipes import Finetune, PartialFinetune

    def cfg(k: int) -> ModelsConfig:
        return dataclasses.replace(ModelsConfig(), finetune=FinetuneConfig(k), partial=PartialConfig(max(k, 1)))

    def net():
        return lite_net("efficientnet_lite0", channels)

    e2e = Finetune(net(), channels, 2, cfg(0))
    frozen = Finetune(net(), channels, 2, cfg(freeze))
    cached = PartialFinetune(net(), channels, 2, cfg(freeze))
    return {name: m.to(memory_format=torch.channels_last).train() for name, m in
            (("e2e", e2e), ("frozen", frozen), ("cached", cached))}  # fmt: skip


def _step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def run() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return run


def _timed(fn: Callable[[], None], iters: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(resolution: int, freeze: int, batch: int, rounds: int, iters: int, channels: int) -> dict:
    torch.manual_seed(0)
    models = _models(freeze, channels)
    x = torch.randn(batch, channels, resolution, resolution).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 2, (batch,))
    cached = models["cached"]
    with torch.no_grad():
        maps = cached.pooled(x)  # what the cache holds for this batch
    cached.eval()

    def fill() -> None:
        with torch.no_grad():
            cached.pooled(x).to(torch.float16)

    cached.train()
    calls = {
        "e2e": _step(models["e2e"], x, y),
        "frozen": _step(models["frozen"], x, y),
        "cached": _step(cached, maps, y),
        "cache pass": fill,
    }
    names = list(calls)
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            per[name].append(_timed(calls[name], iters))
    seconds = {n: statistics.median(v) for n, v in per.items()}
    return {
        "resolution": resolution,
        "freeze_blocks": freeze,
        "batch": batch,
        "images_per_s": {n: batch / s for n, s in seconds.items()},
        "cache_bytes_per_image_view": int(maps.shape[1]) * 2,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resolutions", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--freeze", type=int, default=4, help="K: stages frozen and cached (1-7)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--channels", type=int, default=1, help="input channels (ELPV: 1)")
    ap.add_argument("--epochs", type=int, default=30, help="epochs of the whole-fit cost per training image")
    ap.add_argument("--views", type=int, default=8, help="views cached per image (ELPV: 8)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from resomap.runtime import machine_record

    machine = machine_record(torch.device("cpu"))
    print(f"{machine['cpu']} ({machine['cpu_capability']}, native bf16: {machine['cpu_bf16']}); "
          f"torch threads {torch.get_num_threads()}")  # fmt: skip
    found = []
    for res in args.resolutions:
        row = bench(res, args.freeze, args.batch, args.rounds, args.iters, args.channels)
        ips = row["images_per_s"]
        e2e = ips["e2e"]
        # a whole fit per training image: epochs of steps, plus (cached) one frozen pass per view
        fit_e2e = args.epochs / e2e
        fit_cached = args.epochs / ips["cached"] + args.views / ips["cache pass"]
        row["fit_seconds_per_image"] = {"e2e": fit_e2e, "cached": fit_cached}
        found.append(row)
        print(f"\n{res} px, K = {args.freeze} frozen stages, batch {args.batch} ({args.rounds} rounds x {args.iters}):")
        for name in ("e2e", "frozen", "cached", "cache pass"):
            print(f"  {name:<10} {ips[name]:9.1f} images/s  x{ips[name] / e2e:6.2f} of e2e")
        size = row["cache_bytes_per_image_view"]
        print(f"  cache: {size / 1024:.1f} KiB per image and view (float16); {args.views} views of 1,968 ELPV training "
              f"images: {size * args.views * 1968 / 2**20:.0f} MiB")  # fmt: skip
        print(f"  a {args.epochs}-epoch fit per training image: e2e {fit_e2e:.2f} s, cached {fit_cached:.3f} s "
              f"(x{fit_e2e / fit_cached:.1f}; the cache filled once with {args.views} views)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
