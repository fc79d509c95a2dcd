"""nccl-tests' text output, as users paste it, read into a :class:`NcclTestsLog`.

nccl-tests (NVIDIA/nccl-tests ``src/common.cu``) prints a ``#`` header and one row per message
size::

    # nThread 1 nGpus 8 minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 5 ...
    #  Rank  0 Group  0 Pid  54740 on     thanos device  0 [0x07] NVIDIA A100-SXM4-80GB
    ...
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
         1048576        262144     float     sum      -1    52.61   19.93   34.88      0    53.03 ...

The column header names the columns, so the older layouts (no ``root``; no ``redop`` for
all-gather; ``error`` for ``#wrong``) and the newer trailing columns read the same way: the
first ``time algbw busbw`` are out-of-place, the second in-place. The ranks and their hosts come
from the ``Rank N ... on HOST device ...`` lines (the nodes are the distinct hosts); the NCCL
version from an ``NCCL version X.Y.Z`` line (``NCCL_DEBUG=INFO``/``VERSION``) or nccl-tests'
``nccl-library=NNNNN``; the collective from ``# Collective test starting: NAME``, else the
command line (``.../all_reduce_perf -b 8 ...``), else the file's name; the algorithms NCCL was
limited to from ``NCCL_ALGO`` where the pasted launch line sets it (``-x NCCL_ALGO=Ring``,
``NCCL_ALGO=Tree ./build/...``) or NCCL's ``NCCL_ALGO set by environment to Ring`` INFO line:
its value as NCCL reads it, a comma-separated list of algorithms, or one of algorithms to leave
out after ``^`` (NCCL ``docs``, "NCCL_ALGO").

Each row is checked against its collective: ``size = count x type size x f`` with ``f`` the
ranks for all-gather, reduce-scatter and all-to-all (nccl-tests counts their elements per rank)
and 1 otherwise, and sizes increase row by row (two runs interleaved in one paste do not). Its
printed bandwidths are checked against its own size and time, within the rounding of the printed
digits: ``algbw = size / time`` (GB/s from bytes over microseconds / 1e3) and ``busbw = algbw x
b`` with ``b`` :func:`log_bus_factor`'s (nccl-tests ``doc/PERFORMANCE.md``); a row edited by hand,
or pasted from two runs, disagrees with itself. A log that reports a failure (nccl-tests'
``Test NCCL failure``, ``Test CUDA failure``, ``Test failure``, ``Out of bounds values : N
FAILED``; MPI's abort and signal lines: :data:`FAILURE_LINE`) is refused whole, naming the line:
its rows are those of a run that did not finish correctly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from sim.errors import ConfigError, Described
from sim.inputs import read_input_text
from sim.studies.collective import bus_factor
from sim.types import CollectiveKind

__all__ = ["BANDWIDTH_CHECKED", "COLLECTIVES", "DTYPE_BYTES", "FAILURE_LINE", "NcclTestsLog", "NcclTestsRow",
           "log_bus_factor", "parse_nccl_tests", "read_nccl_tests"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce",
               "gather", "scatter", "hypercube")
"""The tests nccl-tests builds (``<name>_perf``)."""
PER_RANK_COUNT = frozenset({"all_gather", "reduce_scatter", "alltoall", "gather", "scatter"})
"""Tests whose ``count`` column is per rank (``size = count x type size x ranks``)."""
DTYPE_BYTES = {"int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
               "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8, "bfloat16": 2,
               "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
"""Bytes per element of nccl-tests' ``type`` column (``test_typenames`` in ``src/common.cu``)."""

_BUS_KINDS = {"all_reduce": CollectiveKind.ALL_REDUCE, "all_gather": CollectiveKind.ALL_GATHER,
              "reduce_scatter": CollectiveKind.REDUCE_SCATTER, "alltoall": CollectiveKind.ALL_TO_ALL}
"""The tests whose bus bandwidth is not their algorithm bandwidth, as collectives."""
BANDWIDTH_CHECKED = frozenset(_BUS_KINDS) | {"sendrecv", "broadcast", "reduce"}
"""The tests whose rows' bandwidths are checked against their time (gather, scatter and
hypercube count their bytes differently across nccl-tests' versions and are not)."""


def log_bus_factor(test: str, ranks: int) -> float:
    """``busbw / algbw`` of nccl-tests' ``test`` over ``ranks`` (nccl-tests ``doc/PERFORMANCE.md``,
    each test's ``GetBw``; :func:`sim.studies.collective.bus_factor`): 1 for the tests that move
    their bytes once (send-receive, broadcast, reduce).

    >>> log_bus_factor("all_reduce", 8), log_bus_factor("alltoall", 4), log_bus_factor("broadcast", 8)
    (1.75, 0.75, 1.0)
    """
    kind = _BUS_KINDS.get(test)
    return 1.0 if kind is None else bus_factor(kind, ranks)


