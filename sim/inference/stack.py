"""Serving stacks: one release of an inference runtime and what its host does per kernel, per
token and per request.

A serving stack file (``workloads/inference/stacks/*.yaml``, docs/inference.md) names a
runtime release (``trtllm-0.5``, ``nim-1.8``...), the framework texts of a latency case it
matches (regular expressions, searched case-insensitively), and under ``host`` four settings,
each a mapping of ``value``, ``why`` (a phrase) and ``sources`` (where the value comes from:
release notes, the runtime's code, a published measurement):

``cuda_graphs`` (true or false)
    Whether a step's kernels are replayed from a CUDA graph (one launch per step: the host
    issues nothing per kernel) or issued one by one by the host (eager).
``kernel_issue_s`` (seconds, 0 to 0.01)
    The host's time to issue one kernel when eager (the CUDA launch call and the runtime's
    own work around it).
``step_s`` (seconds, 0 to 10)
    The host's work per step between receiving a step's sampled token and issuing the next
    step's first kernel (sampling and stop checks on the host, scheduling).
``request_s`` (seconds, 0 to 600)
    The host's fixed work per request before the prefill is issued (front end, HTTP,
    tokenization), where the measurement of the stack's published figures includes it.

:mod:`sim.inference.host` turns these into the time a step's GPU waits for its host.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sim.config.fields import read_yaml
from sim.config.presets import preset_folder, preset_names, resolve_preset
from sim.errors import ConfigError

__all__ = ["DEFAULT_STACK", "HOST_SETTINGS", "STACKS_FOLDER", "HostSetting", "ServingStack", "load_serving_stack",
           "read_serving_stack", "serving_stack_names", "stack_for_framework"]

STACKS_FOLDER = "workloads/inference/stacks"
"""Where the shipped serving stacks are."""

DEFAULT_STACK = "cuda-graphs"
"""The stack ``llmsim infer`` runs when none is given: decode steps replayed as CUDA graphs and
no host work counted, so the GPU's kernels alone set the latency."""

HOST_SETTINGS = ("cuda_graphs", "kernel_issue_s", "step_s", "request_s")
HOST_MAX_S = {"kernel_issue_s": 1e-2, "step_s": 10.0, "request_s": 600.0}
"""The largest value each host setting takes, seconds: a thousand times what is measured or
published (a kernel launch 2-10 us, pytorch/pytorch #41383 and the stacks' sources; a Python
runtime's step about 1 ms; a request's front end tens of milliseconds), so a typo (``1e308``)
is refused rather than printed as an infinite latency."""
"""The keys of a stack file's ``host`` section, in the order docs/inference.md lists them."""

_TOP = ("name", "description", "matches", "host")
_SETTING = ("value", "why", "sources")


@dataclass(frozen=True)
class HostSetting:
    """One host setting of a stack: the value, why, and where it comes from."""

    value: float | bool
    why: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ServingStack:
    """One serving runtime release and its host's costs (see the module docstring).

    >>> s = ServingStack("x", "", (), False, 4e-6, 0.0, 0.0)
    >>> s.eager, s.kernel_issue_s
    (True, 4e-06)
    """

    name: str
    description: str
    matches: tuple[str, ...]
    cuda_graphs: bool
    kernel_issue_s: float
    step_s: float
    request_s: float
    settings: Mapping[str, HostSetting] | None = None
    """Each setting with its ``why`` and ``sources`` (None for a stack made in code)."""
    path: str = ""

    @property
    def eager(self) -> bool:
        """Whether the host issues each kernel itself (no CUDA graph)."""
        return not self.cuda_graphs

    @property
    def has_host_cost(self) -> bool:
        """Whether the host can ever hold a kernel back (else every step runs as the GPU alone)."""
        return (self.eager and self.kernel_issue_s > 0) or self.step_s > 0 or self.request_s > 0

    def on_slower_host(self, factor: float) -> ServingStack:
        """The stack with its host's times (per kernel, per step, per request) ``factor`` times
        as long: the settings are measured on the x86 hosts of DGX and HGX systems, and a GPU
        whose kernels a Grace CPU issues takes :data:`sim.hardware.GRACE_HOST_TIME_FACTOR`
        times as long (:attr:`sim.hardware.GPUSpec.host_time_factor`).

        >>> ServingStack("x", "", (), False, 4e-6, 1e-3, 0.0).on_slower_host(2.0).shown()
        'x (eager: 8.0 us per kernel issued; host 2.000 ms per step, 0.000 ms per request)'
        """
        if factor == 1.0:
            return self
        return dataclasses.replace(self, kernel_issue_s=self.kernel_issue_s * factor, step_s=self.step_s * factor,
                                   request_s=self.request_s * factor)

    def shown(self) -> str:
        """The stack in words, for notes and reports.

        >>> ServingStack("x", "", (), False, 4e-6, 1e-3, 0.0).shown()
        'x (eager: 4.0 us per kernel issued; host 1.000 ms per step, 0.000 ms per request)'
        """
        mode = "CUDA graphs" if self.cuda_graphs else f"eager: {self.kernel_issue_s * 1e6:.1f} us per kernel issued"
        return (f"{self.name} ({mode}; host {self.step_s * 1e3:.3f} ms per step, "
                f"{self.request_s * 1e3:.3f} ms per request)")


