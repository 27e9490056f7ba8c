// One KV-cache (decode) test case on the host: a shape, contiguous or paged caches filled at random
// (unused slots included), appended tokens, poisoned outputs, the forward_kvcache arguments wired to them,
// the caches as they must look after the call, and the comparison with the float64 reference. Shared by
// the CPU and GPU suites (the GPU suite mirrors a HostKVCase on the device: tests/gpu/test_decode.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_case.h"
#include "flashattn/kvcache.h"
#include "reference/harness.h"
#include "reference/reference.h"

namespace flashattn::testing {

// Cache slots past the longest sequence, and pages no sequence owns: neither may be read or written.
constexpr int64_t kSpareSlots = 5;
constexpr int64_t kSparePages = 3;
// Block-table entries past a sequence's last page hold this out-of-range value: they must be ignored.
constexpr int32_t kUnusedPage = -7;

struct KVCaseSpec {
  std::vector<int64_t> cache_lens{0, 1, 255, 4097};  // batch = size
  int64_t seqlen_q = 1, seqlen_new = 0, heads_q = 4, heads_kv = 1, head_dim = 64;
  int64_t page_size = 0;  // 0: contiguous cache
  DType dtype = DType::kFloat32;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int num_splits = 0;
  int num_threads = 0;    // cpu backend: worker threads (0 = all); named only when set
  bool padded_q = false;  // q and out with padded rows (non-contiguous strides)

  int64_t batch() const { return int64_t(cache_lens.size()); }
  int64_t len_k(size_t b) const { return cache_lens[b] + seqlen_new; }
  std::string name() const {
    std::ostringstream s;
    s << to_string(dtype) << " lens(";
    for (size_t i = 0; i < cache_lens.size(); ++i) s << (i ? "," : "") << cache_lens[i];
    s << ") sq" << seqlen_q << " new" << seqlen_new << " h" << heads_q << "/" << heads_kv << " d" << head_dim;
    s << (page_size ? " page" + std::to_string(page_size) : std::string(" contiguous"));
    if (causal) s << " causal";
    if (window_left >= 0 || window_right >= 0) s << " win" << window_left << "," << window_right;
    if (softcap > 0) s << " cap" << softcap;
    s << " splits" << num_splits;
    if (num_threads) s << " threads" << num_threads;
    if (padded_q) s << " padded";
    return s.str();
  }
};

// gtest prints a case parameter by its name instead of its bytes.
inline void PrintTo(const KVCaseSpec& s, std::ostream* os) { *os << s.name(); }

// The grid both suites walk: every seqlen_q (1, 2, 7, 16) with every cache layout (contiguous, pages of 1,
// 16, 64 and 256 slots), cycling through the GQA ratios (1:1, 4:1, 8:1, MQA), the masks (none, causal,
// sliding window, softcap) and the split counts (heuristic, 3, the maximum, 1). `vary(spec, n)` then sets
// what each suite chooses for the n-th case (dtype, head_dim, appended tokens, ...).
template <typename Vary>
std::vector<KVCaseSpec> kv_case_grid(const KVCaseSpec& base, Vary vary) {
  const std::pair<int64_t, int64_t> ratios[] = {{4, 4}, {8, 2}, {16, 2}, {6, 1}};  // 1:1, 4:1, 8:1, MQA
  const int splits[] = {0, 3, kMaxKVSplits, 1};
  std::vector<KVCaseSpec> v;
  int n = 0;
  for (int64_t sq : {1, 2, 7, 16})
    for (int64_t page : {0, 1, 16, 64, 256}) {
      KVCaseSpec s = base;
      s.seqlen_q = sq;
      s.page_size = page;
      s.heads_q = ratios[n % 4].first;
      s.heads_kv = ratios[n % 4].second;
      switch (n % 4) {
        case 1: s.causal = true; break;
        case 2: s.window_left = 300; s.window_right = 0; break;
        case 3: s.softcap = 0.5f; break;
        default: break;
      }
      s.num_splits = splits[(n / 2) % 4];
      vary(s, n);
      v.push_back(s);
      ++n;
    }
  return v;
}

// Host tensors of one call: the whole cache random (unused slots included, so a stray read shows up in the
// result), the pages of a paged cache handed out in a shuffled order, out and lse poisoned.
struct HostKVCase {
  KVCaseSpec spec;
  harness::HostTensor q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, out, lse;
  int64_t capacity = 0, pages_per_seq = 0;

