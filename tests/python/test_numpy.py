"""The package on the CPU with numpy arrays, against the float64 numpy oracle of attention_reference.py.

Every comparison follows the tolerance rule: max error <= 2 x the error of the same-precision naive
computation + a small floor. Outputs handed to the low-level API are poisoned with NaN first.
"""

import re

import numpy as np
import pytest

import attention_reference as ref
import flashattn

DTYPES = [np.float32, np.float16]

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, window, softcap)
FORWARD_CASES = {
    "plain": (2, 17, 17, 4, 4, 32, False, (-1, -1), 0.0),
    "decode_gqa_causal": (2, 1, 113, 4, 2, 64, True, (-1, -1), 0.0),
    "causal_q_longer_than_k": (1, 113, 64, 6, 2, 64, True, (-1, -1), 0.0),
    "window_mqa": (2, 64, 113, 4, 1, 32, False, (16, 8), 0.0),
    "softcap": (2, 33, 47, 2, 2, 80, False, (-1, -1), 5.0),
    "causal_window_softcap": (1, 40, 40, 2, 2, 128, True, (8, -1), 2.0),
}


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def make_qkv(rng, dtype, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim):
    return (randn(rng, (batch, seqlen_q, heads_q, head_dim), dtype),
            randn(rng, (batch, seqlen_k, heads_kv, head_dim), dtype),
            randn(rng, (batch, seqlen_k, heads_kv, head_dim), dtype))


def check_forward(q, k, v, out, lse, dtype, **mask):
    oracle_out, oracle_lse = ref.forward(q, k, v, **mask)
    naive_out, naive_lse = ref.forward(q, k, v, prec=ref.naive_precision(dtype), **mask)
    ref.assert_close("out", out, oracle_out, naive_out, dtype)
    ref.assert_close("lse", lse, oracle_lse, naive_lse, dtype)
    # Rows that see no key: out = 0 and lse = -inf, exactly.
    dead = np.isneginf(oracle_lse)
    assert np.array_equal(np.isneginf(lse), dead)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("case", FORWARD_CASES.values(), ids=FORWARD_CASES.keys())
def test_forward_matches_reference(rng, dtype, case):
    batch, sq, sk, hq, hkv, d, causal, window, softcap = case
    q, k, v = make_qkv(rng, dtype, batch, sq, sk, hq, hkv, d)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                         return_lse=True)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (batch, hq, sq)
    check_forward(q, k, v, out, lse, dtype, causal=causal, window=window, softcap=softcap)


def test_fully_masked_rows_are_zero(rng):
    # seqlen_q > seqlen_k with causal: the first seqlen_q - seqlen_k query rows see no key.
    q, k, v = make_qkv(rng, np.float32, 1, 9, 4, 2, 2, 32)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert np.all(out[:, :5] == 0) and np.all(np.isneginf(lse[:, :, :5]))
    assert np.all(np.isfinite(lse[:, :, 5:])) and np.any(out[:, 5:] != 0)


def test_explicit_softmax_scale(rng):
    q, k, v = make_qkv(rng, np.float32, 2, 19, 23, 2, 1, 64)
    out, lse = flashattn.flash_attn_func(q, k, v, softmax_scale=0.3, return_lse=True)
    check_forward(q, k, v, out, lse, np.float32, scale=0.3)


def test_default_output_is_out_only(rng):
    q, k, v = make_qkv(rng, np.float32, 1, 8, 8, 2, 2, 32)
    out = flashattn.flash_attn_func(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_with_empty_sequences(rng, dtype, causal):
    # Sequence 1 has no queries; sequence 2 has queries but no keys (its rows are fully masked).
    cu_q = np.array([0, 5, 5, 22, 23], dtype=np.int32)
    cu_k = np.array([0, 7, 19, 19, 60], dtype=np.int32)
    hq, hkv, d = 4, 2, 64
    q = randn(rng, (int(cu_q[-1]), hq, d), dtype)
    k = randn(rng, (int(cu_k[-1]), hkv, d), dtype)
    v = randn(rng, (int(cu_k[-1]), hkv, d), dtype)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 17, 41, causal=causal, return_lse=True)
    assert out.shape == q.shape and lse.shape == (hq, q.shape[0])
    check_forward(q, k, v, out, lse, dtype, causal=causal, cu_q=cu_q, cu_k=cu_k)
    assert np.all(out[5:22] == 0) and np.all(np.isneginf(lse[:, 5:22]))


