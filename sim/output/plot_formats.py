"""The file formats ``--plot`` writes: which ones, checked before any work, and how each is
written so that the same figure gives the same bytes.

matplotlib picks the format from the file's suffix, case aside, among the formats its canvas
lists (``FigureCanvasBase.get_supported_filetypes()``: with matplotlib 3.11 and Pillow
``avif eps gif jpeg jpg pdf pgf png ps raw rgba svg svgz tif tiff webp``). Some of them
need more than matplotlib: the Pillow formats need Pillow built with their codec, and PGF
needs a TeX installation (``rcParams["pgf.texsystem"]``, xelatex by default) to measure the
text. :func:`check_plot_path` therefore draws a small figure with text in the asked format
into memory, with the same writer the commands use, so that a format this installation cannot
write is refused before a simulation of minutes rather than after it; and without matplotlib
it says how to install it.

What :func:`figure_bytes` does per format for reproducible bytes (matplotlib's
``Figure.savefig`` documentation of ``metadata``, and its backends ``backend_agg``,
``backend_pdf._create_pdf_info_dict``, ``backend_svg.RendererSVG._write_metadata``,
``backend_ps._print_ps``):

* PNG: the ``Software`` text chunk, matplotlib's version, left out (``Software: None``).
* PDF: ``Creator`` and ``Producer`` (each with matplotlib's version) and ``CreationDate``
  (today) left out, as ``None`` values remove them.
* SVG and SVGZ: ``Creator`` (with the version) and ``Date`` (today) left out; the element ids,
  hashes salted with a random UUID unless ``rcParams["svg.hashsalt"]`` is set, salted with a
  fixed string. SVGZ is the SVG gzip-compressed here with a zero time stamp (RFC 1952's MTIME
  field; matplotlib's own SVGZ writer stamps the current time and the file name).
* PS and EPS: ``%%Creator`` is ``llmsim`` (a string is required), and the ``%%CreationDate``
  comment, which cannot be left out, is the time ``SOURCE_DATE_EPOCH`` gives (the
  reproducible-builds convention, https://reproducible-builds.org/specs/source-date-epoch/,
  that matplotlib reads), 0 (1 January 1970) unless the user set it.
* JPEG, TIFF, WebP, GIF, AVIF (written by Pillow), raw RGBA and PGF: no metadata is accepted
  or written; their bytes follow from the pixels or the drawing commands (and, for the Pillow
  formats, the encoder's version).
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sim.errors import ConfigError

__all__ = ["INSTALL_HINT", "plot_formats", "plot_format", "figure_bytes", "check_plot_path"]

INSTALL_HINT = "pip install 'llmsim[plot]'"
"""How to install the optional dependency ``--plot`` needs (matplotlib)."""

SVG_HASH_SALT = "llmsim"
"""The fixed salt of the SVG element ids (``rcParams["svg.hashsalt"]``)."""

_METADATA: dict[str, dict[str, str | None]] = {
    "png": {"Software": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    "svg": {"Creator": None, "Date": None},
    "ps": {"Creator": "llmsim"},
    "eps": {"Creator": "llmsim"},
}
"""``savefig(metadata=...)`` per format (the formats not listed take none)."""

_EXCERPT = 160
"""Characters of a writer's error message quoted when a format cannot be written here."""


def plot_formats() -> tuple[str, ...]:
    """The suffixes (without the dot, sorted) of the formats matplotlib writes.

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    from matplotlib.backend_bases import FigureCanvasBase

    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))


def plot_format(path: str) -> str:
    """The format ``path`` asks for: its suffix, lower case, without the dot ('' if none).

    >>> plot_format("out/Memory.SVG"), plot_format("figure")
    ('svg', '')
    """
    return Path(path).suffix[1:].lower()


@contextmanager
def _source_date() -> Iterator[None]:
    """``SOURCE_DATE_EPOCH`` set to 0 within, unless it is set already."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        yield
        return
    os.environ["SOURCE_DATE_EPOCH"] = "0"
    try:
        yield
    finally:
        os.environ.pop("SOURCE_DATE_EPOCH", None)


def figure_bytes(fig, fmt: str) -> bytes:
    """``fig`` (a matplotlib figure) written in format ``fmt`` (a suffix of
    :func:`plot_formats`), reproducibly as the module's docstring describes."""
    import matplotlib

    base = "svg" if fmt == "svgz" else fmt
    kwargs = {"metadata": _METADATA[base]} if base in _METADATA else {}
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": SVG_HASH_SALT}), _source_date():
        fig.savefig(buf, format=base, **kwargs)
    data = buf.getvalue()
    return gzip.compress(data, mtime=0) if fmt == "svgz" else data


def _probe(fmt: str) -> None:
    """Write a small figure with text in ``fmt`` into memory (the text makes PGF measure it
    with TeX); raises what the writer raises."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1.0, 1.0), dpi=20)
    fig.add_subplot().set_title("x")
    figure_bytes(fig, fmt)


def check_plot_path(path: str, option: str = "--plot") -> None:
    """Raise :class:`~sim.errors.ConfigError` (naming ``option``) unless a figure can be
    written to ``path``: matplotlib is installed, ``path`` ends in a suffix of
    :func:`plot_formats`, and this installation writes that format.

    Nothing is written to ``path``.
    """
    where = f"<{option}>"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(where, option, f"matplotlib installed to draw a figure: {INSTALL_HINT}", path) from None
    formats = plot_formats()
    fmt = plot_format(path)
    if fmt not in formats:
        raise ConfigError(where, option, "a file name ending in a format matplotlib writes: "
                          + ", ".join(f".{f}" for f in formats), path)
    try:
        _probe(fmt)
    except Exception as e:  # noqa: BLE001 -- whatever the writer raises, reported as one line
        reason = " ".join(str(e).split())[:_EXCERPT] or type(e).__name__
        raise ConfigError(where, option, f"a format this installation writes (.{fmt} fails here: {reason})",
                          path) from None
