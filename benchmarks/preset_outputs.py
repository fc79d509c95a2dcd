"""Hashes of what llmsim writes for every shipped preset, to show a refactor changes none of it.

::

    python benchmarks/preset_outputs.py --write benchmarks/results/preset_outputs.json
    python benchmarks/preset_outputs.py --check benchmarks/results/preset_outputs.json
    python benchmarks/preset_outputs.py --check FILE --only "run tiny"

Each entry is one ``llmsim`` command, run as ``python -m sim ...`` in a fresh child process
with this checkout first on ``PYTHONPATH`` (the code checked is the code beside this script,
not an installed copy; a child process also keeps one entry's caches and memory from another):

- ``run PRESET --granularity G --json J --trace T.json.gz`` for every ``workloads/*.yaml``;
- ``run tiny --topology TOPOLOGY ...`` (the same outputs) for every ``topologies/*.yaml`` that
  is a topology: a mapping with a ``scale_up`` section. ``hbm-generations.yaml`` and
  ``technology-nodes.yaml`` are tables for ``llmsim whatif`` and have none;
- ``memory PRESET --json J`` for every ``workloads/*.yaml``.

Per entry the record holds the SHA-256 of the printed report (standard output), of the
``--json`` file, of the trace's JSON text (decompressed: the gzip bytes depend on the deflate
library, ISA-L or zlib, and its version), of standard error, the exit status and, for ``run``,
the predicted iteration time (``iteration_time_s`` of the JSON, for the reader: its change
shows in the JSON's hash).

Nothing is masked
-----------------
llmsim prints and writes no wall-clock time, so two runs of one command give the same report,
JSON and trace byte for byte (the ``tests/test_cli.py`` determinism test holds ``run`` to it):
the hashes are of the outputs as they are. The ``llmsim_version`` line and field are part of
them: a refactor keeps the version.

Granularity
-----------
Every preset runs at ``op`` granularity, the default: with its trace each finishes in under
20 s on the project's shared 2-core machine (2026-11-28, load 1-2: ``llama3-405b`` 14.7-17.1 s,
the others 0.6-5.5 s). A preset added later that takes longer goes in :data:`COARSE` (``layer`` or
``chunk``). The record names the granularity, and ``--check`` re-runs the command the file
records.

``--check`` prints ``same`` or the fields that differ per entry and the total wall time; exit
status 1 on any difference (a preset in the folders that the file lacks counts as one), 0 when
every entry is identical, 2 on a file it cannot read.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
"""The checkout whose ``sim`` package and presets are run."""

COARSE: dict[str, str] = {}
"""Workload presets run at a coarser granularity than ``op``, by name (none: every preset's op-level
run with its trace takes under 20 s on the 2-core machine)."""

TOPOLOGY_WORKLOAD = "tiny"
"""The workload run on every topology preset."""

TIMEOUT_S = 1200
"""The longest one command may run before it counts as failed."""

COMPARED = ("exit_status", "report_sha256", "json_sha256", "trace_sha256", "stderr_sha256", "iteration_time_s")
"""The record's fields a check compares."""


@dataclass(frozen=True)
class Entry:
    """One ``llmsim`` command: its name in the file, its arguments without the output paths."""

    id: str
    argv: tuple[str, ...]
    granularity: str | None
    """``op``, ``layer`` or ``chunk`` for ``run``; None for ``memory``."""

    @property
    def command(self) -> str:
        """``run`` or ``memory``."""
        return self.argv[0]


@dataclass(frozen=True)
class Outputs:
    """What one command left: its printed text, its JSON file and its trace's hash."""

    exit_status: int
    stdout: str
    stderr: str
    json_text: str | None
    trace_sha256: str | None
    wall_s: float


