"""Exports of a simulated iteration to other tools' formats.

:mod:`sim.export.chakra` writes MLCommons Chakra execution traces (one ``.et`` per rank) that
ASTRA-sim replays; :mod:`sim.export.etfile` reads and writes the ``.et`` framing through the
schema.

The schema is vendored: ``et_def.proto`` is mlcommons/chakra's ``schema/protobuf/et_def.proto``
(MIT, header in the file) and ``et_def_pb2.py`` was generated from it, with no edits, by::

    python -m venv /tmp/gt && /tmp/gt/bin/pip install grpcio-tools==1.62.3
    cd sim/export && /tmp/gt/bin/python -m grpc_tools.protoc -I. --python_out=. et_def.proto

grpcio-tools 1.62.3 bundles protoc 25.1 (Python gencode 4.25.1), whose output calls no runtime
version check and runs unchanged on protobuf 3.20.3, 4.21.12, 4.23.4, 4.25.9, 5.29.6, 6.33.6
and 7.36.2 with warnings as errors (checked when generated), hence the pin
``protobuf>=3.20,<8`` of the ``chakra`` extra. Newer protoc output pins the runtime to at
least its own version (``runtime_version.ValidateProtobufRuntimeVersion``).
"""
