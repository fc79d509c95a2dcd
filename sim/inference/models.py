"""The model an inference serves, from a model file, a workload file or a Hugging Face config.

``llmsim infer MODEL`` accepts:

* a model file (``workloads/models/*.yaml``, or any YAML with a ``model`` section and an
  optional ``name``), or a preset name of that folder (``llama2-7b``, ``llama2-13b``,
  ``llama2-70b``, ``llama3-8b``, ``llama3-70b``);
* a training workload (a file, or a preset of ``workloads/``): its ``model`` section is used,
  the rest ignored;
* a Hugging Face ``config.json`` (a path ending in ``.json``).

The ``model`` section is read exactly as the workload loader reads it
(:mod:`sim.config.workload`), so the same keys, defaults and errors apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sim.config.fields import Notes, read_yaml
from sim.config.presets import preset_names, resolve_preset
from sim.config.stacks import choose_stack, load_stack
from sim.config.workload import build_model
from sim.errors import ConfigError
from sim.workload.spec import ModelSpec

__all__ = ["DEFAULT_MODEL", "MODELS_FOLDER", "load_model", "model_presets"]

DEFAULT_MODEL = "llama2-7b"
MODELS_FOLDER = "workloads/models"


def model_presets() -> list[str]:
    """The model files of ``workloads/models/``."""
    return preset_names(MODELS_FOLDER)


def _find(arg: str) -> Path:
    try:
        return resolve_preset(arg, MODELS_FOLDER, "workloads")
    except ConfigError:
        raise ConfigError(arg, "<file>", f"a model or workload file, a Hugging Face config.json, or a preset: "
                          f"{model_presets()} or {preset_names('workloads')}", arg) from None


def load_model(arg: str | None = None) -> tuple[str, ModelSpec, list[str]]:
    """Load the model ``arg`` names (see the module docstring); None loads ``llama2-7b``.

    Returns
    -------
    (str, ModelSpec, list of str)
        A short name for reports, the model, and the notes on defaults filled in.

    Raises
    ------
    ConfigError
        Naming the file and the field, for a missing file or a bad model section.

    >>> name, model, _ = load_model("llama2-70b")
    >>> name, model.num_layers, model.num_kv_heads
    ('llama2-70b', 80, 8)
    """
    file = _find(arg or DEFAULT_MODEL)
    notes = Notes()
    if file.suffix == ".json":
        model = build_model({"hf_config": file.name}, str(file), file.parent, None, notes, file.stem)
        return model.name, model, list(notes)
    raw = read_yaml(file)
    if isinstance(raw, list):
        if len(raw) != 1:
            raise ConfigError(str(file), "<top level>", "one case (a file of several cases is not a model)",
                              f"a list of {len(raw)} cases")
        raw = raw[0]
    if not isinstance(raw, Mapping):
        raise ConfigError(str(file), "<top level>", "a mapping with a model section", type(raw).__name__)
    if "model" not in raw:
        raise ConfigError(str(file), "model", "a model section (a mapping, or a Hugging Face config.json path)",
                          None)
    name = raw.get("name") if isinstance(raw.get("name"), str) else file.stem
    # the software stack, for a null seq_length: the file's stack, else the one its framework names
    stack = load_stack(raw["stack"], file.parent) if isinstance(raw.get("stack"), str) else \
        choose_stack(str(raw.get("framework") or "")).stack
    model = build_model(raw["model"], str(file), file.parent, stack, notes, name)
    return name, model, list(notes)