def test_strided_views_are_used_without_copies(rng):
    """Every dim but the last may be strided: the low-level call (which never copies) accepts such views,
    and writes only the elements of its output view."""
    hq, d, pad = 4, 32, 8
    q = randn(rng, (2, 17, 2 * hq, d), np.float32)[:, :, ::2, :]     # every other head
    k = randn(rng, (2, 23, 2, d + pad), np.float32)[..., :d]         # padded rows
    v = np.ascontiguousarray(randn(rng, (23, 2, 2, d), np.float32).transpose(1, 0, 2, 3))
    out_storage = np.full((2, 17, hq, d + pad), np.nan, np.float32)
    out = out_storage[..., :d]
    lse = np.full((2, hq, 17), np.nan, np.float32)
    info = flashattn.forward(q, k, v, out, lse, causal=True, num_threads=1)
    assert info.backend == "cpu" and info.kernel
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    assert np.isnan(out_storage[..., d:]).all(), "the call wrote outside its output view"
    check_forward(q, k, v, out, lse, np.float32, causal=True)


def test_strided_last_dim_is_copied_by_high_level_and_refused_by_low_level(rng):
    q = randn(rng, (2, 11, 32, 2), np.float32).transpose(0, 1, 3, 2)  # [2, 11, 2, 32], last stride 2
    k, v = (randn(rng, (2, 13, 2, 32), np.float32) for _ in range(2))
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)
    check_forward(q, k, v, out, lse, np.float32)
    with pytest.raises(ValueError, match=r"q: the last dimension must be contiguous"):
        flashattn.forward(q, k, v, np.empty(q.shape, np.float32))


def test_read_only_inputs(rng):
    q, k, v = make_qkv(rng, np.float32, 1, 7, 9, 2, 2, 32)
    for t in (q, k, v):
        t.setflags(write=False)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)
    check_forward(q, k, v, out, lse, np.float32)


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, window, softcap)
BACKWARD_CASES = {
    "gqa": (2, 19, 19, 4, 2, 32, False, (-1, -1), 0.0),
    "causal_q_shorter_than_k": (1, 17, 41, 2, 2, 64, True, (-1, -1), 0.0),
    "causal_q_longer_than_k": (1, 29, 13, 2, 1, 64, True, (-1, -1), 0.0),
    "window_softcap": (2, 33, 33, 2, 2, 48, False, (6, 3), 4.0),
}


def run_backward(q, k, v, dout, *, deterministic=False, **opts):
    out = np.full(q.shape, np.nan, q.dtype)
    varlen = "cu_q" in opts
    lse = np.full((q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1]), np.nan, np.float32)
    flashattn.forward(q, k, v, out, lse, **_api(opts))
    dq, dk, dv = (np.full(t.shape, np.nan, t.dtype) for t in (q, k, v))
    info = flashattn.backward(dout, q, k, v, out, lse, dq, dk, dv, deterministic=deterministic, **_api(opts))
    assert info.backend == "cpu"
    return dq, dk, dv


def _api(opts):
    """Reference keyword names -> the package's."""
    names = {"scale": "softmax_scale", "window": "window_size", "cu_q": "cu_seqlens_q", "cu_k": "cu_seqlens_k"}
    return {names.get(key, key): value for key, value in opts.items()}