  HostKVCase(const KVCaseSpec& s, std::mt19937_64& rng) : spec(s) {
    const int64_t b = s.batch();
    int64_t longest = 0;
    for (size_t i = 0; i < s.cache_lens.size(); ++i) longest = std::max(longest, s.len_k(i));
    const Layout ql = s.padded_q ? Layout::kPadded : Layout::kContiguous;
    q = make_tensor(s.dtype, {b, s.seqlen_q, s.heads_q, s.head_dim}, ql);
    out = make_tensor(s.dtype, {b, s.seqlen_q, s.heads_q, s.head_dim}, ql);
    lse = harness::HostTensor::make(DType::kFloat32, {b, s.heads_q, s.seqlen_q});
    cache_seqlens = harness::HostTensor::make(DType::kInt32, {b});
    for (int64_t i = 0; i < b; ++i) cache_seqlens.set(i, double(s.cache_lens[size_t(i)]));
    if (s.page_size == 0) {
      capacity = longest + kSpareSlots;
      k_cache = harness::HostTensor::make(s.dtype, {b, capacity, s.heads_kv, s.head_dim});
    } else {
      pages_per_seq = (longest + kSpareSlots + s.page_size - 1) / s.page_size;
      capacity = pages_per_seq * s.page_size;
      // Only the pages the sequences use exist (plus a few spare).
      int64_t used = 0;
      for (size_t i = 0; i < s.cache_lens.size(); ++i) used += (s.len_k(i) + s.page_size - 1) / s.page_size;
      std::vector<int32_t> pages(size_t(used + kSparePages));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng);
      k_cache = harness::HostTensor::make(s.dtype, {int64_t(pages.size()), s.page_size, s.heads_kv, s.head_dim});
      block_table = harness::HostTensor::make(DType::kInt32, {b, pages_per_seq});
      size_t next = 0;
      for (int64_t i = 0; i < b; ++i) {
        const int64_t n = (s.len_k(size_t(i)) + s.page_size - 1) / s.page_size;
        for (int64_t j = 0; j < pages_per_seq; ++j)
          block_table.set(i * pages_per_seq + j, j < n ? double(pages[next++]) : double(kUnusedPage));
      }
    }
    v_cache = k_cache;
    harness::fill_uniform(&q, rng);
    harness::fill_uniform(&k_cache, rng);
    harness::fill_uniform(&v_cache, rng);
    if (s.seqlen_new > 0) {
      k_new = harness::HostTensor::make(s.dtype, {b, s.seqlen_new, s.heads_kv, s.head_dim});
      v_new = harness::HostTensor::make(s.dtype, {b, s.seqlen_new, s.heads_kv, s.head_dim});
      harness::fill_uniform(&k_new, rng);
      harness::fill_uniform(&v_new, rng);
    }
    harness::poison(&out);
    harness::poison(&lse);
  }

  // Arguments on the host tensors (the CPU backend; the GPU suite swaps in its device mirrors), backend left
  // to the caller.
  KVCacheArgs args() const {
    KVCacheArgs a;
    a.q = q.view;
    a.k_cache = k_cache.view;
    a.v_cache = v_cache.view;
    a.cache_seqlens = cache_seqlens.view;
    if (spec.page_size) a.block_table = block_table.view;
    if (spec.seqlen_new) {
      a.k_new = k_new.view;
      a.v_new = v_new.view;
    }
    a.out = out.view;
    a.lse = lse.view;
    set_mask_options(spec, &a);
    a.num_splits = spec.num_splits;
    a.num_threads = spec.num_threads;
    return a;
  }

