"""Class names in scripts the style's font (DejaVu Sans) lacks, CJK for one: drawn with an installed font that has
their glyphs, else named by class index with one note; never boxes with matplotlib's "Glyph ... missing" warnings
(a CJK class name gave 11 of them per sweep, and boxes in every figure)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

from resomap import plotstyle

CAT, DOG = "\u732b", "\u72ac"  # the CJK ideographs for cat and dog
FAMILY = "ResoMap Test CJK"


def _cjk_font(path: Path) -> Path:
    """A TrueType font with a glyph (a filled square) for the two ideographs and the space, nothing else."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    def square():
        pen = TTGlyphPen(None)
        pen.moveTo((100, 0))
        pen.lineTo((100, 700))
        pen.lineTo((900, 700))
        pen.lineTo((900, 0))
        pen.closePath()
        return pen.glyph()

    order = [".notdef", "space", "cat", "dog"]
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder(order)
    fb.setupCharacterMap({32: "space", ord(CAT): "cat", ord(DOG): "dog"})
    fb.setupGlyf({".notdef": square(), "space": TTGlyphPen(None).glyph(), "cat": square(), "dog": square()})
    fb.setupHorizontalMetrics({name: (1000, 100) for name in order})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": FAMILY, "styleName": "Regular"})
    fb.setupOS2(sTypoAscender=800, sTypoDescender=-200, usWinAscent=800, usWinDescent=200)
    fb.setupPost()
    fb.save(str(path))
    return path


@pytest.fixture
def fonts(monkeypatch: pytest.MonkeyPatch):
    """matplotlib's font list as this test sets it (restored after), the plot style's font caches empty."""
    from matplotlib import font_manager

    monkeypatch.setattr(font_manager.fontManager, "ttflist", list(font_manager.fontManager.ttflist))
    for cache in ("_CHARMAPS", "_FONT_FOR"):
        monkeypatch.setattr(plotstyle, cache, {})
    monkeypatch.setattr(plotstyle, "_NOTED", False)
    font_manager.fontManager._findfont_cached.cache_clear()
    yield font_manager.fontManager
    font_manager.fontManager._findfont_cached.cache_clear()


def _drawn(fig, path: Path) -> list[str]:
    """Save `fig` as a PNG: the glyph warnings matplotlib gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(path)
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_a_class_name_an_installed_font_draws_is_drawn_with_that_font(fonts, tmp_path: Path, caplog):
    from resomap.tasks.metrics import counts_figure

    fonts.addfont(str(_cjk_font(tmp_path / "cjk.ttf")))
    assert plotstyle.glyph_font(f"{CAT} 2") == FAMILY and plotstyle.glyph_font("cat") == ""
    with caplog.at_level(logging.WARNING, logger="resomap"):
        assert plotstyle.class_labels([DOG, CAT, "bird"]) == [DOG, CAT, "bird"]
    assert not caplog.records
    fig = counts_figure(np.array([[3, 1], [0, 4]]), [DOG, CAT], "test confusion matrix")
    ticks = [t for t in fig.axes[0].get_xticklabels() if t.get_text() in (DOG, CAT)]
    assert len(ticks) == 2 and all(FAMILY in t.get_fontfamily() for t in ticks)
    assert _drawn(fig, tmp_path / "cm.png") == []
    # any figure saved through the plot style gets the font for its texts (the probe maps' captions, titles)
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().set_title(f"#3 {CAT}\nlost at 32 px")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plotstyle.save_figure(fig, tmp_path, "titled", formats=("png",))
    assert not [w for w in caught if "missing from font" in str(w.message)]
    assert FAMILY in fig.axes[0].title.get_fontfamily()


def test_without_such_a_font_a_class_is_named_by_its_index_in_one_note(fonts, tmp_path: Path, caplog):
    from resomap.tasks.metrics import counts_figure

    fonts.ttflist = [f for f in fonts.ttflist if "DejaVu" in f.name]  # a machine with no CJK font (this one)
    assert plotstyle.glyph_font(CAT) is None
    with caplog.at_level(logging.WARNING, logger="resomap"):
        assert plotstyle.class_labels([DOG, CAT, "bird"]) == ["class 0", "class 1", "bird"]
        assert plotstyle.class_label(CAT, 1) == "class 1"
        fig = counts_figure(np.array([[3, 1], [0, 4]]), [DOG, CAT], "test confusion matrix")
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "figures name such classes by index (class 0)" in notes[0], notes
    assert "install a font that has them" in notes[0]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["class 0", "class 1"]
    assert _drawn(fig, tmp_path / "cm.png") == []
    # what the fallback replaces: the same figure drawn with the names themselves shows boxes and warns per glyph
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().set_title(f"{DOG} {CAT}")
    assert len(_drawn(fig, tmp_path / "boxes.png")) == 2
