"""The package on a CUDA device with torch tensors, against torch's SDPA math backend on float64 copies of
the inputs (the oracle); the naive baseline of the tolerance rule is torch_reference in the inputs' dtype.

Marked `gpu`; skipped with a reason where torch, a CUDA device or a CUDA build of flashattn is missing.
"""

import pytest

torch = pytest.importorskip("torch")

import attention_reference as ref  # noqa: E402
import flashattn  # noqa: E402
import torch_reference as tref  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch"),
    pytest.mark.skipif(not flashattn.cuda_built(), reason="this build of flashattn has no CUDA kernels"),
]

DEVICE = "cuda"
DTYPES = [torch.float16, torch.bfloat16]
DTYPE_CAPS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
ALGOS = ["auto", "fa3", "fa2", "fa1", "standard"]  # fa3: forward only; its backward runs on `auto`

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, window)
CASES = {
    "gqa_odd": (2, 113, 113, 8, 2, 64, False, (-1, -1)),
    "causal_long": (1, 1007, 1007, 4, 4, 128, True, (-1, -1)),
    "causal_q_shorter_than_k": (2, 17, 300, 4, 2, 128, True, (-1, -1)),
    "decode_mqa": (2, 1, 1007, 8, 1, 128, True, (-1, -1)),
    "window": (2, 64, 200, 4, 4, 64, False, (32, 16)),
}


def cuda_supports(algo, dtype, head_dim, backward=False):
    """True when `capabilities()` lists a CUDA algorithm (or, for 'auto', any) for this dtype and head_dim."""
    for c in flashattn.capabilities():
        if c["backend"] != "cuda" or not c["available"] or (algo != "auto" and c["algo"] != algo):
            continue
        head_dims_ok = head_dim in c["head_dims"] or (not c["head_dims"] and head_dim <= c["max_head_dim"])
        if DTYPE_CAPS[dtype] in c["dtypes"] and head_dims_ok and (c["backward"] or not backward):
            return True
    return False


@pytest.fixture
def gen(seed):
    return torch.Generator(device=DEVICE).manual_seed(seed)


def randn(gen, shape, dtype, requires_grad=False):
    t = torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float32).to(dtype)
    return t.requires_grad_(requires_grad)


def sdpa_math(q, k, v, causal, window):
    """(out, lse) from torch's SDPA math backend, in the inputs' dtype, for the library's layout."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _, sq, hq, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    mask = torch.from_numpy(ref.visible(sq, sk, causal, window[0], window[1])).to(q.device)
    kk, vv = (t.repeat_interleave(hq // hkv, dim=2) for t in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), attn_mask=mask)
    return out.transpose(1, 2)


def oracle_and_naive(q, k, v, dout, causal, window, softcap=0.0):
    """Oracle (SDPA math in float64; torch_reference in float64 for softcap, which SDPA lacks) and naive
    (torch_reference in the inputs' dtype): each (out, dq, dk, dv), or (out,) when dout is None."""
    def run(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_(dout is not None) for t in (q, k, v)]
        out = fn(*leaves)
        if dout is None:
            return (out,)
        out.backward(dout.to(dtype))
        return (out,) + tuple(t.grad for t in leaves)

    if softcap > 0:
        oracle = run(lambda *a: tref.attention(*a, causal=causal, window=window, softcap=softcap)[0], torch.float64)
    else:
        oracle = run(lambda *a: sdpa_math(*a, causal, window), torch.float64)
    naive = run(lambda *a: tref.attention(*a, causal=causal, window=window, softcap=softcap)[0], q.dtype)
    return oracle, naive


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_forward_backward_against_sdpa_math(gen, algo, dtype, case):
    batch, sq, sk, hq, hkv, d, causal, window = case
    if not cuda_supports(algo, dtype, d):
        pytest.skip(f"capabilities(): no CUDA algorithm '{algo}' for {dtype} head_dim {d}")
    q = randn(gen, (batch, sq, hq, d), dtype, requires_grad=True)
    k = randn(gen, (batch, sk, hkv, d), dtype, requires_grad=True)
    v = randn(gen, (batch, sk, hkv, d), dtype, requires_grad=True)
    dout = randn(gen, q.shape, dtype)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=causal, window_size=window, algo=algo, return_lse=True)
    assert out.is_cuda and out.dtype == dtype and lse.shape == (batch, hq, sq)
    oracle, naive = oracle_and_naive(q, k, v, dout, causal, window)
    tref.assert_close("out", out, oracle[0], naive[0], dtype)
    plain = [t.detach() for t in (q, k, v)]
    _, oracle_lse = tref.attention(*(t.double() for t in plain), causal=causal, window=window)
    _, naive_lse = tref.attention(*plain, causal=causal, window=window)
    tref.assert_close("lse", lse, oracle_lse, naive_lse.float(), torch.float32)
    # fa3 is forward only: its graph's backward runs on what `auto` picks.
    if not cuda_supports("auto" if algo == "fa3" else algo, dtype, d, backward=True):
        return
    out.backward(dout)
    for name, got, o, n in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), oracle[1:], naive[1:]):
        tref.assert_close(name, got, o, n, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softcap(gen, dtype):
    if not cuda_supports("auto", dtype, 64, backward=True):
        pytest.skip("no CUDA algorithm for this dtype")
    q, k, v = (randn(gen, (2, 97, 4, 64), dtype, requires_grad=True) for _ in range(3))
    dout = randn(gen, q.shape, dtype)
    out = flashattn.flash_attn_func(q, k, v, causal=True, softcap=3.0)
    out.backward(dout)
    oracle, naive = oracle_and_naive(q, k, v, dout, True, (-1, -1), softcap=3.0)
    for name, got, o, n in zip(("out", "dq", "dk", "dv"), (out, q.grad, k.grad, v.grad), oracle, naive):
        tref.assert_close(name, got, o, n, dtype)


def test_varlen_with_empty_sequences(gen):
    dtype = torch.float16
    if not cuda_supports("auto", dtype, 64):
        pytest.skip("no CUDA algorithm for fp16")
    cu_q = torch.tensor([0, 50, 50, 177, 180], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, 70, 200, 200, 333], dtype=torch.int32, device=DEVICE)
    q = randn(gen, (180, 4, 64), dtype)
    k, v = randn(gen, (333, 2, 64), dtype), randn(gen, (333, 2, 64), dtype)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 127, 133, causal=True, return_lse=True)
    oracle, oracle_lse = tref.varlen_reference(q.double(), k.double(), v.double(), cu_q.cpu(), cu_k.cpu(), causal=True)
    naive, naive_lse = tref.varlen_reference(q, k, v, cu_q.cpu(), cu_k.cpu(), causal=True)
    tref.assert_close("out", out, oracle, naive, dtype)
    tref.assert_close("lse", lse, oracle_lse, naive_lse.float(), torch.float32)


