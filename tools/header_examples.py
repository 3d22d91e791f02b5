#!/usr/bin/env python3
"""Compiles the usage example at the top of every public header (docs/architecture.md, "Header examples").

The example is every line of a header's opening comment that starts with "//" and three spaces;
the other lines of that comment are prose, and so are the indented continuation lines of a
"// - " bullet. This script writes one C++ file in which each header's example is the body of
its own function, strata_header_examples::<path>_h::example(), after `using namespace strata;`,
so an example may declare local variables, structs and lambdas (a function it defines is written
as a lambda) but not templates. `#include` lines of an example move to the top of the file, and
#line directives make compiler errors name the header and line. The functions are compiled and
linked, never called: examples may open files, need a GPU or run under mpirun.

  header_examples.py --root SRC --output FILE   write FILE
  header_examples.py --root SRC --check FILE    fail unless FILE is what --output would write

Both fail, naming the header, when a public header has no example.
"""

import argparse
import pathlib
import re
import sys

FOLDERS = ["tensor", "autograd", "nn", "optim", "data", "distributed", "c10d", "pipe"]

# Headers that are not part of the public API, so carry no usage example. They are the headers
# cmake/install.cmake does not install, plus the stub backends.
INTERNAL = [
    ("autograd/ops/common.h", "helpers shared by the op families"),
    ("tensor/iteration.h", "the kernel tables' iteration geometry"),
    ("tensor/random_stream.h", "the kernel tables' random stream"),
    ("tensor/cpu/", "the CPU kernel table"),
    ("tensor/cuda/", "the CUDA kernel table"),
    ("/stub/", "stand-ins for a backend that is not built"),
    ("/detail/", "glue of a layer's implementation"),
    ("distributed/mpi/", "the MPI backend"),
    ("distributed/nccl/", "the NCCL backend"),
    ("pipe/stage.h", "the pipeline engine's stage"),
]

EXAMPLE_PREFIX = "//   "
BULLET = "// - "  # its continuation lines are indented like an example but are prose
STANDARD_HEADERS = ["cmath", "cstdint", "iostream", "map", "memory", "optional", "string", "vector"]


def is_internal(path):
    return any(pattern in "/" + path if pattern.startswith("/") else path.startswith(pattern)
               for pattern, _ in INTERNAL)


def public_headers(root):
    # c10d/ keeps libtorch's .hpp names, so that a ported program's includes only gain "strata/".
    headers = [p for folder in FOLDERS for p in sorted([*(root / folder).rglob("*.h"), *(root / folder).rglob("*.hpp")])]
    if (root / "strata.h").exists():
        headers.insert(0, root / "strata.h")
    return [h for h in headers if not is_internal(h.relative_to(root).as_posix())]


def opening_comment(lines):
    """(line number, text) of the comment lines a header starts with, after `#pragma once`."""
    start = 1 if lines and lines[0].startswith("#pragma once") else 0
    block = []
    for number, line in enumerate(lines[start:], start + 1):
        if not line.startswith("//"):
            break
        block.append((number, line))
    return block


def example(header, root):
    """The header's example as (line number, code) pairs; exits naming the header when it has none."""
    code, in_bullet = [], False
    for number, line in opening_comment(header.read_text().splitlines()):
        if line.startswith(BULLET):
            in_bullet = True
        elif line.startswith(EXAMPLE_PREFIX) and not in_bullet:
            code.append((number, line[len(EXAMPLE_PREFIX):]))
        elif not line.startswith(EXAMPLE_PREFIX):
            in_bullet = False
    if not code:
        sys.exit(f"{header.relative_to(root)}: a public header needs a usage example in its opening "
                 f"comment, lines starting with '{EXAMPLE_PREFIX}' (docs/architecture.md, \"Header examples\"); "
                 f"an internal header belongs in INTERNAL in {pathlib.Path(__file__).name}")
    return code


def generate(root):
    headers = public_headers(root)
    includes, bodies = [], []
    for header in headers:
        path = header.relative_to(root).as_posix()
        body, last = [], None
        for number, code in example(header, root):
            if re.match(r"\s*#\s*include\b", code):
                includes.append(code.strip())
                continue
            if last is None or number != last + 1:
                body.append(f'#line {number} "{header}"')
            body.append("  " + code if code.strip() else "")
            last = number
        name = re.sub(r"\W", "_", path)
        bodies.append(f"namespace strata_header_examples::{name} {{\n"
                      f"using namespace ::strata;\n"
                      f"void example() {{\n" + "\n".join(body) + "\n}\n}\n")
    top = [f"#include <strata/{h.relative_to(root).as_posix()}>" for h in headers]
    top += [f"#include <{h}>" for h in STANDARD_HEADERS]
    top += [i for i in dict.fromkeys(includes) if i not in top]
    return ("// Generated by tools/header_examples.py from the usage examples of the public headers; do not edit.\n"
            "// Every example is compiled and linked as the body of a function that is never called.\n"
            + "\n".join(top) + "\n\n" + "\n".join(bodies)
            + "\n// The examples need not run (files, GPUs, mpirun): none is called.\nint main() { return 0; }\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=pathlib.Path, required=True, help="the source tree")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--output", type=pathlib.Path, help="write the generated file here")
    mode.add_argument("--check", type=pathlib.Path, help="fail unless this generated file is current")
    args = parser.parse_args()
    text = generate(args.root.resolve())
    if args.check:
        if not args.check.exists() or args.check.read_text() != text:
            sys.exit(f"{args.check} is not what the headers' examples give now: rebuild strata_header_examples")
        print(f"{text.count('void example()')} public headers have a usage example, compiled in {args.check}")
    else:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
