"""flash_attn_with_kvcache on the CPU: numpy (and torch CPU where installed) against a float64 numpy
reference that gathers each sequence's keys from the expected caches (contiguous or paged) and runs the
attention oracle of attention_reference.py over them.

Cache slots that no sequence may read (past each sequence's final length, pages no block table names) hold
NaN, so a read out of bounds shows up as NaN in the output. The slots the append overwrites hold random
values first, so a missing append shows up too. Whole caches are compared byte for byte with the expected
ones (the old caches plus the new tokens).
"""

import re

import numpy as np
import pytest

import attention_reference as ref
import flashattn

DTYPES = [np.float32, np.float16]
CACHE_LENGTHS = (0, 1, 37, 100)  # mixed in one batch, the empty cache included
CAPACITY = 128  # tokens per sequence: max_seqlen, or max_pages_per_seq * page_size
PAGED_EXTRA_PAGES = 3  # pages no sequence uses, to check that they are never read or written
INVALID_PAGE = -7  # in block-table slots past a sequence's last page: never read
HEAD_DIM = 32


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


class Cache:
    """A KV cache (contiguous when page_size is None, paged otherwise) with its block table, and where each
    token of sequence b lives."""

    def __init__(self, rng, dtype, lengths, final_lengths, heads_kv, page_size):
        batch = len(lengths)
        self.page_size = page_size
        if page_size is None:
            shape = (batch, CAPACITY, heads_kv, HEAD_DIM)
            self.block_table = None
        else:
            pages_per_seq = CAPACITY // page_size
            num_pages = batch * pages_per_seq + PAGED_EXTRA_PAGES
            shape = (num_pages, page_size, heads_kv, HEAD_DIM)
            # Shuffled pages, so that a sequence's tokens are not where a contiguous layout would put them.
            order = rng.permutation(num_pages)[: batch * pages_per_seq].astype(np.int32)
            self.block_table = order.reshape(batch, pages_per_seq)
            for b, n in enumerate(final_lengths):
                used = -(-n // page_size)
                self.block_table[b, used:] = INVALID_PAGE
        self.k = np.full(shape, np.nan, dtype)
        self.v = np.full(shape, np.nan, dtype)
        # Every slot a sequence may read after the append holds a random value: the old tokens, and the
        # slots the append overwrites (so that a missing append is seen).
        for b, n in enumerate(final_lengths):
            for t in range(n):
                self.k[self.slot(b, t)] = randn(rng, (heads_kv, HEAD_DIM), dtype)
                self.v[self.slot(b, t)] = randn(rng, (heads_kv, HEAD_DIM), dtype)

    def slot(self, b, t):
        if self.page_size is None:
            return (b, t)
        return (int(self.block_table[b, t // self.page_size]), t % self.page_size)

    def gather(self, cache, b, n):
        """[n, heads_kv, d]: the first n tokens of sequence b."""
        if n == 0:
            return np.zeros((0,) + cache.shape[2:], cache.dtype)
        return np.stack([cache[self.slot(b, t)] for t in range(n)])


def expected_caches(cache, lengths, k_new, v_new):
    k_expected, v_expected = cache.k.copy(), cache.v.copy()
    if k_new is not None:
        for b, n in enumerate(lengths):
            for j in range(k_new.shape[1]):
                k_expected[cache.slot(b, n + j)] = k_new[b, j]
                v_expected[cache.slot(b, n + j)] = v_new[b, j]
    return k_expected, v_expected


def reference(q, cache, k_cache, v_cache, final_lengths, dtype, **mask):
    """(oracle out, oracle lse, naive out, naive lse) over the gathered keys of each sequence."""
    batch, seqlen_q, heads_q, _ = q.shape
    results = [np.zeros(q.shape), np.zeros((batch, heads_q, seqlen_q)), np.zeros(q.shape),
               np.zeros((batch, heads_q, seqlen_q))]
    for b, n in enumerate(final_lengths):
        k = cache.gather(k_cache, b, n)[None]
        v = cache.gather(v_cache, b, n)[None]
        for i, prec in enumerate((ref.ORACLE, ref.naive_precision(dtype))):
            out, lse = ref.forward(q[b : b + 1], k, v, prec=prec, **mask)
            results[2 * i][b], results[2 * i + 1][b] = out[0], lse[0]
    return results


def assert_bytes_equal(name, got, want):
    assert got.tobytes() == want.tobytes(), f"{name}: the cache differs from the old cache plus the new tokens"


def run_case(rng, dtype, seqlen_q, seqlen_new, heads_q, heads_kv, page_size, as_int=False, lengths=None,
             **options):
    lengths = lengths if lengths is not None else (37,) * 3 if as_int else CACHE_LENGTHS
    final_lengths = [n + seqlen_new for n in lengths]
    batch = len(lengths)
    cache = Cache(rng, dtype, lengths, final_lengths, heads_kv, page_size)
    q = randn(rng, (batch, seqlen_q, heads_q, HEAD_DIM), dtype)
    k_new = v_new = None
    if seqlen_new:
        k_new = randn(rng, (batch, seqlen_new, heads_kv, HEAD_DIM), dtype)
        v_new = randn(rng, (batch, seqlen_new, heads_kv, HEAD_DIM), dtype)
    k_expected, v_expected = expected_caches(cache, lengths, k_new, v_new)
    seqlens = lengths[0] if as_int else np.array(lengths, np.int32)
    out, lse = flashattn.flash_attn_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                                 block_table=cache.block_table, return_softmax_lse=True,
                                                 **options)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (batch, heads_q, seqlen_q)
    assert_bytes_equal("k_cache", cache.k, k_expected)
    assert_bytes_equal("v_cache", cache.v, v_expected)
    mask = {key: options[key] for key in ("causal", "softcap") if key in options}
    if "window_size" in options:
        mask["window"] = options["window_size"]
    if "softmax_scale" in options:
        mask["scale"] = options["softmax_scale"]
    oracle_out, oracle_lse, naive_out, naive_lse = reference(q, cache, k_expected, v_expected, final_lengths,
                                                             dtype, **mask)
    ref.assert_close("out", out, oracle_out, naive_out, dtype)
    ref.assert_close("lse", lse, oracle_lse, naive_lse, dtype)
    dead = np.isneginf(oracle_lse)
    assert np.array_equal(np.isneginf(lse), dead)
    assert not np.any(out[dead.transpose(0, 2, 1)]), "rows that see no key must be 0"
    return dead


LAYOUTS = {"contiguous": None, "page1": 1, "page16": 16}
HEADS = {"mha": (2, 2), "gqa4": (4, 1), "gqa3": (6, 2)}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seqlen_new", [0, 2], ids=["no_append", "append2"])
@pytest.mark.parametrize("seqlen_q", [1, 4], ids=["sq1", "sq4"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_matches_reference(rng, layout, seqlen_q, seqlen_new, causal, dtype):
    heads_q, heads_kv = HEADS["gqa4"] if seqlen_q == 1 else HEADS["gqa3"]
    dead = run_case(rng, dtype, seqlen_q, seqlen_new, heads_q, heads_kv, layout, causal=causal)
    # The empty cache without appended tokens has no key at all: its rows must be dead, the others live
    # (causal rows see at least the keys up to their own position).
    assert dead[0].all() == (seqlen_new == 0)
    assert not dead[1:].any() or (causal and seqlen_q > 1)


def test_random_combinations(rng):
    """Calls drawn from every option at once: batch 1-4 of caches of unrelated lengths (empty ones, full ones),
    contiguous or paged (pages of 1 to 128 tokens), 1-6 queries, 0-4 appended tokens, GQA/MQA, float32 and
    float16, causal, windows, softcap, scales of either sign, forced or heuristic splits."""
    for i in range(40):
        seqlen_q, seqlen_new = int(rng.integers(1, 7)), int(rng.integers(0, 5))
        lengths = [int(rng.choice([0, 1, int(rng.integers(0, CAPACITY - seqlen_new + 1)), CAPACITY - seqlen_new]))
                   for _ in range(int(rng.integers(1, 5)))]
        heads = list(HEADS.values())[int(rng.integers(len(HEADS)))]
        options = dict(causal=bool(rng.random() < 0.5), num_splits=int(rng.choice([0, 0, 1, 2, 5])))
        if rng.random() < 0.3:
            options["window_size"] = (int(rng.integers(-1, 40)), int(rng.integers(-1, 40)))
        if rng.random() < 0.25:
            options["softcap"] = float(rng.uniform(1, 20))
        if rng.random() < 0.3:
            options["softmax_scale"] = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.05, 0.5))
        layout = list(LAYOUTS.values())[int(rng.integers(len(LAYOUTS)))] if rng.random() < 0.6 else \
            int(rng.choice([2, 32, 64, 128]))
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        case = dict(seqlen_q=seqlen_q, seqlen_new=seqlen_new, lengths=lengths, heads=heads, layout=layout,
                    dtype=np.dtype(dtype).name, **options)
        try:
            run_case(rng, dtype, seqlen_q, seqlen_new, *heads, layout, lengths=lengths, **options)
        except AssertionError as e:
            raise AssertionError(f"case {i}: {case}: {e}") from e


@pytest.mark.parametrize("heads", HEADS.values(), ids=HEADS.keys())
def test_window_softcap_scale(rng, heads):
    run_case(rng, np.float32, 4, 4, *heads, 16, causal=True, window_size=(5, -1), softcap=3.0, softmax_scale=0.3)


@pytest.mark.parametrize("num_splits", [1, 3, 128])
def test_forced_splits(rng, num_splits):
    run_case(rng, np.float32, 1, 1, 4, 1, 16, num_splits=num_splits)


def test_cache_seqlens_as_python_int(rng):
    run_case(rng, np.float16, 1, 1, 4, 2, None, as_int=True)
    run_case(rng, np.float32, 1, 1, 4, 2, 16, as_int=True)


def test_default_output_is_out_only(rng):
    cache = Cache(rng, np.float32, (5,), (5,), 1, None)
    q = randn(rng, (1, 1, 2, HEAD_DIM), np.float32)
    out = flashattn.flash_attn_with_kvcache(q, cache.k, cache.v, cache_seqlens=5)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


def small_paged_problem(rng):
    lengths = (3, 20)
    cache = Cache(rng, np.float32, lengths, [n + 1 for n in lengths], 1, 16)
    q = randn(rng, (2, 1, 2, HEAD_DIM), np.float32)
    k_new = randn(rng, (2, 1, 1, HEAD_DIM), np.float32)
    v_new = randn(rng, (2, 1, 1, HEAD_DIM), np.float32)
    return cache, q, k_new, v_new, np.array(lengths, np.int32)


def test_bad_block_table_raises_and_writes_nothing(rng):
    cache, q, k_new, v_new, seqlens = small_paged_problem(rng)
    num_pages = cache.k.shape[0]
    # Sequence 1 holds 21 tokens after the append: pages 0 and 1 of its row are read.
    cache.block_table[1, 1] = num_pages
    k_before, v_before = cache.k.copy(), cache.v.copy()
    message = f"block_table[1][1]: page index {num_pages} is outside [0, {num_pages}"
    with pytest.raises(ValueError, match=re.escape(message)):
        flashattn.flash_attn_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                          block_table=cache.block_table)
    assert_bytes_equal("k_cache", cache.k, k_before)
    assert_bytes_equal("v_cache", cache.v, v_before)


def test_host_indices_are_checked_with_check_indices_off(rng):
    """check_indices=False trusts GPU index arrays only: host ones are checked whatever it says."""
    cache, q, k_new, v_new, seqlens = small_paged_problem(rng)
    cache.block_table[1, 1] = -1
    k_before = cache.k.copy()
    with pytest.raises(ValueError, match=re.escape("block_table[1][1]: page index -1")):
        flashattn.flash_attn_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                          block_table=cache.block_table, check_indices=False)
    assert_bytes_equal("k_cache", cache.k, k_before)


def test_cache_overflow_raises_and_writes_nothing(rng):
    cache, q, k_new, v_new, seqlens = small_paged_problem(rng)
    seqlens[0] = CAPACITY
    k_before = cache.k.copy()
    with pytest.raises(ValueError, match="cache_seqlens"):
        flashattn.flash_attn_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                          block_table=cache.block_table)
    assert_bytes_equal("k_cache", cache.k, k_before)


