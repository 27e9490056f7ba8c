// forward_kvcache on the CPU backend against the float64 reference: contiguous and paged caches, appended
// tokens, GQA/MQA, masks, forced and heuristic split counts, and the validation rules (an error writes
// nothing, the caches included). Fresh seeded inputs each run; outputs poisoned before every call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "cpu/cpu_decode.h"
#include "flashattn/flashattn_c.h"
#include "flashattn/kvcache.h"

namespace fa = flashattn;
using fa::DType;
using fa::harness::HostTensor;
namespace harness = fa::harness;
namespace reference = fa::reference;

namespace {

// Cache slots past the longest sequence, and pages no sequence owns: neither may be read or written.
constexpr int64_t kSpareSlots = 5;
constexpr int64_t kSparePages = 3;
// Block-table entries past a sequence's last page hold this out-of-range value: they must be ignored.
constexpr int32_t kUnusedPage = -7;

struct KVSpec {
  std::vector<int64_t> cache_lens{0, 1, 255, 4097};  // batch = size
  int64_t seqlen_q = 1, seqlen_new = 0, heads_q = 4, heads_kv = 1, head_dim = 64;
  int64_t page_size = 0;  // 0: contiguous cache
  DType dtype = DType::kFloat32;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int num_splits = 0;
  int num_threads = 0;
  bool padded_q = false;  // q and out with padded rows (non-contiguous strides)

  int64_t batch() const { return int64_t(cache_lens.size()); }
  int64_t len_k(size_t b) const { return cache_lens[b] + seqlen_new; }
  std::string name() const {
    std::ostringstream s;
    s << fa::to_string(dtype) << " lens(";
    for (size_t i = 0; i < cache_lens.size(); ++i) s << (i ? "," : "") << cache_lens[i];
    s << ") sq" << seqlen_q << " new" << seqlen_new << " h" << heads_q << "/" << heads_kv << " d" << head_dim;
    s << (page_size ? " page" + std::to_string(page_size) : std::string(" contiguous"));
    if (causal) s << " causal";
    if (window_left >= 0 || window_right >= 0) s << " win" << window_left << "," << window_right;
    if (softcap > 0) s << " cap" << softcap;
    s << " splits" << num_splits << " threads" << num_threads;
    if (padded_q) s << " padded";
    return s.str();
  }
};

void PrintTo(const KVSpec& s, std::ostream* os) { *os << s.name(); }

struct KVCase {
  KVSpec spec;
  HostTensor q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, out, lse;
  int64_t capacity = 0, pages_per_seq = 0;

  KVCase(const KVSpec& s, std::mt19937_64& rng) : spec(s) {
    const int64_t b = s.batch();
    int64_t longest = 0;
    for (size_t i = 0; i < s.cache_lens.size(); ++i) longest = std::max(longest, s.len_k(i));
    const fa::testing::Layout ql = s.padded_q ? fa::testing::Layout::kPadded : fa::testing::Layout::kContiguous;
    q = fa::testing::make_tensor(s.dtype, {b, s.seqlen_q, s.heads_q, s.head_dim}, ql);
    out = fa::testing::make_tensor(s.dtype, {b, s.seqlen_q, s.heads_q, s.head_dim}, ql);
    lse = HostTensor::make(DType::kFloat32, {b, s.heads_q, s.seqlen_q});
    cache_seqlens = HostTensor::make(DType::kInt32, {b});
    for (int64_t i = 0; i < b; ++i) cache_seqlens.set(i, double(s.cache_lens[size_t(i)]));
    if (s.page_size == 0) {
      capacity = longest + kSpareSlots;
      k_cache = HostTensor::make(s.dtype, {b, capacity, s.heads_kv, s.head_dim});
    } else {
      pages_per_seq = (longest + kSpareSlots + s.page_size - 1) / s.page_size;
      capacity = pages_per_seq * s.page_size;
      // Only the pages the sequences use exist (plus a few spare), handed out in a shuffled order.
      std::vector<int32_t> pages;
      int64_t used = 0;
      for (size_t i = 0; i < s.cache_lens.size(); ++i) used += (s.len_k(i) + s.page_size - 1) / s.page_size;
      const int64_t num_pages = used + kSparePages;
      pages.resize(size_t(num_pages));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng);
      k_cache = HostTensor::make(s.dtype, {num_pages, s.page_size, s.heads_kv, s.head_dim});
      block_table = HostTensor::make(DType::kInt32, {b, pages_per_seq});
      size_t next = 0;
      for (int64_t i = 0; i < b; ++i) {
        const int64_t n = (s.len_k(size_t(i)) + s.page_size - 1) / s.page_size;
        for (int64_t j = 0; j < pages_per_seq; ++j)
          block_table.set(i * pages_per_seq + j, j < n ? double(pages[next++]) : double(kUnusedPage));
      }
    }
    v_cache = k_cache;
    // The whole cache is random, unused slots included: reading one would show up in the result.
    harness::fill_uniform(&q, rng);
    harness::fill_uniform(&k_cache, rng);
    harness::fill_uniform(&v_cache, rng);
    if (s.seqlen_new > 0) {
      k_new = HostTensor::make(s.dtype, {b, s.seqlen_new, s.heads_kv, s.head_dim});
      v_new = HostTensor::make(s.dtype, {b, s.seqlen_new, s.heads_kv, s.head_dim});
      harness::fill_uniform(&k_new, rng);
      harness::fill_uniform(&v_new, rng);
    }
    harness::poison(&out);
    harness::poison(&lse);
  }

