#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/): valid and nearly valid inputs, generated so
that no binary file lives in the tree.

    seeds.py OUT_DIR     writes OUT_DIR/load_file/* (safetensors files), OUT_DIR/read_idx/* (IDX files, each
                         behind the variant byte fuzz_read_idx.cpp reads: encoding and dtype) and
                         OUT_DIR/schedule_file/* (schedule files in PyTorch's action notation)
"""
import json
import os
import struct
import sys

# safetensors dtype: (struct format, bytes per element)
DTYPES = {"F64": ("d", 8), "F32": ("f", 4), "F16": ("e", 2), "BF16": ("H", 2), "I64": ("q", 8), "I32": ("i", 4),
          "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1), "BOOL": ("?", 1)}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: name -> (dtype, shape, values); the bytes of a safetensors file."""
    header, data = {}, b""
    for name, (dtype, shape, values) in tensors.items():
        fmt, _ = DTYPES[dtype]
        blob = struct.pack("<%d%s" % (len(values), fmt), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def idx(type_code, shape, payload):
    return bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape) + payload


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    load, read, sched = (os.path.join(out, d) for d in ("load_file", "read_idx", "schedule_file"))
    for d in (load, read, sched):
        os.makedirs(d, exist_ok=True)

    seeds = {
        "every_dtype": safetensors({
            "f64": ("F64", [2], [1.5, -2.0]), "f32": ("F32", [2, 2], [0.5, 1, 2, 3]), "f16": ("F16", [1], [1.0]),
            "bf16": ("BF16", [2], [0x3F80, 0xC020]), "i64": ("I64", [1], [-(2**40)]), "i32": ("I32", [2], [7, -7]),
            "i16": ("I16", [1], [-300]), "i8": ("I8", [3], [-1, 0, 1]), "u8": ("U8", [2], [0, 255]),
            "mask": ("BOOL", [2], [True, False])}, {"epoch": "3", "note": "gr\u00f6\u00dfe"}),
        "scalar_and_empty": safetensors({"s": ("F64", [], [2.75]), "e": ("F32", [0, 3], [])}),
        "no_tensors": safetensors({}, {"only": "metadata"}),
        "unpadded": safetensors({"w": ("F32", [3], [1, 2, 3])}, pad=False),
        "big_shape": safetensors({"w": ("U8", [4, 4, 4], list(range(64)))}),
    }
    for name, blob in seeds.items():
        with open(os.path.join(load, name), "wb") as f:
            f.write(blob)

    idx_seeds = {
        "ubyte": idx(0x08, [2, 3], bytes(range(6))),
        "byte": idx(0x09, [4], bytes([0xFF, 0x80, 0x01, 0x7F])),
        "short": idx(0x0B, [2], struct.pack(">hh", 258, -2)),
        "int": idx(0x0C, [1, 2], struct.pack(">ii", 65536, -3)),
        "float": idx(0x0D, [3], struct.pack(">fff", 1.5, float("nan"), float("inf"))),
        "double": idx(0x0E, [2], struct.pack(">dd", -2.5, 2.0**63)),
        "empty": idx(0x08, [0, 5], b""),
        "images": idx(0x08, [2, 4, 4], bytes(range(32))),
    }
    for name, blob in idx_seeds.items():
        for variant in (0, 1, 2, 7, 9, 12):  # plain and gzip; natural, Long, UInt8, Float, Bool, Half dtypes
            with open(os.path.join(read, "%s_%d" % (name, variant)), "wb") as f:
                f.write(bytes([variant]) + blob)

    schedule_seeds = {
        "one_f_one_b": "0F0,0SEND_F0,0F1,0RECV_B0,0SEND_F1,0B0,0RECV_B1,0B1\n"
                       "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n",
        "compute_only": "0F0,0F1,,0B0,0B1\n1F0,1B0,1F1,1B1\n",
        "zero_bubble_v": "0F0,3F0,3I0,3W0,0I0,0W0\n1F0,2F0,2I0,1I0,2W0,1W0\n",
        "pytorch_extras": "# a comment\r\n0UNSHARD,0F0,(0F1;0B0)OVERLAP_F_B,0B1,0REDUCE_GRAD,0WAIT_SEND_F0\r\n",
        "deadlock": "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n",
        "misordered": "0F0,0W0,0I0\n",
    }
    for name, text in schedule_seeds.items():
        with open(os.path.join(sched, name), "w", newline="") as f:
            f.write(text)


if __name__ == "__main__":
    main()
