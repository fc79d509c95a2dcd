"""``llmsim calibrate --nccl-tests`` and ``run --calibration`` (issue #33, the collective part).

The committed logs (tests/data/nccl_tests/, each with the address it came from) parse to what
their text says; the calibrated topology reproduces each one-node all-reduce log's bus bandwidth
within 5% at every size from 1 MiB up, priced as ``llmsim collective`` prices it; so do the
published tables the presets were derived from (benchmarks/nccl/azure_all_reduce.yaml, NVLS on
H200 included), written out as nccl-tests would print them. Bad input is one line, exit 2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.calibration import calibrated_topology, load_calibration
from sim.calibrate.nccl_tests import parse_nccl_tests, read_nccl_tests
from sim.cli import main
from sim.studies.collective import collective
from sim.types import CollectiveKind

ROOT = Path(sim.__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "nccl_tests"
LOGS = sorted(DATA.glob("*.txt"))
TABLES = yaml.safe_load((ROOT / "benchmarks" / "nccl" / "azure_all_reduce.yaml").read_text())
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s")


def text_rows(path: Path) -> list[list[str]]:
    """The table rows of a log as the file writes them (tokens)."""
    return [line.split() for line in path.read_text().splitlines() if ROW.match(line)]


def file_busbw(path: Path, ranks: int) -> dict[int, float]:
    """Bus bandwidth (GB/s) per size from the file's times: the faster of out-of-place (column 6)
    and in-place (column 10), times nccl-tests' all-reduce factor 2(n-1)/n."""
    return {int(t[0]): int(t[0]) / (min(float(t[5]), float(t[9])) * 1e-6) * 2 * (ranks - 1) / ranks / 1e9
            for t in text_rows(path) if int(t[0]) > 0}


def one_node_all_reduce(path: Path) -> bool:
    log = read_nccl_tests(path)
    return log.collective == "all_reduce" and log.nodes == 1


def test_there_are_logs_of_one_node_and_of_several():
    kinds = {one_node_all_reduce(p) for p in LOGS}
    assert kinds == {True, False}
    for p in LOGS:
        assert p.read_text().startswith("# source: "), p.name


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_each_log_parses_to_what_its_text_says(path):
    text = path.read_text()
    log = read_nccl_tests(path)
    rank_lines = re.findall(r"#\s+Rank\s+(\d+) .* on\s+(\S+) device", text)
    assert log.ranks == len(rank_lines)
    assert log.nodes == len({host for _, host in rank_lines})
    rows = text_rows(path)
    assert [r.size_bytes for r in log.rows] == [int(t[0]) for t in rows if int(t[0]) > 0]
    by_size = {int(t[0]): t for t in rows}
    row = next(r for r in log.rows if r.size_bytes >= 2**20)  # 1 MiB, or the smallest size above
    t = by_size[row.size_bytes]
    assert (row.time_us, row.busbw_GBps) == (float(t[5]), float(t[7]))
    assert (row.in_place_time_us, row.in_place_busbw_GBps) == (float(t[9]), float(t[11]))
    assert f"{log.collective}_perf" in text


def _calibrate(tmp_path, *logs, topology=None) -> Path:
    out = tmp_path / "cal.yaml"
    argv = ["calibrate", "--nccl-tests", *map(str, logs), "-o", str(out)]
    assert main(argv + (["--topology", topology] if topology else [])) == 0
    return out


@pytest.mark.parametrize("path", [p for p in LOGS if one_node_all_reduce(p)], ids=lambda p: p.name)
def test_the_calibrated_topology_reproduces_each_one_node_log_within_5_percent_from_1_MiB(path, tmp_path, capsys):
    out = _calibrate(tmp_path, path)
    log = read_nccl_tests(path)
    topo = calibrated_topology(str(out), None)
    measured = file_busbw(path, log.ranks)
    sizes = [s for s in measured if s >= 2**20]
    assert len(sizes) >= 10
    for s in sizes:
        r = collective(topo, CollectiveKind.ALL_REDUCE, s, log.ranks)
        assert r.busbw_bytes_per_s / 1e9 == pytest.approx(measured[s], rel=0.05), s
    cal = load_calibration(str(out))
    assert cal.values and all(path.name in v.source for v in cal.values)
    assert "worst error from 1 MiB up" in capsys.readouterr().out


