"""``--plot`` writes every format matplotlib writes, reproducibly, and refuses the rest before
any work (sim/output/plot_formats.py, sim/output/plot.py, sim/output/paths.py)."""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from sim.cli.main import build_parser, main
from sim.errors import ConfigError, excerpt
from sim.output.plot_formats import check_plot_path, plot_format


def _formats() -> list[str]:
    try:
        from sim.output.plot_formats import plot_formats

        return list(plot_formats())
    except ImportError:  # no matplotlib: the tests below that need it skip
        return []


FORMATS = _formats()

# The first bytes of each format (PNG, PDF 1.7 7.5.2, RFC 1952, Adobe DSC 3.0, JFIF, TIFF 6.0,
# GIF89a, ISO BMFF's ftyp box); raw RGBA has none (its size is width x height x 4).
MAGIC = {"png": (0, b"\x89PNG\r\n\x1a\n"), "pdf": (0, b"%PDF-"), "svg": (0, b"<?xml"), "svgz": (0, b"\x1f\x8b"),
         "eps": (0, b"%!PS-Adobe-3.0 EPSF-3.0"), "ps": (0, b"%!PS-Adobe-3.0"), "jpg": (0, b"\xff\xd8\xff"),
         "jpeg": (0, b"\xff\xd8\xff"), "tif": (0, b"II*\x00"), "tiff": (0, b"II*\x00"), "gif": (0, b"GIF8"),
         "webp": (8, b"WEBP"), "avif": (4, b"ftypavif"), "pgf": (0, b"%% Creator: Matplotlib, PGF backend")}
PILLOW = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF", "tiff": "TIFF", "gif": "GIF", "webp": "WEBP", "avif": "AVIF",
          "png": "PNG"}
TEXT = ("pdf", "svg", "svgz", "eps", "ps")  # formats whose metadata is text we can look at


@pytest.fixture(scope="module")
def memory_figure():
    """A writer of ``llmsim memory tiny``'s figure (two recomputation methods) to a path."""
    pytest.importorskip("matplotlib")
    from sim.config import load_workload
    from sim.memory import memory_table
    from sim.output.plot import plot_memory
    from sim.types import RecomputeKind

    w = load_workload("tiny")
    table = memory_table(w, [RecomputeKind.NONE, RecomputeKind.FULL])
    return lambda path: plot_memory(table, str(path), "tiny")


def _writable(fmt: str) -> bool:
    try:
        check_plot_path(f"x.{fmt}")
        return True
    except ConfigError:
        return False


def _readable(fmt: str, data: bytes) -> None:
    """Assert ``data`` is a well-formed file of ``fmt`` (as far as the standard library and
    Pillow can tell)."""
    assert data, fmt
    if fmt in MAGIC:
        at, magic = MAGIC[fmt]
        assert data[at:at + len(magic)] == magic, (fmt, data[:16])
    if fmt == "svgz":
        data = gzip.decompress(data)
    if fmt in ("svg", "svgz"):
        assert ET.fromstring(data).tag.endswith("svg")
    elif fmt == "pdf":
        assert data.rstrip().endswith(b"%%EOF")
    elif fmt in ("ps", "eps"):
        assert b"%%EndProlog" in data and data.rstrip().endswith((b"showpage", b"%%EOF"))
    elif fmt in ("raw", "rgba"):
        assert len(data) == 912 * 504 * 4  # plot_memory's figure: 7.6 x 4.2 in at 120 dpi
    elif fmt in PILLOW:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            assert im.format == PILLOW[fmt] and im.size == (912, 504), (im.format, im.size)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_matplotlib_writes_is_written_readable_and_the_same_twice(fmt, memory_figure, tmp_path):
    if not _writable(fmt):  # e.g. PGF without TeX: refused before any work (below), not written
        pytest.skip(f".{fmt} cannot be written in this installation")
    first, second = tmp_path / f"a.{fmt}", tmp_path / "sub" / f"b.{fmt.upper()}"
    memory_figure(first)
    memory_figure(second)  # another name, a folder to make, the suffix in capitals
    _readable(fmt, first.read_bytes())
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f in TEXT])
def test_no_date_or_version_in_the_metadata(fmt, memory_figure, tmp_path, monkeypatch):
    import matplotlib

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    path = tmp_path / f"m.{fmt}"
    memory_figure(path)
    data = path.read_bytes()
    if fmt == "svgz":
        assert data[4:8] == b"\0\0\0\0"  # RFC 1952 MTIME: no time stamp
        data = gzip.decompress(data)
    assert f"v{matplotlib.__version__}".encode() not in data
    assert str(time.localtime().tm_year).encode() not in data
    assert b"CreationDate (D:" not in data and b"<dc:date>" not in data
    if fmt in ("eps", "ps"):
        assert b"%%CreationDate: Thu Jan 01 00:00:00 1970" in data  # SOURCE_DATE_EPOCH=0
    assert "SOURCE_DATE_EPOCH" not in __import__("os").environ  # restored


def _plot_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every (sub)command of ``parser`` with a ``--plot`` option, as the words that name it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _plot_commands(sub, prefix + (name,))
        elif "--plot" in action.option_strings:
            yield prefix


PLOT_COMMANDS = sorted(set(_plot_commands(build_parser())))
REQUIRED = {("compare",): ["--topology", "dgx-a100"]}
"""Options a command's parser requires besides ``--plot``."""


def test_the_commands_with_plot_are_found():
    assert {("memory",), ("compare",), ("sweep",), ("roofline",), ("whatif", "generations"), ("whatif", "nodes"),
            ("whatif", "memory")} <= set(PLOT_COMMANDS)


@pytest.mark.parametrize("command", PLOT_COMMANDS, ids=["-".join(c) for c in PLOT_COMMANDS])
@pytest.mark.parametrize("name", ["fig.foo", "fig", "fig.json"])
def test_an_unknown_suffix_stops_every_command_before_any_work(command, name, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / name
    assert main([*command, *REQUIRED.get(command, []), "--plot", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: --plot: expected"), err
    assert ".png" in lines[0] and ".svg" in lines[0] and excerpt(str(path)) in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", PLOT_COMMANDS, ids=["-".join(c) for c in PLOT_COMMANDS])
def test_without_matplotlib_every_command_stops_before_any_work(command, tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert main([*command, *REQUIRED.get(command, []), "--plot", str(tmp_path / "fig.png")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "matplotlib" in lines[0] and "pip install 'llmsim[plot]'" in lines[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_format_the_installation_cannot_write_is_refused_with_the_reason(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    import matplotlib

    monkeypatch.setitem(matplotlib.rcParams, "pgf.texsystem", "lualatex")  # PGF measures text with it,
    monkeypatch.setenv("PATH", str(tmp_path))  # and finds none here
    out_dir = tmp_path / "out"
    assert main(["memory", "tiny", "--plot", str(out_dir / "fig.pgf")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "error: --plot: expected a format this installation writes (.pgf fails here: " in err
    assert "lualatex" in err
    assert not out_dir.exists()


@pytest.mark.parametrize("argv", [["memory", "tiny"], ["roofline", "--gpu", "A100", "--phase", "decode"]])
def test_an_svg_is_drawn_by_the_command(argv, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "fig.svg"
    assert main([*argv, "--plot", str(path)]) == 0
    _readable("svg", path.read_bytes())


def test_plot_format_is_the_suffix_in_lower_case():
    assert [plot_format(p) for p in ("a.PDF", "dir.v2/fig", "fig.tar.svgz", ".svg")] == ["pdf", "", "svgz", ""]