def check_backward(q, k, v, dout, grads, dtype, **opts):
    oracle = ref.backward(dout, q, k, v, **opts)
    naive = ref.backward(dout, q, k, v, prec=ref.naive_precision(dtype), **opts)
    for name, got, o, n in zip(("dq", "dk", "dv"), grads, oracle, naive):
        assert not np.isnan(got).any(), f"{name}: elements left unwritten"
        ref.assert_close(name, got, o, n, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("case", BACKWARD_CASES.values(), ids=BACKWARD_CASES.keys())
def test_backward_matches_reference(rng, dtype, case):
    batch, sq, sk, hq, hkv, d, causal, window, softcap = case
    q, k, v = make_qkv(rng, dtype, batch, sq, sk, hq, hkv, d)
    dout = randn(rng, q.shape, dtype)
    opts = dict(causal=causal, window=window, softcap=softcap)
    check_backward(q, k, v, dout, run_backward(q, k, v, dout, **opts), dtype, **opts)


def test_varlen_backward_with_empty_sequences(rng):
    cu_q = np.array([0, 6, 6, 20, 31], dtype=np.int32)
    cu_k = np.array([0, 9, 12, 12, 40], dtype=np.int32)
    q = randn(rng, (31, 4, 32), np.float32)
    k, v = (randn(rng, (40, 2, 32), np.float32) for _ in range(2))
    dout = randn(rng, q.shape, np.float32)
    opts = dict(causal=True, cu_q=cu_q, cu_k=cu_k)
    check_backward(q, k, v, dout, run_backward(q, k, v, dout, **opts), np.float32, **opts)


def test_deterministic_backward_is_bitwise_reproducible(rng):
    q, k, v = make_qkv(rng, np.float32, 2, 37, 53, 4, 2, 64)
    dout = randn(rng, q.shape, np.float32)
    first = run_backward(q, k, v, dout, deterministic=True, causal=True)
    for _ in range(3):
        again = run_backward(q, k, v, dout, deterministic=True, causal=True)
        for a, b in zip(first, again):
            assert a.tobytes() == b.tobytes()


# ---- random combinations of every option through the low-level calls ---------------------------------------


def strided_like(rng, shape, dtype, fill):
    """(view, storage): a view of `shape` on a `fill`-filled storage of one of five kinds, drawn: contiguous,
    rows padded past the head dim, every other head of a wider buffer, heads outermost ([.., h, s, d] seen as
    [.., s, h, d]), or behind one leading entry (an offset)."""
    kind = int(rng.integers(5))
    if kind == 1:
        storage = np.full(shape[:-1] + (shape[-1] + int(rng.integers(1, 9)),), fill, dtype)
        return storage[..., :shape[-1]], storage
    if kind == 2:
        storage = np.full(shape[:-2] + (2 * shape[-2], shape[-1]), fill, dtype)
        return storage[..., ::2, :], storage
    if kind == 3:
        lead = len(shape) - 3
        perm = tuple(range(lead)) + (lead + 1, lead, lead + 2)
        storage = np.full(tuple(shape[i] for i in perm), fill, dtype)
        return storage.transpose(perm), storage
    if kind == 4:
        storage = np.full((shape[0] + 1,) + tuple(shape[1:]), fill, dtype)
        return storage[1:], storage
    storage = np.full(shape, fill, dtype)
    return storage, storage


def strided_input(rng, shape, dtype):
    view, _ = strided_like(rng, shape, dtype, 0)
    view[...] = randn(rng, shape, dtype)
    return view


def written_within(view, storage):
    """Every element of the view written (no NaN left) and none of the storage around it."""
    return not np.isnan(view).any() and int(np.isnan(storage).sum()) == storage.size - view.size


def draw_case(rng, backward):
    """One call's options, drawn (as tests/common/random_case.h draws the C++ suites' cases): lengths 1, short
    or up to 96 (at least 16 for the backward, whose tolerance rule needs a few rows and keys, see
    docs/testing.md), batch or varlen with empty sequences and rows after the last one, GQA/MQA, head dims up
    to 256 (not only multiples of 8), float32 and float16, causal, windows, softcap, scales of either sign,
    LSE or not, worker counts."""
    low = 16 if backward else 1

    def length(allow_zero):
        r = rng.random()
        if allow_zero and r < 0.12:
            return 0
        return int(rng.integers(low, 17 if r < 0.35 and low < 16 else 97))

    c = dict(dtype=[np.float32, np.float16][int(rng.integers(2))],
             d=int(rng.choice([8, 16, 20, 32, 40, 64, 72, 96, 128, 160, 256])), hkv=int(rng.integers(1, 4)))
    c["hq"] = c["hkv"] * int(rng.choice([1, 1, 2, 4]))
    if rng.random() < 0.35:
        n = int(rng.integers(1, 5))
        c["lens"] = ([length(True) for _ in range(n)], [length(True) for _ in range(n)])
        c["tail"] = (int(rng.integers(1, 4)), int(rng.integers(0, 4))) if rng.random() < 0.3 else (0, 0)
    else:
        c["batch"], sq = int(rng.integers(1, 4)), length(False)
        c["sq"], c["sk"] = sq, sq if rng.random() < 0.25 else length(False)
    reach = 1 if backward else 0  # the backward's windows reach a key on each side
    left = right = -1
    if rng.random() < 0.3:
        left = int(rng.integers(reach, 33)) if rng.random() < 0.7 else -1
        right = int(rng.integers(reach, 33)) if left < 0 or rng.random() < 0.6 else -1
    c["opts"] = dict(causal=bool(rng.random() < 0.4), window=(left, right),
                     softcap=float(rng.uniform(1, 20)) if rng.random() < 0.25 else 0.0,
                     scale=None if rng.random() < 0.6 else float(rng.choice([-1.0, 1.0]) * rng.uniform(0.05, 0.5)))
    c["with_lse"] = backward or rng.random() < 0.7
    c["deterministic"] = bool(rng.random() < 0.5)
    c["num_threads"] = int(rng.integers(0, 4))
    return c


def random_call(rng, c, backward):
    """Runs the drawn case through flashattn.forward (and .backward) on strided views and checks every output
    against the oracle by the tolerance rule, and that nothing outside the output views was written."""
    dtype, d, hq, hkv, opts = c["dtype"], c["d"], c["hq"], c["hkv"], dict(c["opts"])
    varlen = "lens" in c
    if varlen:
        cu_q = np.concatenate([[0], np.cumsum(c["lens"][0])]).astype(np.int32)
        cu_k = np.concatenate([[0], np.cumsum(c["lens"][1])]).astype(np.int32)
        q_shape, k_shape = (int(cu_q[-1]) + c["tail"][0], hq, d), (int(cu_k[-1]) + c["tail"][1], hkv, d)
        opts.update(cu_q=cu_q, cu_k=cu_k)
        extra = dict(max_seqlen_q=max(c["lens"][0]), max_seqlen_k=max(c["lens"][1]))
        lse_shape = (hq, q_shape[0])
    else:
        q_shape, k_shape = (c["batch"], c["sq"], hq, d), (c["batch"], c["sk"], hkv, d)
        extra = {}
        lse_shape = (c["batch"], hq, c["sq"])
    q, k, v = strided_input(rng, q_shape, dtype), strided_input(rng, k_shape, dtype), strided_input(rng, k_shape, dtype)
    api = dict(_api(opts), num_threads=c["num_threads"], **extra)
    out, out_storage = strided_like(rng, q_shape, dtype, np.nan)
    lse = np.full(lse_shape, np.nan, np.float32) if c["with_lse"] else None
    assert flashattn.forward(q, k, v, out, lse, **api).backend == "cpu"
    assert written_within(out, out_storage), "out: unwritten elements, or writes outside its view"
    oracle_out, oracle_lse = ref.forward(q, k, v, **opts)
    naive_out, naive_lse = ref.forward(q, k, v, prec=ref.naive_precision(dtype), **opts)
    if varlen:  # the rows after the last sequence: lse -inf, as for rows that see no key
        oracle_lse[:, cu_q[-1]:] = naive_lse[:, cu_q[-1]:] = -np.inf
    ref.assert_close("out", out, oracle_out, naive_out, dtype)
    if lse is not None:
        ref.assert_close("lse", lse, oracle_lse, naive_lse, dtype)
        assert np.array_equal(np.isneginf(lse), np.isneginf(oracle_lse)), "lse: -inf on other rows than the oracle's"
    if not backward:
        return
    dout = strided_input(rng, q_shape, dtype)
    grads = [strided_like(rng, t.shape, dtype, np.nan) for t in (q, k, v)]
    info = flashattn.backward(dout, q, k, v, out, lse, *(g for g, _ in grads), deterministic=c["deterministic"], **api)
    assert info.backend == "cpu"
    for name, (got, storage) in zip(("dq", "dk", "dv"), grads):
        assert written_within(got, storage), f"{name}: unwritten elements, or writes outside its view"
    check_backward(q, k, v, dout, [g for g, _ in grads], dtype, **opts)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_random_combinations_of_every_option(rng, backward):
    for i in range(30):
        c = draw_case(rng, backward)
        try:
            random_call(rng, c, backward)
        except AssertionError as e:
            raise AssertionError(f"case {i}: {c}: {e}") from e


# ---- errors: the exception type follows the Status code, the message is the library's ----------------------


def test_bad_shapes_raise_value_error_with_the_message(rng):
    q, k, v = make_qkv(rng, np.float32, 2, 8, 8, 4, 2, 32)
    with pytest.raises(ValueError, match=re.escape("k: head_dim 16 must equal the head_dim of q (32)")):
        flashattn.flash_attn_func(q, k[..., :16], v[..., :16])
    with pytest.raises(ValueError, match=r"q: expected 4 dimensions, got 3"):
        flashattn.flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match=r"heads_q \(4\) must be a multiple of heads_kv \(3\)"):
        k3, v3 = (randn(rng, (2, 8, 3, 32), np.float32) for _ in range(2))
        flashattn.flash_attn_func(q, k3, v3)
    with pytest.raises(ValueError, match=r"v: shape"):
        flashattn.flash_attn_func(q, k, v[:, :4])


