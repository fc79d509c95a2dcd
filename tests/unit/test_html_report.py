"""Tests for sim.output.html_report: the numbers on the page are the report's, the bars are drawn to
scale, nothing is fetched from elsewhere, text is escaped; and, where a headless Chromium (or
Playwright) is installed, the page loads in a real browser without a script error."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from sim.cli import main
from sim.config import load_topology, load_workload
from sim.memory import memory_table
from sim.output.html_report import PERFETTO_UI, html_report, write_html_report
from sim.output.report import make_report
from sim.runner import simulate

_FETCHING = {"script": "src", "img": "src", "iframe": "src", "embed": "src", "object": "data", "audio": "src",
             "video": "src", "source": "src", "track": "src", "image": "href", "use": "href", "link": "href"}


class _Page(HTMLParser):
    """Every element as (tag, attrs, text inside it up to its first child), in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self.scripts: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        self._in.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self._in:
            while self._in.pop() != tag:
                pass

    def handle_data(self, data):
        if self._in and self._in[-1] == "style":
            self.styles.append(data)
        elif self._in and self._in[-1] == "script":
            self.scripts.append(data)
        else:
            self.text.append(data)

    def keyed(self) -> list[tuple[str, dict]]:
        return [(t, a) for t, a in self.elements if "data-key" in a]

    def inside(self, svg_id: str) -> list[tuple[str, dict]]:
        """The elements of one ``<svg id=...>`` (flat, in order)."""
        out, on = [], False
        for tag, attrs in self.elements:
            if tag == "svg":
                on = attrs.get("id") == svg_id
                continue
            if on:
                out.append((tag, attrs))
        return out