@pytest.mark.parametrize("algo", ALGOS)
def test_no_key_at_all(gen, algo):
    """Keys of length 0 (padded, and varlen sequences all without keys) into NaN-filled outputs: out 0,
    lse -inf, dq 0. An empty storage reaches the library as a placeholder address that no kernel may touch."""
    dtype = torch.bfloat16
    if not cuda_supports(algo, dtype, 128):
        pytest.skip(f"capabilities(): no CUDA algorithm '{algo}' for bf16 head_dim 128")
    nan = float("nan")
    for varlen in (False, True):
        q = randn(gen, (7, 4, 128) if varlen else (2, 5, 4, 128), dtype)
        k = randn(gen, (0, 2, 128) if varlen else (2, 0, 2, 128), dtype)
        lens = {}
        if varlen:
            lens = dict(cu_seqlens_q=torch.tensor([0, 3, 7], dtype=torch.int32, device=DEVICE),
                        cu_seqlens_k=torch.zeros(3, dtype=torch.int32, device=DEVICE), max_seqlen_q=4)
        out = torch.full_like(q, nan)
        lse = torch.full((4, 7) if varlen else (2, 4, 5), nan, device=DEVICE)
        info = flashattn.forward(q, k, k, out, lse, algo=algo, **lens)
        assert info.algo == algo or algo == "auto"
        assert torch.equal(out, torch.zeros_like(out)), f"varlen={varlen}"
        assert bool(torch.all(lse == float("-inf"))), f"varlen={varlen}"
        if not cuda_supports(algo, dtype, 128, backward=True) or algo == "fa3":
            continue
        dq, dk = torch.full_like(q, nan), torch.empty_like(k)
        flashattn.backward(randn(gen, q.shape, dtype), q, k, k, out, lse, dq, dk, torch.empty_like(k), algo=algo,
                           **lens)
        assert torch.equal(dq, torch.zeros_like(dq)), f"varlen={varlen}"


def test_runs_on_the_current_stream(gen):
    """The input is written on a side stream after a long sleep there; a kernel launched anywhere but on
    that stream would read the old values."""
    dtype = torch.float16
    if not cuda_supports("auto", dtype, 64):
        pytest.skip("no CUDA algorithm for fp16")
    q_old, q_new = randn(gen, (2, 256, 4, 64), dtype), randn(gen, (2, 256, 4, 64), dtype)
    k, v = randn(gen, (2, 256, 4, 64), dtype), randn(gen, (2, 256, 4, 64), dtype)
    buffer = q_old.clone()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    sleep_cycles = 200_000_000  # ~0.1 s at H200 clocks: longer than any launch gap
    with torch.cuda.stream(side):
        torch.cuda._sleep(sleep_cycles)
        buffer.copy_(q_new)
        out = flashattn.flash_attn_func(buffer, k, v)
    side.synchronize()
    oracle, naive = oracle_and_naive(q_new, k, v, None, False, (-1, -1))
    tref.assert_close("out", out, oracle[0], naive[0], dtype)


def test_deterministic_backward_is_bitwise_reproducible(gen):
    dtype = torch.bfloat16
    if not cuda_supports("auto", dtype, 128, backward=True):
        pytest.skip("no CUDA backward for bf16 head_dim 128")
    q = randn(gen, (2, 300, 8, 128), dtype, requires_grad=True)
    k, v = randn(gen, (2, 300, 2, 128), dtype, True), randn(gen, (2, 300, 2, 128), dtype, True)
    dout = randn(gen, q.shape, dtype)

    def grads():
        out = flashattn.flash_attn_func(q, k, v, causal=True, deterministic=True)
        return torch.autograd.grad(out, (q, k, v), dout)

    first = grads()
    for _ in range(5):
        for a, b in zip(first, grads()):
            assert torch.equal(a, b)


def test_compile_fullgraph_on_cuda(gen):
    pytest.importorskip("triton")
    dtype = torch.bfloat16
    if not cuda_supports("auto", dtype, 64, backward=True):
        pytest.skip("no CUDA backward for bf16 head_dim 64")
    q = randn(gen, (2, 128, 4, 64), dtype, requires_grad=True)
    k, v = randn(gen, (2, 128, 2, 64), dtype, True), randn(gen, (2, 128, 2, 64), dtype, True)

    def f(q, k, v):
        return (flashattn.flash_attn_func(q * 0.5, k, v, causal=True) ** 2).sum()

    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    torch._dynamo.reset()
    compiled = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), (q, k, v))
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
