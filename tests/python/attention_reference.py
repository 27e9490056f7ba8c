"""Naive attention in numpy for the Python tests: the float64 oracle and the same-precision baseline of the
tolerance rule. It materializes S and P and writes the visibility rule out again from the definition in
include/flashattn/attention.h, sharing no code with the library.

Layout as the library's: q [seqlen_q, heads_q, d] per sequence, k/v [seqlen_k, heads_kv, d]; padded batches
and varlen packs are split into sequences by `sequences`.
"""

import numpy as np

# The absolute floor of the tolerance rule, per dtype name (times max(1, magnitude of the reference)); the
# same numbers as the C++ harness.
ABS_FLOOR = {"float32": 1e-5, "float16": 5e-5, "bfloat16": 2e-4}


def abs_floor(dtype) -> float:
    """dtype: a numpy dtype or one of the names of ABS_FLOOR (torch's bfloat16 has no numpy twin)."""
    return ABS_FLOOR[dtype if isinstance(dtype, str) else np.dtype(dtype).name]


def visible(len_q: int, len_k: int, causal: bool, window_left: int, window_right: int) -> np.ndarray:
    """[len_q, len_k] bool: key j is visible to query i. Bottom-right aligned: query i sits at key position
    i + (len_k - len_q); causal sets the right window to 0; -1 leaves a side unbounded."""
    right = 0 if causal else window_right
    i = np.arange(len_q)[:, None] + (len_k - len_q)
    j = np.arange(len_k)[None, :]
    ok = np.ones((len_q, len_k), dtype=bool)
    if right >= 0:
        ok &= j <= i + right
    if window_left >= 0:
        ok &= j >= i - window_left
    return ok


class Precision:
    """How the naive computation rounds: `compute` is the accumulation type; `storage` (or None) is the
    dtype that S, P, O and the backward's dP, dS and gradients are rounded to, as a framework's naive
    attention in the inputs' precision would store them."""

    def __init__(self, compute, storage=None):
        self.compute = np.dtype(compute)
        self.storage = None if storage is None else np.dtype(storage)

    def round(self, x: np.ndarray) -> np.ndarray:
        if self.storage is None:
            return x
        return x.astype(self.storage).astype(self.compute)


ORACLE = Precision(np.float64)


def naive_precision(dtype) -> Precision:
    return Precision(np.float32, dtype)


def _sequence_forward(q, k, v, scale, causal, window, softcap, prec):
    """One sequence: returns out [lq, hq, d], lse [hq, lq] and the intermediates backward needs."""
    lq, hq, _ = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    q, k, v = (t.astype(prec.compute) for t in (q, k, v))
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    raw = np.einsum("qhd,khd->hqk", q, kk) * prec.compute.type(scale)
    s = softcap * np.tanh(raw / softcap) if softcap > 0 else raw
    s = prec.round(s)
    mask = visible(lq, lk, causal, window[0], window[1])
    s = np.where(mask[None], s, -np.inf)
    row_max = s.max(axis=-1, keepdims=True) if lk > 0 else np.full((hq, lq, 1), -np.inf, prec.compute)
    # -inf - -inf is NaN: rows that see no key get a finite stand-in maximum and P = 0.
    safe_max = np.where(np.isfinite(row_max), row_max, 0)
    e = np.exp(s - safe_max)
    denom = e.sum(axis=-1, keepdims=True)
    p = np.where(denom > 0, e / np.where(denom > 0, denom, 1), 0)
    p = prec.round(p)
    out = prec.round(np.einsum("hqk,khd->qhd", p, vv))
    with np.errstate(divide="ignore"):
        lse = np.where(denom[..., 0] > 0, safe_max[..., 0] + np.log(denom[..., 0]), -np.inf)
    return out, lse, (q, kk, vv, raw, p, group)


def sequences(q_shape, cu_q=None, cu_k=None, seqlen_k=None):
    """(q rows, k rows) index ranges of each sequence, for padded ([b, s, h, d]) and varlen layouts."""
    if cu_q is not None:
        return [((int(cu_q[b]), int(cu_q[b + 1])), (int(cu_k[b]), int(cu_k[b + 1]))) for b in range(len(cu_q) - 1)]
    return [((0, q_shape[1]), (0, seqlen_k))] * q_shape[0]