FAILURE_LINE = re.compile(r"\bTest (?:CUDA |NCCL )?failure\b|Out of bounds values\s*:\s*(?:[1-9]\d*|.*\bFAILED\b)"
                          r"|MPI_ABORT was invoked|mpirun noticed that process|exited on signal|\(core dumped\)"
                          r"|returned a non-zero exit code|\bsrun: error:")
"""A line that says the run failed: nccl-tests' own (``HOST: Test NCCL failure common.cu:N
'...'``, ``Test CUDA failure``, `` .. HOST pid N: Test failure common.cu:N``, ``# Out of bounds
values : N FAILED``), and MPI's or Slurm's when a rank aborts or dies."""
_RANK = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(.*?)\s*device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_THREADS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_LIBRARY = re.compile(r"nccl-library=(\d+)")
_TEST = re.compile(r"Collective test starting:\s*(\w+?)(?:_perf)?\s*$")
_ALGO = re.compile(r"NCCL_ALGO(?:=|\s+set by environment to\s+)(\^?[A-Za-z][A-Za-z,]*)")
_COMMAND = re.compile(r"\b(" + "|".join(COLLECTIVES) + r")_perf")
_HEADER = ("size", "count", "type", "time", "algbw", "busbw")


@dataclass(frozen=True)
class NcclTestsRow:
    """One message size: its out-of-place and in-place time (us) and bandwidths (GB/s, as printed)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    in_place_time_us: float | None
    in_place_algbw_GBps: float | None
    in_place_busbw_GBps: float | None

    @property
    def best_time_us(self) -> float:
        """The faster of the out-of-place and in-place times (each a mean over nccl-tests'
        iterations; the slower is the more disturbed)."""
        if self.in_place_time_us is None:
            return self.time_us
        return min(self.time_us, self.in_place_time_us)


@dataclass(frozen=True)
class NcclTestsLog:
    """One nccl-tests run: the collective, its ranks and nodes, and the rows."""

    path: str
    collective: str
    ranks: int
    nodes: int
    hosts: tuple[str, ...]
    devices: tuple[str, ...]
    nccl_version: str | None
    threads: int | None
    gpus_per_thread: int | None
    rows: tuple[NcclTestsRow, ...]
    rank_hosts: tuple[str, ...] = ()
    """The host of each rank, in rank order (where :mod:`sim.calibrate.pricing` places them)."""
    nccl_algo: str | None = None
    """``NCCL_ALGO`` as the log sets it (None: not set in the log; NCCL chose)."""

    @property
    def name(self) -> str:
        """The log's file name (what a calibration's ``source`` cites)."""
        return Path(self.path).name


def read_nccl_tests(path: str | Path) -> NcclTestsLog:
    """The nccl-tests output in the text file ``path`` (:func:`parse_nccl_tests`)."""
    return parse_nccl_tests(read_input_text(path, "nccl-tests output"), str(path))


def parse_nccl_tests(text: str, path: str = "<text>") -> NcclTestsLog:
    """Read nccl-tests' text output.

    Raises
    ------
    ConfigError
        Naming ``path`` when the text is not nccl-tests output (no column header, no rank
        lines, no collective named), reports a failure (:data:`FAILURE_LINE`, naming the
        line), has no result rows, or has rows that disagree with their collective (sizes not
        increasing, ``size`` not ``count`` elements of ``type``) or with themselves (``algbw``
        not ``size / time``, ``busbw`` not ``algbw`` times :func:`log_bus_factor`, beyond the
        rounding of the printed digits).
    """
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        if FAILURE_LINE.search(line):
            raise ConfigError(path, f"line {no}", "the output of a run that finished: this line reports a failure, "
                              "so the rows above it are not a measurement to calibrate on (rerun nccl-tests)",
                              line.strip())
    columns = _columns(lines, path)
    ranks: dict[int, tuple[str, str]] = {}
    threads = gpus = None
    version = algo = None
    test = None
    for line in lines:
        body = line.lstrip("# \t")
        m = _RANK.search(body)
        if m and body.startswith("Rank"):
            if int(m.group(1)) in ranks:
                raise ConfigError(path, f"Rank {m.group(1)}", "each rank's line once", body)
            ranks[int(m.group(1))] = (m.group(2).strip(), m.group(3).strip())
            continue
        if threads is None and (m := _THREADS.search(line)):
            threads, gpus = int(m.group(1)), int(m.group(2))
        if version is None and (m := _VERSION.search(line)):
            version = m.group(1)
        if version is None and (m := _LIBRARY.search(line)):
            code = int(m.group(1))
            version = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        if test is None and (m := _TEST.search(body)):
            test = m.group(1)
        if algo is None and (m := _ALGO.search(line)):
            algo = m.group(1)
    if test is None:
        test = _named_test(lines, path)
    if test not in COLLECTIVES:
        raise ConfigError(path, "collective", f"one of nccl-tests' tests {list(COLLECTIVES)}", test)
    if not ranks:
        raise ConfigError(path, "ranks", "nccl-tests' '#  Rank  N Group G Pid P on HOST device D [BUS] GPU' lines "
                          "(paste the whole output, header included)", Described("no rank lines"))
    n = len(ranks)
    rows = _rows(lines, columns, path, test, n)
    _check_rows(rows, test, n, path)
    hosts = tuple(sorted({h for h, _ in ranks.values()}))
    devices = tuple(sorted({d for _, d in ranks.values()}))
    rank_hosts = tuple(ranks[i][0] for i in sorted(ranks))
    return NcclTestsLog(path, test, n, len(hosts), hosts, devices, version, threads, gpus, rows, rank_hosts, algo)


def _columns(lines: list[str], path: str) -> list[str]:
    """The column names of the table's header line (``size count type ... busbw #wrong ...``)."""
    for line in lines:
        tokens = line.replace("#", " ").split()
        if all(t in tokens for t in _HEADER) and tokens[0] == "size":
            return line.lstrip().lstrip("#").split()
    head = next((ln for ln in lines if ln.strip()), "")
    raise ConfigError(path, "<file>", "nccl-tests output: a column header '#  size  count  type ... time  algbw  "
                      "busbw ...' above the result rows", head)