def table_as_log(entry: dict) -> str:
    """A published busbw table printed the way all_reduce_perf prints it (float elements)."""
    n = entry["ranks"]
    lines = ["# Collective test starting: all_reduce_perf",
             f"# nThread 1 nGpus {n} minBytes 1024 maxBytes 8589934592 step: 2(factor)"]
    lines += [f"#  Rank {i:2d} Group  0 Pid  1 on node device {i:2d} [0x00] {entry['system']}" for i in range(n)]
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
                 "   algbw   busbw #wrong")
    for i, bw in enumerate(entry["busbw_GBps"]):
        size = 1024 * 2**i
        t_us = size * 2 * (n - 1) / n / (bw * 1e9) * 1e6
        lines.append(f"  {size:>10} {size // 4:>10}  float  sum  -1  {t_us:.6g}  {size / t_us / 1e3:.2f}  {bw:.2f}  0"
                     f"  {t_us:.6g}  {size / t_us / 1e3:.2f}  {bw:.2f}  0")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("entry", TABLES, ids=lambda e: e["topology"])
def test_the_published_tables_calibrate_to_within_5_percent_from_1_MiB(entry, tmp_path):
    path = tmp_path / f"{entry['topology']}.txt"
    path.write_text(table_as_log(entry))
    out = _calibrate(tmp_path, path, topology=entry["topology"])
    topo = calibrated_topology(str(out), None)
    n = entry["ranks"]
    for i, bw in enumerate(entry["busbw_GBps"]):
        size = 1024 * 2**i
        if size >= 2**20:
            r = collective(topo, CollectiveKind.ALL_REDUCE, size, n)
            assert r.busbw_bytes_per_s / 1e9 == pytest.approx(bw, rel=0.05), size
    keys = {v.key for v in load_calibration(str(out)).values}
    assert ("nvls_efficiency_by_size_bytes" in keys) == (entry["algorithm"] == "nvls")


def _slower(path: Path, factor: float) -> str:
    """The log of an all-reduce with every time column multiplied by ``factor``, and its
    bandwidths as nccl-tests computes them from the new times."""
    ranks = sum(1 for line in path.read_text().splitlines() if re.search(r"#\s+Rank\s+\d+", line))

    def scale(line: str) -> str:
        if not ROW.match(line):
            return line
        t = line.split()
        for i in (5, 9):
            t[i] = f"{float(t[i]) * factor:.6g}"
            algbw = int(t[0]) / float(t[i]) / 1e3
            t[i + 1], t[i + 2] = f"{algbw:.2f}", f"{algbw * 2 * (ranks - 1) / ranks:.2f}"
        return "  ".join(t)
    return "\n".join(scale(line) for line in path.read_text().splitlines()) + "\n"


def test_run_with_a_slower_calibration_predicts_a_longer_iteration(tmp_path, capsys):
    a100 = next(p for p in LOGS if one_node_all_reduce(p) and "A100" in p.read_text())
    slow = tmp_path / "slow-all_reduce.txt"
    slow.write_text(_slower(a100, 3.0))
    cal = _calibrate(tmp_path, slow)
    capsys.readouterr()
    assert main(["run", "tiny", "--json", str(tmp_path / "plain.json")]) == 0
    assert main(["run", "tiny", "--calibration", str(cal), "--json", str(tmp_path / "cal.json")]) == 0
    printed = capsys.readouterr().out
    plain = json.loads((tmp_path / "plain.json").read_text())
    calibrated = json.loads((tmp_path / "cal.json").read_text())
    assert calibrated["iteration_time_s"] > plain["iteration_time_s"]
    assert f"calibration {cal}" in printed


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("llmsim: error: "), err
    return err


BAD_LOGS = {
    "not-nccl-tests.txt": "name: tiny\nmodel: {num_layers: 4}\n",
    "no-rows.txt": "# all_reduce_perf\n#  Rank  0 Group  0 Pid 1 on h device  0 [0x0] GPU\n"
                   "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n",
    "bad-count.txt": "./all_reduce_perf -g 2\n#  Rank  0 Group  0 Pid 1 on h device  0 [0x0] GPU\n"
                     "#  Rank  1 Group  0 Pid 1 on h device  1 [0x0] GPU\n"
                     "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                     "   1024  100  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n",
    "interleaved.txt": "./all_reduce_perf -g 2\n#  Rank  0 Group  0 Pid 1 on h device  0 [0x0] GPU\n"
                       "#  Rank  1 Group  0 Pid 1 on h device  1 [0x0] GPU\n"
                       "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                       "   2048  512  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n"
                       "   1024  256  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n",
}


