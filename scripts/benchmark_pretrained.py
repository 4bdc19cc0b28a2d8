"""The ImageNet-pretrained EfficientNet-Lite0 models (resomap.models.pretrained) on the CPU: which path computes
their features fastest, what training costs, and where a fine-tuning step spends its time. In interleaved rounds
(order rotated each round, `--iters` timed calls per variant per round after a warm-up call), median images/s (the
median of the per-round medians) of, once (the pooled features are the same size at every resolution):

  b) one training step (AdamW) of a head on cached features ([--head-batch, 4048] rows: lite0_linear's
     feature_size), a linear layer and an MLP with one hidden layer of 256;

and per resolution (--batch images per call):

  a) feature extraction of lite0_linear (`model.fit_inputs(x)`: the pooled multi-depth features its closed-form
     head is fitted on; eval mode, no_grad; it runs a batch in chunks of about 8 x 128 x 128 pixels, 2 images at
     224 px, as the model does) in each path: fp32 NCHW, fp32 channels_last, bf16 autocast with channels_last
     (skipped, with the reason, where the CPU has no native bf16: resomap.runtime.cpu_bf16_feature; --force-bf16
     times it anyway) and, with --compile, fp32 channels_last under torch.compile (its `pooled`);
  c) one training step (forward, cross-entropy, backward, AdamW) of lite0_finetune trained end to end
     (models.finetune.freeze_blocks 0) and of torchvision's resnet18 beside it, both fp32 channels_last, same batch;
  d) one lite0_finetune training step split by layer kind, measured with torch.profiler (CPU activity, shapes
     recorded) over --profile-steps steps after the timed ones: each convolution op, forward `aten::conv2d` and
     backward `aten::convolution_backward`, classified by its weight's shape (groups = input channels / weight
     dim 1; groups > 1: depthwise conv; else 1x1 kernel: pointwise conv; else full conv), batch norm = forward
     `aten::batch_norm` + backward `aten::native_batch_norm_backward` (timm's BatchNormAct2d applies the
     activation after it: that is in "other"), the optimizer = `Optimizer.step` + `zero_grad`; each op's
     inclusive CPU time (its children in it, no op counted inside another counted one), as a share of the step's
     own (a record_function around it). "other": the rest (activations, padding, pooling, loss, autograd's
     bookkeeping). The profiler's overhead makes its step slower than the timed one; the shares are what counts.

Ends with the fastest path of a) per resolution, which the models' declared CPU fast path (registry metadata
`cpu_fast_path`, taken by trials where system.precision / channels_last are on auto) should agree with. E.g.

    python scripts/benchmark_pretrained.py                                # 64, 128 and 224 px, 3 rounds
    python scripts/benchmark_pretrained.py --resolutions 64 --rounds 1    # a quick check (under a minute)
    python scripts/benchmark_pretrained.py --resolutions 224 --compile --json lite0.json

Threads: --threads 0 (default) takes the cores other processes leave free (resomap.runtime.auto_threads); the
cores other processes kept busy meanwhile are printed per resolution. Exit status 0; --json PATH writes the
figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models import build_model
from resomap.models.registry import MODELS
from resomap.profiling.timing import Rounds, autocast, time_rounds, training_step
from resomap.runtime import CpuLoad, auto_threads, cpu_bf16_feature, describe_device, machine_record

CPU = torch.device("cpu")
CL, NCHW = torch.channels_last, torch.contiguous_format
KINDS = ("depthwise conv", "pointwise conv", "full conv", "batch norm", "optimizer", "other")


def extraction_paths(
    args: argparse.Namespace, res: int, base: nn.Module
) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """The a) variants of lite0_linear `base` at `res` px ({path: call}) and the paths skipped ({path: why})."""
    x = torch.randn(args.batch, args.channels, res, res)
    calls, skipped = {}, {}

    def path(fmt: torch.memory_format, amp: torch.dtype | None = None, compiled: bool = False):
        model = copy.deepcopy(base).to(memory_format=fmt).eval()
        if compiled:
            model.pooled = torch.compile(model.pooled)  # fit_inputs calls self.pooled (per chunk)
        inp = x.contiguous(memory_format=fmt)

        def call() -> torch.Tensor:
            with torch.no_grad(), autocast(CPU, amp):
                return model.fit_inputs(inp)

        return call

    calls["fp32 NCHW"] = path(NCHW)
    calls["fp32 channels_last"] = path(CL)
    feature = cpu_bf16_feature()
    if feature or args.force_bf16:
        calls["bf16 channels_last"] = path(CL, torch.bfloat16)
    else:
        skipped["bf16 channels_last"] = "no native bf16 on this CPU (amx_bf16, avx512_bf16); --force-bf16 times it"
    if args.compile:
        calls["fp32 channels_last compiled"] = path(CL, compiled=True)
    return calls, skipped


def train_steps(args: argparse.Namespace, res: int) -> dict[str, Callable[[], None]]:
    """The c) variants at `res` px: a training step of lite0_finetune (end to end) and of resnet18, fp32 CL."""
    cfg = ModelsConfig()  # models.finetune.freeze_blocks 0: end to end
    x = torch.randn(args.batch, args.channels, res, res).contiguous(memory_format=CL)
    y = torch.randint(0, 2, (args.batch,))
    steps = {}
    for name in ("lite0_finetune", "resnet18"):
        torch.manual_seed(0)
        model, _ = build_model(name, 2, args.channels, cfg)
        model = model.to(memory_format=CL).train()
        steps[f"train {name}"] = training_step(model, x, y, amp_dtype=None)
    return steps


def head_steps(args: argparse.Namespace, features: int) -> dict[str, Callable[[], None]]:
    """b): a training step of a linear head and of a small MLP on cached [head_batch, features] rows."""
    torch.manual_seed(0)
    x = torch.randn(args.head_batch, features)
    y = torch.randint(0, 2, (args.head_batch,))
    heads = {
        "linear head": nn.Linear(features, 2),
        "MLP head (256 hidden)": nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 2)),
    }
    return {name: training_step(head.train(), x, y, amp_dtype=None) for name, head in heads.items()}


def rates(done: Rounds, batch: int) -> dict[str, float]:
    """images/s per variant: `batch` / the median of its per-round median seconds."""
    return {n: batch / statistics.median(done.round_medians(n)) for n in done.calls if done.calls[n]}


def timed(variants: dict[str, Callable], args: argparse.Namespace) -> tuple[Rounds, float]:
    """time_rounds over the variants (one warm-up call each) and the cores other processes kept busy meanwhile."""
    with CpuLoad() as load:
        done = time_rounds(variants, CPU, iters=args.iters * args.rounds, warmup=1, rounds=args.rounds)
    return done, load.others_cores


# ------------------------------------------------------------------------------------------ d) time by layer kind


def conv_kind(input_shape: list[int], weight_shape: list[int]) -> str:
    """depthwise / pointwise / full conv from a convolution's input [N, C, H, W] and weight [O, C/g, kh, kw]."""
    if len(input_shape) != 4 or len(weight_shape) != 4:  # not a 2-d convolution's shapes
        return "full conv"
    groups = input_shape[1] // max(1, weight_shape[1])
    if groups > 1:
        return "depthwise conv"
    return "pointwise conv" if weight_shape[2:] == [1, 1] else "full conv"