def _rows(lines: list[str], columns: list[str], path: str, test: str, ranks: int) -> tuple[NcclTestsRow, ...]:
    """Every line that reads as a row under ``columns`` (others, such as MPI's messages, are not
    rows), each one's bandwidths checked against its size and time (:func:`_check_bandwidths`)
    as ``test`` over ``ranks`` prints them."""
    names = [c.lstrip("#") for c in columns]
    times = [i for i, c in enumerate(names) if c == "time"]
    if not 1 <= len(times) <= 2:
        raise ConfigError(path, "<column header>", "one or two 'time algbw busbw' groups (out-of-place, in-place)",
                          " ".join(columns))
    at = {c: names.index(c) for c in ("size", "count", "type")}
    redop = names.index("redop") if "redop" in names else None
    root = names.index("root") if "root" in names else None
    wrong = [i for i, c in enumerate(names) if c == "wrong"]
    out: list[NcclTestsRow] = []
    for line in lines:
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or not tokens[0].isdigit():
            continue  # not a result row (a size first): MPI's messages, nccl-tests' summary
        field = f"row {len(out) + 1} (size {tokens[0]})"
        if len(tokens) < len(names):
            raise ConfigError(path, field, f"the {len(names)} columns of the header ({' '.join(columns)})",
                              line.strip())
        try:
            size, count = int(tokens[at["size"]]), int(tokens[at["count"]])
            dtype = tokens[at["type"]]
            values = [[_number(tokens[t + k]) for k in range(3)] for t in times]
            root_value = int(tokens[root]) if root is not None else None
        except ValueError:
            raise ConfigError(path, field, "integer size and count, and times and bandwidths that are numbers "
                              "above 0 (or N/A)", line.strip()) from None
        if dtype not in DTYPE_BYTES:
            raise ConfigError(path, f"{field}: type", f"one of nccl-tests' types {sorted(DTYPE_BYTES)}", dtype)
        if test in BANDWIDTH_CHECKED:
            for t, label in zip(times, ("out-of-place", "in-place")):
                _check_bandwidths(path, field, label, size, tokens[t:t + 3], log_bus_factor(test, ranks))
        if values[0][0] is None or size <= 0:
            continue  # nothing measured: a size nccl-tests skips
        if any(v is not None and v <= 0 for v in (values[0][0], values[1][0] if len(values) > 1 else None)):
            raise ConfigError(path, f"{field}: time", "a time above 0 microseconds", line.strip())
        for i in wrong:
            if tokens[i] != "N/A" and tokens[i] != "0":
                raise ConfigError(path, f"{field}: #wrong", "0: nccl-tests found the results wrong (data corruption); "
                                  "a calibration needs a correct run", tokens[i])
        ip = values[1] if len(values) > 1 else [None, None, None]
        out.append(NcclTestsRow(size, count, dtype, tokens[redop] if redop is not None else None, root_value,
                                values[0][0], values[0][1] or 0.0, values[0][2] or 0.0, ip[0], ip[1], ip[2]))
    if not out:
        raise ConfigError(path, "<rows>", "result rows under the column header (size count type ... time algbw "
                          "busbw ...) with a size above 0", Described("none"))
    return tuple(out)


