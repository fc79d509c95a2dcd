"""``llmsim validate-infer``: simulate published, measured single-request latencies and score them.

A case file (``workloads/inference/latency.yaml``, the shipped cases) lists measured runs: the model (a name
:func:`sim.inference.models.load_model` knows), the GPU, TP, PP, batch, prompt and output
lengths, the number formats, and what was measured (``ttft_s``, ``tpot_s``,
``e2e_latency_s``), each with its source. Every case is simulated and every measured metric
gets a row: measured, predicted, error ``(predicted - measured) / measured``.

A measurement is *below the bandwidth floor* when it is shorter than reading the weights of
the fullest GPU once per output token at the GPU's peak HBM bandwidth (the prefill and every
decode step read every weight at least once; Pope et al. 2022, arXiv 2211.05102, Sec. 3):
no run of the stated configuration can be that fast, so the figure belongs to another
configuration than the one stated. Such rows are shown but left out of the error summary, and
so are the rows *beside* one: the same source's measurements of the same model on the same GPU
in the same format, batch, lengths, metric and serving stack, which differ from it only in the
parallelism. One table's series of a model on a GPU is one measurement campaign; a run of it that
no run of the stated configuration could match shows the series did not run that configuration
(NVIDIA/NeMo discussion #8455 and issue #8370 on the NeMo inference page's Llama 2 13B rows,
faster than its 7B rows: "unbelievable"), so none of its rows scores the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from sim.config.fields import Fields, read_yaml
from sim.config.presets import resolve_preset
from sim.errors import ConfigError, NotBuiltError
from sim.inference.config import InferenceArgs, build_spec
from sim.inference.memory import weights_bytes
from sim.inference.report import make_inference_report
from sim.inference.runner import simulate_inference
from sim.inference.spec import InferenceSpec
from sim.inference.stack import ServingStack, load_serving_stack, stack_for_framework

__all__ = ["DEFAULT_CASES", "METRICS", "Row", "Series", "Validation", "case_stack", "validate_inference",
           "format_inference_validation", "bandwidth_floor_s"]

METRICS = ("ttft_s", "tpot_s", "e2e_latency_s")
DEFAULT_CASES = "latency"
"""The shipped cases: ``workloads/inference/latency.yaml``."""
_CASE_KEYS = ("id", "source", "model", "gpu", "tp", "pp", "batch", "prompt_tokens", "generate_tokens", "dtype",
              "kv_dtype", "topology", "stack", "measured", "notes")


_CASE_FIELD_OF_OPTION = {"--gpu": "gpu", "--tp": "tp", "--pp": "pp", "--batch": "batch", "--prompt": "prompt_tokens",
                         "--generate": "generate_tokens", "--dtype": "dtype", "--kv-dtype": "kv_dtype",
                         "--topology": "topology"}
"""The case's field for each ``llmsim infer`` option the shared spec builder names in its errors."""


def bandwidth_floor_s(spec: InferenceSpec, metric: str) -> float:
    """The least time ``metric`` can take: the fullest GPU's weights read once per forward
    pass the metric covers (one for TTFT, one per decode step for TPOT, ``generate_tokens``
    for end to end) at the GPU's peak HBM bandwidth.

    >>> from sim.hardware import get_gpu
    >>> from sim.inference.models import load_model
    >>> name, m, _ = load_model("llama2-13b")
    >>> round(bandwidth_floor_s(InferenceSpec(name, m, get_gpu("A100"), generate_tokens=20), "e2e_latency_s"), 3)
    0.255
    """
    passes = {"ttft_s": 1, "tpot_s": 1, "e2e_latency_s": spec.generate_tokens}[metric]
    w = max(weights_bytes(spec, s) for s in range(spec.pp))
    return passes * w / spec.gpu.hbm_bandwidth_bytes_per_s


@dataclass(frozen=True, slots=True)
class Series:
    """What the rows of one measured series share (the module docstring); they differ only in
    the parallelism."""

    source: str
    model: str
    gpu: str
    dtype: str
    batch: int
    prompt_tokens: int
    generate_tokens: int
    metric: str
    stack: str


