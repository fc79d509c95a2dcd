"""A one-page HTML report of one simulated iteration (``llmsim run --html PATH``).

The page is self-contained: inline CSS, inline SVG charts drawn here (no plotting library), a
few lines of inline JavaScript and no ``src``/``href`` that a browser would fetch, so it opens
from disk, from a CI artifact or attached to an e-mail. It shows what ``llmsim run`` prints:
the summary (workload, GPUs, parallel layout, iteration time, the measured time when the
workload has one, throughput, MFU and HFU), where the time goes (one stacked bar of the
iteration split into compute by kind, exposed communication by dimension and the bubble, as
:func:`sim.output.report.make_report` computes them, and one bar per pipeline stage), the memory of
each stage (weights, gradients, optimizer state, activations and other buffers from
:func:`sim.memory.memory_table`, the simulated peak as a tick, the GPU's capacity as a dashed
line) and the notes.

Every number drawn or printed carries ``data-key`` (its path in :meth:`Report.to_dict`, or
``memory.<stage>.<field>`` in :meth:`StageMemory.to_dict`) and ``data-value`` (the number itself,
``repr`` of the float), so a test or a script can read the page back and find the report's
numbers exactly. Bar lengths are proportional to ``data-seconds`` (time bars) or ``data-value``
(memory bars). The bytes depend only on the inputs: no date, no wall-clock time.

Perfetto (https://ui.perfetto.dev) cannot be pointed at a local file by a link; the page says
to use its "Open trace file" and links the trace written beside it. When the page is served
over HTTP (``python -m http.server`` in its folder), its "Open in Perfetto" button fetches the
trace and hands it to the UI with the ``window.open`` + ``PING``/``PONG`` + ``postMessage``
recipe of Perfetto's "Deep linking to the Perfetto UI" (perfetto.dev/docs/visualization/
deep-linking-to-perfetto-ui); ``localhost`` is a trusted origin there, so the trace opens
without a prompt (``ui/src/frontend/post_message_handler.ts::isTrustedOrigin``). A ``file://``
page has the origin ``"null"``, which that handler cannot answer, so the button then only
explains what to do.
"""

from __future__ import annotations

import html
import math
import numbers
import os
from collections.abc import Sequence
from pathlib import Path

from sim.memory import StageMemory
from sim.output.report import Report
from sim.units import GiB
from sim.version import __version__

__all__ = ["html_report", "write_html_report", "PERFETTO_UI"]

