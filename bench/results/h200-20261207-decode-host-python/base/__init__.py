"""flashattn: exact attention kernels of the FlashAttention line, on the CPU and on CUDA GPUs.

High level (flash-attn's names and arguments where they overlap):
    flash_attn_func(q, k, v, ...)                     q [batch, seqlen_q, heads_q, head_dim]
    flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
    flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, ...)   decode, no autograd
Torch tensors get autograd and torch.compile support (custom ops flashattn::fwd / flashattn::bwd); numpy,
CuPy and other DLPack arrays get the forward pass. Low level, with preallocated outputs and no copies:
    forward(q, k, v, out, lse=None, ...)
    backward(dout, q, k, v, out, lse, dq, dk, dv, ...)
See docs/python.md for the arguments and where behaviour differs from flash-attn.
"""

import importlib.util
from typing import Any, NamedTuple

from . import _arrays, _ext, _generic

__version__: str = _ext.__version__

# torch is optional: without it numpy, CuPy and DLPack arrays still work. Where it is installed, the custom
# ops are registered here, at import, so that torch.compile can trace even the first call.
if importlib.util.find_spec("torch") is not None:
    from . import _torch
    from ._torch import FlashAttnFunc
else:
    _torch = None
    FlashAttnFunc = None

__all__ = [
    "__version__",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "forward",
    "backward",
    "capabilities",
    "cuda_built",
    "cuda_device_count",
    "RunInfo",
    "FlashAttnFunc",
]


class RunInfo(NamedTuple):
    """What a low-level call ran: backend ('cpu' or 'cuda'), algorithm ('fa2', ...) and kernel name."""

    backend: str
    algo: str
    kernel: str


def _is_torch(x: Any) -> bool:
    return _torch is not None and isinstance(x, _torch.torch.Tensor)


def _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
               window_size, softcap, alibi_slopes, deterministic, return_attn_probs, return_lse, backend, algo,
               stream):
    _arrays.check_flash_attn_only_options(dropout_p, alibi_slopes, return_attn_probs)
    scale = _arrays.softmax_scale(softmax_scale)
    window_left, window_right = _arrays.window(window_size)
    if _is_torch(q):
        if stream is not None:
            raise ValueError(
                "stream: torch tensors run on torch.cuda.current_stream(); select another with "
                "`with torch.cuda.stream(s):`"
            )
        out, lse = _torch.attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                    causal, window_left, window_right, softcap, backend, algo, deterministic)
    else:
        out, lse = _generic.forward(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=scale,
                                    causal=causal, window_left=window_left, window_right=window_right,
                                    softcap=softcap, backend=backend, algo=algo, stream=stream)
    return (out, lse) if return_lse else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, return_lse=False,
                    backend="auto", algo="auto", stream=None):
    """Exact attention over padded batches.

    q: [batch, seqlen_q, heads_q, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim], heads_q a multiple
    of heads_kv (GQA/MQA). float32, float16 or bfloat16, all alike; the last dimension contiguous (otherwise
    a contiguous copy is made), other strides free.

    softmax_scale: None for 1/sqrt(head_dim). causal: mask aligned bottom-right when seqlen_q != seqlen_k.
    window_size: (left, right) keys visible around the diagonal, -1 unbounded. softcap: > 0 applies
    softcap * tanh(score / softcap). deterministic: bitwise-reproducible backward.
    return_lse: also return the float32 log-sum-exp [batch, heads_q, seqlen_q] (natural log).
    backend: 'auto' (where the tensors live), 'cpu' or 'cuda'; algo: 'auto', 'standard', 'fa1', 'fa2', 'fa3'.
    stream: CUDA stream for non-torch arrays (integer handle or stream object); torch tensors always run on
    torch.cuda.current_stream(), CuPy arrays default to CuPy's current stream.

    dropout_p other than 0 raises ValueError; alibi_slopes and return_attn_probs raise NotImplementedError.
    Returns out (like q), or (out, lse) with return_lse=True. Differentiable for torch tensors.
    """
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, return_lse, backend, algo, stream)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, return_lse=False,
                           backend="auto", algo="auto", stream=None):
    """Exact attention over packed sequences of different lengths.

    q: [total_q, heads_q, head_dim]; k, v: [total_k, heads_kv, head_dim]; cu_seqlens_q / cu_seqlens_k: int32
    [batch + 1] prefix sums of the lengths (empty sequences allowed), in the same memory as q. max_seqlen_q /
    max_seqlen_k: upper bounds of the lengths (0 lets the library compute them). The LSE is
    [heads_q, total_q]. Other arguments as in flash_attn_func; block_table (paged KV) is not supported yet.
    """
    if block_table is not None:
        raise NotImplementedError("block_table: paged KV is not supported by flash_attn_varlen_func yet")
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), dropout_p,
                      softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
                      return_lse, backend, algo, stream)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, num_splits=0,
                            return_softmax_lse=False, *, check_indices=True, backend="auto", stream=None,
                            rotary_cos=None,
                            rotary_sin=None, rotary_interleaved=True, cache_batch_idx=None, cache_leftpad=None,
                            alibi_slopes=None):
    """Attention of new query tokens over a KV cache (decode), appending k/v to the cache in place first.

    q: [batch, seqlen_q, heads_q, head_dim]. k_cache, v_cache: [batch, max_seqlen, heads_kv, head_dim], or
    paged [num_pages, page_size, heads_kv, head_dim] with block_table int32 [batch, max_pages_per_seq] (token
    t of sequence b in page block_table[b][t // page_size], slot t % page_size; any page_size >= 1).
    cache_seqlens: int32 [batch] (array/tensor in the memory of q) or a Python int for every sequence: the
    tokens already in each cache. Required.
    k, v: optional [batch, seqlen_new, heads_kv, head_dim], written into the caches at positions
    cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 before the attention; nothing else of the caches is
    written, and cache_seqlens is not advanced (the caller does that). Sequence b attends over
    cache_seqlens[b] + seqlen_new keys, masks aligned bottom-right.

    softmax_scale, causal, window_size, softcap, backend, stream: as in flash_attn_func. num_splits: KV
    splits per sequence, 0 lets the library choose (1..128 forces that many). return_softmax_lse: also return
    the float32 log-sum-exp [batch, heads_q, seqlen_q]. The caches must be writable and have a contiguous
    last dimension (they are never copied); inputs with a strided last dimension are copied.
    check_indices: True checks cache_seqlens and block_table first (bad ones raise and nothing is written),
    which for GPU index arrays costs a copy to the host and a wait for the stream on every call. False
    trusts GPU index arrays (no copy, no wait: the call can be queued ahead or captured in a CUDA graph);
    the kernels then clamp bad lengths and page indices into the caches, giving wrong results instead of an
    error. Host index arrays are always checked.

    Any error leaves the caches unchanged. rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad and
    alibi_slopes raise NotImplementedError when given (rotary_interleaved is ignored without rotary).
    Returns out (like q), or (out, lse) with return_softmax_lse=True. No autograd.
    """
    del rotary_interleaved  # only meaningful with rotary_cos/rotary_sin, which are refused below
    _arrays.check_kvcache_only_options(rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                       cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                                       alibi_slopes=alibi_slopes)
    if cache_seqlens is None:
        raise ValueError("cache_seqlens: required; pass an int32 array [batch] or a Python int for every sequence")
    if (k is None) != (v is None):
        raise ValueError("k, v: pass both new keys and new values, or neither")
    scale = _arrays.softmax_scale(softmax_scale)
    window_left, window_right = _arrays.window(window_size)
    options = dict(softmax_scale=scale, causal=bool(causal), window_left=window_left, window_right=window_right,
                   softcap=float(softcap), num_splits=int(num_splits), check_indices=bool(check_indices),
                   backend=backend)
    if _is_torch(q):
        if stream is not None:
            raise ValueError(
                "stream: torch tensors run on torch.cuda.current_stream(); select another with "
                "`with torch.cuda.stream(s):`"
            )
        if _arrays.is_python_int(cache_seqlens):
            cache_seqlens = _torch.torch.full((q.shape[0],), int(cache_seqlens), dtype=_torch.torch.int32,
                                              device=q.device)
        out, lse = _torch.forward_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, **options)
    else:
        out, lse = _generic.forward_kvcache(q, k_cache, v_cache, k_new=k, v_new=v, cache_seqlens=cache_seqlens,
                                            block_table=block_table, stream=stream, **options)
    return (out, lse) if return_softmax_lse else out


