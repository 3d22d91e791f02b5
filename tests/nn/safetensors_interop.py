#!/usr/bin/env python3
"""Checks that strata's safetensors files match the format, with nothing but the standard library.

    safetensors_interop.py read FILE    checks a file strata wrote: layout, header and values
    safetensors_interop.py write FILE   writes the same tensors the way the reference writer does

Both sides use TENSORS and metadata() below; tests/nn/test_safetensors.cpp builds the same tensors in C++
and runs both directions. Any mismatch exits non-zero with a message.
"""
import json
import struct
import sys

# name: (dtype, shape, row-major values)
TENSORS = {
    "f32": ("F32", [2, 3], [i * 0.5 - 1 for i in range(6)]),
    "f64": ("F64", [3], [1 / 3, -2.5, 1e300]),
    "scalar": ("F64", [], [2.75]),
    "i64": ("I64", [2, 2], [-(2**40), -1, 0, 2**62 + 5]),
    "mask": ("BOOL", [4], [True, False, False, True]),
    "empty": ("F32", [0, 3], []),
    "f16": ("F16", [2, 3], [1.5, -2.0, 65504.0, 2.0**-24, -0.333251953125, 0.0]),
    "bf16": ("BF16", [2, 2], [1.0, -2.5, 2.0**100, -(2.0**-100)]),
}


def metadata(source):
    """The writer's metadata, keys sorted as strata writes them; the note carries non-ASCII text."""
    return {"note": "gr\u00f6\u00dfe \u2713", "source": source}


# struct formats; BF16 is the high half of an F32 (the TENSORS values are exact in it).
FORMATS = {"BOOL": "?", "F16": "e", "BF16": "f", "I64": "q", "F32": "f", "F64": "d"}
# The reference implementation's dtype order (ascending alignment); its writer lays tensors out from the
# highest to the lowest, then by name.
RANK = {"BOOL": 0, "F16": 1, "BF16": 2, "F32": 3, "F64": 4, "I64": 5}


def layout():
    return sorted(TENSORS, key=lambda name: (-RANK[TENSORS[name][0]], name))


def pack(dtype, values):
    data = struct.pack("<%d%s" % (len(values), FORMATS[dtype]), *values)
    if dtype == "BF16":
        data = b"".join(data[i + 2 : i + 4] for i in range(0, len(data), 4))
    return data


def unpack(dtype, data, offset, count):
    if dtype == "BF16":
        data = b"".join(b"\0\0" + data[offset + 2 * i : offset + 2 * i + 2] for i in range(count))
        offset = 0
    return list(struct.unpack_from("<%d%s" % (count, FORMATS[dtype]), data, offset))


def write(path):
    header = {"__metadata__": metadata("python")}
    data = b""
    for name in layout():
        dtype, shape, values = TENSORS[name]
        begin = len(data)
        data += pack(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, len(data)]}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def check(condition, message):
    if not condition:
        sys.exit("safetensors_interop.py: " + message)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob)
    text = blob[8 : 8 + n]
    check(n % 8 == 0, "header length %d is not a multiple of 8" % n)
    check(text.rstrip(b" ").endswith(b"}") and len(text) - len(text.rstrip(b" ")) < 8, "header padding")
    entries = json.loads(text, object_pairs_hook=list)  # a list of pairs keeps the file's order
    names = [name for name, _ in entries]
    check(names == ["__metadata__"] + layout(), "header order %s" % names)
    entries = dict(entries)
    found = dict(entries.pop("__metadata__"))
    check(found == metadata("strata"), "metadata %s" % found)
    data = blob[8 + n :]
    offset = 0
    for name in layout():
        dtype, shape, values = TENSORS[name]
        size = len(pack(dtype, values))
        info = dict(entries[name])
        expected = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        check(info == expected, "%s: header entry %s, expected %s" % (name, info, expected))
        got = unpack(dtype, data, offset, len(values))
        check(got == values, "%s: values %s, expected %s" % (name, got, values))
        offset += size
    check(offset == len(data), "%d data bytes, expected %d" % (len(data), offset))


if __name__ == "__main__":
    check(len(sys.argv) == 3 and sys.argv[1] in ("read", "write"), "usage: safetensors_interop.py read|write FILE")
    (read if sys.argv[1] == "read" else write)(sys.argv[2])
    print("safetensors_interop.py: %s %s ok" % (sys.argv[1], sys.argv[2]))