PERFETTO_UI = "https://ui.perfetto.dev"
_BAR_W = 720.0
"""Width in px of the iteration's stacked bar: the iteration time."""
_MEM_H = 240.0
"""Height in px of the memory chart's plot area: the top of its axis."""
_COLORS = {
    "gemm": "#4e79a7", "attention": "#59a14f", "elementwise": "#9c755f", "norm": "#b07aa1",
    "embedding": "#76b7b2", "loss": "#edc948", "optimizer": "#bab0ac",
    "tp": "#e15759", "pp": "#f28e2b", "dp": "#ff9da7", "cp": "#d37295", "ep": "#fabfd2",
    "bubble": "#d9d9d9", "compute": "#4e79a7", "exposed": "#e15759", "idle": "#d9d9d9",
    "weights_bytes": "#4e79a7", "grads_bytes": "#f28e2b", "optimizer_bytes": "#59a14f",
    "activations_bytes": "#e15759", "other_bytes": "#bab0ac", "peak_memory_bytes": "#9c755f",
}
_MEMORY_PARTS = (("weights_bytes", "weights"), ("grads_bytes", "gradients"), ("optimizer_bytes", "optimizer state"),
                 ("activations_bytes", "activations"), ("other_bytes", "other buffers"))
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1000px;
padding:0 16px;color:#222}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#555;margin:0 0 12px}table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;text-align:left;
vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}th{font-weight:600}
svg{max-width:100%;height:auto;display:block;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#333}
.legend{list-style:none;padding:0;margin:4px 0;display:flex;flex-wrap:wrap;gap:4px 14px}
.sw{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px;border:1px solid #0003}
.bad{color:#b00;font-weight:600}code{background:#f3f3f3;padding:0 3px}button{font:inherit}
.notes li{margin:2px 0}#perfetto-status{color:#555}
"""
_JS = """
(function () {
  "use strict";
  var root = document.documentElement;
  window.addEventListener("error", function (e) { root.setAttribute("data-js-error", String(e.message)); });
  var ORIGIN = "https://ui.perfetto.dev";
  var button = document.getElementById("open-perfetto");
  var status = document.getElementById("perfetto-status");
  function say(text) { if (status) { status.textContent = text; } }
  if (button) {
    button.addEventListener("click", function () {
      var href = button.getAttribute("data-trace");
      if (location.protocol === "file:") {
        say("This page was opened from disk, which Perfetto cannot receive a trace from: use its " +
            "\\u201cOpen trace file\\u201d with " + href + ", or serve this folder (python -m http.server) " +
            "and open the page from http://localhost.");
        return;
      }
      var win = window.open(ORIGIN);
      if (!win) { say("The browser blocked the new tab; allow pop-ups for this page."); return; }
      say("Reading " + href + " ...");
      fetch(href).then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.arrayBuffer();
      }).then(function (buffer) {
        var tries = 0;
        var timer = setInterval(function () {
          tries += 1;
          if (tries > 600) { clearInterval(timer); say("Perfetto did not answer."); return; }
          win.postMessage("PING", ORIGIN);
        }, 50);
        window.addEventListener("message", function onMessage(evt) {
          if (evt.source !== win || evt.data !== "PONG") { return; }
          clearInterval(timer);
          window.removeEventListener("message", onMessage);
          win.postMessage({perfetto: {buffer: buffer, title: button.getAttribute("data-title"), fileName: href}},
                          ORIGIN);
          say("Sent " + href + " to Perfetto.");
        });
      }).catch(function (err) { say("Could not read " + href + ": " + err.message); });
    });
  }
  root.setAttribute("data-js", "ok");
}());
"""


def _e(text: object) -> str:
    """Escape text for an HTML element or a double-quoted attribute."""
    return html.escape(str(text), quote=True)


def _num(value: float | int) -> str:
    """A number as ``data-value`` text: ``repr`` of the float (exact round trip), ints as ints."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"not a number: {value!r}")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return repr(float(value))


def _data(key: str, value: float | int, **extra: float) -> str:
    """``data-key``/``data-value`` attributes (and ``data-<name>`` for each extra number)."""
    more = "".join(f' data-{k}="{_num(v)}"' for k, v in extra.items())
    return f' data-key="{_e(key)}" data-value="{_num(value)}"{more}'


def _px(x: float) -> str:
    return f"{x:.3f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _nice_step(top: float, ticks: int = 6) -> float:
    """A 1-2-5 step that puts at most ``ticks`` ticks on ``[0, top]``.

    >>> _nice_step(13.7), _nice_step(80.0), _nice_step(0.004)
    (5.0, 20.0, 0.001)
    """
    if top <= 0:
        return 1.0
    raw = top / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return float(round(m * mag, 12))
    return float(10 * mag)  # pragma: no cover - the loop always returns


def _legend(items: Sequence[tuple[str, str]]) -> str:
    lis = "".join(f'<li><span class="sw" style="background:{_COLORS[c]}"></span>{_e(label)}</li>' for c, label in items)
    return f'<ul class="legend">{lis}</ul>'


def _segments(r: Report) -> list[tuple[str, str, str, float, float]]:
    """The iteration's parts: (colour, label, data-key, JSON value, seconds), as the table prints them."""
    T = r.iteration_time_s
    out = [(k, k, f"compute_s.{k}", v, v) for k, v in
           sorted(((k, v) for k, v in r.compute_s.items() if k != "total"), key=lambda kv: (-kv[1], kv[0]))]
    out += [(c, f"exposed {c} comm", f"exposed_comm_s.{c}", v, v) for c, v in r.exposed_comm_s.items() if v > 0]
    out.append(("bubble", "pipeline bubble, idle", "bubble_fraction", r.bubble_fraction, r.bubble_fraction * T))
    return out


def _time_chart(r: Report) -> str:
    """One stacked bar as long as the iteration, with a seconds axis."""
    T = r.iteration_time_s
    scale = _BAR_W / T if T > 0 else 0.0
    x0, y0, h = 10.0, 10.0, 34.0
    parts, x = [], x0
    for color, label, key, value, seconds in _segments(r):
        w = seconds * scale
        parts.append(f'<rect x="{_px(x)}" y="{_px(y0)}" width="{_px(w)}" height="{_px(h)}" fill="{_COLORS[color]}"'
                     f'{_data(key, value, seconds=seconds)}><title>{_e(label)}: {seconds:.3f} s '
                     f'({_pct(seconds / T if T else 0.0)})</title></rect>')
        x += w
    step = _nice_step(T)
    ticks = []
    for i in range(int(T / step + 1e-9) + 1):
        t = i * step
        tx = x0 + t * scale
        ticks.append(f'<line x1="{_px(tx)}" y1="{_px(y0 + h)}" x2="{_px(tx)}" y2="{_px(y0 + h + 4)}" stroke="#555"/>'
                     f'<text x="{_px(tx)}" y="{_px(y0 + h + 16)}" text-anchor="middle">{t:g} s</text>')
    width, height = x0 * 2 + _BAR_W, y0 + h + 24
    legend = _legend([(c, label) for c, label, *_ in _segments(r)])
    return (f'<svg id="time-chart" role="img" aria-label="where the iteration time goes" viewBox="0 0 {_px(width)} '
            f'{_px(height)}" width="{_px(width)}" height="{_px(height)}" data-scale="{_num(scale)}">'
            + "".join(parts) + "".join(ticks) + "</svg>" + legend)


def _stage_chart(r: Report) -> str:
    """One bar per pipeline stage: compute, exposed communication, idle (each stage's own)."""
    T = max([r.iteration_time_s] + [s.compute_s + s.exposed_comm_s + s.idle_s for s in r.stages])
    scale = _BAR_W / T if T > 0 else 0.0
    label_w, row_h, bar_h = 60.0, 20.0, 14.0
    rows = []
    for i, s in enumerate(r.stages):
        y = 6.0 + i * row_h
        x = label_w
        rows.append(f'<text x="{_px(label_w - 6)}" y="{_px(y + bar_h - 3)}" text-anchor="end">stage {s.stage}</text>')
        for color, field, value in (("compute", "compute_s", s.compute_s),
                                    ("exposed", "exposed_comm_s", s.exposed_comm_s),
                                    ("idle", "idle_s", s.idle_s)):
            w = value * scale
            rows.append(f'<rect x="{_px(x)}" y="{_px(y)}" width="{_px(w)}" height="{_px(bar_h)}" '
                        f'fill="{_COLORS[color]}"{_data(f"stages.{i}.{field}", value, seconds=value)}>'
                        f'<title>stage {s.stage} {field.removesuffix("_s").replace("_", " ")}: '
                        f'{value:.3f} s</title></rect>')
            x += w
    width, height = label_w + _BAR_W + 12, 12.0 + len(r.stages) * row_h
    legend = _legend([("compute", "compute"), ("exposed", "exposed communication"), ("idle", "idle (bubble, waiting)")])
    return (f'<svg id="stage-chart" role="img" aria-label="time per pipeline stage" viewBox="0 0 {_px(width)} '
            f'{_px(height)}" width="{_px(width)}" height="{_px(height)}" data-scale="{_num(scale)}">'
            + "".join(rows) + "</svg>" + legend)


def _memory_chart(r: Report, memory: Sequence[StageMemory] | None) -> str:
    """Stacked bars of each stage's memory at its peak (GiB axis), the simulated peak as a tick,
    the GPU's capacity as a dashed line."""
    stages = r.stages
    cap = max((s.capacity_bytes for s in stages), default=0.0)
    tops = [s.peak_memory_bytes for s in stages] + ([m.total_bytes for m in memory] if memory else [])
    top = max([cap] + tops) * 1.08 or 1.0
    scale = _MEM_H / top
    left, y_base, bar_w, gap = 48.0, 10.0 + _MEM_H, 26.0, 14.0
    out = []
    step = _nice_step(top / GiB)
    for i in range(int(top / GiB / step + 1e-9) + 1):
        g = i * step
        y = y_base - g * GiB * scale
        out.append(f'<line x1="{_px(left - 4)}" y1="{_px(y)}" x2="{_px(left)}" y2="{_px(y)}" stroke="#555"/>'
                   f'<text x="{_px(left - 6)}" y="{_px(y + 4)}" text-anchor="end">{g:g}</text>')
    out.append(f'<text x="12" y="{_px(10 + _MEM_H / 2)}" transform="rotate(-90 12 {_px(10 + _MEM_H / 2)})" '
               'text-anchor="middle">GiB per GPU</text>')
    for i, s in enumerate(stages):
        x = left + gap / 2 + i * (bar_w + gap)
        y = y_base
        if memory:
            m = memory[i]
            for field, label in _MEMORY_PARTS:
                v = getattr(m, field)
                hgt = v * scale
                y -= hgt
                out.append(f'<rect x="{_px(x)}" y="{_px(y)}" width="{_px(bar_w)}" height="{_px(hgt)}" '
                           f'fill="{_COLORS[field]}"{_data(f"memory.{i}.{field}", v)}><title>stage {s.stage} '
                           f'{_e(label)}: {v / GiB:.2f} GiB</title></rect>')
        else:
            hgt = s.peak_memory_bytes * scale
            out.append(f'<rect x="{_px(x)}" y="{_px(y - hgt)}" width="{_px(bar_w)}" height="{_px(hgt)}" '
                       f'fill="{_COLORS["peak_memory_bytes"]}"'
                       f'{_data(f"stages.{i}.peak_memory_bytes", s.peak_memory_bytes)}>'
                       f'<title>stage {s.stage} peak: {s.peak_memory_bytes / GiB:.2f} GiB</title></rect>')
        if memory:
            py = y_base - s.peak_memory_bytes * scale
            out.append(f'<line x1="{_px(x - 3)}" y1="{_px(py)}" x2="{_px(x + bar_w + 3)}" y2="{_px(py)}" stroke="#000" '
                       f'stroke-width="2"{_data(f"stages.{i}.peak_memory_bytes", s.peak_memory_bytes)}>'
                       f'<title>stage {s.stage} simulated peak: {s.peak_memory_bytes / GiB:.2f} GiB</title></line>')
        out.append(f'<text x="{_px(x + bar_w / 2)}" y="{_px(y_base + 14)}" text-anchor="middle">{s.stage}</text>')
    right = left + len(stages) * (bar_w + gap) + 90
    if stages:
        cy = y_base - cap * scale
        out.append(f'<line x1="{_px(left)}" y1="{_px(cy)}" x2="{_px(right - 90)}" y2="{_px(cy)}" stroke="#000" '
                   f'stroke-dasharray="5 3"{_data("stages.0.capacity_bytes", stages[0].capacity_bytes)}/>'
                   f'<text x="{_px(right - 86)}" y="{_px(cy + 4)}">capacity {cap / GiB:.0f} GiB</text>')
    height = y_base + 30
    items = [(f, label) for f, label in _MEMORY_PARTS] if memory else [("peak_memory_bytes", "simulated peak")]
    tick = " Black ticks: the simulated peak (the trace's memory counter)." if memory else ""
    return (f'<svg id="memory-chart" role="img" aria-label="memory per pipeline stage" viewBox="0 0 {_px(right)} '
            f'{_px(height)}" width="{_px(right)}" height="{_px(height)}" data-scale="{_num(scale)}" '
            f'data-base="{_num(y_base)}">' + "".join(out) + "</svg>" + _legend(items)
            + f'<p class="sub">Pipeline stage on the x axis.{tick}</p>')


def _row(label: str, cell: str) -> str:
    return f"<tr><th>{_e(label)}</th><td>{cell}</td></tr>"


def _value(key: str, value: float | int, text: str) -> str:
    return f'<span{_data(key, value)}>{_e(text)}</span>'


def _summary(r: Report, model: str | None) -> str:
    T = r.iteration_time_s
    rows = [_row("workload", _e(r.workload) + (f" ({_e(model)})" if model else "")),
            _row("GPUs", _value("num_gpus", r.num_gpus, f"{r.num_gpus:,}") + f" x {_e(r.gpu)}"),
            _row("topology", _e(r.topology)),
            _row("iteration time", _value("iteration_time_s", T, f"{T:.3f} s"))]
    ref = r.reference
    if ref and "iteration_time_s" in ref:
        rows.append(_row("measured", _value("reference.iteration_time_s", ref["iteration_time_s"],
                                            f"{ref['iteration_time_s']:.3f} s") + " (prediction "
                         + _value("reference.error_pct", ref["error_pct"], f"{ref['error_pct']:+.1f}%")
                         + f"; {_e(ref['source'])})"))
    rows += [_row("throughput", _value("tokens_per_s", r.tokens_per_s, f"{r.tokens_per_s:,.0f} tokens/s")
                  + f" ({r.tokens_per_s / r.num_gpus:,.1f} per GPU)"),
             _row("model TFLOP/s per GPU", _value("tflops_per_gpu", r.tflops_per_gpu, f"{r.tflops_per_gpu:.1f}")
                  + " &nbsp; MFU " + _value("mfu", r.mfu, _pct(r.mfu))),
             _row("with recomputation",
                  _value("hfu_tflops_per_gpu", r.hfu_tflops_per_gpu, f"{r.hfu_tflops_per_gpu:.1f}")
                  + " &nbsp; HFU " + _value("hfu", r.hfu, _pct(r.hfu)))]
    if ref and "tflops_per_gpu" in ref:
        rows.append(_row("measured TFLOP/s per GPU", _value("reference.tflops_per_gpu", ref["tflops_per_gpu"],
                                                            f"{ref['tflops_per_gpu']:.1f}") + " (prediction "
                         + _value("reference.error_pct", ref["error_pct"], f"{ref['error_pct']:+.1f}%")
                         + f"; {_e(ref['source'])})"))
    fits = all(s.fits for s in r.stages)
    rows.append(_row("fits in memory", "yes" if fits else '<span class="bad">NO</span>'))
    rows.append(_row("simulated", _value("simulated_ranks", r.simulated_ranks, f"{r.simulated_ranks:,} ranks") + ", "
                     + _value("tasks", r.tasks, f"{r.tasks:,} tasks") + ", "
                     + _value("events", r.events, f"{r.events:,} engine events")
                     + f" at {_e(r.granularity)} granularity"))
    par = []
    for k, v in r.parallel.items():
        if isinstance(v, bool):
            cell = "yes" if v else "no"
        elif isinstance(v, numbers.Real):
            cell = _value(f"parallel.{k}", v, f"{v:g}")
        elif isinstance(v, (list, tuple)):
            cell = _e(", ".join(map(str, v)))
        else:
            cell = _e("-" if v is None else v)
        par.append(f"<tr><th>{_e(k)}</th><td>{cell}</td></tr>")
    return (f'<table id="summary">{"".join(rows)}</table><h2>Parallel layout</h2>'
            f'<table id="parallel">{"".join(par)}</table>')


def _breakdown_table(r: Report) -> str:
    T = r.iteration_time_s
    total = r.compute_s["total"]
    rows = [f'<tr><th>compute</th><td class="n">{_value("compute_s.total", total, f"{total:.3f} s")}'
            f'</td><td class="n">{_pct(total / T if T else 0.0)}</td></tr>']
    for _c, label, key, value, seconds in _segments(r):
        if key == "bubble_fraction":
            rows.append(f'<tr><th>pipeline bubble, idle</th><td class="n">{seconds:.3f} s</td><td class="n">'
                        f'{_value(key, value, _pct(value))}</td></tr>')
        else:
            rows.append(f'<tr><td>&nbsp;&nbsp;{_e(label)}</td><td class="n">{_value(key, value, f"{value:.3f} s")}'
                        f'</td><td class="n">{_pct(value / T if T else 0.0)}</td></tr>')
    return f'<table id="breakdown">{"".join(rows)}</table>'


def _memory_table(r: Report, memory: Sequence[StageMemory] | None) -> str:
    head = "<tr><th>stage</th>" + ("".join(f'<th class="n">{_e(label)}</th>' for _f, label in _MEMORY_PARTS)
                                   if memory else "") + "<th>simulated peak</th><th>capacity</th><th>fits</th></tr>"
    rows = []
    for i, s in enumerate(r.stages):
        cells = ("".join(f'<td class="n">{getattr(memory[i], f) / GiB:.2f}</td>' for f, _l in _MEMORY_PARTS)
                 if memory else "")
        fits = "yes" if s.fits else '<span class="bad">NO</span>'
        rows.append(f'<tr><td>{s.stage}</td>{cells}<td class="n">{s.peak_memory_bytes / GiB:.2f}</td>'
                    f'<td class="n">{s.capacity_bytes / GiB:.1f}</td><td>{fits}</td></tr>')
    return f'<table id="memory">{head}{"".join(rows)}</table><p class="sub">GiB per GPU.</p>'


def _trace_section(r: Report, trace_href: str | None, trace_dir_href: str | None) -> str:
    out = []
    if trace_href:
        title = f"llmsim {r.workload}"
        out.append(f'<p>Timeline of every simulated rank (Chrome trace): <a id="trace-link" href="{_e(trace_href)}">'
                   f'{_e(trace_href)}</a></p>'
                   f'<p><button id="open-perfetto" type="button" data-trace="{_e(trace_href)}" '
                   f'data-title="{_e(title)}">'
                   f'Open in Perfetto</button> <span id="perfetto-status"></span></p>'
                   f'<p class="sub">Or open <a href="{PERFETTO_UI}" target="_blank" rel="noopener">{PERFETTO_UI}</a>, '
                   f'choose <b>Open trace file</b> in its sidebar and pick <code>{_e(trace_href)}</code>: a web page '
                   'cannot hand a file on disk to another site. The button works when this page is served over '
                   'HTTP from its folder (<code>python -m http.server</code>, then '
                   '<code>http://localhost:8000/</code> and this file).</p>')
    else:
        out.append(f'<p>No trace was written with this report: run <code>llmsim run ... --trace trace.json.gz '
                   f'--html ...</code>, then open <a href="{PERFETTO_UI}" target="_blank" rel="noopener">'
                   f'{PERFETTO_UI}</a> and choose <b>Open trace file</b>.</p>')
    if trace_dir_href:
        out.append(f'<p>One file per simulated rank for Holistic Trace Analysis: <a id="trace-dir-link" '
                   f'href="{_e(trace_dir_href)}">{_e(trace_dir_href)}</a> (<code>rank-N.json.gz</code>; '
                   f'<code>TraceAnalysis(trace_dir=...)</code>).</p>')
    return "".join(out)


def html_report(report: Report, *, memory: Sequence[StageMemory] | None = None, model: str | None = None,
                trace_href: str | None = None, trace_dir_href: str | None = None) -> str:
    """The page as text.

    Parameters
    ----------
    report : Report
        The run's report (:func:`sim.output.report.make_report`).
    memory : sequence of StageMemory, optional
        The closed-form memory of each pipeline stage under the workload's recomputation
        (:func:`sim.memory.memory_table`), drawn as stacked bars; without it each stage's bar is
        its simulated peak.
    model : str, optional
        The model's name, shown beside the workload's.
    trace_href, trace_dir_href : str, optional
        Links to the merged trace and to the per-rank trace folder, relative to the page.

    Returns
    -------
    str
        A complete HTML5 document; the same inputs give the same text.
    """
    if memory is not None and len(memory) != len(report.stages):
        raise ValueError(f"memory has {len(memory)} stages, the report {len(report.stages)}")
    p = report.parallel
    heading = f"{report.workload} on {report.num_gpus:,} x {report.gpu}"
    layout = f"TP {p['tp']} · PP {p['pp']} · DP {p['dp']}" + (f" · CP {p['cp']}" if p.get("cp", 1) > 1 else "") \
        + (f" · EP {p['ep']}" if p.get("ep", 1) > 1 else "") + f" · {p['schedule']} · {p['dtype']}"
    notes = "".join(f"<li>{_e(n)}</li>" for n in report.notes) or "<li>none</li>"
    body = (f"<h1>{_e(heading)}</h1>"
            f"<p class=\"sub\">{_e(layout)} · {_e(report.topology)} · llmsim {_e(__version__)}</p>"
            f"<h2>Summary</h2>{_summary(report, model)}"
            f"<h2>Where the time goes</h2><p class=\"sub\">Per GPU, mean over pipeline stages: compute by kind, "
            f"exposed communication by dimension, the pipeline bubble and waiting.</p>{_time_chart(report)}"
            f"{_breakdown_table(report)}<h2>Per pipeline stage</h2>{_stage_chart(report)}"
            f"<h2>Memory per stage</h2>{_memory_chart(report, memory)}{_memory_table(report, memory)}"
            f"<h2>Trace</h2>{_trace_section(report, trace_href, trace_dir_href)}"
            f"<h2>Defaults and notes</h2><ul class=\"notes\">{notes}</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<meta name=\"generator\" content=\"llmsim {_e(__version__)}\">\n"
            f"<title>llmsim: {_e(heading)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n"
            f"<script>{_JS}</script>\n</body>\n</html>\n")


def write_html_report(path: str | os.PathLike, report: Report, **kwargs) -> None:
    """Write :func:`html_report` to ``path`` (UTF-8; parent folders created)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(html_report(report, **kwargs), encoding="utf-8")