@dataclass(frozen=True)
class Record:
    """The hashes of one entry's outputs (module docstring)."""

    id: str
    argv: tuple[str, ...]
    granularity: str | None
    exit_status: int
    report_sha256: str
    json_sha256: str | None
    trace_sha256: str | None
    stderr_sha256: str
    iteration_time_s: float | None

    def to_dict(self) -> dict:
        """The record as JSON-ready values."""
        out = asdict(self)
        out["argv"] = list(self.argv)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        """The record a :meth:`to_dict` wrote (KeyError or TypeError if a field is missing or odd)."""
        values = {f.name: d[f.name] for f in fields(cls)}
        values["argv"] = tuple(str(a) for a in values["argv"])
        return cls(**values)


def sha256(text: str) -> str:
    """The SHA-256 of ``text`` in UTF-8, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_topology(path: Path) -> bool:
    """Whether a ``topologies/`` file is a topology: a mapping with a ``scale_up`` section (the
    tables for ``llmsim whatif`` have none)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return isinstance(doc, dict) and "scale_up" in doc


def entries(root: Path = ROOT) -> list[Entry]:
    """Every command checked, listed from the ``workloads/`` and ``topologies/`` folders of ``root``."""
    workloads = sorted(p.stem for p in (root / "workloads").glob("*.yaml"))
    topologies = sorted(p.stem for p in (root / "topologies").glob("*.yaml") if is_topology(p))
    out = []
    for name in workloads:
        g = COARSE.get(name, "op")
        out.append(Entry(f"run {name}", ("run", name, "--granularity", g), g))
    for topo in topologies:
        out.append(Entry(f"run {TOPOLOGY_WORKLOAD} --topology {topo}",
                         ("run", TOPOLOGY_WORKLOAD, "--topology", topo, "--granularity", "op"), "op"))
    for name in workloads:
        out.append(Entry(f"memory {name}", ("memory", name), None))
    return out


def child_env(root: Path = ROOT) -> dict[str, str]:
    """The environment of a child process: ``root`` first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def sim_location(root: Path = ROOT) -> str:
    """Where a child process imports ``sim`` from (printed, so a run of another copy shows)."""
    done = subprocess.run([sys.executable, "-c", "import sim; print(sim.__file__)"], env=child_env(root),
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def file_sha256(path: Path, gzipped: bool) -> str:
    """The SHA-256 of a file's bytes, decompressed first when ``gzipped``, read a MiB at a time."""
    h = hashlib.sha256()
    with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def run_entry(entry: Entry, root: Path = ROOT) -> Outputs:
    """Run one entry's command in a child process, its outputs in a fresh temporary folder."""
    with tempfile.TemporaryDirectory(prefix="preset_outputs-") as tmp:
        json_path, trace_path = Path(tmp) / "out.json", Path(tmp) / "trace.json.gz"
        argv = list(entry.argv) + ["--json", str(json_path)]
        if entry.command == "run":
            argv += ["--trace", str(trace_path)]
        t0 = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "sim", *argv], env=child_env(root), cwd=tmp,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
            status, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as e:
            status, stdout, stderr = -1, _text(e.stdout), _text(e.stderr) + f"\ntimed out after {TIMEOUT_S} s"
        wall = time.perf_counter() - t0
        json_text = json_path.read_text(encoding="utf-8") if json_path.is_file() else None
        trace = file_sha256(trace_path, gzipped=True) if trace_path.is_file() else None
    return Outputs(status, stdout, stderr, json_text, trace, wall)


def _text(b: bytes | str | None) -> str:
    """What a timed-out child had written, as text."""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def record_of(entry: Entry, out: Outputs) -> Record:
    """The record of an entry's outputs."""
    iteration = None
    if entry.command == "run" and out.json_text is not None:
        iteration = json.loads(out.json_text).get("iteration_time_s")
    json_hash = None if out.json_text is None else sha256(out.json_text)
    return Record(entry.id, entry.argv, entry.granularity, out.exit_status, sha256(out.stdout),
                  json_hash, out.trace_sha256, sha256(out.stderr), iteration)


def differences(reference: Record, now: Record) -> list[str]:
    """The :data:`COMPARED` fields in which ``now`` differs from ``reference`` (empty: the same)."""
    return [name for name in COMPARED if getattr(reference, name) != getattr(now, name)]


