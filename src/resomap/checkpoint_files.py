"""Checkpoint files before torch is imported: which ones a folder of trained checkpoints holds, and whether one
may go on to `torch.load(weights_only=True)` at all.

`refusal(path)` reads the file's format and scans its pickle with the standard library (pickletools): a torch zip
checkpoint (`<name>/data.pkl`, `<name>/data/0`, ...) must be whole (its central directory and members within the
file: resomap.filecheck.check_zip); a bare pickle must be torch.save's legacy format (its magic number first); and
every global the pickle names (GLOBAL, STACK_GLOBAL, INST: what REDUCE, NEWOBJ and BUILD can call) must be one that
torch's safe loader accepts. Torch offers no such check before it is imported (importing it, and the explainers
`resomap explain` loads, takes seconds; its safe loader then warns about pickle protocols and names the wrong cause
for a protocol-4 pickle), so the scan is written here by hand: a bad file is refused in one line in a fraction of
a second. torch.load(weights_only=True) still loads every file that passes: the scan is the first line of defence,
not the only one.

Used by `resomap explain` / `resomap analyze` (resomap.cli.analysis) and models.pretrained (resomap.cli.args) before
torch loads, and by resomap.training.checkpoint.load_checkpoint / resomap.models.weights.read_state_dict before
their torch.load. Plain standard library only: nothing here imports torch.
"""

from __future__ import annotations

import _compat_pickle
import dataclasses
import io
import json
import math
import pickletools
import re
import zipfile
from pathlib import Path
from typing import IO, Any

from resomap.errors import CheckpointError
from resomap.filecheck import check_zip

_ZIP_SIGNATURE = b"PK\x03\x04"
_PROTO = 0x80  # the first byte of a pickle of protocol 2 and later (torch.save's legacy format: protocol 2)
_TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER: the first pickle of the legacy format
_LEGACY_PICKLES = 5  # magic number, protocol version, sys info, the object, its storage keys; then raw storage bytes

# The opcodes torch's safe loader reads (torch/_weights_only_unpickler.py, Unpickler.load, torch 2.x): a pickle
# with any other (FRAME, MEMOIZE, STACK_GLOBAL, ... of protocol 4) fails there with "Unsupported operand".
TORCH_OPCODES = frozenset({"GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "MARK",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT",
    "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET",
    "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1", "PROTO", "STOP"})  # fmt: skip

# The globals torch's safe loader accepts by default (_get_allowed_globals in the same file): plain containers,
# tensor and storage classes, dtypes, quantisation schemes and the tensor rebuild functions. Nothing of numpy:
# torch refuses numpy scalars and arrays unless a program allow-lists them, and ResoMap does not.
# tests/test_checkpoint.py checks that every global torch accepts passes here.
_ALLOWED = frozenset(
    {
        "_codecs.encode",
        "builtins.bytearray",
        "builtins.complex",
        "builtins.set",
        "collections.Counter",
        "collections.OrderedDict",
        "torch.Size",
        "torch.Tensor",
        "torch.device",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch.storage.TypedStorage",
        "torch.storage.UntypedStorage",
        "torch._tensor._rebuild_from_type_v2",
        "torch.per_tensor_affine",
        "torch.per_tensor_symmetric",
        "torch.per_channel_affine",
        "torch.per_channel_symmetric",
        "torch.per_channel_affine_float_qparams",
        "torch.bool",
    }
)
_ALLOWED_PATTERNS = (
    re.compile(r"torch\._utils\._rebuild_\w+"),  # _rebuild_tensor_v2, _rebuild_parameter, ...
    re.compile(r"torch(\.cuda)?(\.sparse)?\.[A-Z][A-Za-z0-9]*(Tensor|Storage)"),  # FloatTensor, cuda.HalfStorage
    # dtypes: float32, bfloat16, uint8, int4, complex64, bits8, float8_e4m3fn, qint8, quint4x2 (a digit right after
    # the stem: torch.float_power and torch.int_repr are functions)
    re.compile(r"torch\.(b?float|u?int|b?complex|bits|q(u)?int)\d\w*"),
)

_SHOWN_MODULES = {"posix": "os", "nt": "os"}  # os.system pickles as posix.system: named as one writes it


def allowed_global(name: str) -> bool:
    """Whether `name` (module.qualname, after Python 2 names are mapped as torch maps them) is a global torch's
    safe loader accepts."""
    return name in _ALLOWED or any(p.fullmatch(name) for p in _ALLOWED_PATTERNS)