def test_argument_errors(rng):
    cache, q, k_new, v_new, seqlens = small_paged_problem(rng)
    call = flashattn.flash_attn_with_kvcache
    bt = cache.block_table
    with pytest.raises(TypeError, match="cache_seqlens: dtype int64 is not supported"):
        call(q, cache.k, cache.v, cache_seqlens=seqlens.astype(np.int64), block_table=bt)
    with pytest.raises(TypeError, match="cache_seqlens: dtype fp32 must be int32"):
        call(q, cache.k, cache.v, cache_seqlens=seqlens.astype(np.float32), block_table=bt)
    with pytest.raises(TypeError, match="block_table: dtype int64 is not supported"):
        call(q, cache.k, cache.v, cache_seqlens=seqlens, block_table=bt.astype(np.int64))
    with pytest.raises(ValueError, match="cache_seqlens: required"):
        call(q, cache.k, cache.v, block_table=bt)
    with pytest.raises(ValueError, match="k, v: pass both"):
        call(q, cache.k, cache.v, k_new, None, cache_seqlens=seqlens, block_table=bt)
    for name in ("rotary_cos", "rotary_sin", "cache_batch_idx", "cache_leftpad", "alibi_slopes"):
        with pytest.raises(NotImplementedError, match=name):
            call(q, cache.k, cache.v, cache_seqlens=seqlens, block_table=bt, **{name: np.zeros(1, np.float32)})