  fa::KVCacheArgs args() const {
    fa::KVCacheArgs a;
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
    a.causal = spec.causal;
    a.window_left = spec.window_left;
    a.window_right = spec.window_right;
    a.softcap = spec.softcap;
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
  void expected_caches(HostTensor* k, HostTensor* v) const {
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
struct ReferenceInputs {
  HostTensor q, k, v, out, lse, cu_q, cu_k;
  fa::AttentionArgs args;

  ReferenceInputs(const KVCase& c, const HostTensor& k_cache, const HostTensor& v_cache) {
    const KVSpec& s = c.spec;
    int64_t total_k = 0;
    for (size_t b = 0; b < s.cache_lens.size(); ++b) total_k += s.len_k(b);
    const int64_t total_q = s.batch() * s.seqlen_q, d = s.head_dim;
    q = HostTensor::make(s.dtype, {total_q, s.heads_q, d});
    for (int64_t i = 0; i < q.numel(); ++i) q.set(i, c.q.get(i));
    k = HostTensor::make(s.dtype, {total_k, s.heads_kv, d});
    v = HostTensor::make(s.dtype, {total_k, s.heads_kv, d});
    cu_q = HostTensor::make(DType::kInt32, {s.batch() + 1});
    cu_k = HostTensor::make(DType::kInt32, {s.batch() + 1});
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
    out = HostTensor::make(s.dtype, {total_q, s.heads_q, d});
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.out = out.view;
    args.cu_seqlens_q = cu_q.view;
    args.cu_seqlens_k = cu_k.view;
    args.causal = s.causal;
    args.window_left = s.window_left;
    args.window_right = s.window_right;
    args.softcap = s.softcap;
  }
};

// The reference LSE is [heads_q, total_q] (varlen); the API's is [batch, heads_q, seqlen_q].
std::vector<double> lse_to_batched(const KVSpec& s, const std::vector<double>& varlen) {
  std::vector<double> r(varlen.size());
  const int64_t total_q = s.batch() * s.seqlen_q;
  for (int64_t b = 0; b < s.batch(); ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seqlen_q; ++i)
        r[size_t((b * s.heads_q + h) * s.seqlen_q + i)] = varlen[size_t(h * total_q + b * s.seqlen_q + i)];
  return r;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.storage.size() == b.storage.size() && std::memcmp(a.storage.data(), b.storage.data(), a.storage.size()) == 0;
}

struct Expected {
  HostTensor k_cache, v_cache;
  reference::Result exact, naive;
  std::vector<double> lse_exact, lse_naive;
};

Expected expected_for(const KVCase& c) {
  Expected e;
  c.expected_caches(&e.k_cache, &e.v_cache);
  ReferenceInputs r(c, e.k_cache, e.v_cache);
  EXPECT_TRUE(reference::forward(r.args, reference::Precision::kFloat64, &e.exact).ok());
  EXPECT_TRUE(reference::forward(r.args, reference::Precision::kNaive, &e.naive).ok());
  e.lse_exact = lse_to_batched(c.spec, e.exact.lse);
  e.lse_naive = lse_to_batched(c.spec, e.naive.lse);
  return e;
}

void expect_result(const KVCase& c, const Expected& e) {
  EXPECT_TRUE(same_bytes(c.k_cache, e.k_cache)) << "k_cache: differs from the old cache plus the appended tokens";
  EXPECT_TRUE(same_bytes(c.v_cache, e.v_cache)) << "v_cache: differs from the old cache plus the appended tokens";
  fa::testing::expect_matches_reference("out", c.out, e.exact.out, e.naive.out, c.spec.dtype);
  for (int64_t i = 0; i < c.lse.numel(); ++i)
    ASSERT_EQ(std::isinf(c.lse.get(i)), std::isinf(e.lse_exact[size_t(i)])) << "lse row " << i;
  fa::testing::expect_matches_reference("lse", c.lse, e.lse_exact, e.lse_naive, c.spec.dtype);
}

std::vector<KVSpec> cases() {
  const std::pair<int64_t, int64_t> ratios[] = {{4, 4}, {8, 2}, {16, 2}, {6, 1}};  // 1:1, 4:1, 8:1, MQA
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const int splits[] = {0, 3, fa::kMaxKVSplits, 1};
  std::vector<KVSpec> v;
  int n = 0;
  for (int64_t sq : {1, 2, 7, 16})
    for (int64_t page : {0, 1, 16, 64, 256}) {
      KVSpec s;
      s.seqlen_q = sq;
      s.page_size = page;
      s.heads_q = ratios[n % 4].first;
      s.heads_kv = ratios[n % 4].second;
      s.dtype = dtypes[n % 3];
      s.head_dim = n % 5 == 4 ? 128 : 64;
      s.seqlen_new = n % 2 ? sq : 0;  // with and without appended tokens
      switch (n % 4) {
        case 1: s.causal = true; break;
        case 2: s.window_left = 300; s.window_right = 0; break;
        case 3: s.softcap = 0.5f; break;
        default: break;
      }
      s.num_splits = splits[(n / 2) % 4];
      // The heuristic with many workers splits even this small batch.
      if (s.num_splits == 0 && n % 3 == 0) s.num_threads = 16;
      s.padded_q = n % 3 == 1;
      v.push_back(s);
      ++n;
    }
  return v;
}

class KVCacheCpu : public ::testing::TestWithParam<KVSpec> {};

TEST_P(KVCacheCpu, MatchesReferenceAndAppendsInPlace) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE(GetParam().name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  KVCase c(GetParam(), rng);
  const Expected e = expected_for(c);
  fa::RunInfo info;
  const fa::Status s = fa::forward_kvcache(c.args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(info.backend, fa::Backend::kCPU);
  EXPECT_NE(info.kernel.find("decode"), std::string::npos) << info.kernel;
  expect_result(c, e);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KVCacheCpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<KVSpec>& info) {
                           std::string n = std::to_string(info.index) + "_" + info.param.name();
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(KVCacheCpuSplits, OneThreeAndMaximumAgree) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  KVSpec s;
  s.cache_lens = {4097, 300, 1};
  s.seqlen_q = 2;
  s.seqlen_new = 2;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 16;
  s.dtype = DType::kBFloat16;
  s.causal = true;
  std::vector<HostTensor> outs;
  for (int splits : {1, 3, fa::kMaxKVSplits}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    std::mt19937_64 rng(seed);  // the same inputs for every split count
    s.num_splits = splits;
    KVCase c(s, rng);
    const Expected e = expected_for(c);
    ASSERT_TRUE(fa::forward_kvcache(c.args()).ok());
    expect_result(c, e);
    if (!outs.empty()) {
      // Split counts change only the rounding: the results agree within the tolerance of the rule.
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

TEST(KVCacheCpuLong, OneHundredThirtyOneThousandKeys) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  KVSpec s;
  s.cache_lens = {131072 - 1};
  s.seqlen_new = 1;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 32;
  s.page_size = 64;
  s.dtype = DType::kBFloat16;
  KVCase c(s, rng);
  const Expected e = expected_for(c);
  ASSERT_TRUE(fa::forward_kvcache(c.args()).ok());
  expect_result(c, e);
}

TEST(KVCacheCpuSplits, HeuristicFillsTheWorkersWithLongEnoughChunks) {
  fa::detail::KVCacheProblem p;
  p.batch = 1;
  p.heads_q = 8;
  p.heads_kv = 1;
  p.head_dim = 64;
  p.seqlen_q = 1;
  p.cache_seqlens = {4096};
  // One query tile: two tasks per worker, as long as chunks keep kMinSplitKeys keys.
  EXPECT_EQ(fa::detail::cpu::heuristic_kv_splits(p, 2), 4);
  EXPECT_EQ(fa::detail::cpu::heuristic_kv_splits(p, 64), 4096 / fa::detail::cpu::kMinSplitKeys);
  p.cache_seqlens = {100};
  EXPECT_EQ(fa::detail::cpu::heuristic_kv_splits(p, 64), 1);
  p.cache_seqlens = {1 << 20};
  EXPECT_EQ(fa::detail::cpu::heuristic_kv_splits(p, 1024), fa::kMaxKVSplits);
}

TEST(KVCacheCpuEdge, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  std::mt19937_64 rng(21);
  KVSpec s;
  s.cache_lens = {0, 3};
  s.seqlen_q = 5;
  s.causal = true;  // sequence 1: rows 0 and 1 sit left of the first key
  s.heads_q = 2;
  s.head_dim = 16;
  s.num_splits = 2;
  KVCase c(s, rng);
  ASSERT_TRUE(fa::forward_kvcache(c.args()).ok());
  auto out_at = [&](int64_t b, int64_t i, int64_t h, int64_t x) {
    return c.out.get(((b * 5 + i) * 2 + h) * 16 + x);
  };
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      // Sequence 0 has no key at all; in sequence 1 (3 keys, 5 rows) rows 0 and 1 see none.
      const bool b1_sees_none = i < 2;
      EXPECT_EQ(c.lse.get((0 * 2 + h) * 5 + i), -INFINITY);
      EXPECT_EQ(std::isinf(c.lse.get((1 * 2 + h) * 5 + i)), b1_sees_none);
      for (int64_t x = 0; x < 16; ++x) {
        EXPECT_EQ(out_at(0, i, h, x), 0.0);
        if (b1_sees_none) EXPECT_EQ(out_at(1, i, h, x), 0.0);
        else EXPECT_TRUE(std::isfinite(out_at(1, i, h, x)));
      }
    }
}

// ---- validation: the message names the argument and the rule; nothing is written ----------------------

struct Broken {
  const char* name;
  fa::StatusCode code;
  const char* message_part;
  void (*breaks)(KVCase&, fa::KVCacheArgs&);
};

void run_broken(const Broken& r) {
  SCOPED_TRACE(r.name);
  std::mt19937_64 rng(7);
  KVSpec s;
  s.cache_lens = {5, 17, 0};
  s.seqlen_q = 2;
  s.seqlen_new = 2;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 16;
  s.page_size = 4;
  KVCase c(s, rng);
  fa::KVCacheArgs a = c.args();
  r.breaks(c, a);
  const HostTensor k_before = c.k_cache, v_before = c.v_cache;
  const fa::Status st = fa::forward_kvcache(a);
  EXPECT_EQ(st.code(), r.code) << st.to_string();
  EXPECT_NE(st.message().find(r.message_part), std::string::npos)
      << "message \"" << st.message() << "\" lacks \"" << r.message_part << "\"";
  EXPECT_EQ(harness::count_nan(c.out), c.out.numel()) << "out was written despite the error";
  EXPECT_EQ(harness::count_nan(c.lse), c.lse.numel()) << "lse was written despite the error";
  EXPECT_TRUE(same_bytes(c.k_cache, k_before)) << "k_cache was written despite the error";
  EXPECT_TRUE(same_bytes(c.v_cache, v_before)) << "v_cache was written despite the error";
}

TEST(KVCacheValidation, EachRuleNamesTheArgumentAndWritesNothing) {
  using C = fa::StatusCode;
  const Broken rules[] = {
      {"page index past the pages", C::kInvalidArgument, "block_table[1][2]: page index",
       [](KVCase& c, fa::KVCacheArgs&) { c.block_table.set(1 * c.pages_per_seq + 2, double(c.k_cache.view.shape[0])); }},
      {"negative page index", C::kInvalidArgument, "block_table[0][0]: page index -1",
       [](KVCase& c, fa::KVCacheArgs&) { c.block_table.set(0, -1); }},
      {"negative cache length", C::kInvalidArgument, "cache_seqlens[2]: must be >= 0",
       [](KVCase& c, fa::KVCacheArgs&) { c.cache_seqlens.set(2, -1); }},
      {"length past capacity", C::kInvalidArgument, "cache_seqlens[0]: ",
       [](KVCase& c, fa::KVCacheArgs&) { c.cache_seqlens.set(0, double(c.capacity - 1)); }},
      {"k_new without v_new", C::kInvalidArgument, "v_new: is absent but k_new is present",
       [](KVCase&, fa::KVCacheArgs& a) { a.v_new = fa::TensorView(); }},
      {"v_new without k_new", C::kInvalidArgument, "k_new: is absent but v_new is present",
       [](KVCase&, fa::KVCacheArgs& a) { a.k_new = fa::TensorView(); }},
      {"cache dtype", C::kInvalidArgument, "v_cache: dtype fp16 must equal the dtype of q",
       [](KVCase&, fa::KVCacheArgs& a) { a.v_cache.dtype = DType::kFloat16; }},
      {"k_new dtype", C::kInvalidArgument, "k_new: dtype bf16 must equal",
       [](KVCase&, fa::KVCacheArgs& a) { a.k_new.dtype = DType::kBFloat16; }},
      {"cache_seqlens dtype", C::kInvalidArgument, "cache_seqlens: dtype must be int32",
       [](KVCase&, fa::KVCacheArgs& a) { a.cache_seqlens.dtype = DType::kFloat32; }},
      {"block_table dtype", C::kInvalidArgument, "block_table: dtype must be int32",
       [](KVCase&, fa::KVCacheArgs& a) { a.block_table.dtype = DType::kFloat32; }},
      {"lse dtype", C::kInvalidArgument, "lse: dtype must be float32",
       [](KVCase&, fa::KVCacheArgs& a) { a.lse.dtype = DType::kFloat16; }},
      {"missing cache_seqlens", C::kInvalidArgument, "cache_seqlens: is required",
       [](KVCase&, fa::KVCacheArgs& a) { a.cache_seqlens = fa::TensorView(); }},
      {"block_table rows", C::kInvalidArgument, "block_table: has 2 rows",
       [](KVCase&, fa::KVCacheArgs& a) { a.block_table.shape[0] = 2; }},
      {"k_new shape", C::kInvalidArgument, "k_new: shape",
       [](KVCase&, fa::KVCacheArgs& a) { a.k_new.shape[2] = 1; }},
      {"contiguous cache batch", C::kInvalidArgument, "k_cache: batch",
       [](KVCase&, fa::KVCacheArgs& a) { a.block_table = fa::TensorView(); }},
      {"gqa ratio", C::kInvalidArgument, "must be a multiple of heads_kv",
       [](KVCase&, fa::KVCacheArgs& a) { a.q.shape[2] = a.out.shape[2] = 3; }},
      {"cache last dim strided", C::kInvalidArgument, "k_cache: the last dimension must be contiguous",
       [](KVCase&, fa::KVCacheArgs& a) { a.k_cache.stride[3] = 2; }},
      {"num_splits", C::kInvalidArgument, "num_splits: must be in [0, 128]",
       [](KVCase&, fa::KVCacheArgs& a) { a.num_splits = fa::kMaxKVSplits + 1; }},
      {"head_dim past the cpu limit", C::kNotSupported, "head_dim 512",
       [](KVCase&, fa::KVCacheArgs& a) {
         // Shapes consistent with a larger head dim, reinterpreting the same bytes (never read: refused first).
         for (fa::TensorView* t : {&a.q, &a.out, &a.k_cache, &a.v_cache, &a.k_new, &a.v_new}) {
           t->shape[3] = 512;
           t->shape[2] = 1;
           t->stride[3] = 1;
         }
         a.lse.shape[1] = 1;
         a.lse.stride[0] = a.lse.shape[2];
       }},
  };
  for (const Broken& r : rules) run_broken(r);
}

TEST(KVCacheValidation, CApiMirrorsTheCall) {
  std::mt19937_64 rng(harness::pick_seed());
  KVSpec s;
  s.cache_lens = {9, 0};
  s.seqlen_q = 1;
  s.seqlen_new = 1;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 16;
  s.page_size = 4;
  KVCase c(s, rng);
  const Expected e = expected_for(c);
  auto to_c = [](const fa::TensorView& v) {
    flashattn_tensor t;
    std::memset(&t, 0, sizeof t);
    t.data = v.data;
    t.dtype = int32_t(v.dtype);
    t.device = int32_t(v.device);
    t.ndim = v.ndim;
    for (int i = 0; i < 4; ++i) {
      t.shape[i] = v.shape[i];
      t.stride[i] = v.stride[i];
    }
    return t;
  };
  const fa::KVCacheArgs a = c.args();
  flashattn_kvcache_args ca;
  flashattn_kvcache_args_init(&ca);
  ca.q = to_c(a.q);
  ca.k_cache = to_c(a.k_cache);
  ca.v_cache = to_c(a.v_cache);
  ca.cache_seqlens = to_c(a.cache_seqlens);
  ca.block_table = to_c(a.block_table);
  ca.k_new = to_c(a.k_new);
  ca.out = to_c(a.out);
  ca.lse = to_c(a.lse);
  EXPECT_EQ(flashattn_forward_kvcache(&ca), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("v_new"), std::string::npos) << flashattn_last_error();
  ca.v_new = to_c(a.v_new);
  ASSERT_EQ(flashattn_forward_kvcache(&ca), FLASHATTN_OK) << flashattn_last_error();
  expect_result(c, e);
}

}  // namespace