  // Linear element index of (token t of sequence b, head h, dim 0) in a cache, by the documented addressing.
  int64_t cache_index(int64_t b, int64_t t, int64_t h) const {
    const int64_t hd = spec.heads_kv * spec.head_dim;
    if (spec.page_size == 0) return (b * capacity + t) * hd + h * spec.head_dim;
    const int64_t page = int64_t(block_table.get(b * pages_per_seq + t / spec.page_size));
    return (page * spec.page_size + t % spec.page_size) * hd + h * spec.head_dim;
  }

  // The caches as they must look after the call: the new tokens in their slots, every other byte as before.
  void expected_caches(harness::HostTensor* k, harness::HostTensor* v) const {
    *k = k_cache;
    *v = v_cache;
    const int64_t d = spec.head_dim;
    for (int64_t b = 0; b < spec.batch(); ++b)
      for (int64_t t = 0; t < spec.seqlen_new; ++t)
        for (int64_t h = 0; h < spec.heads_kv; ++h) {
          const int64_t dst = cache_index(b, spec.cache_lens[size_t(b)] + t, h);
          const int64_t src = ((b * spec.seqlen_new + t) * spec.heads_kv + h) * d;
          for (int64_t x = 0; x < d; ++x) {
            k->set(dst + x, k_new.get(src + x));
            v->set(dst + x, v_new.get(src + x));
          }
        }
  }
};

// The reference problem: varlen, one sequence per batch entry, keys gathered from the expected caches.
struct KVReferenceInputs {
  harness::HostTensor q, k, v, out, cu_q, cu_k;
  AttentionArgs args;

  KVReferenceInputs(const HostKVCase& c, const harness::HostTensor& k_cache, const harness::HostTensor& v_cache) {
    const KVCaseSpec& s = c.spec;
    int64_t total_k = 0;
    for (size_t b = 0; b < s.cache_lens.size(); ++b) total_k += s.len_k(b);
    const int64_t total_q = s.batch() * s.seqlen_q, d = s.head_dim;
    q = harness::HostTensor::make(s.dtype, {total_q, s.heads_q, d});
    for (int64_t i = 0; i < q.numel(); ++i) q.set(i, c.q.get(i));
    k = harness::HostTensor::make(s.dtype, {total_k, s.heads_kv, d});
    v = harness::HostTensor::make(s.dtype, {total_k, s.heads_kv, d});
    cu_q = harness::HostTensor::make(DType::kInt32, {s.batch() + 1});
    cu_k = harness::HostTensor::make(DType::kInt32, {s.batch() + 1});
    cu_q.set(0, 0);
    cu_k.set(0, 0);
    int64_t row = 0;
    for (int64_t b = 0; b < s.batch(); ++b) {
      for (int64_t t = 0; t < s.len_k(size_t(b)); ++t, ++row)
        for (int64_t h = 0; h < s.heads_kv; ++h) {
          const int64_t src = c.cache_index(b, t, h), dst = (row * s.heads_kv + h) * d;
          for (int64_t x = 0; x < d; ++x) {
            k.set(dst + x, k_cache.get(src + x));
            v.set(dst + x, v_cache.get(src + x));
          }
        }
      cu_q.set(b + 1, double((b + 1) * s.seqlen_q));
      cu_k.set(b + 1, double(row));
    }
    out = harness::HostTensor::make(s.dtype, {total_q, s.heads_q, d});
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.out = out.view;
    args.cu_seqlens_q = cu_q.view;
    args.cu_seqlens_k = cu_k.view;
    set_mask_options(s, &args);
  }
};

// The reference LSE is [heads_q, total_q] (varlen); the API's is [batch, heads_q, seqlen_q].
inline std::vector<double> lse_to_batched(const KVCaseSpec& s, const std::vector<double>& varlen) {
  std::vector<double> r(varlen.size());
  const int64_t total_q = s.batch() * s.seqlen_q;
  for (int64_t b = 0; b < s.batch(); ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seqlen_q; ++i)
        r[size_t((b * s.heads_q + h) * s.seqlen_q + i)] = varlen[size_t(h * total_q + b * s.seqlen_q + i)];
  return r;
}