def _half_unit(token: str) -> float:
    """Half the unit of the last digit ``token`` is printed with (``182.87``: 0.005): how far the
    printed number may be from the one it rounds."""
    try:
        exponent = Decimal(token).as_tuple().exponent
    except InvalidOperation:
        return 0.0
    return 0.5 * 10.0 ** exponent if isinstance(exponent, int) else 0.0


def _check_bandwidths(path: str, field: str, label: str, size: int, tokens: list[str], factor: float) -> None:
    """A row's ``time algbw busbw`` (one group, ``label``) against its own size: ``algbw = size /
    time`` and ``busbw = algbw x factor``, each within the rounding of the printed digits (a
    bandwidth of 0.00 at a size of a few bytes agrees with any time); N/A is not checked, nor a
    time not above 0 (refused, or skipped at size 0, by the caller)."""
    if "N/A" in tokens:
        return
    time_us, algbw, busbw = (float(x) for x in tokens)
    if not time_us > 0:
        return
    dt, da, db = (_half_unit(x) for x in tokens)
    slack = 1e-9
    fastest = size / max(time_us - dt, 0.0) / 1e3 if time_us > dt else float("inf")
    slowest = size / (time_us + dt) / 1e3
    lo, hi = max(slowest, algbw - da), min(fastest, algbw + da)  # what algbw was before it was printed
    if lo > hi * (1 + slack) + slack:
        raise ConfigError(path, f"{field}: {label} algbw", f"size / time = {size} B / {tokens[0]} us = "
                          f"{_gbps(size / time_us / 1e3)} GB/s, as nccl-tests computes it (the row disagrees with "
                          "itself: edited by hand, or pasted from two runs?)", tokens[1])
    if not lo * factor * (1 - slack) - db - slack <= busbw <= hi * factor * (1 + slack) + db + slack:
        raise ConfigError(path, f"{field}: {label} busbw", f"algbw x {factor:.4g} = {_gbps(algbw * factor)} GB/s for "
                          "this test over the log's ranks, as nccl-tests computes it (the row disagrees with "
                          "itself, or the log's rank lines are not all of its ranks)", tokens[2])


def _gbps(value: float) -> str:
    """A bandwidth for a message: two decimals, or four digits and an exponent past any link's
    (a time of 1e-300 us would print hundreds of digits).

    >>> _gbps(1234.5678), _gbps(1.048576e306)
    ('1,234.57', '1.049e+306')
    """
    return f"{value:,.2f}" if value < 1e9 else f"{value:.4g}"


def _number(token: str) -> float | None:
    """A time or bandwidth column: a number, or None for nccl-tests' ``N/A``."""
    if token == "N/A":
        return None
    value = float(token)
    if not value >= 0 or value == float("inf"):
        raise ValueError(token)
    return value


def _named_test(lines: list[str], path: str) -> str:
    """The collective a command line in the paste names (``all_reduce_perf``), else the file's name."""
    for line in lines:
        if m := _COMMAND.search(line):
            return m.group(1)
    if m := _COMMAND.search(Path(path).name) or re.search("(" + "|".join(COLLECTIVES) + ")", Path(path).name):
        return m.group(1)
    raise ConfigError(path, "collective", "a line naming the test ('# Collective test starting: all_reduce_perf' or "
                      "the command line, .../all_reduce_perf -b 8 ...), or a file name containing it",
                      Described("none"))


def _check_rows(rows: tuple[NcclTestsRow, ...], test: str, ranks: int, path: str) -> None:
    """Sizes increasing; each size ``count`` elements of ``type`` (per rank where the test counts so)."""
    per = ranks if test in PER_RANK_COUNT else 1
    for i, row in enumerate(rows):
        if i and row.size_bytes <= rows[i - 1].size_bytes:
            raise ConfigError(path, f"row {i + 1}", f"a size above the previous row's {rows[i - 1].size_bytes} "
                              "(one run per file: runs pasted together interleave)", row.size_bytes)
        expect = row.count * DTYPE_BYTES[row.dtype] * per
        if row.size_bytes != expect:
            raise ConfigError(path, f"row {i + 1}", f"size = count x {DTYPE_BYTES[row.dtype]} bytes ({row.dtype})"
                              + (f" x {ranks} ranks" if per > 1 else "") + f" = {expect} for {test}",
                              row.size_bytes)