def describe(reference: Record, now: Record) -> str:
    """``same``, or the fields that differ, with the iteration times when they do."""
    diff = differences(reference, now)
    if not diff:
        return "same"
    text = "DIFFERS: " + ", ".join(d.removesuffix("_sha256") for d in diff)
    if "iteration_time_s" in diff:
        text += f" ({reference.iteration_time_s!r} s -> {now.iteration_time_s!r} s)"
    if "exit_status" in diff:
        text += f" (exit status {reference.exit_status} -> {now.exit_status})"
    return text


def read_reference(path: Path) -> list[Record]:
    """The records of a file :func:`write` made.

    Raises
    ------
    ValueError
        Naming the file and what is wrong with it.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return [Record.from_dict(r) for r in doc["entries"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a file preset_outputs.py --write made ({type(e).__name__}: {e})") from None


def git_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit, with ``-dirty`` when it has uncommitted changes; None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def run_all(todo: Sequence[Entry], root: Path = ROOT) -> list[tuple[Record, Outputs]]:
    """Run every entry in turn, printing each one's wall time."""
    out = []
    for entry in todo:
        outputs = run_entry(entry, root)
        out.append((record_of(entry, outputs), outputs))
        print(f"  {outputs.wall_s:7.2f} s  {entry.id}", flush=True)
    return out


def write(path: Path, only: Sequence[str] = (), root: Path = ROOT) -> int:
    """Run every entry (or those named in ``only``) and write their records to ``path``; exit
    status 1, and no file, if a command fails."""
    todo = [e for e in entries(root) if not only or e.id in only]
    done = run_all(todo, root)
    failed = [(r, o) for r, o in done if r.exit_status != 0]
    for r, o in failed:
        print(f"{r.id}: exit status {r.exit_status}: {o.stderr.strip()[-500:]}", file=sys.stderr)
    if failed:
        return 1
    doc = {"about": "SHA-256 of llmsim's outputs per preset: benchmarks/preset_outputs.py",
           "commit": git_commit(root), "python": sys.version.split()[0],
           "entries": [r.to_dict() for r, _ in done]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {len(done)} entries to {path}")
    return 0


def check(path: Path, only: Sequence[str] = (), root: Path = ROOT) -> int:
    """Re-run the commands ``path`` records (or those named in ``only``) and compare; prints one
    line per entry and returns 0 when every one is the same, else 1 (also when the folders hold a
    preset the file lacks)."""
    recorded = read_reference(path)
    reference = [r for r in recorded if not only or r.id in only]
    missing = [e.id for e in entries(root) if e.id not in {r.id for r in recorded} and (not only or e.id in only)]
    done = run_all([Entry(r.id, r.argv, r.granularity) for r in reference], root)
    print()
    differing = 0
    for ref, (now, outputs) in zip(reference, done):
        line = describe(ref, now)
        if now.exit_status != 0:
            line += f": {outputs.stderr.strip()[-300:]}"
        differing += line != "same"
        print(f"{line:<8} {ref.id}")
    for m in missing:
        print(f"NOT IN {path.name}: {m} (a preset the file lacks; --write records it)")
    print(f"{len(done) - differing} of {len(done)} the same" + (f"; {len(missing)} not recorded" if missing else ""))
    return 1 if differing or missing else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", type=Path, help="run every preset and write the hashes")
    mode.add_argument("--check", metavar="FILE", type=Path, help="run every preset again and compare")
    ap.add_argument("--only", action="append", default=[], metavar="ID",
                    help='an entry to run, e.g. "run tiny" or "memory gpt3-175b" (repeatable; default: all)')
    args = ap.parse_args(argv)
    print(f"llmsim from {sim_location()}")
    t0 = time.perf_counter()
    try:
        status = write(args.write, args.only) if args.write else check(args.check, args.only)
    except ValueError as e:
        print(f"preset_outputs: error: {e}", file=sys.stderr)
        return 2
    print(f"total wall time {time.perf_counter() - t0:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
