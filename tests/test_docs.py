"""The documentation's example outputs and links, checked against the code.

Every example output quoted in README.md and docs/*.md is marked by an HTML comment on the line
right before its fenced block, naming the command that prints it::

    <!-- example: llmsim run tiny; volatile: in \\S+ s$ -->
    ```
    llmsim 0.1.0: tiny on 8 x A100-SXM4-80GB (dgx-a100)
    ...
    ```

Each marked example is run in this process (``sim.cli.main``) in a fresh working folder that
links the repository's top-level folders, so ``workloads/...`` paths resolve and any file the
command writes stays there, and what it printed is compared with the block:

- the text compared is the command's standard output, followed by its standard error when the
  exit status is not 0 (an error line is the example);
- the repository's absolute path prints as ``...``; trailing spaces and blank lines are ignored;
- every number must match, except inside a match of a ``volatile: REGEX`` the marker declares
  (repeatable, ``re.M``): there each number is masked in both texts, for wall-clock figures;
- ``excerpt``: the block quotes some of the output's lines, in order; each is found by its text
  with the numbers masked, then compared whole;
- a block whose first line is ``$ llmsim ...`` echoes the command, which must be the marker's;
- ``<!-- file: NAME -->`` right before a fenced block writes that block's text as NAME into the
  working folder of every example of the same page (a space file the example reads).

A fenced block that looks like llmsim output (its first line is ``$ llmsim ...`` or an llmsim
banner such as ``llmsim 0.1.0: ...`` or ``llmsim: error: ...``) must be marked, and every
relative link in the pages must name an existing file and, with ``#anchor``, one of its headings.

Refreshing the examples after an output changes (nothing masked; review the diff)::

    python tests/test_docs.py --update            # every page
    python tests/test_docs.py --update docs/usage.md
    python tests/test_docs.py                     # check without pytest
"""

from __future__ import annotations

import difflib
import io
import os
import re
import shlex
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))

EXAMPLE = re.compile(r"^\s*<!--\s*example:\s*(?P<spec>.*?)\s*-->\s*$")
FILE = re.compile(r"^\s*<!--\s*file:\s*(?P<name>[\w.-]+)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<mark>`{3,}|~{3,})(?P<info>.*)$")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
BANNER = re.compile(r"^llmsim(?: [^\s:]+)*: ")
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class Fence:
    """One fenced block of a page: the opening and closing fence's line indices and its text."""

    page: Path
    start: int
    end: int
    indent: str
    lines: tuple[str, ...]
    before: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.start + 1}"


@dataclass(frozen=True)
class Example:
    """A marked block: the command, how its output is compared, and the block it quotes."""

    fence: Fence
    command: str
    volatile: tuple[re.Pattern[str], ...]
    excerpt: bool
    echo: bool

    @property
    def quoted(self) -> tuple[str, ...]:
        return self.fence.lines[1:] if self.echo else self.fence.lines


def fences(page: Path) -> list[Fence]:
    """Every fenced block of ``page`` (fences of three or more backticks or tildes, indented
    as a list item's may be)."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, mark = m["indent"], m["mark"]
        close = re.compile(rf"^\s*{re.escape(mark[0])}{{{len(mark)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = tuple(line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:j])
        found.append(Fence(page, i, j, indent, body, lines[i - 1] if i else ""))
        i = j + 1
    return found


def parse_example(fence: Fence) -> Example | None:
    """The example a fence's marker declares, or None for an unmarked fence."""
    m = EXAMPLE.match(fence.before)
    if not m:
        return None
    command, *options = [part.strip() for part in m["spec"].split(";")]
    if not command.startswith("llmsim "):
        raise ValueError(f"{fence.where}: an example's command starts with 'llmsim ' (got {command!r})")
    volatile, excerpt = [], False
    for option in options:
        key, _, value = option.partition(":")
        if key.strip() == "volatile" and value.strip():
            volatile.append(re.compile(value.strip(), re.M))
        elif key.strip() == "excerpt" and not value:
            excerpt = True
        else:
            raise ValueError(f"{fence.where}: unknown example option {option!r} (volatile: REGEX, excerpt)")
    echo = bool(fence.lines) and fence.lines[0].startswith("$ ")
    if echo and fence.lines[0][2:].strip() != command:
        raise ValueError(f"{fence.where}: the block runs {fence.lines[0][2:]!r}, the marker names {command!r}")
    return Example(fence, command, tuple(volatile), excerpt, echo)