def test_bad_varlen_offsets_raise_value_error(rng):
    q = randn(rng, (10, 2, 32), np.float32)
    k = v = randn(rng, (10, 2, 32), np.float32)
    bad = np.array([0, 6, 4, 10], dtype=np.int32)
    good = np.array([0, 3, 6, 10], dtype=np.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_q must be non-decreasing"):
        flashattn.flash_attn_varlen_func(q, k, v, bad, good, 0, 0)
    with pytest.raises(ValueError, match=r"cu_seqlens_k: last entry 12 exceeds"):
        flashattn.flash_attn_varlen_func(q, k, v, good, np.array([0, 3, 6, 12], np.int32), 0, 0)


def test_dtypes_raise_type_error(rng):
    q, k, v = make_qkv(rng, np.float32, 1, 8, 8, 2, 2, 32)
    with pytest.raises(TypeError, match=r"k: dtype fp16 must be fp32"):
        flashattn.flash_attn_func(q, k.astype(np.float16), v)
    with pytest.raises(TypeError, match=r"q: dtype float64 is not supported"):
        flashattn.flash_attn_func(q.astype(np.float64), k, v)
    with pytest.raises(TypeError, match=r"q: dtype int64 is not supported"):
        flashattn.flash_attn_func(q.astype(np.int64), k, v)
    cu = np.array([0, 8], dtype=np.int64)
    with pytest.raises(TypeError, match=r"cu_seqlens_q: dtype int64 is not supported"):
        flashattn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8)
    with pytest.raises(TypeError, match=r"lse: dtype fp16 must be fp32"):
        flashattn.forward(q, k, v, np.empty_like(q), np.empty((1, 2, 8), np.float16))


