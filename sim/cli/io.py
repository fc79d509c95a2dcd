"""What the commands of ``llmsim`` share: ``--json -``, the workload and topology a command
runs, and the options several commands take.

``--json -`` writes the JSON to standard output and what the command prints to standard
error (:func:`run_command`, :func:`note_json_stdout`); the JSON itself is written by
:func:`sim.output.json_output.write_json` and the output paths are checked before any work by
:func:`sim.output.paths.check_output_paths`. A command's workload is a workload file or
Megatron-LM launch arguments (:func:`load_workload`), placed on a topology by the one rule of
:mod:`sim.topology.choice` (:func:`place`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from sim.errors import ConfigError
from sim.output.json_output import json_to_stdout
from sim.output.paths import STDOUT

__all__ = ["TOPOLOGY_GPU_HELP", "add_budget_option", "add_calibration_option", "add_megatron_options", "calibration",
           "load_workload", "note_json_stdout", "place", "run_command"]

TOPOLOGY_GPU_HELP = ("; one whose file fixes its GPU (gpu: B200 in topologies/dgx-b200.yaml) brings it, unless "
                     "--set system.gpu=NAME keeps the workload's GPU on its links (sim/topology/choice.py)")
"""The rule for a topology option and the GPU (:mod:`sim.topology.choice`), in every such option's help."""


def run_command(args: argparse.Namespace) -> int:
    """Run the command; with ``--json -`` the JSON goes to standard output and what the command
    prints to standard error, so that ``llmsim run --json - | jq .iteration_time_s`` works."""
    if getattr(args, "json", None) != STDOUT:
        return args.func(args)
    with json_to_stdout(), contextlib.redirect_stdout(sys.stderr):
        return args.func(args)


def note_json_stdout(parser: argparse.ArgumentParser) -> None:
    """Add to every command's ``--json`` help what ``-`` does (:func:`run_command`)."""
    for action in parser._actions:
        if "--json" in action.option_strings:
            action.help = f"{action.help} (- writes it to standard output, the printed report to stderr)"
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):  # a command's subcommands
            for child in choices.values():
                if isinstance(child, argparse.ArgumentParser):
                    note_json_stdout(child)


def add_budget_option(p: argparse.ArgumentParser) -> None:
    """``--max-memory-gib`` on a command that simulates (:mod:`sim.budget`), its last option."""
    p.add_argument("--max-memory-gib", type=float, metavar="GIB",
                   help="the memory one simulation may take: a job whose estimate (tasks, topology) exceeds it "
                   "stops before it is built, with the estimate (default: half of the memory this process may use)")


def add_calibration_option(p: argparse.ArgumentParser, applies: str) -> None:
    """``--calibration FILE`` (``llmsim calibrate``'s file) on a command; ``applies`` says where
    the command applies it."""
    p.add_argument("--calibration", metavar="FILE", help="apply a calibration file (llmsim calibrate): " + applies
                   + " (docs/calibrate.md)")


def calibration(args: argparse.Namespace, topology, notes: list[str]):
    """``--calibration FILE`` applied to ``topology`` (a name, a file, a spec or None), each
    thing it sets noted in ``notes``: what the topology option stands for and the factors for
    :func:`sim.runner.simulate` (:func:`sim.calibrate.calibration.apply_calibration`); the
    topology itself and None without the option."""
    from sim.calibrate.calibration import apply_calibration

    return apply_calibration(getattr(args, "calibration", None), topology, notes)


def place(workload, topology, args: argparse.Namespace, notes: list[str]):
    """The workload on ``topology`` (a name, a file, a loaded spec, or None: its own), the GPU
    chosen by the one rule of :mod:`sim.topology.choice`."""
    from sim.topology.choice import gpu_given, place_workload

    return place_workload(workload, topology, notes, gpu_named=gpu_given(getattr(args, "set", None)))


def load_workload(args: argparse.Namespace):
    """The workload of ``run`` and ``memory``: a workload file, or Megatron-LM launch arguments
    (``--megatron-args``, docs/megatron-args.md), whose unknown flags are also printed on stderr."""
    from sim.config import load_workload_with_notes

    if getattr(args, "megatron_args", None) is None:
        if getattr(args, "hf_config", None):
            raise ConfigError("<--hf-config>", "--hf-config", "--megatron-args beside it (a workload file names "
                              "its Hugging Face config in model.hf_config)", args.hf_config)
        return load_workload_with_notes(args.workload, args.set or (), args.case)
    from sim.config.megatron_args import UNKNOWN_NOTE, load_megatron_workload, read_megatron_args

    if args.workload or args.case:
        raise ConfigError("<--megatron-args>", "--megatron-args", "no workload file or --case beside it",
                          args.workload or args.case)
    text, source = read_megatron_args(args.megatron_args)
    workload, notes = load_megatron_workload(text, source=source, hf_config=args.hf_config,
                                             topology=getattr(args, "topology", None), overrides=args.set or ())
    for note in notes:
        if note.startswith(UNKNOWN_NOTE):
            print(f"llmsim: warning: {note}", file=sys.stderr)
    return workload, notes


def tuned_workload(args: argparse.Namespace, workload, notes: list[str], topology, factors):
    """The workload of ``run`` with the null settings a practitioner tunes chosen so, when its
    framework is one no stack models (:mod:`sim.studies.tuning`), each combination put on
    ``topology`` as the command puts the workload; its notes then those of the tuned build.
    Launch arguments name Megatron-LM, whose stack is known."""
    if getattr(args, "megatron_args", None) is not None:
        return workload, notes
    from sim.config.workload import load_tunable_case
    from sim.studies.tuning import tune

    case = load_tunable_case(args.workload, args.set or (), args.case, workload)
    if case is None:
        return workload, notes

    def placed(w):
        p = place(w, topology, args, [])
        return p.workload, p.topology

    tuned = tune(case, workload, placed, factors)
    return (workload, notes) if tuned is None else (tuned.workload, list(tuned.notes))


def workload_stack_name(args: argparse.Namespace) -> str:
    """The software stack of the workload :func:`load_workload` loads for ``args`` (its
    ``stack``, else the one its framework text names; launch arguments name Megatron-LM)."""
    from sim.config.workload import case_stack, workload_stack

    if getattr(args, "megatron_args", None) is None:
        return workload_stack(args.workload, args.set or (), args.case).name
    from sim.config.fields import apply_overrides
    from sim.config.megatron_args import FRAMEWORK, SOURCE
    from sim.config.workload import WORKLOAD_SETTABLE

    return case_stack(apply_overrides({"framework": FRAMEWORK}, args.set or (), WORKLOAD_SETTABLE), Path(SOURCE)).name


def add_megatron_options(p: argparse.ArgumentParser) -> None:
    """``--megatron-args`` and ``--hf-config``: the workload of ``run`` and ``memory`` as launch arguments."""
    p.add_argument("--megatron-args", metavar='"ARGS"|@FILE',
                   help="the workload as Megatron-LM launch arguments, or @FILE: a launch-script fragment "
                   "(torchrun ... pretrain_gpt.py --flag v ...); GPU type with --set system.gpu=NAME "
                   "(docs/megatron-args.md)")
    p.add_argument("--hf-config", metavar="PATH", help="with --megatron-args: a Hugging Face config.json giving "
                   "the model, or a shipped one's name (llmsim presets); model flags given beside it must agree")
