#!/usr/bin/env python3
"""Checks strata's safetensors files against Hugging Face's safetensors library (PyPI: safetensors, numpy).

    safetensors_interop.py version              prints the versions of the library, numpy and torch (if any)
    safetensors_interop.py read FULL NUMPY      checks two files strata wrote: FULL holds TENSORS, NUMPY all of
                                                them but BF16 (numpy has no bfloat16)
    safetensors_interop.py write FOLDER         writes TENSORS with the library: FOLDER/numpy.safetensors (all but
                                                BF16) and FOLDER/raw.safetensors (all)
    safetensors_interop.py verdicts FILE...     prints, for each file, whether the library loads or rejects it

tests/nn/test_safetensors.cpp builds the same TENSORS in C++, runs every mode with the Python of the virtual
environment scripts/test makes, and holds what it expects of the verdicts. Without the library the script prints why
and exits with 77 (the test is then skipped); any mismatch exits non-zero with a message.
"""
import os
import sys

try:
    import numpy as np
    import safetensors
    import safetensors.numpy
except ImportError as error:
    print("safetensors_interop.py: %s in %s (scripts/test installs safetensors and numpy)" % (error, sys.executable))
    sys.exit(77)

# name: (dtype, shape, row-major values)
TENSORS = {
    "f32": ("F32", [2, 3], [-1.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.5]),
    "f64": ("F64", [3], [1 / 3, -2.5, 1e300]),
    "scalar": ("F64", [], [2.75]),
    "i64": ("I64", [2, 2], [-(2**40), -1, 0, 2**62 + 5]),
    "i32": ("I32", [2, 2], [-(2**31), -1, 7, 2**31 - 1]),
    "i16": ("I16", [3], [-32768, 300, 32767]),
    "i8": ("I8", [2, 3], [-128, 5, 127, -1, 0, 9]),
    "u8": ("U8", [4], [0, 1, 200, 255]),
    "mask": ("BOOL", [4], [True, False, False, True]),
    "empty": ("F32", [0, 3], []),
    "f16": ("F16", [2, 3], [1.5, -2.0, 65504.0, 2.0**-24, -0.333251953125, -0.0]),
    "bf16": ("BF16", [2, 2], [1.0, -2.5, 2.0**100, -(2.0**-100)]),
}
NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
         "F16": np.float16, "F32": np.float32, "F64": np.float64}
NUMPY_NAMES = [name for name, (dtype, _, _) in TENSORS.items() if dtype in NUMPY]
# The library writes several metadata entries in no fixed order, so the file compared byte for byte has one.
RAW_METADATA = {"source": "python"}


def metadata(source):
    """The writer's metadata; the note carries non-ASCII text."""
    return {"note": "gr\u00f6\u00dfe \u2713", "source": source}