inline bool same_bytes(const harness::HostTensor& a, const harness::HostTensor& b) {
  return a.storage.size() == b.storage.size() && std::memcmp(a.storage.data(), b.storage.data(), a.storage.size()) == 0;
}

// What a call on a HostKVCase must produce: the caches after the append, and the reference results.
struct KVExpected {
  harness::HostTensor k_cache, v_cache;
  reference::Result exact, naive;
  std::vector<double> lse_exact, lse_naive;
};

// Computed before the call: the caches it appends to are the inputs of the reference.
inline KVExpected expected_for(const HostKVCase& c) {
  KVExpected e;
  c.expected_caches(&e.k_cache, &e.v_cache);
  KVReferenceInputs r(c, e.k_cache, e.v_cache);
  EXPECT_TRUE(reference::forward(r.args, reference::Precision::kFloat64, &e.exact).ok());
  EXPECT_TRUE(reference::forward(r.args, reference::Precision::kNaive, &e.naive).ok());
  e.lse_exact = lse_to_batched(c.spec, e.exact.lse);
  e.lse_naive = lse_to_batched(c.spec, e.naive.lse);
  return e;
}

// The results of a call now in `c` (out, lse and both caches) against `e`.
inline void expect_result(const HostKVCase& c, const KVExpected& e) {
  EXPECT_TRUE(same_bytes(c.k_cache, e.k_cache)) << "k_cache: differs from the old cache plus the appended tokens";
  EXPECT_TRUE(same_bytes(c.v_cache, e.v_cache)) << "v_cache: differs from the old cache plus the appended tokens";
  expect_matches_reference("out", c.out, e.exact.out, e.naive.out, c.spec.dtype);
  for (int64_t i = 0; i < c.lse.numel(); ++i)
    ASSERT_EQ(std::isinf(c.lse.get(i)), std::isinf(e.lse_exact[size_t(i)])) << "lse row " << i;
  expect_matches_reference("lse", c.lse, e.lse_exact, e.lse_naive, c.spec.dtype);
}

// The case of the split-count tests: long and short sequences with appended tokens, GQA, a paged cache and
// a causal mask, on `s`'s dtype and head_dim.
inline KVCaseSpec split_counts_case(KVCaseSpec s) {
  s.cache_lens = {4097, 300, 1};
  s.seqlen_q = 2;
  s.seqlen_new = 2;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 16;
  s.causal = true;
  return s;
}

// Runs `s` with 1, 3 and the maximum number of KV splits on the same inputs (drawn from `seed`): each call
// must match the reference and append in place, and since split counts change only the rounding, each
// output must agree with the one-split output within the tolerance of the rule. `run(&c)` makes the call
// and leaves its results in `c`; a fatal failure in it ends the test.
template <typename Run>
void expect_split_counts_agree(KVCaseSpec s, uint64_t seed, Run run) {
  std::vector<harness::HostTensor> outs;
  for (int splits : {1, 3, kMaxKVSplits}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    std::mt19937_64 rng(seed);  // the same inputs for every split count
    s.num_splits = splits;
    HostKVCase c(s, rng);
    const KVExpected e = expected_for(c);
    ASSERT_NO_FATAL_FAILURE(run(&c));
    expect_result(c, e);
    if (!outs.empty()) {
      std::vector<double> first(size_t(c.out.numel()));
      for (int64_t i = 0; i < c.out.numel(); ++i) first[size_t(i)] = outs.front().get(i);
      const harness::Verdict v = harness::judge(harness::max_abs_diff(c.out, first),
                                                harness::max_abs_diff(e.naive.out, e.exact.out), s.dtype,
                                                harness::max_abs(e.exact.out));
      EXPECT_TRUE(v.pass) << "against num_splits 1: " << v.describe();
    }
    outs.push_back(c.out);
  }
}

}  // namespace flashattn::testing
