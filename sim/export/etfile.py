"""Chakra ``.et`` files: length-prefixed protobuf messages of the MLCommons schema.

A Chakra execution trace is one ``GlobalMetadata`` message followed by ``Node`` messages,
each written as a varint of its length and then its bytes (mlcommons/chakra
``src/third_party/utils/protolib.py``, ``encodeMessage`` / ``decodeMessage``; ASTRA-sim's
feeder reads the same framing). The messages are those of ``et_def.proto``
(:mod:`sim.export.et_def_pb2`, generated from the vendored schema); protobuf is an optional
dependency (``pip install 'llmsim[chakra]'``).

:class:`EtNode` is the plain, hashable form of a node that the rest of llmsim builds and
compares; :func:`write_et` encodes it through the schema and :func:`read_et` decodes a file
back, so a round trip returns equal :class:`EtNode` lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path

from sim.errors import NotBuiltError

__all__ = ["NodeType", "CollectiveCommType", "AttrType", "Attr", "EtNode", "EtTrace", "encode_node",
           "encode_metadata", "write_et", "read_et", "frame", "require_schema"]


class NodeType(IntEnum):
    """``ChakraProtoMsg.NodeType`` (et_def.proto); the values are the schema's."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    """``ChakraProtoMsg.CollectiveCommType`` (et_def.proto); the values are the schema's."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


class AttrType(str, Enum):
    """Which member of ``AttributeProto``'s ``value`` oneof carries an attribute; the value is
    the schema's field name."""

    INT32 = "int32_val"
    INT64 = "int64_val"
    UINT64 = "uint64_val"
    DOUBLE = "double_val"
    BOOL = "bool_val"
    STRING = "string_val"


@dataclass(frozen=True, slots=True)
class Attr:
    """One ``AttributeProto``: a name and a typed value."""

    name: str
    type: AttrType
    value: int | float | bool | str


@dataclass(frozen=True, slots=True)
class EtNode:
    """One ``ChakraProtoMsg.Node``, with the fields llmsim writes.

    ``duration_micros`` and ``start_time_micros`` are whole microseconds, as the schema has
    them; ``attrs`` keep their order (a feeder looks them up by name).
    """

    id: int
    name: str
    type: NodeType
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    start_time_micros: int = 0
    duration_micros: int = 0
    attrs: tuple[Attr, ...] = ()

    def attr(self, name: str):
        """The value of attribute ``name`` (KeyError when the node has none)."""
        for a in self.attrs:
            if a.name == name:
                return a.value
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class EtTrace:
    """A decoded ``.et`` file: the metadata's version and attributes, then the nodes."""

    version: str
    metadata: tuple[Attr, ...]
    nodes: list[EtNode]


def require_schema():
    """The generated message classes (:mod:`sim.export.et_def_pb2`); a NotBuiltError naming the
    extra to install when protobuf is missing."""
    try:
        from sim.export import et_def_pb2
    except ImportError:
        raise NotBuiltError("Chakra export needs protobuf: pip install 'llmsim[chakra]'") from None
    return et_def_pb2


def _varint(n: int) -> bytes:
    """Base-128 varint, least significant group first (protobuf's encoding of a length)."""
    out = bytearray()
    while True:
        bits = n & 0x7F
        n >>= 7
        if n:
            out.append(0x80 | bits)
        else:
            out.append(bits)
            return bytes(out)


def frame(message: bytes) -> bytes:
    """One message as protolib's ``encodeMessage`` writes it: its length as a varint, then it.

    >>> frame(b"abc")
    b'\\x03abc'
    >>> len(frame(bytes(300))) - 300
    2
    """
    return _varint(len(message)) + message


def _attr_proto(pb, a: Attr):
    return pb.AttributeProto(name=a.name, **{a.type.value: a.value})


def encode_node(node: EtNode) -> bytes:
    """The deterministic serialization of ``node`` as a ``ChakraProtoMsg.Node`` (unframed)."""
    pb = require_schema()
    msg = pb.Node(id=node.id, name=node.name, type=int(node.type), ctrl_deps=node.ctrl_deps,
                  data_deps=node.data_deps, start_time_micros=node.start_time_micros,
                  duration_micros=node.duration_micros, attr=[_attr_proto(pb, a) for a in node.attrs])
    return msg.SerializeToString(deterministic=True)


def encode_node_attrs(attrs: tuple[Attr, ...]) -> bytes:
    """The serialization of ``attrs`` as a ``Node``'s ``attr`` entries alone. ``attr`` is the
    last field of ``Node`` (number 10) and a deterministic serialization writes fields in number
    order, so ``encode_node(n)`` followed by this is ``encode_node`` of ``n`` with ``attrs``
    appended to its attributes (tested): a node whose last attributes depend on the rank is
    encoded once and completed per rank by concatenation."""
    pb = require_schema()
    return pb.Node(attr=[_attr_proto(pb, a) for a in attrs]).SerializeToString(deterministic=True)


def encode_metadata(version: str, attrs: tuple[Attr, ...]) -> bytes:
    """The deterministic serialization of a ``GlobalMetadata`` message (unframed)."""
    pb = require_schema()
    msg = pb.GlobalMetadata(version=version, attr=[_attr_proto(pb, a) for a in attrs])
    return msg.SerializeToString(deterministic=True)


def write_et(path: str | Path, version: str, metadata: tuple[Attr, ...], nodes) -> int:
    """Write one ``.et`` file: the metadata, then every node (an :class:`EtNode` or its
    already encoded bytes) in order. Returns the bytes written."""
    parts = [frame(encode_metadata(version, metadata))]
    for n in nodes:
        parts.append(frame(n if isinstance(n, bytes) else encode_node(n)))
    data = b"".join(parts)
    Path(path).write_bytes(data)
    return len(data)


def _attrs(msg_attrs) -> tuple[Attr, ...]:
    out = []
    for a in msg_attrs:
        which = a.WhichOneof("value")
        try:
            kind = AttrType(which)
        except ValueError:
            raise NotBuiltError(f"attribute {a.name!r}: llmsim reads scalar attributes, not {which}") from None
        out.append(Attr(a.name, kind, getattr(a, which)))
    return tuple(out)


def _messages(data: bytes):
    """Split ``data`` into its length-prefixed messages."""
    pos, n = 0, len(data)
    while pos < n:
        size = shift = 0
        while True:
            if pos >= n:
                raise ValueError("truncated varint")
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + size > n:
            raise ValueError(f"message of {size} bytes at offset {pos} runs past the end ({n} bytes)")
        yield data[pos:pos + size]
        pos += size


def read_et(path: str | Path) -> EtTrace:
    """Decode a ``.et`` file written by :func:`write_et` (or any Chakra producer that writes
    only scalar attributes) through the schema."""
    pb = require_schema()
    messages = _messages(Path(path).read_bytes())
    head = next(messages, None)
    if head is None:
        raise ValueError(f"{path}: empty file, no GlobalMetadata message")
    meta = pb.GlobalMetadata.FromString(head)
    nodes = []
    for raw in messages:
        m = pb.Node.FromString(raw)
        nodes.append(EtNode(m.id, m.name, NodeType(m.type), tuple(m.data_deps), tuple(m.ctrl_deps),
                            m.start_time_micros, m.duration_micros, _attrs(m.attr)))
    return EtTrace(meta.version, _attrs(meta.attr), nodes)
