"""Published pretrained weights from where the ecosystem keeps them: `models.pretrained: {<model>: hub}`.

- `timm:<name>`: timm's pretrained weights of that architecture (its default tag), found in the Hugging Face cache
  (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else ~/.cache/huggingface/hub) or, for the few timm weights published
  only by URL, in torch's hub cache; timm then loads the file (`pretrained_cfg_overlay=dict(file=...)`: its own
  head reset and input-channel adaptation, nothing downloaded while a trial builds its model).
- a torchvision model of the registry (`hub="torchvision"`): its weight enum's DEFAULT, in torch's hub cache
  (`$TORCH_HOME/hub/checkpoints`, else ~/.cache/torch/hub/checkpoints), loaded like a local weights file.

The weights are located and, where missing, fetched once before a command creates anything (resomap.cli.preflight):
fetched only when `HF_HUB_OFFLINE` is not set (it keeps torchvision's downloads off too), otherwise one line names
the model, where it looked and the command that fetches it on a connected machine. A file is checked against the
hash its source publishes (a Hugging Face blob is named by its SHA-256; torchvision's file names carry the first
hex digits of theirs) before it is read.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from resomap.config.schema import is_hub
from resomap.errors import ConfigError, ModelError
from resomap.hub_cache import TIMM_FETCH, hf_cache, offline, offline_message, torch_hub
from resomap.models.registry import MODELS, TIMM_PREFIX, is_timm_name

HF_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm reads from a Hugging Face repo, in its order
_HASH_IN_NAME = re.compile(r"-([a-f0-9]{8,})\.")  # torch.hub's check_hash convention: name-<sha256 prefix>.pth
_SHA256 = re.compile(r"^[a-f0-9]{64}$")


def torch_checkpoints() -> Path:
    """torch.hub's weights folder (torch.hub.get_dir()/checkpoints)."""
    return torch_hub() / "checkpoints"


@dataclass(frozen=True)
class HubWeights:
    """Where a model's published weights are, or would be once fetched."""

    model: str  # 'timm:tf_efficientnet_lite0', 'resnet18'
    library: str  # 'timm' / 'torchvision'
    name: str  # what the library calls them: 'timm/tf_efficientnet_lite0.in1k', 'ResNet18_Weights.IMAGENET1K_V1'
    source: str  # 'Hugging Face' / 'URL'
    repo: str | None  # the Hugging Face repo id
    revision: str | None
    url: str | None
    path: Path | None  # the cached file; None when it is not on this machine
    looked: Path  # the folder looked in
    fetch: str  # the command that fetches them on a connected machine

    @property
    def where(self) -> str:
        cache = "the Hugging Face cache" if self.source == "Hugging Face" else "torch's hub cache"
        return f"{cache} ({self.looked})"


def locate(model: str) -> HubWeights:
    """Where the published weights of `model` (a canonical registry key or 'timm:<arch>') are; nothing downloaded."""
    if is_timm_name(model):
        return _locate_timm(model)
    if MODELS.meta(model).get("hub") == "torchvision":
        return _locate_torchvision(model)
    torchvision = ", ".join(n for n in MODELS.names() if MODELS.meta(n).get("hub") == "torchvision")
    raise ConfigError(
        f"models.pretrained.{model}: 'hub' weights exist for timm:<name> and the torchvision models ({torchvision});"
        " give a weights file for this model instead"
    )


def _locate_timm(model: str) -> HubWeights:
    from timm.models import get_pretrained_cfg

    arch = model[len(TIMM_PREFIX) :]
    cfg = get_pretrained_cfg(arch)
    fetch = TIMM_FETCH.format(arch=arch)
    if cfg is None or not (cfg.hf_hub_id or cfg.url):
        raise ModelError(f"{model}: timm publishes no pretrained weights for it; give a weights file instead")
    if cfg.hf_hub_id:
        repo, _, revision = cfg.hf_hub_id.partition("@")
        files = (cfg.hf_hub_filename,) if cfg.hf_hub_filename else HF_FILES
        found = _hf_cached(repo, files, revision or None)
        return HubWeights(model, "timm", repo, "Hugging Face", repo, revision or None, None, found, hf_cache(), fetch)
    path = torch_checkpoints() / os.path.basename(cfg.url)
    return HubWeights(
        model, "timm", arch, "URL", None, None, cfg.url, path if path.is_file() else None, path.parent, fetch
    )


def _locate_torchvision(model: str) -> HubWeights:
    from torchvision.models import get_model_weights

    weights = get_model_weights(model).DEFAULT
    path = torch_checkpoints() / os.path.basename(weights.url)
    fetch = f"python -c \"import torchvision; torchvision.models.get_model('{model}', weights='DEFAULT')\""
    return HubWeights(
        model, "torchvision", str(weights), "URL", None, None, weights.url, path if path.is_file() else None,
        path.parent, fetch,
    )  # fmt: skip


def _hf_cached(repo: str, filenames: tuple[str, ...], revision: str | None) -> Path | None:
    """The first of the repo's files `filenames` the Hugging Face cache holds, else None."""
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        found = try_to_load_from_cache(repo, filename, cache_dir=str(hf_cache()), revision=revision)
        if isinstance(found, str):
            return Path(found)
    return None


