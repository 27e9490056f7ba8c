"""Forward for arrays that are not torch tensors: numpy (CPU), CuPy (CUDA), and other DLPack producers
such as JAX, which are viewed through numpy (CPU memory) or CuPy (CUDA memory) without a copy.

There is no autograd here; the gradients come from `flashattn.backward` with preallocated outputs.
"""

import contextlib
from typing import Any, Callable, Optional, Tuple

from . import _arrays, _ext


def _namespace(q: Any) -> Tuple[Any, Callable[[Any], Any]]:
    """The array module that allocates outputs like `q`, and the function that hands results back in the
    caller's framework."""
    kind = _arrays.framework(q)
    if kind == "numpy":
        import numpy

        return numpy, lambda a: a
    if kind == "cupy":
        import cupy

        return cupy, lambda a: a
    # Another DLPack producer: DLPack device type 1 is CPU memory, everything else is a GPU here.
    device_type = q.__dlpack_device__()[0] if hasattr(q, "__dlpack_device__") else 1
    back = _back_to(q)
    if device_type == 1:
        import numpy

        return numpy, back
    try:
        import cupy
    except ImportError:
        raise NotImplementedError(
            f"q: {type(q).__name__} arrays in GPU memory need CuPy (or torch tensors) to allocate the outputs; "
            "flashattn.forward also accepts them with outputs preallocated by any DLPack framework"
        ) from None
    return cupy, back


def _back_to(template: Any) -> Callable[[Any], Any]:
    """JAX arrays get JAX arrays back (through DLPack, no copy where JAX can alias the buffer)."""
    if type(template).__module__.split(".", 1)[0] in ("jax", "jaxlib"):
        import jax.numpy as jnp

        def to_jax(a: Any) -> Any:
            try:
                return jnp.from_dlpack(a)
            except (TypeError, ValueError, RuntimeError, BufferError):
                return jnp.asarray(a)

        return to_jax
    return lambda a: a


def _as_xp(xp: Any, x: Any) -> Any:
    """A view of `x` in module `xp` whose last dimension is contiguous and whose strides are non-negative;
    a contiguous copy only when `x` breaks that (the kernels need a unit stride along head_dim)."""
    if x is None:
        return None
    if not isinstance(x, xp.ndarray):
        x = xp.from_dlpack(x)
    unit_last = x.ndim == 0 or x.shape[-1] <= 1 or x.strides[-1] == x.itemsize
    if unit_last and all(s >= 0 for s in x.strides):
        return x
    return xp.ascontiguousarray(x)


def forward(
    q: Any,
    k: Any,
    v: Any,
    *,
    cu_seqlens_q: Optional[Any],
    cu_seqlens_k: Optional[Any],
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    backend: str,
    algo: str,
    stream: Any,
) -> Tuple[Any, Any]:
    xp, back = _namespace(q)
    stream_handle = _arrays.resolve_stream(stream, q)
    q, k, v = (_as_xp(xp, t) for t in (q, k, v))
    cu_seqlens_q, cu_seqlens_k = (_as_xp(xp, t) for t in (cu_seqlens_q, cu_seqlens_k))
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    # CuPy allocates on its current device, which need not be the one q lives on.
    with q.device if xp.__name__ == "cupy" else contextlib.nullcontext():
        out = xp.empty(q.shape, dtype=q.dtype)
        lse = xp.empty(_arrays.lse_shape(q.shape, varlen), dtype=xp.float32)
    _ext.forward(
        q, k, v, out, lse,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, backend=backend, algo=algo, stream=stream_handle,
    )
    return back(out), back(lse)


def forward_kvcache(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    *,
    k_new: Optional[Any],
    v_new: Optional[Any],
    cache_seqlens: Any,
    block_table: Optional[Any],
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    num_splits: int,
    check_indices: bool,
    backend: str,
    stream: Any,
) -> Tuple[Any, Any]:
    xp, back = _namespace(q)
    stream_handle = _arrays.resolve_stream(stream, q)
    q, k_new, v_new = (_as_xp(xp, t) for t in (q, k_new, v_new))
    # The caches are written in place: they go to the library as they are, never through a copy that
    # would take the appended tokens away from the caller.
    k_cache, v_cache = (t if isinstance(t, xp.ndarray) else xp.from_dlpack(t) for t in (k_cache, v_cache))
    with q.device if xp.__name__ == "cupy" else contextlib.nullcontext():
        if _arrays.is_python_int(cache_seqlens):
            cache_seqlens = xp.full((q.shape[0],), int(cache_seqlens), dtype=xp.int32)
        cache_seqlens, block_table = (_as_xp(xp, t) for t in (cache_seqlens, block_table))
        out = xp.empty(q.shape, dtype=q.dtype)
        lse = xp.empty(_arrays.lse_shape(q.shape, False), dtype=xp.float32)
    _ext.forward_kvcache(
        q, k_cache, v_cache, cache_seqlens, out, lse,
        k_new=k_new, v_new=v_new, block_table=block_table,
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, num_splits=num_splits, check_indices=check_indices, backend=backend,
        stream=stream_handle,
    )
    return back(out), back(lse)
