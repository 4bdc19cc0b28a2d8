"""Classification metrics (sklearn) and a readable confusion-matrix figure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int, prefix: str = "val") -> dict:
    """`{prefix}/accuracy`, `{prefix}/macro_precision`, `{prefix}/macro_recall`, `{prefix}/macro_f1`.

    Macro averages run over every class in range(num_classes) (absent classes count as 0, zero_division=0).
    """
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support  # slow import: only when used

    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    if y_true.size == 0:
        nan = float("nan")
        return {f"{prefix}/{k}": nan for k in ("accuracy", "macro_precision", "macro_recall", "macro_f1")}
    precision, recall, f1, _ = precision_recall_fscore_support(
        y_true, y_pred, labels=list(range(num_classes)), average="macro", zero_division=0
    )
    return {
        f"{prefix}/accuracy": float(accuracy_score(y_true, y_pred)),
        f"{prefix}/macro_precision": float(precision),
        f"{prefix}/macro_recall": float(recall),
        f"{prefix}/macro_f1": float(f1),
    }


def confusion_matrix_figure(
    y_true: np.ndarray, y_pred: np.ndarray, class_names: Sequence[str], title: str = "Confusion matrix"
):
    """A matplotlib Figure (Agg): cells coloured by row-normalised rate, annotated with count and percent."""
    from sklearn.metrics import confusion_matrix

    cm = confusion_matrix(np.asarray(y_true), np.asarray(y_pred), labels=list(range(len(class_names))))
    return counts_figure(cm, class_names, title)


def counts_figure(cm: np.ndarray, class_names: Sequence[str], title: str, unit: str = "true class"):
    """A confusion matrix of counts (rows true, columns predicted) as a Figure: cells coloured by the row's rate,
    annotated with count and percent; `unit` names what the rows count (a class's images or its pixels)."""
    from matplotlib.figure import Figure  # Figure() needs no pyplot state and renders with Agg

    from resomap.plotstyle import class_labels, glyph_fonts

    class_names = class_labels(class_names)  # by index where no installed font draws one
    n = len(class_names)
    rows = cm.sum(axis=1, keepdims=True)
    rate = np.divide(cm, rows, out=np.zeros(cm.shape, dtype=float), where=rows > 0)
    side = max(3.5, 0.6 * n + 2.0)
    fig = Figure(figsize=(side + 1.0, side), layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(rate, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=f"fraction of {unit}")
    ax.set_xticks(range(n), labels=list(class_names), rotation=45 if n > 3 else 0, ha="right" if n > 3 else "center")
    ax.set_yticks(range(n), labels=list(class_names))
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    font = 9 if n <= 8 else 7
    for i in range(n):
        for j in range(n):
            color = "white" if rate[i, j] > 0.5 else "black"
            ax.text(j, i, f"{cm[i, j]}\n{rate[i, j]:.0%}", ha="center", va="center", color=color, fontsize=font)
    glyph_fonts(fig, ticks=True)  # a class name in a script the style's font lacks: an installed font that has it
    return fig