@pytest.mark.parametrize("name", sorted(BAD_LOGS))
def test_bad_logs_are_one_line_naming_the_file_exit_2(name, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(BAD_LOGS[name])
    assert main(["calibrate", "--nccl-tests", str(path), "-o", str(tmp_path / "cal.yaml")]) == 2
    assert str(path) in _one_error_line(capsys)
    assert not (tmp_path / "cal.yaml").exists()


def test_a_log_of_another_collective_alone_calibrates_nothing(tmp_path, capsys):
    one = next(p for p in LOGS if one_node_all_reduce(p))
    other = tmp_path / "broadcast.txt"

    def as_broadcast(line: str) -> str:  # a broadcast's busbw is its algbw
        t = line.split()
        return "  ".join(t[:7] + [t[6]] + t[8:11] + [t[10]] + t[12:]) if ROW.match(line) else line
    text = one.read_text().replace("all_reduce_perf", "broadcast_perf")
    other.write_text("\n".join(as_broadcast(line) for line in text.splitlines()) + "\n")
    assert main(["calibrate", "--nccl-tests", str(other), "-o", str(tmp_path / "cal.yaml")]) == 2
    err = _one_error_line(capsys)
    assert str(other) in err and "an all_reduce_perf log (else all_gather_perf, reduce_scatter_perf, alltoall" in err


def test_a_calibration_for_other_links_is_refused(tmp_path, capsys):
    a100 = next(p for p in LOGS if one_node_all_reduce(p) and "A100" in p.read_text())
    cal = _calibrate(tmp_path, a100)
    capsys.readouterr()
    assert main(["run", "tiny", "--topology", "dgx-h100", "--calibration", str(cal)]) == 2
    assert "bandwidth_GBps" in _one_error_line(capsys)
    cal.write_text(cal.read_text().replace("llmsim_calibration: 1", "llmsim_calibration: 7"))
    assert main(["run", "tiny", "--calibration", str(cal)]) == 2
    assert str(cal) in _one_error_line(capsys)


def test_older_layouts_and_per_rank_counts():
    """nccl-tests before 2.10 had no root column and all-gather no redop; all-gather counts per rank."""
    text = ("# nThread 1 nGpus 4 minBytes 1024 maxBytes 2048 step: 2(factor)\n"
            + "".join(f"#   Rank  {i} Pid  9 on box device  {i} [0x00] Tesla V100-SXM2-16GB\n" for i in range(4))
            + "#       size  count  type  time  algbw  busbw  error  time  algbw  busbw  error\n"
            "        1024     64  float  12.5   0.08   0.06  0e+00  12.1   0.08   0.06  0e+00\n"
            "        2048    128  float  12.9   0.16   0.12  0e+00  12.4   0.17   0.12  0e+00\n")
    log = parse_nccl_tests(text, "all_gather.log")
    assert (log.collective, log.ranks, log.nodes, log.rows[1].count) == ("all_gather", 4, 1, 128)
    assert log.rows[0].redop is None and log.rows[0].root is None and log.rows[1].best_time_us == 12.4
    with pytest.raises(sim.errors.ConfigError, match="x 4 ranks"):
        parse_nccl_tests(text.replace("   64  float", "  256  float"), "all_gather.log")


def test_the_calibration_file_docs_calibrate_md_quotes_is_what_the_command_writes(tmp_path):
    """docs/calibrate.md quotes the head of a written calibration file: each line it shows (all
    but its closing "..." line) is a line of the file the same command writes today, in order."""
    text = (ROOT / "docs" / "calibrate.md").read_text()
    quoted = text.split("```yaml\n# llmsim calibration", 1)[1].split("```", 1)[0]
    quoted = ["# llmsim calibration" + quoted.splitlines()[0]] + quoted.splitlines()[1:]
    shown = [line for line in quoted if "..." not in line]
    written = _calibrate(tmp_path, DATA / "azure-nd-a100-v4-all_reduce.txt").read_text().splitlines()
    assert len(shown) >= 10 and written[:len(shown)] == shown