def test_flash_attn_only_options():
    q = np.ones((1, 4, 2, 32), np.float32)
    with pytest.raises(ValueError, match=r"dropout_p: attention dropout is not supported"):
        flashattn.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(NotImplementedError, match=r"alibi_slopes"):
        flashattn.flash_attn_func(q, q, q, alibi_slopes=np.ones((2,), np.float32))
    with pytest.raises(NotImplementedError, match=r"return_attn_probs"):
        flashattn.flash_attn_func(q, q, q, return_attn_probs=True)
    with pytest.raises(NotImplementedError, match=r"block_table"):
        flashattn.flash_attn_varlen_func(q[0], q[0], q[0], None, None, 4, 4, block_table=np.zeros((1, 1), np.int32))
    with pytest.raises(ValueError, match=r"softmax_scale: must be nonzero"):
        flashattn.flash_attn_func(q, q, q, softmax_scale=0.0)
    with pytest.raises(ValueError, match=r"window_size: expected a pair"):
        flashattn.flash_attn_func(q, q, q, window_size=4)


def test_backend_and_algorithm_choice(rng):
    q, k, v = make_qkv(rng, np.float32, 1, 8, 8, 2, 2, 32)
    with pytest.raises(ValueError, match=r"backend: unknown name 'gpu'"):
        flashattn.flash_attn_func(q, k, v, backend="gpu")
    with pytest.raises(ValueError, match=r"backend: cuda cannot run on tensors in cpu memory"):
        flashattn.flash_attn_func(q, k, v, backend="cuda")
    with pytest.raises(NotImplementedError, match=r"algorithm fa3"):
        flashattn.flash_attn_func(q, k, v, algo="fa3")
    out, lse = flashattn.flash_attn_func(q, k, v, backend="cpu", algo="fa2", return_lse=True)
    check_forward(q, k, v, out, lse, np.float32)