@dataclass(frozen=True)
class Row:
    case: str
    metric: str
    measured: float
    predicted: float
    floor: float
    source: str
    prompt_tokens: int = 0
    generate_tokens: int = 0
    stack: str = ""
    """The serving stack the case ran on (:mod:`sim.inference.stack`)."""
    series: Series | None = None
    """The measured series the row belongs to (None: a series of its own)."""

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    @property
    def below_floor(self) -> bool:
        return self.measured < self.floor

    def to_dict(self) -> dict:
        return {"case": self.case, "metric": self.metric, "measured": self.measured, "predicted": self.predicted,
                "error": self.error, "bandwidth_floor": self.floor, "below_floor": self.below_floor,
                "source": self.source, "prompt_tokens": self.prompt_tokens, "generate_tokens": self.generate_tokens,
                "stack": self.stack}


@dataclass(frozen=True)
class Validation:
    rows: tuple[Row, ...]

    @cached_property
    def discredited(self) -> frozenset[Series]:
        """The series with a row below the bandwidth floor (the module docstring)."""
        return frozenset(r.series for r in self.rows if r.below_floor and r.series is not None)

    def beside_floor(self, row: Row) -> bool:
        """Whether ``row``, itself above the bandwidth floor, belongs to a series with a row
        below it (:attr:`Row.series`, :attr:`discredited`)."""
        return not row.below_floor and row.series in self.discredited

    def scored(self, metric: str | None = None) -> list[Row]:
        """Rows counted in the summary: not below the bandwidth floor nor beside a row that is
        (:meth:`beside_floor`), of ``metric`` if given."""
        return [r for r in self.rows if not r.below_floor and not self.beside_floor(r)
                and (metric is None or r.metric == metric)]

    def mape(self, metric: str | None = None) -> float:
        rows = self.scored(metric)
        return sum(abs(r.error) for r in rows) / len(rows) if rows else 0.0

    def max_abs_error(self, metric: str | None = None) -> float:
        return max((abs(r.error) for r in self.scored(metric)), default=0.0)

    def to_dict(self) -> dict:
        summary = {m: {"rows": len(self.scored(m)), "mape": self.mape(m), "max_abs_error": self.max_abs_error(m)}
                   for m in METRICS if self.scored(m)}
        summary["all"] = {"rows": len(self.scored()), "mape": self.mape(), "max_abs_error": self.max_abs_error()}
        return {"rows": [{**r.to_dict(), "beside_floor": self.beside_floor(r)} for r in self.rows],
                "summary": summary, "excluded_below_floor": sum(r.below_floor for r in self.rows),
                "excluded_beside_floor": sum(self.beside_floor(r) for r in self.rows)}


def _source(raw: object) -> str:
    if isinstance(raw, Mapping):
        return str(raw.get("publication") or raw.get("url") or "")
    return str(raw or "")


def case_stack(raw: Mapping, where: str, field: str) -> ServingStack:
    """The serving stack a case runs on: its ``stack`` (a shipped stack's name or a file),
    else the shipped stack whose ``matches`` finds its source's ``framework`` text, else the
    default stack (:data:`sim.inference.stack.DEFAULT_STACK`).

    Raises
    ------
    ConfigError
        For a ``stack`` that names no stack, naming the case file and the field.
    """
    given = raw.get("stack")
    if given is not None:
        if not isinstance(given, str) or not given.strip():
            raise ConfigError(where, f"{field}.stack", "a serving stack's name or file", given)
        try:
            return load_serving_stack(given)
        except ConfigError as exc:
            if exc.field != "--stack":
                raise
            raise ConfigError(where, f"{field}.stack", exc.expected, given) from None
    source = raw.get("source")
    framework = str(source.get("framework") or "") if isinstance(source, Mapping) else ""
    return (stack_for_framework(framework) if framework else None) or load_serving_stack()


