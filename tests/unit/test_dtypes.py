"""Number formats: the ones simulated are the ones every input accepts and every ``--dtype``
help lists; fp32 and tf32 are refused when read, exit 2 (sim/types.py SIMULATED_DTYPES)."""

from __future__ import annotations

import argparse
import ast
import re

import pytest

from sim.cli.main import build_parser, main
from sim.config import load_workload
from sim.errors import ConfigError
from sim.inference.config import InferenceArgs, build_spec
from sim.inference.spec import KV_DTYPES
from sim.studies.whatif.systems import parse_dtype
from sim.types import SIMULATED_DTYPES, Dtype


def _dtype_options(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(command words, option, help) of every option of every (sub)command that takes a
    number format."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _dtype_options(sub, prefix + (name,))
        elif any(o.endswith("dtype") for o in action.option_strings):
            yield prefix, action.option_strings[0], action.help


OPTIONS = sorted(_dtype_options(build_parser()))


def _listed(text: str) -> list[str]:
    """The formats ``text`` names, each once, in its order."""
    names = {d.value for d in Dtype}
    return list(dict.fromkeys(w for w in re.findall(r"[a-z0-9]+", text) if w in names))


def test_the_format_options_are_found():
    assert {(c, o) for c, o, _ in OPTIONS} >= {(("whatif", "generations"), "--dtype"), (("infer",), "--dtype"),
                                               (("infer",), "--kv-dtype"), (("roofline",), "--dtype"),
                                               (("whatif", "memory"), "--dtype")}


@pytest.mark.parametrize("command, option, text", OPTIONS, ids=[f"{'-'.join(c)}{o}" for c, o, _ in OPTIONS])
def test_every_format_help_lists_exactly_what_the_command_accepts(command, option, text, capsys):
    listed = _listed(text)
    assert listed, text
    for d in Dtype:
        if d.value in listed:
            continue
        assert main([*command, option, d.value]) == 2, d  # refused before any work
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        said = re.search(rf"error: {option}: expected one of (\[[^\]]*\])", err)
        assert said, err
        assert ast.literal_eval(said.group(1)) == listed  # the error lists what the help lists
        if option == "--dtype" and d in (Dtype.FP32, Dtype.TF32):
            assert "not simulated" in err  # and why


def test_the_listed_formats_are_accepted():
    assert [d.value for d in SIMULATED_DTYPES] == ["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]
    for d in SIMULATED_DTYPES:
        assert parse_dtype(d.value) is d
        spec, _, _ = build_spec(InferenceArgs("llama2-7b", "B200", dtype=d.value, kv_dtype="bf16"))
        assert spec.dtype is d
    for d in KV_DTYPES:
        spec, _, _ = build_spec(InferenceArgs("llama2-7b", "B200", kv_dtype=d.value))
        assert spec.kv_dtype is d


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_a_workload_in_fp32_or_tf32_is_refused_when_loaded(dtype, capsys):
    with pytest.raises(ConfigError) as e:  # the A100 has both peaks; neither is simulated
        load_workload("tiny", [f"dtype={dtype}"])
    assert e.value.field == "dtype" and "not simulated" in e.value.expected
    assert main(["run", "tiny", "--set", f"dtype={dtype}"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and f"(got '{dtype}')" in err


def test_a_workload_built_in_fp32_is_refused():
    import dataclasses

    w = load_workload("tiny")
    with pytest.raises(ConfigError, match="dtype: expected one of"):
        dataclasses.replace(w, dtype=Dtype.FP32)
