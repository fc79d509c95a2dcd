"""A userbuffers table as YAML gives it: Megatron-LM's ``--tp-comm-overlap-cfg`` file, a case's
``parallel.tp_comm_overlap_cfg`` and a stack's ``tp_comm_overlap_cfg`` setting.

A mapping from Transformer Engine's GEMM names (:data:`~sim.workload.tp_overlap.UB_GEMMS`) to
each one's entry (Transformer Engine's ``ub_cfgs``: ``method``, ``num_sm``, ``use_ce``,
``set_sm_margin``, ``num_splits``, ``aggregate`` and keys accepted but not modelled); a GEMM
left out keeps TE's defaults (:func:`~sim.workload.tp_overlap.userbuffers`).
"""

from __future__ import annotations

from collections.abc import Mapping

from sim.config.fields import Fields
from sim.errors import ConfigError
from sim.types import TpOverlapMethod, parse_enum
from sim.workload.tp_overlap import UB_GEMMS, TpOverlapConfig, UbGemm, userbuffers

__all__ = ["UB_KEYS", "read_ub_table"]

UB_KEYS = ("method", "num_sm", "use_ce", "cga_size", "set_sm_margin", "num_splits", "aggregate",
           "atomic_gemm", "fp8_buf", "is_reduce_scatter", "comm_priority", "gemm_priority",
           "pipeline_rs_overlap_first_gemm")
"""The keys of one GEMM's entry in Megatron-LM's ``--tp-comm-overlap-cfg`` YAML (Transformer
Engine's ``ub_cfgs``); ``method``, ``num_sm``, ``use_ce``, ``set_sm_margin``, ``num_splits``
and ``aggregate`` decide the SMs held and how the GEMM runs beside them
(:class:`~sim.workload.tp_overlap.UbGemm`), the others are accepted and not modelled."""


def _switch(g: Fields, key: str) -> bool | None:
    """A userbuffers switch: true or false, or 1 or 0 as NeMo's launcher tables write them
    (``launcher_scripts/conf/training/tp_overlap/ub_cfg_*.yaml``: ``set_sm_margin: 1``)."""
    value = g.raw.get(key)
    if value in (0, 1) and not isinstance(value, bool):
        return bool(value)
    return g.flag(key)


def read_ub_table(raw: object, path: str, field: str, source: str) -> TpOverlapConfig:
    """The table ``raw`` (read from ``path`` at ``field``) over TE's defaults; anything else is
    a ConfigError naming the file, the field and what arrived.

    >>> cfg = read_ub_table({"proj_fprop": {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": 1}},
    ...                     "w.yaml", "parallel.tp_comm_overlap_cfg", "a table")
    >>> cfg.split_of("proj_fprop"), cfg.sms_of("proj_fprop")
    (UbSplit(splits=1, ring=True, aggregate=False, sm_margin=1), 0)
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(path, field, f"a mapping from GEMM names {list(UB_GEMMS)} to {{method, num_sm, ...}}",
                          raw)
    overrides = {}
    for gemm, entry in raw.items():
        if gemm not in UB_GEMMS:
            raise ConfigError(path, f"{field}.{gemm}", f"a GEMM name among {list(UB_GEMMS)}", gemm)
        g = Fields(entry, path, f"{field}.{gemm}", UB_KEYS)
        method = g.raw.get("method")
        method = None if method is None else parse_enum(TpOverlapMethod, method, path, g.field("method"))
        num_sm = g.integer("num_sm")
        if num_sm is not None and num_sm < 0:
            raise g.error("num_sm", "a non-negative integer", num_sm)
        num_splits = g.integer("num_splits")
        if num_splits is not None and num_splits < 1:
            raise g.error("num_splits", "a positive integer", num_splits)
        overrides[gemm] = UbGemm(method, num_sm, g.flag("use_ce"), _switch(g, "set_sm_margin"), num_splits,
                                 _switch(g, "aggregate"))
    return userbuffers(overrides, source)
