"""Space files: the parallel strategies ``llmsim sweep`` searches, as lists of values per setting.

A space file is a mapping from a setting of ``parallel`` to the values to try::

    tp: [4, 8]
    pp: auto                  # every value valid for the combination (the default space's rule)
    recompute: [selective, full]

A setting the file leaves out stays at the workload's value; ``auto`` asks for the default
space's rule for that setting (:mod:`sim.studies.sweep.core`); with no space file every setting is ``auto``.
``dp`` is never listed: it is ``num_gpus / (tp x pp x cp)``. ``zero_stage`` is the ZeRO level
in effect: 0 shards nothing, 1 is Megatron-LM's distributed optimizer, 2 shards the gradients
too, 3 the weights (FSDP).

>>> space = space_from_mapping({"tp": [2, 4], "pp": "auto"}, "s.yaml")
>>> space.values("tp"), space.values("pp"), space.is_fixed("cp")
((2, 4), None, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sim.config.fields import Fields, is_int, read_yaml
from sim.errors import ConfigError
from sim.types import RecomputeKind, ScheduleKind, parse_enum

__all__ = ["AXES", "AUTO", "Space", "load_space", "space_from_mapping", "default_space"]

AXES = ("tp", "cp", "pp", "ep", "virtual_pipeline_stages", "schedule", "micro_batch_size", "recompute",
        "sequence_parallel", "zero_stage")
"""The settings a space may vary, in the order the enumeration nests them (a later setting's
default values may depend on the earlier ones: ``dp`` on ``tp``, ``cp`` and ``pp``, the
schedules on ``pp`` and ``virtual_pipeline_stages``, ...)."""

AUTO = "auto"
"""The word a space file uses for "every value valid for the combination"."""

_POSITIVE = ("tp", "cp", "pp", "ep", "virtual_pipeline_stages", "micro_batch_size")


@dataclass(frozen=True)
class Space:
    """Which values to try for each setting of :data:`AXES`.

    ``choices`` maps a setting to a tuple of values (ints, bools, or the enums
    :class:`~sim.types.ScheduleKind` and :class:`~sim.types.RecomputeKind`), or to None for
    the default rule; a setting it leaves out is fixed to the workload's value.
    """

    choices: Mapping[str, tuple | None] = field(default_factory=dict)
    source: str = "<default space>"
    """The file the space came from, for messages."""

    def is_fixed(self, axis: str) -> bool:
        """Whether ``axis`` keeps the workload's value."""
        return axis not in self.choices

    def values(self, axis: str) -> tuple | None:
        """The listed values of ``axis``, or None for the default rule (or a fixed axis)."""
        return self.choices.get(axis)


def default_space() -> Space:
    """Every setting by the default rule."""
    return Space({axis: None for axis in AXES})


def load_space(path: str) -> Space:
    """Read a space file (YAML).

    Raises
    ------
    ConfigError
        For an unreadable file, a key that is not one of :data:`AXES`, or a value that is not
        ``auto`` nor a non-empty list of distinct values of the setting's kind; the message
        names the file, the field (``tp``, ``recompute[1]``), what was expected and what came.
    """
    return space_from_mapping(read_yaml(Path(path)), str(path))


def space_from_mapping(raw: object, path: str) -> Space:
    """Build a :class:`Space` from a parsed space file (see :func:`load_space`)."""
    if raw is None:
        raise ConfigError(path, "<top level>", f"a mapping of settings ({', '.join(AXES)}) to lists of values",
                          None)
    f = Fields(raw, path, "", AXES)
    choices: dict[str, tuple | None] = {}
    for axis in AXES:
        if axis not in f.raw:
            continue
        value = f.raw[axis]
        if value == AUTO:
            choices[axis] = None
            continue
        if not isinstance(value, list) or not value:
            raise f.error(axis, f"a non-empty list of {_kind(axis)}, or '{AUTO}'", value)
        items = tuple(_item(axis, v, path, f"{axis}[{i}]") for i, v in enumerate(value))
        if len(set(items)) != len(items):
            raise f.error(axis, f"a list of distinct {_kind(axis)}", value)
        choices[axis] = items
    return Space(choices, path)


def _kind(axis: str) -> str:
    if axis in _POSITIVE:
        return "positive integers"
    if axis == "zero_stage":
        return "ZeRO stages 0, 1, 2 or 3"
    if axis == "sequence_parallel":
        return "true or false"
    kind = ScheduleKind if axis == "schedule" else RecomputeKind
    return f"values among {[k.value for k in kind]}"


def _item(axis: str, value: object, path: str, field_name: str) -> object:
    """One listed value of ``axis``, parsed; a ConfigError naming ``field_name`` otherwise."""
    if axis in _POSITIVE:
        if not is_int(value) or value < 1:
            raise ConfigError(path, field_name, "a positive integer", value)
        return value
    if axis == "zero_stage":
        if not is_int(value) or value not in (0, 1, 2, 3):
            raise ConfigError(path, field_name, "0, 1, 2 or 3", value)
        return value
    if axis == "sequence_parallel":
        if not isinstance(value, bool):
            raise ConfigError(path, field_name, "true or false", value)
        return value
    return parse_enum(ScheduleKind if axis == "schedule" else RecomputeKind, value, path, field_name)
