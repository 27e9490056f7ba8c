"""What the scripts of bench/ share: run metadata (commit, date, driver), the PyTorch preamble and JSON header
of the peer timings, the device copy ceiling, and JSON output.

The scripts import it by name: Python puts a script's own folder first on sys.path, so
`python3 bench/peers_decode.py` finds it from any working directory.
"""

import datetime
import json
import os
import statistics
import subprocess
import sys

SDPA_BACKENDS = ("flash", "cudnn")
MS_PER_S = 1e3
# The FlashAttention papers' sweep: batch x seqlen = TOKENS, heads x head_dim = HIDDEN.
TOKENS = 16384
HIDDEN = 2048
HEAD_DIMS = (64, 128, 256)
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
BYTES_PER_TERA = 1e12


def head_commit():
    """`git rev-parse HEAD` of the checkout this file lies in, or None outside one."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def run_commit():
    """The commit a result records: $FLASHATTN_COMMIT first (gpu_check.sh sets it where the checkout's git
    metadata may not match the tree), else `git rev-parse HEAD`, else None."""
    return os.environ.get("FLASHATTN_COMMIT") or head_commit()


def utc_date():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def torch_and_backends(prog, backends_text):
    """PyTorch and the SDPA backends named in the comma list `backends_text`, ready to time. Exits 0, after saying
    which is missing, without PyTorch or a CUDA device (the peers are optional), and 2 on an unknown backend."""
    try:
        import torch
    except ImportError:
        print(f"{prog}: PyTorch is not installed; peer timings skipped")
        sys.exit(0)
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA device visible to PyTorch; peer timings skipped")
        sys.exit(0)
    backends = [b for b in backends_text.split(",") if b]
    unknown = [b for b in backends if b not in SDPA_BACKENDS]
    if unknown:
        print(f"{prog}: unknown backend(s) {unknown}; choose from {', '.join(SDPA_BACKENDS)}", file=sys.stderr)
        sys.exit(2)
    return torch, backends


def torch_and_flashattn(prog):
    """PyTorch (with a CUDA device) and the flashattn package, for the scripts that time both in one process;
    (None, None) after saying which is missing."""
    try:
        import torch
    except ImportError:
        print(f"{prog}: PyTorch is not installed; nothing to time")
        return None, None
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA device visible to PyTorch; nothing to time")
        return None, None
    try:
        import flashattn
    except ImportError as err:
        print(f"{prog}: the flashattn package is not importable ({err}); nothing to time")
        return None, None
    return torch, flashattn


# FLOPs counted as in the FlashAttention papers: forward 4*b*h*N*N*d, half of it under a causal mask, the
# backward 2.5x the forward.
BACKWARD_FLOP_FACTOR = 2.5
CAUSAL_FLOP_FACTOR = 0.5


def attention_flops(b, h, n, d, causal, backward=False):
    """The papers' FLOP count of one attention call on b x h heads of N queries and keys of head dim d."""
    flops = 4.0 * b * h * n * n * d * (CAUSAL_FLOP_FACTOR if causal else 1.0)
    return flops * (BACKWARD_FLOP_FACTOR if backward else 1.0)


def median_of_rounds(rounds):
    """The median call time over every call of a side's rounds (lists of call times)."""
    return statistics.median([t for r in rounds for t in r])


def per_round_ratios(num_rounds, den_rounds):
    """Two sides timed in the same rounds (lists of call times): each round's median of the first over the
    same round's median of the second (above 1, the second side is faster), as its lower quartile, median and
    upper quartile. A drift of the clock from round to round moves both sides of a ratio alike."""
    if len(num_rounds) != len(den_rounds) or len(num_rounds) < 2:
        raise ValueError("both sides need the same number of rounds, at least 2")
    ratios = [statistics.median(a) / statistics.median(b) for a, b in zip(num_rounds, den_rounds)]
    return statistics.quantiles(ratios, n=4, method="inclusive")


def parse_shapes(text):
    """A comma list of d:N:causal (causal: 1/0, yes/no, true/false) as (d, N, causal) triples."""
    shapes = []
    for item in text.split(","):
        d, n, causal = item.split(":")
        shapes.append((int(d), int(n), causal not in ("0", "no", "false")))
    return shapes


def uniform(torch, shape):
    """bf16 uniform in [-1, 1] on the GPU: the distribution `flashattn bench --gpu` fills its inputs with."""
    return (torch.rand(shape, device="cuda", dtype=torch.float32) * 2 - 1).to(torch.bfloat16)


def queued_event_times(torch, fn, calls):
    """Milliseconds of `calls` calls queued back to back, each between its own pair of CUDA events, after one
    untimed call (so that the first pair does not start on an idle GPU); one synchronization at the end."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    fn()
    for a, b in pairs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def sdpa_backend_kinds():
    """Our backend names mapped to torch's SDPBackend values (for sdpa_kernel)."""
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def start_peer_result(torch, prog, args, commit=None):
    """The opening fields of a peer result (what ran, when, on which GPU, with which PyTorch; the commit when
    given), after announcing the run on stdout. The caller adds its shapes, timing settings and rows."""
    props = torch.cuda.get_device_properties(0)
    result = {"benchmark": prog}
    if commit is not None:
        result["commit"] = commit
    result.update({
        "date": utc_date(),
        "gpu": {"name": props.name, "driver": driver_version(), "sm_count": props.multi_processor_count,
                "compute_capability": f"{props.major}.{props.minor}"},
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    })
    print(f"{prog}: {props.name}, torch {torch.__version__}; median of {args.repeat} after {args.warmup}",
          flush=True)
    return result


def tbps(nbytes, ms):
    """TB/s of `nbytes` moved in `ms` milliseconds."""
    return nbytes / (ms / MS_PER_S) / BYTES_PER_TERA


def copy_ceiling_tbps(torch, nbytes, time_ms):
    """TB/s of a device-to-device copy of `nbytes` (bytes read + written over time); `time_ms(fn)` returns the
    milliseconds of one call of fn. The buffers are freed before returning."""
    src = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return tbps(2.0 * nbytes, ms)