def forward(q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, cu_q=None, cu_k=None,
            prec=ORACLE):
    """out (like q, in prec.compute) and lse (library layout: [b, hq, sq], or [hq, total_q] for varlen)."""
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    varlen = cu_q is not None
    out = np.zeros(q.shape, prec.compute)
    lse = np.zeros((q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1]), np.float64)
    for b, ((q0, q1), (k0, k1)) in enumerate(sequences(q.shape, cu_q, cu_k, None if varlen else k.shape[1])):
        if varlen:
            o, l, _ = _sequence_forward(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, window, softcap, prec)
            out[q0:q1], lse[:, q0:q1] = o, l
        else:
            o, l, _ = _sequence_forward(q[b], k[b], v[b], scale, causal, window, softcap, prec)
            out[b], lse[b] = o, l
    return out, lse


def _sequence_backward(dout, q, k, v, scale, causal, window, softcap, prec):
    out, _, (qc, kk, vv, raw, p, group) = _sequence_forward(q, k, v, scale, causal, window, softcap, prec)
    do = dout.astype(prec.compute)
    lk, hkv, d = k.shape
    dv = np.einsum("hqk,qhd->khd", p, do)
    dp = prec.round(np.einsum("qhd,khd->hqk", do, vv))
    delta = np.einsum("qhd,qhd->hq", do, out)[..., None]
    ds = p * (dp - delta)
    if softcap > 0:
        ds = ds * (1 - np.tanh(raw / softcap) ** 2)
    ds = prec.round(ds)
    sc = prec.compute.type(scale)
    dq = np.einsum("hqk,khd->qhd", ds, kk) * sc
    dk = np.einsum("hqk,qhd->khd", ds, qc) * sc
    # GQA: the query heads of one group all read the same KV head, so their gradients add up there.
    dk = dk.reshape(lk, hkv, group, d).sum(axis=2)
    dv = dv.reshape(lk, hkv, group, d).sum(axis=2)
    return prec.round(dq), prec.round(dk), prec.round(dv)


def backward(dout, q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, cu_q=None, cu_k=None,
             prec=ORACLE):
    """dq, dk, dv (shapes of q, k, v, in prec.compute)."""
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    varlen = cu_q is not None
    dq, dk, dv = (np.zeros(t.shape, prec.compute) for t in (q, k, v))
    for b, ((q0, q1), (k0, k1)) in enumerate(sequences(q.shape, cu_q, cu_k, None if varlen else k.shape[1])):
        if varlen:
            g = _sequence_backward(dout[q0:q1], q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, window, softcap, prec)
            dq[q0:q1], dk[k0:k1], dv[k0:k1] = g
        else:
            dq[b], dk[b], dv[b] = _sequence_backward(dout[b], q[b], k[b], v[b], scale, causal, window, softcap, prec)
    return dq, dk, dv


def max_error(got, ref) -> float:
    """max |got - ref|; NaN anywhere (or -inf where the reference is finite) makes it inf."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    both_neg_inf = np.isneginf(got) & np.isneginf(ref)
    diff = np.abs(np.where(both_neg_inf, 0.0, got - np.where(both_neg_inf, 0.0, ref)))
    if diff.size == 0:
        return 0.0
    diff = np.where(np.isnan(diff), np.inf, diff)
    return float(diff.max())


def assert_close(name, got, oracle, naive, dtype):
    """The tolerance rule: error <= 2 * naive error + floor(dtype) * max(1, magnitude); NaN never passes."""
    err = max_error(got, oracle)
    naive_err = max_error(naive, oracle)
    finite = np.asarray(oracle, np.float64)[np.isfinite(oracle)]
    magnitude = float(np.abs(finite).max()) if finite.size else 0.0
    bound = 2 * naive_err + abs_floor(dtype) * max(1.0, magnitude)
    assert np.isfinite(err) and err <= bound, f"{name}: err {err:.3g} > bound {bound:.3g} (naive {naive_err:.3g})"
    return err, bound