def classify(event) -> str | None:
    """The layer kind of a profiler event counted in d), or None for one that is not counted itself."""
    name, shapes = event.name, event.input_shapes
    if name == "aten::conv2d":  # (input, weight, bias, stride, padding, dilation, groups)
        return conv_kind(shapes[0], shapes[1])
    if name == "aten::convolution_backward":  # (grad_output, input, weight, ...)
        return conv_kind(shapes[1], shapes[2])
    if name in ("aten::batch_norm", "aten::native_batch_norm_backward"):
        return "batch norm"
    if name.startswith("Optimizer.step#") or name.startswith("Optimizer.zero_grad#"):
        return "optimizer"
    return None


def split_by_kind(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Milliseconds per step of each layer kind (KINDS) and `total`, from torch.profiler over `steps` steps."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            with record_function("benchmark_step"):
                step()
    out = dict.fromkeys(KINDS, 0.0)
    total = 0.0
    for event in prof.events():
        if event.name == "benchmark_step":
            total += event.cpu_time_total
            continue
        kind = classify(event)
        if kind is None:
            continue
        parent = event.cpu_parent
        while parent is not None and classify(parent) is None:
            parent = parent.cpu_parent
        if parent is None:  # not inside another counted op
            out[kind] += event.cpu_time_total
    out["other"] = max(0.0, total - sum(out.values()))
    return {k: v / 1e3 / steps for k, v in {**out, "total": total}.items()}


def split_line(split: dict[str, float]) -> str:
    total = split["total"] or float("nan")
    return ", ".join(f"{k} {split[k]:.0f} ms ({100 * split[k] / total:.0f}%)" for k in KINDS)


# ------------------------------------------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resolutions", nargs="+", type=int, default=[64, 128, 224])
    p.add_argument("--batch", type=int, default=8, help="images per call of a) and c) (the CPU's fastest chunk: 8)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--iters", type=int, default=2, help="timed calls per variant per round")
    p.add_argument("--head-batch", type=int, default=64, help="rows per head step in b) (the presets' batch: 64)")
    p.add_argument("--channels", type=int, default=1, help="input channels (ELPV: 1)")
    p.add_argument("--profile-steps", type=int, default=1, help="profiled lite0_finetune steps in d) (0: skip d)")
    p.add_argument("--compile", action="store_true", help="also time a) under torch.compile (slow to compile)")
    p.add_argument("--force-bf16", action="store_true", help="time bf16 autocast even without native bf16")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0: the cores other processes leave free")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(args.threads or auto_threads())
    machine = machine_record(CPU)
    print(f"{machine['cpu']} ({machine['cpu_capability']}, native bf16: {machine['cpu_bf16']}); "
          f"{describe_device(CPU)}; torch {torch.__version__}; batch {args.batch}, {args.rounds} round(s) x "
          f"{args.iters} call(s)", flush=True)  # fmt: skip
    declared = MODELS.meta("lite0_linear").get("cpu_fast_path") or {}
    fast_name = f"{declared.get('precision', 'fp32')} {'channels_last' if declared.get('channels_last') else 'NCHW'}"
    figures: dict = {"machine": machine, "threads": torch.get_num_threads(), "batch": args.batch, "resolutions": {}}

    torch.manual_seed(0)
    linear, _ = build_model("lite0_linear", num_classes=2, in_channels=args.channels, cfg=ModelsConfig())
    done, others = timed(head_steps(args, features=linear.feature_size), args)
    head = rates(done, args.head_batch)
    figures["head_step_images_per_s"] = head
    print(f"\nb) head training step on cached features [{args.head_batch}, {linear.feature_size}] (any resolution): "
          + ", ".join(f"{n} {v:,.0f} img/s" for n, v in head.items()), flush=True)  # fmt: skip

    fastest = {}
    for res in args.resolutions:
        calls, skipped = extraction_paths(args, res, linear)
        steps = train_steps(args, res)
        done, others = timed({**calls, **steps}, args)
        speed = rates(done, args.batch)
        row: dict = {"extraction_images_per_s": {n: speed[n] for n in calls if n in speed}, "skipped": skipped}
        row["errors"] = {n: f"{type(e).__name__}: {e}".splitlines()[0][:200] for n, e in done.errors.items()}
        row["train_images_per_s"] = {n.removeprefix("train "): speed[n] for n in steps if n in speed}
        row["others_busy_cores"] = round(others, 2)
        print(f"\n{res} px (other processes kept {others:.1f} cores busy):", flush=True)
        ext = row["extraction_images_per_s"]
        base = ext.get("fp32 NCHW")
        for n in calls:
            if n in ext:
                rel = f"  x{ext[n] / base:.2f} vs fp32 NCHW" if base and n != "fp32 NCHW" else ""
                print(f"  a) features {n:<28} {ext[n]:8.1f} img/s{rel}")
            else:
                print(f"  a) features {n:<28} failed: {row['errors'].get(n)}")
        for n, why in skipped.items():
            print(f"  a) features {n:<28} skipped: {why}")
        tr = row["train_images_per_s"]
        for n in ("lite0_finetune", "resnet18"):
            print(f"  c) train step {n:<26} {tr[n]:8.1f} img/s" if n in tr else f"  c) {n} failed: "
                  f"{row['errors'].get('train ' + n)}")  # fmt: skip
        if len(tr) == 2:
            print(
                f"     lite0_finetune step time / resnet18's: x{tr['resnet18'] / tr['lite0_finetune']:.2f}; feature "
                f"extraction (fastest path) vs a fine-tuning step: x{max(ext.values()) / tr['lite0_finetune']:.1f}"
            )
        if args.profile_steps > 0:
            split = split_by_kind(steps["train lite0_finetune"], args.profile_steps)  # warm: timed in c)
            row["finetune_step_ms_by_kind"] = split
            print(f"  d) lite0_finetune step by layer kind (profiled: {split['total']:.0f} ms/step):")
            print(f"     {split_line(split)}")
        if ext:
            plain = {n: v for n, v in ext.items() if "compiled" not in n}
            best = max(plain, key=plain.get) if plain else max(ext, key=ext.get)
            row["fastest"] = max(ext, key=ext.get)
            row["fastest_uncompiled"] = best
            fastest[res] = (row["fastest"], best, ext)
        figures["resolutions"][str(res)] = row

    print(f"\nfastest path per resolution (the models' declared CPU fast path: {fast_name}):")
    for res, (overall, best, ext) in fastest.items():
        agrees = "agrees" if best == fast_name else f"DISAGREES (declared {fast_name}: {ext.get(fast_name, 0):.1f})"
        extra = f"; with torch.compile: {overall} {ext[overall]:.1f} img/s" if overall != best else ""
        print(f"  {res} px: {best} {ext[best]:.1f} img/s, {agrees}{extra}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