def test_torch_cpu(rng):
    torch = pytest.importorskip("torch")
    cache, q, k_new, v_new, seqlens = small_paged_problem(rng)
    k_expected, v_expected = expected_caches(cache, seqlens, k_new, v_new)
    k_cache, v_cache = torch.from_numpy(cache.k.copy()), torch.from_numpy(cache.v.copy())
    out, lse = flashattn.flash_attn_with_kvcache(
        torch.from_numpy(q), k_cache, v_cache, torch.from_numpy(k_new), torch.from_numpy(v_new),
        cache_seqlens=torch.from_numpy(seqlens), block_table=torch.from_numpy(cache.block_table), causal=True,
        return_softmax_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and lse.dtype == torch.float32
    assert_bytes_equal("k_cache", k_cache.numpy(), k_expected)
    assert_bytes_equal("v_cache", v_cache.numpy(), v_expected)
    oracle_out, oracle_lse, naive_out, naive_lse = reference(q, cache, k_expected, v_expected, seqlens + 1,
                                                             np.float32, causal=True)
    ref.assert_close("out", out.numpy(), oracle_out, naive_out, np.float32)
    ref.assert_close("lse", lse.numpy(), oracle_lse, naive_lse, np.float32)
    # A Python int is broadcast into an int32 tensor on the device of q.
    out_int = flashattn.flash_attn_with_kvcache(torch.from_numpy(q), k_cache, v_cache, cache_seqlens=4,
                                                block_table=torch.from_numpy(cache.block_table))
    assert out_int.shape == q.shape
    with pytest.raises(TypeError, match=r"dense \(strided\) tensors, got one of layout torch.sparse_coo"):
        flashattn.flash_attn_with_kvcache(torch.from_numpy(q), k_cache.to_sparse(), v_cache, cache_seqlens=4,
                                          block_table=torch.from_numpy(cache.block_table))


@pytest.mark.gpu
@pytest.mark.parametrize("check_indices", [True, False], ids=["checked", "trusted"])
@pytest.mark.parametrize("seqlen_q", [1, 4], ids=["sq1", "sq4"])
@pytest.mark.parametrize("layout", [None, 16], ids=["contiguous", "page16"])
def test_torch_cuda_matches_cpu(rng, layout, seqlen_q, check_indices):
    """torch CUDA tensors run the GPU decode kernels: the same call as on the CPU backend, compared with the CPU
    result and the float64 oracle; the caches are appended in place on the device. check_indices=False: the
    GPU index tensors are trusted (no host copy), with the same results."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    if not flashattn.cuda_built():
        pytest.skip("this build of flashattn has no CUDA kernels")
    dtype, seqlen_new, heads_q, heads_kv = np.float16, 2, 8, 2
    final_lengths = [n + seqlen_new for n in CACHE_LENGTHS]
    batch = len(CACHE_LENGTHS)
    cache = Cache(rng, dtype, CACHE_LENGTHS, final_lengths, heads_kv, layout)
    q = randn(rng, (batch, seqlen_q, heads_q, HEAD_DIM), dtype)
    k_new = randn(rng, (batch, seqlen_new, heads_kv, HEAD_DIM), dtype)
    v_new = randn(rng, (batch, seqlen_new, heads_kv, HEAD_DIM), dtype)
    seqlens = np.array(CACHE_LENGTHS, np.int32)
    k_expected, v_expected = expected_caches(cache, CACHE_LENGTHS, k_new, v_new)
    options = dict(cache_seqlens=seqlens, block_table=cache.block_table, causal=True, return_softmax_lse=True)

    cpu_out, cpu_lse = flashattn.flash_attn_with_kvcache(q, cache.k.copy(), cache.v.copy(), k_new, v_new,
                                                         backend="cpu", **options)

    def cuda(a):
        return None if a is None else torch.from_numpy(np.ascontiguousarray(a)).cuda()

    k_cache, v_cache = cuda(cache.k), cuda(cache.v)
    out, lse = flashattn.flash_attn_with_kvcache(
        cuda(q), k_cache, v_cache, cuda(k_new), cuda(v_new), cache_seqlens=cuda(seqlens),
        block_table=cuda(cache.block_table), causal=True, return_softmax_lse=True, check_indices=check_indices)
    torch.cuda.synchronize()
    assert out.is_cuda and out.dtype == torch.float16 and lse.dtype == torch.float32
    assert_bytes_equal("k_cache", k_cache.cpu().numpy(), k_expected)
    assert_bytes_equal("v_cache", v_cache.cpu().numpy(), v_expected)
    oracle_out, oracle_lse, naive_out, naive_lse = reference(q, cache, k_expected, v_expected, final_lengths,
                                                             dtype, causal=True)
    out, lse = out.cpu().numpy(), lse.cpu().numpy()
    ref.assert_close("out", out, oracle_out, naive_out, dtype)
    ref.assert_close("lse", lse, oracle_lse, naive_lse, dtype)
    # Against the CPU backend's result on the same inputs: within the same rule, with the CPU as the oracle.
    ref.assert_close("out vs cpu", out, cpu_out, naive_out, dtype)
    assert np.array_equal(np.isneginf(lse), np.isneginf(cpu_lse))