def _parse(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    p.close()
    return p


def _lookup(obj, key: str):
    for part in key.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def _svg_attrs(page: _Page, svg_id: str) -> dict:
    return next(a for t, a in page.elements if t == "svg" and a.get("id") == svg_id)


@pytest.fixture(scope="module")
def case():
    w = load_workload("tiny")
    run = simulate(w, load_topology("dgx-a100"))
    report = dataclasses.replace(make_report(run), reference={"source": "a paper <b>& co</b>", "iteration_time_s": 0.01,
                                                              "error_pct": -7.5})
    memory = memory_table(w, [w.parallel.recompute])[w.parallel.recompute]
    text = html_report(report, memory=memory, model=w.model.name, trace_href="../out/trace.json.gz",
                       trace_dir_href="ranks/")
    return report, memory, text


def test_every_number_on_the_page_is_the_reports(case):
    report, memory, text = case
    expected = {**report.to_dict(), "memory": [m.to_dict() for m in memory]}
    keyed = _parse(text).keyed()
    seen = set()
    for _tag, attrs in keyed:
        value = _lookup(expected, attrs["data-key"])
        assert float(attrs["data-value"]) == value, attrs["data-key"]
        seen.add(attrs["data-key"])
    required = {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "hfu_tflops_per_gpu", "mfu", "hfu",
                "bubble_fraction", "num_gpus", "reference.iteration_time_s", "reference.error_pct",
                "parallel.tp", "parallel.pp", "parallel.dp", "stages.0.capacity_bytes"}
    required |= {f"compute_s.{k}" for k in report.compute_s}
    required |= {f"exposed_comm_s.{c}" for c, v in report.exposed_comm_s.items() if v > 0}
    for i in range(len(report.stages)):
        required |= {f"stages.{i}.{f}" for f in ("compute_s", "exposed_comm_s", "idle_s", "peak_memory_bytes")}
        required |= {f"memory.{i}.{f}" for f in ("weights_bytes", "grads_bytes", "optimizer_bytes",
                                                 "activations_bytes", "other_bytes")}
    assert required <= seen, sorted(required - seen)
    assert any(v > 0 for v in report.exposed_comm_s.values()) and report.bubble_fraction > 0


def test_a_measured_tflops_reference_is_shown(case):
    report = dataclasses.replace(case[0], reference={"source": "S", "tflops_per_gpu": 140.5, "error_pct": 3.25})
    keyed = {a["data-key"]: float(a["data-value"]) for _t, a in _parse(html_report(report)).keyed()}
    assert (keyed["reference.tflops_per_gpu"], keyed["reference.error_pct"]) == (140.5, 3.25)
    assert "reference.iteration_time_s" not in keyed


def test_time_bars_are_to_scale_and_fill_the_iteration(case):
    report, _memory, text = case
    page = _parse(text)
    scale = float(_svg_attrs(page, "time-chart")["data-scale"])
    rects = [a for t, a in page.inside("time-chart") if t == "rect"]
    assert len(rects) == len([k for k in report.compute_s if k != "total"]) + \
        len([v for v in report.exposed_comm_s.values() if v > 0]) + 1
    x = float(rects[0]["x"])
    for a in rects:
        assert float(a["width"]) == pytest.approx(float(a["data-seconds"]) * scale, abs=1e-3)
        assert float(a["x"]) == pytest.approx(x, abs=1e-3)  # stacked end to end
        x += float(a["data-seconds"]) * scale
    bubble = next(a for a in rects if a["data-key"] == "bubble_fraction")
    assert float(bubble["data-seconds"]) == pytest.approx(report.bubble_fraction * report.iteration_time_s)
    # compute by kind + exposed comm + bubble = the iteration (mean over stages)
    assert sum(float(a["data-seconds"]) for a in rects) == pytest.approx(report.iteration_time_s, rel=1e-9)
    assert x == pytest.approx(float(rects[0]["x"]) + 720.0, rel=1e-9)  # the bar is as wide as the iteration
    stage_scale = float(_svg_attrs(page, "stage-chart")["data-scale"])
    for t, a in page.inside("stage-chart"):
        if t == "rect":
            assert float(a["width"]) == pytest.approx(float(a["data-value"]) * stage_scale, abs=1e-3)


def test_memory_bars_are_stacked_to_scale_under_the_capacity_line(case):
    report, memory, text = case
    page = _parse(text)
    svg = _svg_attrs(page, "memory-chart")
    scale, base = float(svg["data-scale"]), float(svg["data-base"])
    items = page.inside("memory-chart")
    for i, m in enumerate(memory):
        rects = [a for t, a in items if t == "rect" and a["data-key"].startswith(f"memory.{i}.")]
        assert len(rects) == 5
        y = base
        for a in rects:
            assert float(a["height"]) == pytest.approx(float(a["data-value"]) * scale, abs=1e-3)
            y -= float(a["data-value"]) * scale
            assert float(a["y"]) == pytest.approx(y, abs=1e-3)
        assert base - y == pytest.approx(m.total_bytes * scale, rel=1e-9)
        (tick,) = [a for t, a in items if t == "line" and a.get("data-key") == f"stages.{i}.peak_memory_bytes"]
        assert float(tick["y1"]) == pytest.approx(base - report.stages[i].peak_memory_bytes * scale, abs=1e-3)
    (cap,) = [a for t, a in items if t == "line" and a.get("data-key") == "stages.0.capacity_bytes"]
    assert float(cap["y1"]) == pytest.approx(base - report.stages[0].capacity_bytes * scale, abs=1e-3)


def test_without_memory_the_bars_are_the_simulated_peaks(case):
    report, _memory, _text = case
    page = _parse(html_report(report))
    scale = float(_svg_attrs(page, "memory-chart")["data-scale"])
    rects = [a for t, a in page.inside("memory-chart") if t == "rect"]
    assert [a["data-key"] for a in rects] == [f"stages.{i}.peak_memory_bytes" for i in range(len(report.stages))]
    for a, s in zip(rects, report.stages):
        assert float(a["height"]) == pytest.approx(s.peak_memory_bytes * scale, abs=1e-3)
    assert "No trace was written" in "".join(page.text)


def test_nothing_is_fetched_from_elsewhere(case):
    _report, _memory, text = case
    page = _parse(text)
    for tag, attrs in page.elements:
        assert _FETCHING.get(tag) not in attrs, (tag, attrs)  # no src= / href= that loads a resource
        assert "style" not in attrs or "url(" not in attrs["style"]
        if tag == "a":
            href = attrs["href"]
            assert href == PERFETTO_UI or "://" not in href, href  # links only: nothing loads by itself
    css = "".join(page.styles)
    assert "url(" not in css and "@import" not in css
    assert [t for t, _a in page.elements if t == "script"] == ["script"]  # the one inline script
    urls = [(t, k, v) for t, a in page.elements for k, v in a.items() if v and "://" in v and (t, k) != ("a", "href")]
    assert urls == []  # no URL in any other attribute (not even an SVG namespace)


def test_text_is_escaped_and_links_are_given(case):
    report, _memory, _text = case
    hostile = dataclasses.replace(report, workload='w<script>alert("x")</script>&',
                                  notes=("<img src=x onerror=alert(1)>", "a & b"))
    text = html_report(hostile, trace_href='t"x.json.gz')
    page = _parse(text)
    assert [t for t, _a in page.elements if t in ("script", "img")] == ["script"]
    words = "".join(page.text)
    assert 'w<script>alert("x")</script>&' in words and "<img src=x onerror=alert(1)>" in words and "a & b" in words
    (link,) = [a for t, a in page.elements if t == "a" and a.get("id") == "trace-link"]
    assert link["href"] == 't"x.json.gz'
    (button,) = [a for t, a in page.elements if t == "button"]
    assert button["data-trace"] == 't"x.json.gz'
    anchors = {a["href"] for t, a in _parse(case[2]).elements if t == "a"}
    assert {"../out/trace.json.gz", "ranks/", PERFETTO_UI} <= anchors
    assert "Open trace file" in "".join(_parse(case[2]).text)


def test_bytes_are_deterministic(case):
    report, memory, text = case
    again = dataclasses.replace(report, simulated_wall_s=report.simulated_wall_s + 12.5)  # wall time not shown
    assert html_report(again, memory=memory, model=load_workload("tiny").model.name,
                       trace_href="../out/trace.json.gz", trace_dir_href="ranks/") == text


def test_cli_writes_the_page_with_relative_links(tmp_path, capsys):
    page, trace, ranks = tmp_path / "pages" / "run.html", tmp_path / "out" / "t.json.gz", tmp_path / "out" / "ranks"
    assert main(["run", "tiny", "--html", str(page), "--trace", str(trace), "--trace-dir", str(ranks),
                 "--json", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()
    parsed = _parse(page.read_text(encoding="utf-8"))
    anchors = {a["href"] for t, a in parsed.elements if t == "a"}
    assert {"../out/t.json.gz", "../out/ranks/"} <= anchors
    report = json.loads((tmp_path / "r.json").read_text())
    (it,) = [a for _t, a in parsed.keyed() if a["data-key"] == "iteration_time_s"]
    assert float(it["data-value"]) == report["iteration_time_s"]


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome", "google-chrome-stable",
                 "headless_shell", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_page_loads_in_a_headless_browser_without_script_errors(case, tmp_path):
    """Skipped where neither Playwright (with its Chromium) nor a Chromium binary is installed."""
    _report, _memory, text = case
    page = tmp_path / "report.html"
    write_html_report(page, case[0], memory=case[1], trace_href="trace.json.gz")
    assert page.read_text(encoding="utf-8") != text  # the test's page links its own trace
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is not None:
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch()
                tab = browser.new_page()
                errors: list[str] = []
                tab.on("pageerror", lambda e: errors.append(str(e)))
                tab.goto(page.as_uri())
                tab.click("#open-perfetto")  # from file:// it explains instead of opening a tab
                status = tab.inner_text("#perfetto-status")
                state = tab.evaluate("document.documentElement.dataset.js")
                browser.close()
        except Exception as e:  # no browser downloaded for Playwright
            if _browser() is None:
                pytest.skip(f"Playwright has no usable browser: {e}")
        else:
            assert errors == [] and state == "ok"
            assert "Open trace file" in status
            return
    binary = _browser()
    if binary is None:
        pytest.skip("no headless browser: neither Playwright nor a Chromium binary on PATH")
    try:
        out = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip(f"{binary} did not finish in 120 s")
    if "<html" not in out.stdout:  # the browser did not start (a snap stub, no display libraries...)
        pytest.skip(f"{binary} printed no page: {out.stderr[-500:]}")
    dom = _parse(out.stdout)
    html_attrs = next(a for t, a in dom.elements if t == "html")
    assert html_attrs.get("data-js") == "ok", out.stderr[-2000:]  # the script ran to its end
    assert "data-js-error" not in html_attrs
    assert [t for t, a in dom.elements if t == "svg"] == ["svg"] * 3