def page_files(page: Path) -> dict[str, str]:
    """The files a page's ``<!-- file: NAME -->`` markers give its examples."""
    return {m["name"]: "\n".join(f.lines) + "\n" for f in fences(page) if (m := FILE.match(f.before))}


def examples(pages=PAGES) -> list[Example]:
    return [ex for page in pages for f in fences(page) if (ex := parse_example(f)) is not None]


def run(example: Example) -> str:
    """Run the example's command as ``llmsim`` would and return what it printed, normalised."""
    from sim import cli

    argv = shlex.split(example.command)[1:]
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for entry in REPO.iterdir():
            if not entry.name.startswith("."):
                (work / entry.name).symlink_to(entry)
        for name, text in page_files(example.fence.page).items():
            (work / name).write_text(text, encoding="utf-8")
        cwd = os.getcwd()
        os.chdir(work)
        try:
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    status = cli.main(argv)
                except SystemExit as exc:  # argparse's usage errors
                    status = exc.code
        finally:
            os.chdir(cwd)
        text = out.getvalue() + (err.getvalue() if status else "")
        text = text.replace(str(work.resolve()), ".").replace(str(work), ".")
    return normalise(text.replace(str(REPO), "..."))


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def masked(text: str, patterns) -> str:
    """``text`` with each number inside a match of any of ``patterns`` replaced by ``#``."""
    for p in patterns:
        text = p.sub(lambda m: NUMBER.sub("#", m.group(0)), text)
    return text


def excerpt_lines(quoted: tuple[str, ...], actual: list[str]) -> list[str | None]:
    """For each quoted line, the output line it stands for (found in order by its text with
    every number masked), or None where there is none."""
    shape = [NUMBER.sub("#", line.rstrip()) for line in actual]
    found, k = [], 0
    for line in quoted:
        key = NUMBER.sub("#", line.rstrip())
        while k < len(actual) and shape[k] != key:
            k += 1
        found.append(actual[k] if k < len(actual) else None)
        k += 1
    return found


def mismatch(example: Example, actual: str) -> str | None:
    """Why the quoted block differs from ``actual``, or None when it matches."""
    quoted = normalise("\n".join(example.quoted))
    if example.excerpt:
        lines = excerpt_lines(tuple(quoted.split("\n")), actual.split("\n"))
        for q, a in zip(quoted.split("\n"), lines):
            if a is None:
                return f"quoted line not in the output, in order: {q!r}\n--- output ---\n{actual}"
            if masked(q.rstrip(), example.volatile) != masked(a.rstrip(), example.volatile):
                return f"quoted: {q!r}\nprinted: {a!r}"
        return None
    if masked(quoted, example.volatile) == masked(actual, example.volatile):
        return None
    diff = difflib.unified_diff(quoted.split("\n"), actual.split("\n"), "quoted", "printed", lineterm="")
    return "\n".join(diff)


def looks_like_output(fence: Fence) -> bool:
    first = next((line for line in fence.lines if line.strip()), "")
    return first.startswith("$ llmsim") or bool(BANNER.match(first))