def refusal(path: str | Path, what: str = "checkpoint") -> str | None:
    """Why the file at `path` must not go on to torch.load, in one line that starts with its name; None when it
    may. `what`: "checkpoint" (a ResoMap checkpoint) or "pretrained weights" (models.pretrained)."""
    path = Path(path)
    head = f"{path}: " if what == "checkpoint" else f"{what} {path}: "
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            start = fh.read(4)
    except FileNotFoundError:
        if what == "checkpoint":
            return f"{path}: checkpoint not found; check the path or train first"
        return f"{what} file {path} does not exist; fix models.pretrained"
    except IsADirectoryError:
        return f"{head}a folder, not a checkpoint file"
    except OSError as exc:
        return f"{head}cannot be read ({exc.strerror or exc})"
    if size == 0:
        return f"{head}checkpoint is truncated or corrupt (empty: 0 bytes); re-save it or copy it again"
    if start.startswith(_ZIP_SIGNATURE):
        cause = _zip_cause(path, size)
    elif start[0] == _PROTO:
        cause = _legacy_cause(path)
    else:
        cause = "corrupt or not a checkpoint (neither a torch.save zip nor a pickle); delete it or retrain"
    return None if cause is None else head + cause


def check(path: str | Path, what: str = "checkpoint") -> None:
    """CheckpointError with refusal()'s line when the file at `path` must not go on to torch.load."""
    cause = refusal(path, what)
    if cause is not None:
        raise CheckpointError(cause)


@dataclasses.dataclass
class _Scan:
    """What one pickle holds: the first global torch would refuse (`code`), the first opcode torch cannot read
    (`unsupported`), its protocol, the integers it pushes (the legacy format's magic number) and, when it stops
    short or holds bytes that are no pickle, why (`error`)."""

    code: str | None = None
    unsupported: str | None = None
    protocol: int = 0
    values: list[int] = dataclasses.field(default_factory=list)
    error: str | None = None


def _scan(stream: IO[bytes]) -> _Scan:
    """One pickle from `stream` (left just past its STOP) through pickletools.genops: nothing is unpickled.

    STACK_GLOBAL takes its module and name from the stack: the strings pushed just before it, or fetched from the
    memo, are followed here (a global whose name cannot be followed is refused unnamed)."""
    scan = _Scan()
    recent: list[Any] = []  # the last values pushed, where a string; None for anything else
    memo: dict[int, Any] = {}
    try:
        for op, arg, _pos in pickletools.genops(stream):
            name = op.name
            if name not in TORCH_OPCODES and scan.unsupported is None:
                scan.unsupported = name
            if name == "PROTO":
                scan.protocol = int(arg)
            elif name in ("GLOBAL", "INST"):
                module, _, qualname = str(arg).partition(" ")
                _refuse(scan, module, qualname)
                recent.append(None)
            elif name == "STACK_GLOBAL":
                module, qualname = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
                if isinstance(module, str) and isinstance(qualname, str):
                    _refuse(scan, module, qualname)
                elif scan.code is None:
                    scan.code = "a global whose name the scan cannot follow"
                recent.append(None)
            elif name in ("EXT1", "EXT2", "EXT4"):  # copyreg's extension registry: a global by number
                scan.code = scan.code or f"the global registered as copyreg extension {arg}"
                recent.append(None)
            elif name == "MEMOIZE":
                memo[len(memo)] = recent[-1] if recent else None
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = recent[-1] if recent else None
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                recent.append(memo.get(int(arg)))
            elif name in ("FRAME", "MARK", "STOP"):
                pass
            elif isinstance(arg, str) and op.stack_after and op.stack_after[-1].name in ("str", "bytes_or_str"):
                recent.append(arg)
            else:
                if name in ("LONG1", "LONG4", "BININT", "BININT1", "BININT2", "INT", "LONG"):
                    scan.values.append(arg)
                recent.append(None)
            del recent[:-2]
    except ValueError as exc:  # "pickle exhausted before seeing STOP", an unknown opcode byte
        scan.error = "stops short" if "exhausted" in str(exc) else f"is not a pickle: {exc}"
    return scan