def describe(model: str, value: str) -> str:
    """A models.pretrained value as a run's param: the published weights' name and source for `hub`, else the file."""
    if not is_hub(value):
        return str(value)
    weights = locate(model)
    return f"{weights.name} ({weights.library}, {'Hugging Face' if weights.repo else weights.url})"


def fetch(weights: HubWeights) -> Path:
    """The checked local file of `weights`, downloaded first when it is not cached and downloads are allowed."""
    path = weights.path or _download(weights)
    check_hash(path, weights.model)
    return path


def _download(weights: HubWeights) -> Path:
    if offline():
        raise ModelError(offline_message(weights.model, weights.where, weights.fetch))
    _writable(weights.looked, "HF_HUB_CACHE (or HF_HOME)" if weights.repo else "TORCH_HOME")
    try:
        _reachable(weights.url or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
        if weights.repo:
            from huggingface_hub import hf_hub_download

            for i, name in enumerate(HF_FILES):
                try:
                    with _quiet("huggingface_hub"):  # its retry warnings; the one line below says it all
                        found = hf_hub_download(weights.repo, name, revision=weights.revision, cache_dir=hf_cache())
                    return Path(found)
                except Exception as exc:
                    # timm's next file name only when this one is not in the repo; any other error is final
                    if i == len(HF_FILES) - 1 or "EntryNotFound" not in type(exc).__name__:
                        raise
        import torch

        target = weights.looked / os.path.basename(str(weights.url))
        target.parent.mkdir(parents=True, exist_ok=True)
        match = _HASH_IN_NAME.search(target.name)
        torch.hub.download_url_to_file(str(weights.url), str(target), hash_prefix=match.group(1) if match else None)
        return target
    except Exception as exc:  # network, permission and hash errors all end the same way for the user
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}" if str(exc) else type(exc).__name__
        raise ModelError(
            f"{weights.model}: pretrained weights {weights.name} could not be fetched from "
            f"{weights.url or weights.repo} ({reason}); on a connected machine run: {weights.fetch}"
        ) from None


def _writable(folder: Path, setting: str) -> None:
    """The cache folder the weights would be written to can be made and written, else one line naming it and the
    setting that moves it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".resomap-write-check-"):
            pass
    except OSError as exc:
        raise ModelError(
            f"the weights cache {folder} is not writable ({exc.strerror or type(exc).__name__}); set {setting} to a "
            "folder you can write"
        ) from None


def _reachable(url: str) -> None:
    """The URL's host resolves (an offline machine fails here at once, not after the hub's retries)."""
    import socket
    from urllib.parse import urlparse

    host = urlparse(url).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        raise ConnectionError(f"{host} cannot be reached from this machine ({exc.strerror or exc})") from None


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """A library's logger held to errors for a while."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def check_hash(path: Path, model: str) -> None:
    """The file against the hash its source publishes: a Hugging Face blob's name is its SHA-256 (LFS files), a
    torch.hub file name carries the first hex digits of its SHA-256; a file with neither is taken as it is."""
    real = Path(os.path.realpath(path))
    want = real.name if _SHA256.match(real.name) else None
    match = None if want else _HASH_IN_NAME.search(Path(path).name)
    if want is None and match is None:
        return
    digest = _sha256(str(real), real.stat().st_mtime_ns, real.stat().st_size)
    if (want and digest != want) or (match and not digest.startswith(match.group(1))):
        expected = want or match.group(1)  # type: ignore[union-attr]
        raise ModelError(
            f"{model}: the cached weights {path} have SHA-256 {digest[:16]}..., not the published {expected[:16]}...; "
            "delete the file and fetch it again"
        )


@functools.lru_cache(maxsize=32)
def _sha256(path: str, _mtime_ns: int, _size: int) -> str:
    """A file's SHA-256, once per process per version of the file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def found_on_this_machine() -> list[HubWeights]:
    """The published weights this machine holds, for `resomap models --pretrained`: timm's in the Hugging Face
    cache (repos under timm/) and in torch's hub cache, torchvision's DEFAULT weights of the registry's models."""
    found: list[HubWeights] = []
    cache = hf_cache()
    for folder in sorted(cache.glob("models--timm--*")) if cache.is_dir() else []:
        repo = folder.name[len("models--") :].replace("--", "/")
        path = _hf_cached(repo, HF_FILES, None)
        if path is not None:
            arch = repo.split("/", 1)[1]  # with its tag: the name that finds these weights (the default may be another)
            weights = HubWeights(TIMM_PREFIX + arch, "timm", repo, "Hugging Face", repo, None, None, path, cache, "")
            found.append(weights)
    checkpoints = torch_checkpoints()
    if checkpoints.is_dir():
        for name in sorted(n for n in MODELS.names() if MODELS.meta(n).get("hub") == "torchvision"):
            weights = _locate_torchvision(name)
            if weights.path is not None:
                found.append(weights)
    return found