def _error(path: str, field: str, expected: str, got: object) -> ConfigError:
    text = repr(got)
    return ConfigError(path, field, expected, got if len(text) <= 80 else text[:77] + "...")


def _mapping(raw: object, path: str, field: str, keys: tuple[str, ...]) -> Mapping:
    if not isinstance(raw, Mapping):
        raise _error(path, field or "<file>", "a mapping", raw)
    for k in raw:
        if k not in keys:
            raise _error(path, f"{field}.{k}" if field else str(k), f"one of the keys {list(keys)}", k)
    return raw


def _setting(raw: object, path: str, key: str) -> HostSetting:
    field = f"host.{key}"
    m = _mapping(raw, path, field, _SETTING)
    if "value" not in m:
        raise _error(path, f"{field}.value", "a value", None)
    value = m["value"]
    if key == "cuda_graphs":
        if not isinstance(value, bool):
            raise _error(path, f"{field}.value", "true or false", value)
    elif (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
          or value > HOST_MAX_S[key]):
        raise _error(path, f"{field}.value", f"a number of seconds from 0 to {HOST_MAX_S[key]:g}", value)
    why = m.get("why")
    if not isinstance(why, str) or not why.strip():
        raise _error(path, f"{field}.why", "a phrase saying why", why)
    sources = m.get("sources")
    if not (isinstance(sources, list) and sources and all(isinstance(s, str) and s.strip() for s in sources)):
        raise _error(path, f"{field}.sources", "a list of one or more sources (text)", sources)
    return HostSetting(value if isinstance(value, bool) else float(value), why.strip(), tuple(sources))


def read_serving_stack(file: Path | str) -> ServingStack:
    """Read one serving stack file.

    Raises
    ------
    ConfigError
        Naming the file and the field for anything unreadable, missing or out of range.
    """
    path = str(file)
    raw = read_yaml(Path(file))  # bounded: size, aliases, depth, duplicate keys (sim.config.fields)
    top = _mapping(raw, path, "", _TOP)
    name = top.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _error(path, "name", "the stack's name (text)", name)
    description = top.get("description", "")
    if not isinstance(description, str):
        raise _error(path, "description", "text", description)
    matches = top.get("matches", [])
    if not (isinstance(matches, list) and all(isinstance(p, str) and p for p in matches)):
        raise _error(path, "matches", "a list of regular expressions (text)", matches)
    for i, p in enumerate(matches):
        try:
            re.compile(p)
        except re.error as exc:
            raise _error(path, f"matches[{i}]", f"a regular expression ({exc})", p) from None
    host = _mapping(top.get("host"), path, "host", HOST_SETTINGS)
    settings = {}
    for key in HOST_SETTINGS:
        if key not in host:
            raise _error(path, f"host.{key}", "a setting (value, why, sources)", None)
        settings[key] = _setting(host[key], path, key)
    return ServingStack(name.strip(), description.strip(), tuple(matches), settings["cuda_graphs"].value,
                        settings["kernel_issue_s"].value, settings["step_s"].value, settings["request_s"].value,
                        settings, path)


def serving_stack_names() -> list[str]:
    """The shipped stacks' names (``workloads/inference/stacks/``)."""
    return preset_names(STACKS_FOLDER)


def load_serving_stack(name_or_path: str | None = None, flag: str = "--stack") -> ServingStack:
    """A shipped stack by name, or a stack file (the default stack when None).

    Raises
    ------
    ConfigError
        For a name that is neither a file nor a shipped stack (naming ``flag``), or a bad file.
    """
    given = DEFAULT_STACK if name_or_path is None else str(name_or_path).strip()
    try:
        file = resolve_preset(given, STACKS_FOLDER)
    except ConfigError:
        raise ConfigError(f"<{flag}>", flag, f"a serving stack file or one of {serving_stack_names()}",
                          name_or_path) from None
    return read_serving_stack(file)


def stack_for_framework(text: str) -> ServingStack | None:
    """The shipped stack whose ``matches`` finds ``text`` (a case's framework), if exactly one.

    Raises
    ------
    ConfigError
        When two or more shipped stacks match (their patterns overlap).
    """
    found = [s for s in (read_serving_stack(preset_folder(STACKS_FOLDER) / f"{n}.yaml") for n in serving_stack_names())
             if any(re.search(p, text, re.IGNORECASE) for p in s.matches)]
    if len(found) > 1:
        raise ConfigError(found[1].path, "matches", f"patterns no other stack's match shares (also matched by "
                          f"{found[0].name})", text)
    return found[0] if found else None