def _refuse(scan: _Scan, module: str, qualname: str) -> None:
    """Record `module.qualname` in `scan.code` when torch's safe loader would refuse it (the first one found)."""
    # torch maps Python 2 names as pickle does (torch/_weights_only_unpickler.py, _read_global_instruction)
    if (module, qualname) in _compat_pickle.NAME_MAPPING:
        module, qualname = _compat_pickle.NAME_MAPPING[(module, qualname)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    if scan.code is None and not allowed_global(f"{module}.{qualname}"):
        scan.code = f"{_SHOWN_MODULES.get(module, module)}.{qualname}"


def _cut(detail: str) -> str:
    return f"checkpoint is truncated or corrupt ({detail}); re-save it or copy it again"


def _protocol(scan: _Scan) -> str:
    return (
        f"written with pickle protocol {scan.protocol}, which torch.load(weights_only=True) cannot read (opcode "
        f"{scan.unsupported}); re-save it with torch.save's default protocol"
    )


def _code(name: str) -> str:
    return (
        f"refused: the file contains pickled code that calls {name} when loaded; only plain tensors and "
        "containers are loaded (re-save it as a plain state_dict)"
    )


def _zip_cause(path: Path, size: int) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:  # a zip that starts right but has lost its end: the central directory
        return _cut(f"cut short: a zip of {size} bytes without its central directory at the end")
    except (OSError, ValueError, EOFError) as exc:
        return _cut(str(exc))
    problem = check_zip(path)  # every member's header and data within the file
    if problem is not None:
        return _cut(f"not a complete zip: {problem}")
    # torch.save writes <name>/data.pkl beside <name>/data/<key> (the storages); each such record is scanned, so
    # that a zip holding two cannot show the scan one and torch the other
    pickles = [n for n in names if n == "data.pkl" or n.endswith("/data.pkl")]
    if not pickles:
        return "not a PyTorch checkpoint (a zip archive without data.pkl); give a file written by torch.save"
    for member in pickles:
        try:
            with zipfile.ZipFile(path) as archive:
                scan = _scan(io.BytesIO(archive.read(member)))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:  # a bad CRC or compressed stream
            return _cut(f"{member}: {exc}")
        if scan.code is not None:
            return _code(scan.code)
        if scan.error is not None:
            return _cut(f"{member} {scan.error}")
        if scan.unsupported is not None:
            return _protocol(scan)
    return None


def _legacy_cause(path: Path) -> str | None:
    """A bare pickle: torch.save's legacy format (_use_new_zipfile_serialization=False: five pickles, then the
    storages' bytes) or a pickle.dump that is no checkpoint."""
    with path.open("rb") as fh:
        for number in range(_LEGACY_PICKLES):
            scan = _scan(fh)
            if scan.code is not None:  # pickled code is named first, even in a torn file
                return _code(scan.code)
            if scan.error is not None:
                return _cut(f"its pickled data {scan.error}")
            if number == 0 and scan.values != [_TORCH_MAGIC]:
                return (
                    f"not a PyTorch checkpoint (a plain pickle of protocol {scan.protocol}, not written by "
                    "torch.save); save it with torch.save"
                )
            if scan.unsupported is not None:
                return _protocol(scan)
    return None


# ---------------------------------------------------------------- which checkpoints a folder holds


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, {} when it is absent, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def best_checkpoint(folder: str | Path) -> Path | None:
    """The best `epoch=*.pt` of a trial folder by its metadata JSON (value + mode); last.pt when none is left."""
    folder = Path(folder)
    ranked = []
    for path in folder.glob("epoch=*.pt"):
        meta = read_json(path.with_suffix(".json"))
        value = meta.get("value")
        score = float(value) if isinstance(value, int | float) and math.isfinite(value) else math.inf
        if score != math.inf and meta.get("mode", "max") == "max":
            score = -score
        ranked.append((score, int(meta.get("epoch", 0)), path.name, path))
    if ranked:
        return min(ranked)[-1]
    last = folder / "last.pt"
    return last if last.is_file() else None


def find_checkpoints(root: str | Path) -> list[Path]:
    """The best checkpoint of every trial folder under `root` (a folder without ResoMap's epoch=*.pt / last.pt:
    each of its *.pt, so that a file that cannot be loaded is reported as such); a missing or empty root is an
    error."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(
            f"{root}: checkpoint folder not found; train first (resomap sweep) or fix --checkpoint-dir"
        )
    found = []
    for folder in sorted({p.parent for p in root.rglob("*.pt")}):
        best = best_checkpoint(folder)
        found += [best] if best is not None else sorted(folder.glob("*.pt"))  # other names: each tried as it is
    if not found:
        raise CheckpointError(f"{root}: no trained checkpoints (*.pt) found; train first (resomap sweep)")
    return found


def none_analysed(root: str | Path, reasons: list[str]) -> str:
    """`resomap analyze`'s line when no checkpoint under `root` could be analysed: the first reason, and how many
    more."""
    more = len(reasons) - 1
    also = f" (and {more} more, each named in the log)" if more else ""
    return f"{root}: no checkpoint could be analysed: {reasons[0]}{also}"