def tensor_bytes(name):
    """The little-endian bytes of a tensor of TENSORS."""
    dtype, _, values = TENSORS[name]
    if dtype == "BF16":  # the high half of each float32 (the values are exact in bfloat16)
        return (np.array(values, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    return np.array(values, NUMPY[dtype]).tobytes()


def type_name(dtype):
    """What numpy and torch call a dtype, as serialize_file takes it."""
    return "bfloat16" if dtype == "BF16" else np.dtype(NUMPY[dtype]).name


def import_torch():
    """torch, with safetensors.torch imported, when this environment has it; else None."""
    try:
        import safetensors.torch
        import torch
    except ImportError:
        return None
    return torch


def check(condition, message):
    if not condition:
        sys.exit("safetensors_interop.py: " + message)


def version():
    torch = import_torch()
    print("safetensors %s, numpy %s, torch %s" % (safetensors.__version__, np.__version__,
                                                   torch.__version__ if torch else "not installed"))


def read(full, numpy_file):
    """FULL through safe_open (metadata), deserialize (the library's parser without a framework: names, dtypes, shapes
    and raw bytes, which is how BF16 is checked) and, when torch is installed, safetensors.torch.load_file; NUMPY
    through safetensors.numpy.load_file, which refuses a file with BF16 in it."""
    for path in (full, numpy_file):
        with safetensors.safe_open(path, framework="numpy") as f:
            check(f.metadata() == metadata("strata"), "%s: metadata %s" % (path, f.metadata()))
    with open(full, "rb") as f:
        parsed = safetensors.deserialize(f.read())
    check(sorted(name for name, _ in parsed) == sorted(TENSORS), "names %s" % [name for name, _ in parsed])
    for name, info in parsed:
        dtype, shape, _ = TENSORS[name]
        got = (info["dtype"], list(info["shape"]), bytes(info["data"]))
        check(got == (dtype, shape, tensor_bytes(name)), "%s: deserialize gives %s" % (name, got))

    loaded = safetensors.numpy.load_file(numpy_file)
    check(sorted(loaded) == sorted(NUMPY_NAMES), "numpy.load_file names %s" % sorted(loaded))
    for name in NUMPY_NAMES:
        dtype, shape, _ = TENSORS[name]
        a = loaded[name]
        check(a.dtype == NUMPY[dtype] and list(a.shape) == shape and a.tobytes() == tensor_bytes(name),
              "%s: numpy.load_file gives %s %s %s" % (name, a.dtype, a.shape, a))

    torch = import_torch()
    if torch:
        loaded = safetensors.torch.load_file(full)
        check(sorted(loaded) == sorted(TENSORS), "torch.load_file names %s" % sorted(loaded))
        for name, (dtype, shape, _) in TENSORS.items():
            t = loaded[name]
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
            check(t.dtype == getattr(torch, type_name(dtype)) and list(t.shape) == shape and data == tensor_bytes(name),
                  "%s: torch.load_file gives %s" % (name, t))


def write(folder):
    """numpy.safetensors with safetensors.numpy.save_file (its own order and alignment, metadata("python")), and
    raw.safetensors, BF16 included, with serialize_file, the writer under it, which takes raw bytes."""
    arrays = {}
    for name in NUMPY_NAMES:
        dtype, shape, values = TENSORS[name]
        arrays[name] = np.array(values, NUMPY[dtype]).reshape(shape)
    safetensors.numpy.save_file(arrays, os.path.join(folder, "numpy.safetensors"), metadata=metadata("python"))
    data = {name: np.frombuffer(tensor_bytes(name), np.uint8) for name in TENSORS}  # alive until serialize_file ends
    specs = {}
    for name, (dtype, shape, _) in TENSORS.items():
        if hasattr(safetensors, "TensorSpec"):  # since safetensors 0.8; before, a dict with the bytes
            specs[name] = safetensors.TensorSpec(dtype=type_name(dtype), shape=shape, data_ptr=data[name].ctypes.data,
                                                 data_len=data[name].nbytes)
        else:
            specs[name] = {"dtype": type_name(dtype), "shape": shape, "data": data[name].tobytes()}
    safetensors.serialize_file(specs, os.path.join(folder, "raw.safetensors"), metadata=RAW_METADATA)


def verdicts(paths):
    """'PATH: accepted (N tensors)' or 'PATH: rejected: MESSAGE' per file, from deserialize, which checks the whole
    file as safe_open (under every load_file) does, without a framework's dtypes."""
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        try:
            print("%s: accepted (%d tensors)" % (path, len(safetensors.deserialize(data))))
        except safetensors.SafetensorError as error:
            print("%s: rejected: %s" % (path, error))


if __name__ == "__main__":
    modes = {"version": (version, 0), "read": (read, 2), "write": (write, 1), "verdicts": (verdicts, None)}
    mode, args = (sys.argv[1] if len(sys.argv) > 1 else ""), sys.argv[2:]
    check(mode in modes and modes[mode][1] in (None, len(args)),
          "usage: safetensors_interop.py version | read FULL NUMPY | write FOLDER | verdicts FILE...")
    function, count = modes[mode]
    if count is None:
        function(args)
    else:
        function(*args)
