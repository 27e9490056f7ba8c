#!/usr/bin/env python3
"""Whether two builds of the same kernels compile to the same machine code, without cuobjdump: the .text
section of each kernel in two cubins (ELF files) compared byte for byte. A change meant to leave the compiled
kernels as they were measured (a refactor, a path only another configuration takes) is checked this way.

Usage:
  kernel_text.py OLD.cubin NEW.cubin [--by-code]
  kernel_text.py --trees OLD_TREE NEW_TREE SOURCE [SOURCE ...] [--arch sm_90a] [--old-define NAME=VALUE ...]
                 [--by-code]
With --trees, each SOURCE (a path inside the trees, e.g. src/cuda/sm90/fa3_fwd_hd128.cu) is first compiled in
both trees to a cubin (nvcc -cubin, the library's defines and include paths, no line info, so that moved
lines do not count as changes); --old-define adds a definition to the old side's compile only (e.g.
FLASHATTN_FA3_CANDIDATE=1: a candidate build, which holds the measured candidate form beside the shipped one).
Prints one line per kernel that differs or that only one side has, then a summary. Exit status: 0 when every
kernel is on both sides with the same code, 1 otherwise, 2 on bad input.
--by-code matches kernels by their code instead of their names, for an adopted candidate form, whose kernels
are named by another configuration: every new kernel must have the code of some old kernel (old kernels
without a new one, such as a candidate build's shipped form, do not count); one line per new kernel whose
code no old kernel has, then a summary; exit status 0 when there is none.
"""

import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

NVCC_FLAGS = ["-O3", "-DNDEBUG", "-DFLASHATTN_WITH_CUDA=1", "-DFLASHATTN_WITH_SM90A=1",
              "-DFLASHATTN_VERSION_STRING=\"0.1.0\"", "--expt-relaxed-constexpr", "-std=c++17", "-cubin"]


def text_sections(data):
    """{section name: sha1 of its bytes} for every section whose name starts with .text (an ELF64,
    little-endian file, as cubins are)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset, names_size = headers[shstrndx][4], headers[shstrndx][5]
    names = data[names_offset:names_offset + names_size]
    out = {}
    for name_at, _type, _flags, _addr, offset, size, *_ in headers:
        name = names[name_at:names.index(b"\0", name_at)].decode()
        if name.startswith(".text"):
            out[name] = hashlib.sha1(data[offset:offset + size]).hexdigest()
    return out


def compare(old, new):
    """Lines describing each kernel that differs or is on one side only, and the number of identical ones."""
    lines = []
    for name in sorted(set(old) | set(new)):
        kernel = name[len(".text."):]
        if name not in new:
            lines.append(f"only in the old build: {kernel}")
        elif name not in old:
            lines.append(f"only in the new build: {kernel}")
        elif old[name] != new[name]:
            lines.append(f"differs: {kernel}")
    same = sum(1 for name in old if new.get(name) == old[name])
    return lines, same


def compare_by_code(old, new):
    """Lines naming each new kernel whose code no old kernel has, and the number that have it."""
    old_code = set(old.values())
    lines = [f"no old kernel has the code of: {name[len('.text.'):]}"
             for name in sorted(new) if new[name] not in old_code]
    return lines, len(new) - len(lines)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def compile_cubin(tree, source, arch, out, defines=()):
    cmd = ["nvcc", f"-arch={arch}", f"-I{tree}/include", f"-I{tree}/src", *NVCC_FLAGS,
           *(f"-D{d}" for d in defines), "-o", out, os.path.join(tree, source)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed on {os.path.join(tree, source)}:\n{result.stderr[-2000:]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="OLD.cubin NEW.cubin, or with --trees OLD_TREE NEW_TREE SOURCE...")
    p.add_argument("--trees", action="store_true", help="compile SOURCE in both trees first")
    p.add_argument("--arch", default="sm_90a", help="nvcc -arch for --trees (default sm_90a)")
    p.add_argument("--old-define", action="append", default=[], metavar="NAME=VALUE",
                   help="with --trees: a definition for the old side's compile only (repeatable)")
    p.add_argument("--by-code", action="store_true",
                   help="match kernels by code, not name: every new kernel must have some old kernel's code")
    args = p.parse_args(argv)
    if args.old_define and not args.trees:
        p.error("--old-define needs --trees")
    try:
        if args.trees:
            if len(args.paths) < 3:
                p.error("--trees takes OLD_TREE NEW_TREE and at least one SOURCE")
            pairs = []
            with tempfile.TemporaryDirectory() as tmp:
                for i, source in enumerate(args.paths[2:]):
                    sides = []
                    for side, tree, defines in (("old", args.paths[0], args.old_define), ("new", args.paths[1], ())):
                        out = os.path.join(tmp, f"{side}{i}.cubin")
                        compile_cubin(tree, source, args.arch, out, defines)
                        sides.append(read_file(out))
                    pairs.append((source, *sides))
        else:
            if len(args.paths) != 2:
                p.error("give two cubins (or --trees)")
            pairs = [("", *(read_file(path) for path in args.paths))]
        differing = 0
        for label, old_data, new_data in pairs:
            old, new = text_sections(old_data), text_sections(new_data)
            prefix = f"{label}: " if label else ""
            if args.by_code:
                lines, same = compare_by_code(old, new)
                summary = f"{same} of {len(new)} new kernels have an old kernel's code"
            else:
                lines, same = compare(old, new)
                summary = f"{same} kernels identical, {len(lines)} not"
            for line in lines:
                print(prefix + line)
            print(prefix + summary)
            differing += len(lines)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"kernel_text: {e}", file=sys.stderr)
        return 2
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
