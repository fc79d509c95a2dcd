"""Edges of the ``llmsim`` command line: how an error reads, Ctrl-C in every long command,
a topology's own GPU, ``--json -``, byte counts as integers, and the options whose help and
behaviour must agree."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.errors import ConfigError


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``llmsim ARGV`` in-process; return (status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _one_error(capsys, *argv: str) -> str:
    """The single ``llmsim: error:`` line ``argv`` prints, after checking status 2."""
    status, out, err = _run(capsys, *argv)
    assert status == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), err
    assert "Traceback" not in out + err
    return lines[0].removeprefix("llmsim: error: ")


# --- how an error reads ---------------------------------------------------------------------------


def test_an_option_error_names_the_option_once():
    assert str(ConfigError("<--json>", "--json", "a file to write", "x")) == "--json: expected a file to write (got 'x')"
    # a file's error keeps FILE: FIELD:, and an option's error about another field names both
    assert str(ConfigError("w.yaml", "parallel.tp", "a positive integer", 0)) == \
        "w.yaml: parallel.tp: expected a positive integer (got 0)"
    assert str(ConfigError("<--set>", "parallel.tp", "a YAML value", "[1")) == \
        "<--set>: parallel.tp: expected a YAML value (got '[1')"


def test_an_output_folder_given_for_a_file_reads_once(tmp_path, capsys):
    line = _one_error(capsys, "run", "tiny", "--trace", str(tmp_path))
    assert line == f"--trace: expected a file to write, not a folder (got {str(tmp_path)!r})"


def test_a_forced_algorithm_that_cannot_run_says_what_was_expected(capsys):
    line = _one_error(capsys, "collective", "--op", "all-gather", "--algo", "nvls")
    assert line.startswith("--algo: expected an algorithm that can run this all-gather over 8 GPUs of dgx-h100; "
                           "nvls needs an all-reduce"), line
    assert line.endswith("(got 'nvls')")


def test_a_power_cap_below_idle_says_what_was_expected(capsys):
    line = _one_error(capsys, "whatif", "power", "tiny", "--set", "system.gpu=H100", "--limits", "10")
    assert line.startswith("--limits: expected caps in watts above the GPU's idle draw"), line
    assert line.endswith("(got '10')")


def test_fp16_beside_bf16_reads_as_what_was_expected(capsys):
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --bf16 --fp16")
    line = _one_error(capsys, "run", "--megatron-args", args, "--set", "system.gpu=H100")
    assert "--fp16: expected no --fp16 beside --bf16" in line, line
