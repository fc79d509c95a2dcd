"""The presets llmsim ships: where its ``workloads/`` and ``topologies/`` folders are, and
finding a file by path or by preset name.

The folders live at the top of the repository, where users read and edit them. A wheel
carries them inside the package, as ``sim/data/workloads/`` and ``sim/data/topologies/``
(``[tool.setuptools.package-dir]`` in ``pyproject.toml`` maps the top-level folders there), and
they are found through :func:`importlib.resources.files`. A source checkout, whether run in
place or installed in editable mode, has no ``sim/data/``: there the folders beside the
``sim`` package are used.

A *kind* names a folder relative to that root: ``"workloads"``, ``"topologies"``,
``"workloads/models"``, ``"workloads/validation"``, ``"workloads/inference"``,
``"workloads/megatron"``, ``"workloads/hf"``, ``"workloads/stacks"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import yaml

from sim.errors import ConfigError
from sim.inputs import is_file

__all__ = ["PRESET_GROUPS", "Preset", "preset_folder", "preset_names", "preset_root", "presets", "resolve_preset",
           "shown_path"]

PACKAGED = "data"
"""The folder inside the installed ``sim`` package that holds the presets."""


def preset_root() -> Path:
    """The folder holding ``workloads/`` and ``topologies/``.

    ``sim/data`` of an installed wheel when it is there, else the repository root of a source
    checkout (the parent of the ``sim`` package).

    >>> sorted(p.name for p in preset_root().iterdir() if p.name in ("topologies", "workloads"))
    ['topologies', 'workloads']
    """
    package = files("sim")
    # A package imported from the file system gives a pathlib.Path; llmsim is not run from a
    # zip archive, whose Traversable would need copying out before YAML loaders could read it.
    root = Path(str(package))
    packaged = root / PACKAGED
    return packaged if (packaged / "workloads").is_dir() else root.parent


def preset_folder(kind: str) -> Path:
    """The folder of one kind of preset, e.g. ``preset_folder("topologies")``."""
    return preset_root() / kind


def preset_names(kind: str, suffix: str = ".yaml") -> list[str]:
    """The names of a folder's presets (files ending in ``suffix``), sorted (``tiny``, not
    ``tiny.yaml``).

    >>> "dgx-a100" in preset_names("topologies")
    True
    """
    tables = TABLES if kind == "topologies" else ()
    return sorted(p.stem for p in preset_folder(kind).glob(f"*{suffix}") if p.stem not in tables)


def shown_path(path: Path | str) -> str:
    """How a file is named in reports: a shipped file by its place among the presets
    (``workloads/validation/korthikanti2022.yaml``, the same in a checkout and in any install),
    any other as given.

    >>> shown_path(preset_folder("workloads/validation") / "nemo2407.yaml")
    'workloads/validation/nemo2407.yaml'
    >>> shown_path("mine/case.yaml")
    'mine/case.yaml'
    """
    try:
        return Path(path).resolve().relative_to(preset_root().resolve()).as_posix()
    except ValueError:
        return str(path)


def resolve_preset(path_or_name: str, *kinds: str, suffix: str = ".yaml") -> Path:
    """An existing file: ``path_or_name`` itself, else a file or preset of the first of ``kinds``
    that has it (``NAME``, ``NAME`` + ``suffix``, or a path relative to the folder such as
    ``validation/korthikanti2022``).

    Raises
    ------
    ConfigError
        Naming what arrived and the presets of the first kind.

    >>> resolve_preset("tiny", "workloads").name
    'tiny.yaml'
    >>> resolve_preset("korthikanti2022", "workloads/validation", "workloads").parent.name
    'validation'
    >>> resolve_preset("llama3-8b", "workloads/megatron", suffix=".args").name
    'llama3-8b.args'
    """
    path_or_name = str(path_or_name)
    given = Path(path_or_name)
    if is_file(given):
        return given
    for kind in kinds:
        folder = preset_folder(kind)
        for candidate in (folder / path_or_name, folder / f"{path_or_name}{suffix}"):
            if is_file(candidate):
                return candidate
    shown = ", ".join(preset_names(kinds[0], suffix))
    raise ConfigError(path_or_name, "<file>", f"an existing file or a preset name ({kinds[0]}: {shown})",
                      path_or_name)


@dataclass(frozen=True)
class Preset:
    """One shipped file: its group, the name commands take, where it is, and what it holds."""

    group: str
    name: str
    path: Path
    description: str

    def to_dict(self) -> dict:
        return {"group": self.group, "name": self.name, "path": str(self.path), "description": self.description}


PRESET_GROUPS = (
    # (group, folder, suffix, the commands that take the name)
    ("workloads", "workloads", ".yaml", "run, memory, compare, sweep, whatif"),
    ("topologies", "topologies", ".yaml", "--topology"),
    ("models", "workloads/models", ".yaml", "infer, roofline, whatif memory"),
    ("validation", "workloads/validation", ".yaml", "validate"),
    ("inference-validation", "workloads/inference", ".yaml", "validate-infer"),
    ("megatron-args", "workloads/megatron", ".args", "run --megatron-args @NAME"),
    ("stacks", "workloads/stacks", ".yaml", "a workload's stack:, --set stack=NAME"),
    ("serving-stacks", "workloads/inference/stacks", ".yaml", "infer --stack NAME, validate-infer --stack NAME"),
    ("hf-configs", "workloads/hf", ".json", "--hf-config NAME, a workload's model.hf_config"),
)
"""The shipped presets, by group; ``llmsim presets`` lists them."""

TABLES = ("hbm-generations", "technology-nodes")
"""Files of ``topologies/`` that are tables for ``whatif memory`` and ``whatif nodes``, not topologies."""


def _describe(path: Path) -> str:
    """What a preset holds, in a line: its ``description``; else, for one workload, its model on
    its GPUs; for a file of cases, how many and the first one's publication; for a model file,
    the model's name; else the file's first comment line."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        cfg = json.loads(text)
        arch = (cfg.get("architectures") or [cfg.get("model_type", "")])[0]
        return f"Hugging Face config: {arch}, {cfg.get('num_hidden_layers')} layers, hidden {cfg.get('hidden_size')}"
    raw = yaml.safe_load(text) if path.suffix == ".yaml" else None
    cases = raw if isinstance(raw, list) else [raw]
    if isinstance(raw, list) and len(raw) > 1:
        source = raw[0].get("source") if isinstance(raw[0], dict) else None
        publication = source.get("publication") if isinstance(source, dict) else None
        return f"{len(raw)} cases: {publication}" if publication else f"{len(raw)} cases"
    case = cases[0] if cases and isinstance(cases[0], dict) else {}
    if isinstance(case.get("description"), str):
        return case["description"]
    model, system = case.get("model"), case.get("system")
    model = model if isinstance(model, dict) else {}
    system = system if isinstance(system, dict) else {}
    if model.get("name") and system.get("gpu"):
        return f"{model['name']} on {system.get('num_gpus')} x {system['gpu']}"
    if model.get("name"):
        return str(model["name"])
    for line in text.splitlines():
        if line.startswith("#") and line.strip("# "):
            return line.lstrip("# ").rstrip()
    return ""


def presets() -> list[Preset]:
    """Every shipped preset, group by group in :data:`PRESET_GROUPS` order, names sorted.

    >>> [p.name for p in presets() if p.group == "megatron-args"]
    ['gpt3-175b', 'llama3-8b']
    """
    out = []
    for group, kind, suffix, _ in PRESET_GROUPS:
        for name in preset_names(kind, suffix):
            if kind == "topologies" and name in TABLES:
                continue
            path = preset_folder(kind) / f"{name}{suffix}"
            out.append(Preset(group, name, path, _describe(path)))
    return out