def test_capabilities_and_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", flashattn.__version__)
    caps = flashattn.capabilities()
    cpu = [c for c in caps if c["backend"] == "cpu"]
    assert cpu and cpu[0]["available"] and "fp32" in cpu[0]["dtypes"] and cpu[0]["backward"]
    assert isinstance(flashattn.cuda_built(), bool)
    if not flashattn.cuda_built():
        assert flashattn.cuda_device_count() == 0
        assert any(c["backend"] == "cuda" and not c["available"] for c in caps)


def test_jax_cpu_arrays_if_present(rng):
    jax = pytest.importorskip("jax")
    cpu = jax.devices("cpu")[0]  # where JAX also sees a GPU, its arrays would default to GPU memory
    q, k, v = make_qkv(rng, np.float32, 1, 9, 12, 2, 1, 32)
    out, lse = flashattn.flash_attn_func(*(jax.device_put(t, cpu) for t in (q, k, v)), causal=True,
                                         return_lse=True)
    assert type(out).__module__.startswith("jax")
    check_forward(q, k, v, np.asarray(out), np.asarray(lse), np.float32, causal=True)


def cuda_dlpack_ready():
    """A reason to skip the GPU tests of non-torch arrays, or None."""
    if not flashattn.cuda_built():
        return "this build of flashattn has no CUDA kernels"
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "no CUDA device"
    except cupy.cuda.runtime.CUDARuntimeError:
        return "no CUDA device"
    return None


@pytest.mark.gpu
def test_cupy_and_jax_gpu_arrays(rng):
    reason = cuda_dlpack_ready()
    if reason:
        pytest.skip(reason)
    import cupy

    q, k, v = make_qkv(rng, np.float16, 2, 37, 53, 4, 2, 64)
    out, lse = flashattn.flash_attn_func(*(cupy.asarray(t) for t in (q, k, v)), causal=True, return_lse=True)
    assert isinstance(out, cupy.ndarray) and out.dtype == np.float16
    check_forward(q, k, v, cupy.asnumpy(out), cupy.asnumpy(lse), np.float16, causal=True)

    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    out, lse = flashattn.flash_attn_func(*(jax.device_put(t, gpus[0]) for t in (q, k, v)), causal=True,
                                         return_lse=True)
    assert type(out).__module__.startswith("jax")
    check_forward(q, k, v, np.asarray(out), np.asarray(lse), np.float16, causal=True)