def headings(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings (lower case, punctuation dropped, spaces as -)."""
    inside = {i for f in fences(page) for i in range(f.start, f.end + 1)}
    slugs = set()
    for i, line in enumerate(page.read_text(encoding="utf-8").split("\n")):
        if i not in inside and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            slugs.add(re.sub(r"[^\w\- ]", "", m[1].lower()).replace(" ", "-"))
    return slugs


def links(page: Path) -> list[tuple[int, str]]:
    """The relative links of a page outside code, as (line number, target)."""
    inside = {i for f in fences(page) for i in range(f.start, f.end + 1)}
    found = []
    for i, line in enumerate(page.read_text(encoding="utf-8").split("\n")):
        if i in inside:
            continue
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            target = m["target"]
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                found.append((i + 1, target))
    return found


def broken(page: Path, target: str) -> str | None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{target}: no such file"
    if anchor and (dest.suffix != ".md" or anchor not in headings(dest)):
        return f"{target}: no heading #{anchor} in {dest.name}"
    return None


EXAMPLES = examples()


@pytest.mark.parametrize("example", EXAMPLES, ids=[ex.fence.where for ex in EXAMPLES])
def test_example_output_is_what_the_command_prints(example):
    problem = mismatch(example, run(example))
    assert problem is None, (f"{example.fence.where}: `{example.command}` prints otherwise "
                             f"(python tests/test_docs.py --update refreshes it):\n{problem}")


def test_every_quoted_llmsim_output_is_marked():
    unmarked = [f.where for page in PAGES for f in fences(page)
                if looks_like_output(f) and parse_example(f) is None]
    assert not unmarked, f"llmsim output quoted without an <!-- example: ... --> marker: {unmarked}"


def test_the_pages_have_examples_and_the_readme_its_default_run():
    assert any(ex.command == "llmsim run" for ex in EXAMPLES if ex.fence.page.name == "README.md")
    assert {ex.fence.page.name for ex in EXAMPLES} >= {"README.md", "usage.md"}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(page):
    bad = [f"{page.relative_to(REPO)}:{n}: {why}" for n, target in links(page) if (why := broken(page, target))]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_a_changed_number_and_masks_only_volatile_ones():
    fence = Fence(REPO / "README.md", 0, 3, "", ("$ llmsim run tiny", "time 0.009 s", "done in 2 s"), "")
    ex = Example(fence, "llmsim run tiny", (re.compile(r"in \S+ s$", re.M),), False, True)
    assert mismatch(ex, "time 0.009 s\ndone in 3.5 s") is None
    assert mismatch(ex, "time 0.010 s\ndone in 2 s") is not None
    part = Example(Fence(REPO / "README.md", 0, 2, "", ("b 2",), ""), "llmsim x", (), True, False)
    assert mismatch(part, "a 1\nb 2\nc 3") is None
    assert mismatch(part, "a 1\nb 5\nc 3") is not None


def test_output_is_told_from_commands_and_usage_lines():
    def fence(*lines):
        return Fence(REPO / "README.md", 0, len(lines) + 1, "", lines, "")

    assert looks_like_output(fence("llmsim 0.1.0: tiny on 8 x A100-SXM4-80GB (dgx-a100)"))
    assert looks_like_output(fence("llmsim: error: --trace: expected a file"))
    assert looks_like_output(fence("$ llmsim run tiny", "..."))
    assert not looks_like_output(fence("llmsim run gpt3-175b --chakra et/"))
    assert not looks_like_output(fence("llmsim sweep [WORKLOAD] [--executor local|dask://HOST:PORT]"))


def test_the_link_check_sees_a_missing_file_or_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Its `second` part\n\n[x](other.md) [y](#its-second-part) [z](#nope)\n"
                    "```\n[not a link](nowhere.md)\n```\n", encoding="utf-8")
    assert [t for _, t in links(page)] == ["other.md", "#its-second-part", "#nope"]
    assert broken(page, "#its-second-part") is None
    assert broken(page, "#nope") is not None
    assert broken(page, "other.md") is not None
    (tmp_path / "other.md").write_text("# Other\n", encoding="utf-8")
    assert broken(page, "other.md") is None


def test_a_marker_must_name_what_the_block_echoes():
    fence = Fence(REPO / "README.md", 0, 2, "", ("$ llmsim run tiny",), "<!-- example: llmsim run -->")
    with pytest.raises(ValueError, match="marker names"):
        parse_example(fence)


# ---- refreshing -------------------------------------------------------------------------------

def update(pages=PAGES) -> int:
    """Rewrite every marked block of ``pages`` with what its command prints now; returns how
    many blocks changed."""
    changed = 0
    for page in pages:
        lines = page.read_text(encoding="utf-8").split("\n")
        for ex in reversed(examples([page])):
            actual = run(ex).split("\n")
            if ex.excerpt:
                new = [a if a is not None else q for q, a in zip(ex.quoted, excerpt_lines(ex.quoted, actual))]
                missing = [q for q, a in zip(ex.quoted, excerpt_lines(ex.quoted, actual)) if a is None]
                if missing:
                    print(f"{ex.fence.where}: excerpt lines no longer printed, left as they are: {missing}")
            else:
                new = actual
            body = ([ex.fence.lines[0]] if ex.echo else []) + new
            body = [(ex.fence.indent + line) if line else line for line in body]
            if lines[ex.fence.start + 1:ex.fence.end] != body:
                lines[ex.fence.start + 1:ex.fence.end] = body
                changed += 1
                print(f"{ex.fence.where}: refreshed `{ex.command}`")
        page.write_text("\n".join(lines), encoding="utf-8")
    return changed


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    refresh = "--update" in argv
    pages = tuple(Path(a).resolve() for a in argv if a != "--update") or PAGES
    if refresh:
        print(f"{update(pages)} example(s) refreshed")
        return 0
    failed = 0
    for ex in examples(pages):
        problem = mismatch(ex, run(ex))
        if problem:
            failed += 1
            print(f"{ex.fence.where}: `{ex.command}` prints otherwise:\n{problem}\n")
    print(f"{failed} example(s) differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
