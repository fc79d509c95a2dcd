"""Bad input to ``llmsim calibrate`` and ``--calibration`` is refused, never dropped or read
as something else: a calibration file's ``runs``, ``logs`` and ``check`` rows are checked key
by key (an unknown key, a missing one, a string or a boolean where a number belongs, NaN), a
boolean is not its format number, and a section without the one it belongs to is refused; an
nccl-tests row whose bandwidths disagree with its own size and time, a log that reports a
failure, a log given twice and logs of different GPUs are refused. Each is one line naming the
file and the field, exit 2.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.calibration import load_calibration
from sim.calibrate.nccl_tests import parse_nccl_tests
from sim.cli import main
from sim.errors import ConfigError

ROOT = Path(sim.__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "nccl_tests"
H100 = DATA / "h100-cluster01-1node-all_reduce.txt"
A100 = DATA / "azure-nd-a100-v4-all_reduce.txt"


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("llmsim: error: "), err
    return err


def _row(run_id: str, measured: object = 0.0134) -> dict:
    """A run as ``llmsim calibrate --runs`` writes it."""
    return {"file": "runs.yaml", "id": run_id, "metric": "iteration_time_s", "measured": measured,
            "predicted_before": 0.0114, "predicted_after": 0.0134, "error_before": -0.1475, "error_after": 0.0,
            "predicted_written": 0.012, "predicted_left_out": 0.0131}


FITTED = {"llmsim_calibration": 1, "factors": {"compute_efficiency": {"value": 0.9, "source": "a test"}},
          "runs": [_row(f"r{i}") for i in range(5)]}


def _write(tmp_path: Path, raw: dict, name: str = "cal.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def test_a_run_of_five_with_a_measured_time_as_a_string_is_refused_not_dropped(tmp_path, capsys):
    """The fuzzer's case: one of five rows read '0.0134s'; it was dropped, and the run's note
    then said the file had five runs and needed five."""
    raw = copy.deepcopy(FITTED)
    raw["runs"][4]["measured"] = "0.0134s"
    cal = _write(tmp_path, raw)
    assert main(["run", "tiny", "--calibration", cal]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {cal}: runs[4].measured: expected a positive number"), line
    assert line.endswith("(got '0.0134s')"), line
    assert load_calibration(_write(tmp_path, FITTED, "good.yaml")).runs == tuple(FITTED["runs"])


def _del(key: str):
    return lambda row: row.pop(key)


def _set(key: str, value: object):
    return lambda row: row.__setitem__(key, value)


@pytest.mark.parametrize("edit, field", [
    (_set("measured", True), "runs[0].measured"),
    (_set("measured", float("nan")), "runs[0].measured"),
    (_set("measured", -0.01), "runs[0].measured"),
    (_set("predicted_left_out", float("inf")), "runs[0].predicted_left_out"),
    (_set("predicted_after", "0.0134"), "runs[0].predicted_after"),
    (_set("error_after", None), "runs[0].error_after"),
    (_set("bogus", 1), "runs[0].bogus"),
    (_del("metric"), "runs[0].metric"),
    (_set("metric", "mfu"), "runs[0].metric"),
    (_set("id", 7), "runs[0].id"),
], ids=["measured-bool", "measured-nan", "measured-negative", "left-out-inf", "after-string", "error-null",
        "unknown-key", "no-metric", "other-metric", "id-int"])
def test_a_bad_runs_row_is_refused_naming_the_row_and_the_key(edit, field, tmp_path):
    raw = copy.deepcopy(FITTED)
    edit(raw["runs"][0])
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_calibration(path)
    assert (err.value.path, err.value.field) == (path, field)


def test_a_left_out_prediction_may_be_null_and_the_later_keys_absent(tmp_path):
    """``predicted_left_out: null`` where the run alone sets a factor; a file written by hand
    (docs/calibrate.md's five-runs.yaml) may leave out the predictions it does not use."""
    raw = copy.deepcopy(FITTED)
    raw["runs"][0]["predicted_left_out"] = None
    raw["runs"][1] = {k: raw["runs"][1][k] for k in ("file", "id", "metric", "measured", "predicted_left_out")}
    assert load_calibration(_write(tmp_path, raw)).runs == tuple(raw["runs"])


@pytest.mark.parametrize("edit, field", [
    (lambda raw: raw.update(llmsim_calibration=True), "llmsim_calibration"),
    (lambda raw: raw.update(llmsim_calibration=1.0), "llmsim_calibration"),
    (lambda raw: raw["runs"].__setitem__(1, "a run"), "runs[1]"),
    (lambda raw: raw.pop("factors"), "runs"),
    (lambda raw: raw.update(topology="dgx-a100"), "topology"),
    (lambda raw: raw.update(logs=[]), "logs"),
], ids=["version-true", "version-float", "row-not-a-mapping", "runs-without-factors", "topology-without-scale-up",
        "logs-without-scale-up"])
def test_a_malformed_file_of_factors_is_refused(edit, field, tmp_path):
    raw = copy.deepcopy(FITTED)
    edit(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_calibration(path)
    assert (err.value.path, err.value.field) == (path, field)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """The calibration file ``llmsim calibrate`` writes from the committed A100 log, as YAML read."""
    out = tmp_path_factory.mktemp("cal") / "a100.yaml"
    assert main(["calibrate", "--nccl-tests", str(A100), "-o", str(out)]) == 0
    return yaml.safe_load(out.read_text())


@pytest.mark.parametrize("edit, field", [
    (lambda raw: raw["logs"][0].update(bogus=1), "logs[0].bogus"),
    (lambda raw: raw["logs"][0].pop("ranks"), "logs[0].ranks"),
    (lambda raw: raw["logs"][0].update(ranks=True), "logs[0].ranks"),
    (lambda raw: raw["logs"][0].update(devices="A100"), "logs[0].devices"),
    (lambda raw: raw["logs"][0].update(used="yes"), "logs[0].used"),
    (lambda raw: raw["logs"][0].pop("role"), "logs[0].role"),
    (lambda raw: raw["check"][0].update(bogus=1), "check[0].bogus"),
    (lambda raw: raw["check"][0].pop("error"), "check[0].error"),
    (lambda raw: raw["check"][0].update(log_busbw_GBps=float("nan")), "check[0].log_busbw_GBps"),
    (lambda raw: raw["check"][0].update(size_bytes=1.5), "check[0].size_bytes"),
    (lambda raw: raw["check"][0].update(error_before=False), "check[0].error_before"),
    (lambda raw: raw.update(llmsim_calibration=True), "llmsim_calibration"),
], ids=["logs-unknown", "logs-missing", "logs-bool", "logs-devices", "logs-used", "logs-role", "check-unknown",
        "check-missing", "check-nan", "check-size", "check-bool", "version-true"])
def test_a_malformed_logs_or_check_entry_is_refused(edit, field, written, tmp_path, capsys):
    raw = copy.deepcopy(written)
    edit(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_calibration(path)
    assert (err.value.path, err.value.field) == (path, field)
    assert main(["run", "tiny", "--calibration", path]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {path}: {field}: expected "), line


def test_the_written_file_reads_back(written, tmp_path):
    cal = load_calibration(_write(tmp_path, written))
    assert cal.logs and cal.check and cal.values


# --- nccl-tests logs -----------------------------------------------------------------------------

ROW_2 = "    67108864       8388608    double     sum      -1   313.66  213.95  374.42       0   313.52  214.05  374.58"


@pytest.mark.parametrize("edited, field", [
    ("    67108864       8388608    double     sum      -1     1.00  213.95  374.42       0   313.52  214.05  374.58",
     "row 2 (size 67108864): out-of-place algbw"),
    ("    67108864       8388608    double     sum      -1   313.66  213.95   37.44       0   313.52  214.05  374.58",
     "row 2 (size 67108864): out-of-place busbw"),
    ("    67108864       8388608    double     sum      -1   313.66  213.95  374.42       0   313.52  241.05  374.58",
     "row 2 (size 67108864): in-place algbw"),
    ("    67108864       8388608    double     sum      -1   313.66  213.95  374.42       0   313.52  214.05  374.68",
     "row 2 (size 67108864): in-place busbw"),
    ("    67108864       8388608    double     sum      -1   1e-300  213.95  374.42       0   313.52  214.05  374.58",
     "row 2 (size 67108864): out-of-place algbw"),
], ids=["time-300x-off", "busbw", "in-place-algbw", "in-place-busbw-by-0.1", "time-1e-300"])
def test_a_row_whose_bandwidths_disagree_with_its_size_and_time_is_refused(edited, field, tmp_path, capsys):
    text = H100.read_text()
    assert ROW_2 in text
    log = tmp_path / "all_reduce.txt"
    log.write_text(text.replace(ROW_2, edited))
    assert main(["calibrate", "--nccl-tests", str(log), "-o", str(tmp_path / "c.yaml")]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {log}: {field}: expected "), line
    assert len(line) < len(str(log)) + 300, line  # the bandwidth it computes is not printed in 300 digits
    assert not (tmp_path / "c.yaml").exists()


def _tiny_log(algbw: str, busbw: str) -> str:
    return ("# Collective test starting: all_reduce_perf\n"
            + "".join(f"#  Rank {i:2d} Group  0 Pid  1 on h device {i} [0x00] NVIDIA H100 80GB HBM3\n"
                      for i in range(8))
            + "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            f"   8  2  float  sum  -1  30.00  {algbw}  {busbw}  0  29.87  {algbw}  {busbw}  0\n"
            f"   1048576  262144  float  sum  -1  100.0  10.49  18.35  0  100.0  10.49  18.35  0\n")


def test_the_printed_rounding_is_allowed_for():
    """8 B in 30 us is 0.000267 GB/s, printed 0.00: the check allows the printed digits their
    rounding (and 1 MiB in 100.0 us, 10.48576 GB/s, busbw 18.35 of 18.3501)."""
    log = parse_nccl_tests(_tiny_log("0.00", "0.00"), "x-all_reduce.txt")
    assert [r.size_bytes for r in log.rows] == [8, 1048576]
    with pytest.raises(ConfigError) as err:
        parse_nccl_tests(_tiny_log("0.01", "0.02"), "x-all_reduce.txt")
    assert err.value.field == "row 1 (size 8): out-of-place algbw"


FAILURES = ["cnode3-002: Test NCCL failure common.cu:1234 'unhandled cuda error / '",
            "cnode3-002: Test CUDA failure common.cu:891 'out of memory'",
            " .. cnode3-002 pid 4180122: Test failure common.cu:1161",
            "# Out of bounds values : 3 FAILED",
            "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD",
            "mpirun noticed that process rank 2 with PID 0 on node h exited on signal 11 (Segmentation fault).",
            "srun: error: cnode3-002: task 5: Exited with exit code 3"]


@pytest.mark.parametrize("failure", FAILURES, ids=["nccl", "cuda", "test", "out-of-bounds", "mpi-abort", "signal",
                                                   "srun"])
def test_a_log_that_reports_a_failure_is_refused_naming_the_line(failure, tmp_path, capsys):
    text = H100.read_text()
    log = tmp_path / "all_reduce.txt"
    log.write_text(text.replace("# Out of bounds values : 0 OK\n", failure + "\n"))
    no = next(i for i, line in enumerate(log.read_text().splitlines(), 1) if line == failure)
    assert main(["calibrate", "--nccl-tests", str(log), "-o", str(tmp_path / "c.yaml")]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {log}: line {no}: expected the output of a run that finished"), line
    assert failure.strip()[:40] in line


def test_a_log_given_twice_is_refused_naming_both(tmp_path, capsys):
    out = str(tmp_path / "c.yaml")
    assert main(["calibrate", "--nccl-tests", str(H100), str(H100), "-o", out]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {H100}: --nccl-tests: expected each log once (the same file as {H100}")
    copy_of = tmp_path / "copy-all_reduce.txt"
    copy_of.write_bytes(H100.read_bytes())
    assert main(["calibrate", "--nccl-tests", str(H100), str(copy_of), "-o", out]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {copy_of}: --nccl-tests: expected each log once (the same text as {H100}")
    assert not Path(out).exists()


def test_logs_of_different_gpus_are_refused_naming_both(tmp_path, capsys):
    out = str(tmp_path / "c.yaml")
    assert main(["calibrate", "--nccl-tests", str(H100), str(A100), "-o", out]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"llmsim: error: {A100}: devices: expected the GPU of the other logs: {H100.name} ran on "
                           "NVIDIA H100 80GB HBM3"), line
    assert line.endswith("(got 'NVIDIA A100-SXM4-80GB')")
    mixed = tmp_path / "mixed-all_reduce.txt"
    mixed.write_text(H100.read_text().replace("[0000:df:00] NVIDIA H100 80GB HBM3", "[0000:df:00] NVIDIA H200"))
    assert main(["calibrate", "--nccl-tests", str(mixed), "-o", out]) == 2
    assert f"{mixed}: devices: expected the ranks of one log on one GPU model" in _one_error_line(capsys)
    assert not Path(out).exists()
