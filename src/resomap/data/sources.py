"""The ELPV solar-cell dataset (elpv-dataset package).

ELPV: 2,624 grayscale 300x300 electroluminescence images of solar cells with defect probabilities
{0, 1/3, 2/3, 1} and the cell type (mono/poly). Licence: CC BY-NC-SA 4.0 (Buerhop-Lutz et al., Deitsch et al.).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from resomap.config.schema import DataConfig
from resomap.data.registry import digest, register_dataset
from resomap.errors import DataError

log = logging.getLogger(__name__)

# load_dataset() decodes all 2,624 PNGs (~4 s): kept per process so several resolutions/trials load once.
_ELPV_IMAGES: np.ndarray | None = None
_ELPV_LOCK = threading.Lock()

TASK_CLASSES = {
    "defect": ["functional", "defective"],
    "defect4": ["p=0", "p=1/3", "p=2/3", "p=1"],
    "type": ["mono", "poly"],
}


def _labels_file() -> Path:
    try:
        import elpv_dataset
    except ImportError:
        raise DataError(
            "data.dataset is 'elpv' but the elpv-dataset package is missing; pip install elpv-dataset"
        ) from None
    return Path(elpv_dataset.__file__).parent / "data" / "labels.csv"


def elpv_images() -> np.ndarray:
    """All ELPV images, uint8 [2624, 300, 300], loaded once per process."""
    global _ELPV_IMAGES
    with _ELPV_LOCK:
        if _ELPV_IMAGES is None:
            from elpv_dataset.utils import load_dataset

            log.info("loading the ELPV images (once per process)")
            images, _, _ = load_dataset()
            _ELPV_IMAGES = np.ascontiguousarray(images, dtype=np.uint8)
        return _ELPV_IMAGES


NATIVE_SIZE = 300  # every ELPV cell image is 300 x 300 px
PROBABILITY_NAMES = ["p=0", "p=1/3", "p=2/3", "p=1"]


class ElpvDataset:
    """Labels come from labels.csv alone; the images are decoded only when `load` is first called.

    `confidence`: how sure the raters were of each image's label, the probability of the label given (defect: p for
    a defective cell, 1 - p for a functional one, so 1 at p = 0 or 1 and 2/3 at p = 1/3 or 2/3; 1 for the other
    tasks). `strata` (with stratify='probability_type'): the defect probability x cell type groups that Deitsch et
    al. (2019) kept in proportion in their split."""

    channels = 1
    has_masks = False
    native_size = NATIVE_SIZE

    def __init__(self, task: str, stratify: str = "label"):
        if task not in TASK_CLASSES:
            raise DataError(f"data.elpv.task '{task}' is not an ELPV task; use one of {', '.join(TASK_CLASSES)}")
        path = _labels_file()
        rows = np.genfromtxt(path, dtype=["|S19", "<f8", "|S4"], names=["path", "probability", "type"])
        probs = rows["probability"]
        types = np.char.decode(rows["type"])
        self._paths = np.char.decode(rows["path"])
        level = np.rint(probs * 3).astype(np.int64)  # 0..3: p = 0, 1/3, 2/3, 1
        if task == "defect":
            labels = probs >= 0.5
        elif task == "defect4":
            labels = level
        else:
            labels = types == "poly"
        self.labels = labels.astype(np.int64)
        self.confidence = np.where(labels, probs, 1.0 - probs) if task == "defect" else np.ones(len(probs))
        self.strata = None
        if stratify == "probability_type":
            poly = (types == "poly").astype(np.int64)
            names = [f"{p} {t}" for p in PROBABILITY_NAMES for t in ("mono", "poly")]
            self.strata = (level * 2 + poly, names)
        # the groups a summary decides each model on separately (stats.groups): cell type and defect probability
        self.groups = {
            "cell_type": ((types == "poly").astype(np.int64), ["mono", "poly"]),
            "defect_probability": (level, list(PROBABILITY_NAMES)),
        }
        self.class_names = list(TASK_CLASSES[task])
        self.task = task
        self.fingerprint = "elpv-" + digest([path.read_bytes()])

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, i: int) -> np.ndarray:
        return elpv_images()[i]

    def mask(self, i: int) -> np.ndarray:
        raise DataError("the ELPV dataset has no object masks")

    def name(self, i: int) -> str:
        return str(self._paths[i])


@dataclass(frozen=True)
class ElpvOptions:
    task: Literal["defect", "defect4", "type"] = "defect"  # defect (p >= 0.5), 4 levels, or mono/poly
    stratify: Literal["label", "probability_type"] = "label"  # split strata: the label, or probability x cell type


@register_dataset(
    "elpv",
    options=ElpvOptions,
    channels=1,
    masks=False,
    images=2624,
    classes=lambda o: TASK_CLASSES.get(o.task),
    native=NATIVE_SIZE,
    confidence=True,
    groups=["cell_type", "defect_probability"],
    symmetries=("hflip", "vflip", "rot90"),  # square cells: flips and quarter turns keep a defect (Deitsch et al.)
)
def elpv(cfg: DataConfig, options: ElpvOptions) -> ElpvDataset:
    return ElpvDataset(options.task, options.stratify)