def forward(q, k, v, out, lse=None, *, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, backend="auto", algo="auto",
            num_threads=0, stream=None) -> RunInfo:
    """Forward into preallocated outputs: `out` like q, `lse` (optional) float32 [batch, heads_q, seqlen_q] or
    [heads_q, total_q] for varlen. Nothing is copied: every array must already have a contiguous last
    dimension. num_threads: CPU worker threads (0 = all). stream: as in flash_attn_func (torch and CuPy
    arrays default to their framework's current stream). Returns what ran."""
    x = _arrays.for_extension
    window_left, window_right = _arrays.window(window_size)
    info = _ext.forward(x(q), x(k), x(v), x(out), x(lse), cu_seqlens_q=x(cu_seqlens_q),
                        cu_seqlens_k=x(cu_seqlens_k), max_seqlen_q=int(max_seqlen_q), max_seqlen_k=int(max_seqlen_k),
                        softmax_scale=_arrays.softmax_scale(softmax_scale), causal=causal, window_left=window_left,
                        window_right=window_right, softcap=softcap, backend=backend, algo=algo,
                        num_threads=num_threads, stream=_arrays.resolve_stream(stream, q))
    return RunInfo(**info)


def backward(dout, q, k, v, out, lse, dq, dk, dv, *, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
             max_seqlen_k=0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, backend="auto",
             algo="auto", deterministic=False, num_threads=0, stream=None) -> RunInfo:
    """Backward into preallocated dq, dk, dv (shapes of q, k, v), from the forward's out and lse and the
    gradient dout. The options must be those of the forward call. deterministic: bitwise-reproducible
    gradients. Other arguments as in `forward`. Returns what ran."""
    x = _arrays.for_extension
    window_left, window_right = _arrays.window(window_size)
    info = _ext.backward(x(dout), x(q), x(k), x(v), x(out), x(lse), x(dq), x(dk), x(dv),
                         cu_seqlens_q=x(cu_seqlens_q), cu_seqlens_k=x(cu_seqlens_k),
                         max_seqlen_q=int(max_seqlen_q), max_seqlen_k=int(max_seqlen_k),
                         softmax_scale=_arrays.softmax_scale(softmax_scale), causal=causal, window_left=window_left,
                         window_right=window_right, softcap=softcap, backend=backend, algo=algo,
                         deterministic=deterministic, num_threads=num_threads,
                         stream=_arrays.resolve_stream(stream, q))
    return RunInfo(**info)


def capabilities() -> list:
    """One dict per backend and algorithm of this build: backend, algo, available, note, dtypes, head_dims,
    max_head_dim, and the feature flags backward, causal, window, softcap, gqa, varlen."""
    return _ext.capabilities()


def cuda_built() -> bool:
    """True when this build has CUDA kernels (nvcc was found when the package was built)."""
    return _ext.cuda_built()


def cuda_device_count() -> int:
    """CUDA devices visible to the library (0 without CUDA)."""
    return _ext.cuda_device_count()
