"""google/pprof ``proto/profile.proto`` (package perftools.profiles, proto3)
built as a descriptor at test time with ``google.protobuf.descriptor_pb2`` —
field names, numbers and types exactly as the .proto declares them — so our
hand-written encoder is decoded by the official protobuf runtime."""

from __future__ import annotations

import gzip

import pytest

descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2", reason="protobuf (test extra) not installed")
from google.protobuf import descriptor_pool, message_factory  # noqa: E402

F = descriptor_pb2.FieldDescriptorProto
I64, U64, STR, BOOL, MSG = F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_MESSAGE
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED

#: message -> [(field name, number, type, label, message type)]
PROFILE_PROTO = {
    "Profile": [
        ("sample_type", 1, MSG, REP, "ValueType"), ("sample", 2, MSG, REP, "Sample"),
        ("mapping", 3, MSG, REP, "Mapping"), ("location", 4, MSG, REP, "Location"),
        ("function", 5, MSG, REP, "Function"), ("string_table", 6, STR, REP, None),
        ("drop_frames", 7, I64, OPT, None), ("keep_frames", 8, I64, OPT, None),
        ("time_nanos", 9, I64, OPT, None), ("duration_nanos", 10, I64, OPT, None),
        ("period_type", 11, MSG, OPT, "ValueType"), ("period", 12, I64, OPT, None),
        ("comment", 13, I64, REP, None), ("default_sample_type", 14, I64, OPT, None),
        ("doc_url", 15, I64, OPT, None),
    ],
    "ValueType": [("type", 1, I64, OPT, None), ("unit", 2, I64, OPT, None)],
    "Sample": [("location_id", 1, U64, REP, None), ("value", 2, I64, REP, None), ("label", 3, MSG, REP, "Label")],
    "Label": [("key", 1, I64, OPT, None), ("str", 2, I64, OPT, None), ("num", 3, I64, OPT, None),
              ("num_unit", 4, I64, OPT, None)],
    "Mapping": [("id", 1, U64, OPT, None), ("memory_start", 2, U64, OPT, None), ("memory_limit", 3, U64, OPT, None),
                ("file_offset", 4, U64, OPT, None), ("filename", 5, I64, OPT, None), ("build_id", 6, I64, OPT, None),
                ("has_functions", 7, BOOL, OPT, None), ("has_filenames", 8, BOOL, OPT, None),
                ("has_line_numbers", 9, BOOL, OPT, None), ("has_inline_frames", 10, BOOL, OPT, None)],
    "Location": [("id", 1, U64, OPT, None), ("mapping_id", 2, U64, OPT, None), ("address", 3, U64, OPT, None),
                 ("line", 4, MSG, REP, "Line"), ("is_folded", 5, BOOL, OPT, None)],
    "Line": [("function_id", 1, U64, OPT, None), ("line", 2, I64, OPT, None), ("column", 3, I64, OPT, None)],
    "Function": [("id", 1, U64, OPT, None), ("name", 2, I64, OPT, None), ("system_name", 3, I64, OPT, None),
                 ("filename", 4, I64, OPT, None), ("start_line", 5, I64, OPT, None)],
}

_CLASS = []


def profile_class():
    if not _CLASS:
        fdp = descriptor_pb2.FileDescriptorProto(name="pmuscope_test/profile.proto", package="perftools.profiles",
                                                 syntax="proto3")
        for msg, fields in PROFILE_PROTO.items():
            m = fdp.message_type.add(name=msg)
            for name, number, type_, label, type_name in fields:
                f = m.field.add(name=name, number=number, type=type_, label=label)
                if type_name:
                    f.type_name = ".perftools.profiles." + type_name
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        desc = pool.FindMessageTypeByName("perftools.profiles.Profile")
        get_class = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
        _CLASS.append(get_class(desc) if get_class else message_factory.MessageFactory(pool).GetPrototype(desc))
    return _CLASS[0]


def decode(blob: bytes):
    """Parse gzipped (or raw) Profile bytes with the official schema."""
    if blob[:2] == b"\x1f\x8b":
        blob = gzip.decompress(blob)
    msg = profile_class()()
    msg.ParseFromString(blob)
    return msg


def folded_of(prof, sample_index: int = 0) -> dict[str, int]:
    """Decoded Profile → {root-first ';'-joined function names: value}."""
    st = prof.string_table
    funcs = {f.id: st[f.name] for f in prof.function}
    locs = {loc.id: funcs[loc.line[0].function_id] for loc in prof.location}
    out: dict[str, int] = {}
    for s in prof.sample:
        if s.value[sample_index]:
            key = ";".join(locs[i] for i in reversed(s.location_id))
            out[key] = out.get(key, 0) + s.value[sample_index]
    return out


def labels_of(prof, sample) -> dict[str, object]:
    st = prof.string_table
    return {st[lb.key]: (st[lb.str] if lb.str else lb.num) for lb in sample.label}