def validate_inference(path: str | None = None, granularity: str = "step",
                       stack: ServingStack | None = None) -> Validation:
    """Simulate every case of the file at ``path`` (the shipped cases,
    ``workloads/inference/latency.yaml``, when None) and score each measured metric.

    Parameters
    ----------
    stack : ServingStack, optional
        Run every case on this serving stack; None: each on its own (:func:`case_stack`).

    Raises
    ------
    ConfigError
        Naming the file and the case's field for anything malformed.
    """
    file = resolve_preset(path or DEFAULT_CASES, "workloads/inference")
    where = str(file)
    top = Fields(read_yaml(file), where, "", ("cases", "sources", "notes"))
    cases = top.raw.get("cases")
    if not isinstance(cases, list) or not cases:
        raise top.error("cases", "a list of measured cases", cases)
    rows = []
    seen: dict[str, int] = {}
    for i, case in enumerate(cases):
        f = Fields(case, where, f"cases[{i}]", _CASE_KEYS)
        cid = f.text("id", required=True)
        if cid in seen:  # the rows are told apart by their id
            raise f.error("id", f"an id no other case of the file has (cases[{seen[cid]}] has it)", cid)
        seen[cid] = i
        source = f.raw.get("source")
        if source is not None and not isinstance(source, (Mapping, str)):
            raise f.error("source", "a mapping (publication, url, framework) or text", source)
        args = InferenceArgs(f.text("model", required=True), f.text("gpu", required=True),
                             f.integer("tp", positive=True) or 1, f.integer("pp", positive=True) or 1,
                             f.integer("batch", positive=True) or 1,
                             f.integer("prompt_tokens", required=True), f.integer("generate_tokens", required=True),
                             f.text("dtype") or "bf16", f.text("kv_dtype"), f.text("topology"))
        try:
            spec, topo, _ = build_spec(args)
        except ConfigError as exc:
            field = _CASE_FIELD_OF_OPTION.get(exc.field, exc.field)
            raise ConfigError(where, f"cases[{i}] ({cid}): {field}", exc.expected, exc.got) from None
        except NotBuiltError as exc:  # a model llmsim does not serve yet: say which case of which file asks
            raise NotBuiltError(f"{where}: cases[{i}] ({cid}): model: {exc}") from None
        measured = Fields(f.raw.get("measured"), where, f"cases[{i}].measured", METRICS)
        if not measured.raw:
            raise f.error("measured", f"a mapping with one or more of {list(METRICS)}", None)
        host = stack if stack is not None else case_stack(f.raw, where, f"cases[{i}]")
        rep = make_inference_report(simulate_inference(spec, topo, granularity=granularity, stack=host))
        for metric in METRICS:
            value = measured.number(metric)
            if value is None:
                continue
            if value <= 0:
                raise measured.error(metric, "a positive number of seconds", value)
            source_text = _source(f.raw.get("source"))
            series = Series(source_text, spec.name, spec.gpu.name, spec.dtype.value, spec.batch,
                            spec.prompt_tokens, spec.generate_tokens, metric, host.name)
            rows.append(Row(cid, metric, value, getattr(rep, metric), bandwidth_floor_s(spec, metric),
                            source_text, spec.prompt_tokens, spec.generate_tokens, host.name, series))
    return Validation(tuple(rows))


def format_inference_validation(v: Validation) -> str:
    """One row per case and metric, then the error summary per metric."""
    lines = [f"{'case':<52}{'metric':<15}{'measured':>12}{'predicted':>12}{'error':>9}  note"]
    for r in v.rows:
        note = f"below the bandwidth floor ({r.floor * 1e3:.1f} ms): not scored" if r.below_floor else \
            "beside a row below the bandwidth floor (same source, model, GPU): not scored" if v.beside_floor(r) else ""
        lines.append(f"{r.case:<52}{r.metric:<15}{r.measured * 1e3:>10.2f}ms{r.predicted * 1e3:>10.2f}ms"
                     f"{r.error * 100:>+8.1f}%  {note}")
    lines.append("")
    for m in METRICS:
        if v.scored(m):
            lines.append(f"  {m:<15} {len(v.scored(m)):>3} rows   MAPE {v.mape(m) * 100:5.1f}%   "
                         f"worst {v.max_abs_error(m) * 100:5.1f}%")
    lines.append(f"  {'all':<15} {len(v.scored()):>3} rows   MAPE {v.mape() * 100:5.1f}%   "
                 f"worst {v.max_abs_error() * 100:5.1f}%   ({sum(r.below_floor for r in v.rows)} rows below the "
                 f"bandwidth floor and {sum(v.beside_floor(r) for r in v.rows)} beside them not scored)")
    return "\n".join(lines)
