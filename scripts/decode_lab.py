#!/usr/bin/env python3
"""Build and run the decode timing lab (bench/decode_lab/decode_lab.cu) on a machine with an NVIDIA GPU.

The lab includes the decode kernel of src/cuda/decode/decode_kernel.cuh through a copy with timestamp probes
(bench/decode_lab/probe.cuh) that this script writes into a temporary include directory: a probe at each
CTA's start, after the key loop, after the CTA's partial rows, and after a tile's merge, plus a switch that
skips the key loop's arithmetic. It then builds the lab with nvcc for sm_90a, runs it and writes its JSON
lines, with the commit, GPU and date, to one JSON file.

Usage: python3 scripts/decode_lab.py OUT.json [--modes N] [--kernel PATH] [--config PATH] [--define NAME=VALUE ...]
  --modes   bits of the lab's modes (1 read ceilings, 2 the 4-warp kernel, 4 loads only, 8 the wide
            kernel); default 15
  --kernel  the kernel header to probe (default: the library's); e.g. an older version from `git show`
  --config  a decode_config.cuh to use with it (default: the library's), for a kernel of another version
  --define  extra -D for nvcc (e.g. LAB_NAME='"old-"')
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
KERNEL = os.path.join(ROOT, "src", "cuda", "decode", "decode_kernel.cuh")
LAB = os.path.join(ROOT, "bench", "decode_lab", "decode_lab.cu")
HEURISTIC = os.path.join(ROOT, "src", "cuda", "decode", "decode_heuristic.cpp")  # the split rule the lab uses

# The first statement after the kernel's wait for the kernel ahead, where the start probe goes: since
# a4e56a1 the CTA's work comes from cta_work(); older kernels (--kernel) compute it in line.
START_ANCHORS = ("  const CtaWork work = cta_work(p);\n", "  const int split = blockIdx.x;\n")


def start_probe(text):
    """The (anchor, replacement) of the start probe for this kernel source: the first of START_ANCHORS that
    occurs in it (probed_kernel_source then requires it exactly once)."""
    anchor = next((a for a in START_ANCHORS if a in text), START_ANCHORS[0])
    return anchor, "  const unsigned long long probe_t0 = lab_gtime();\n" + anchor


# (anchor in the kernel source, text that replaces it): each anchor must occur exactly once.
PROBES = (
    ("#pragma once\n", "#pragma once\n#include \"probe.cuh\"\n"),
    ("  __syncthreads();  // every warp is done with its ring\n",
     "  __syncthreads();  // every warp is done with its ring\n  const unsigned long long probe_t1 = lab_gtime();\n"),
    ("  if (direct) return;\n", "  lab_probe(probe_t0, probe_t1);\n  if (direct) return;\n"),
    ("    attend_block<Cfg, T>(st, p, sQ,", "    if (!g_lab_skip) attend_block<Cfg, T>(st, p, sQ,"),
)
# The merge call's arguments changed over time: whichever form is present gets the merge probe.
MERGE_CALL = "  merge_splits<Cfg, T>("


def probed_kernel_source(text):
    """The kernel source with the lab's probes inserted; raises ValueError naming an anchor that is missing
    or ambiguous (the kernel changed under the lab)."""
    for anchor, replacement in (PROBES[0], start_probe(text)) + PROBES[1:]:
        n = text.count(anchor)
        if n != 1:
            raise ValueError(f"decode_lab: expected one {anchor.strip()!r} in the kernel, found {n}")
        text = text.replace(anchor, replacement)
    n = text.count(MERGE_CALL)
    if n != 1:
        raise ValueError(f"decode_lab: expected one {MERGE_CALL.strip()!r} call in the kernel, found {n}")
    start = text.index(MERGE_CALL)
    end = text.index(";\n", start) + 2
    return text[:end] + "  lab_probe_merge(tile);\n" + text[end:]


def parse_lines(output):
    """The lab's JSON objects, one per output line; other lines are ignored."""
    rows = []
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row.get("exp") != "done":
            rows.append(row)
    return rows


def git_commit():
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_name():
    try:
        out = subprocess.check_output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                      text=True)
        name, driver = [s.strip() for s in out.splitlines()[0].split(",")]
        return {"name": name, "driver": driver}
    except (OSError, subprocess.CalledProcessError, IndexError, ValueError):
        return {"name": "unknown"}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="JSON file to write")
    ap.add_argument("--modes", type=int, default=15)
    ap.add_argument("--kernel", default=KERNEL)
    ap.add_argument("--config", default=None)
    ap.add_argument("--define", action="append", default=[])
    args = ap.parse_args(argv)

    with open(args.kernel) as f:
        source = probed_kernel_source(f.read())
    nvcc = os.environ.get("NVCC", "nvcc")
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "cuda", "decode"))
        with open(os.path.join(tmp, "cuda", "decode", "decode_kernel.cuh"), "w") as f:
            f.write(source)
        if args.config:
            with open(args.config) as src, open(os.path.join(tmp, "cuda", "decode", "decode_config.cuh"), "w") as f:
                f.write(src.read())
        exe = os.path.join(tmp, "decode_lab")
        # The probed copy first, so that "cuda/decode/decode_kernel.cuh" resolves to it.
        cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-I" + tmp,
               "-I" + os.path.join(ROOT, "bench", "decode_lab"), "-I" + os.path.join(ROOT, "src"),
               "-I" + os.path.join(ROOT, "include")] + ["-D" + d for d in args.define] + ["-o", exe, LAB, HEURISTIC]
        print("decode_lab: building", flush=True)
        subprocess.check_call(cmd)
        print(f"decode_lab: running modes {args.modes}", flush=True)
        run = subprocess.run([exe, str(args.modes)], capture_output=True, text=True)
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)
        if run.returncode != 0:
            print(f"decode_lab: the lab exited with {run.returncode}", file=sys.stderr)
            return 1
    result = {
        "benchmark": "decode_lab",
        "commit": git_commit(),
        "gpu": gpu_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": os.path.relpath(args.kernel, ROOT),
        "config": os.path.relpath(args.config, ROOT) if args.config else "src/cuda/decode/decode_config.cuh",
        "modes": args.modes,
        "rows": parse_lines(run.stdout),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"decode_lab: {len(result['rows'])} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
