// forward_kvcache on the CUDA backend (the split-KV decode kernels) against the float64 reference:
// contiguous and paged caches (page sizes 1..256, pages shuffled), appended tokens landing in the right slots
// with every other cache byte unchanged, GQA/MQA, causal / window / softcap, forced and heuristic split
// counts, a 131072-key sequence, repeated calls on one stream (the merge tickets must return to zero), and
// refusals that write nothing. Fresh seeded inputs every run; out and lse poisoned before every call.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "device_tensor.h"
#include "flashattn/kvcache.h"

namespace fa = flashattn;
using fa::DType;
using fa::harness::HostTensor;
using fa::testing::DeviceTensor;
namespace harness = fa::harness;
namespace reference = fa::reference;

namespace {

constexpr int64_t kSpareSlots = 5;   // contiguous slots past the longest sequence: never read or written
constexpr int64_t kSparePages = 3;   // pages no sequence owns: never read or written
constexpr int32_t kUnusedPage = -7;  // block-table entries past a sequence's last page: never read
constexpr char kKernelPrefix[] = "fa2_decode_splitkv";

struct DecodeSpec {
  std::vector<int64_t> cache_lens{0, 1, 255, 4097};  // batch = size
  int64_t seqlen_q = 1, seqlen_new = 0, heads_q = 4, heads_kv = 1, head_dim = 128;
  int64_t page_size = 0;  // 0: contiguous cache
  DType dtype = DType::kBFloat16;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int num_splits = 0;

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
    s << " splits" << num_splits;
    return s.str();
  }
};

void PrintTo(const DecodeSpec& s, std::ostream* os) { *os << s.name(); }

// Host tensors of one call: the whole cache random (unused slots included, so a stray read shows up in the
// result), pages handed out in a shuffled order, out and lse poisoned.
struct HostKVCase {
  DecodeSpec spec;
  HostTensor q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, out, lse;
  int64_t capacity = 0, pages_per_seq = 0;

  HostKVCase(const DecodeSpec& s, std::mt19937_64& rng) : spec(s) {
    const int64_t b = s.batch();
    int64_t longest = 0;
    for (size_t i = 0; i < s.cache_lens.size(); ++i) longest = std::max(longest, s.len_k(i));
    q = HostTensor::make(s.dtype, {b, s.seqlen_q, s.heads_q, s.head_dim});
    out = HostTensor::make(s.dtype, {b, s.seqlen_q, s.heads_q, s.head_dim});
    lse = HostTensor::make(DType::kFloat32, {b, s.heads_q, s.seqlen_q});
    cache_seqlens = HostTensor::make(DType::kInt32, {b});
    for (int64_t i = 0; i < b; ++i) cache_seqlens.set(i, double(s.cache_lens[size_t(i)]));
    if (s.page_size == 0) {
      capacity = longest + kSpareSlots;
      k_cache = HostTensor::make(s.dtype, {b, capacity, s.heads_kv, s.head_dim});
    } else {
      pages_per_seq = (longest + kSpareSlots + s.page_size - 1) / s.page_size;
      capacity = pages_per_seq * s.page_size;
      int64_t used = 0;
      for (size_t i = 0; i < s.cache_lens.size(); ++i) used += (s.len_k(i) + s.page_size - 1) / s.page_size;
      std::vector<int32_t> pages(size_t(used + kSparePages));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng);
      k_cache = HostTensor::make(s.dtype, {int64_t(pages.size()), s.page_size, s.heads_kv, s.head_dim});
      block_table = HostTensor::make(DType::kInt32, {b, pages_per_seq});
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
      k_new = HostTensor::make(s.dtype, {b, s.seqlen_new, s.heads_kv, s.head_dim});
      v_new = HostTensor::make(s.dtype, {b, s.seqlen_new, s.heads_kv, s.head_dim});
      harness::fill_uniform(&k_new, rng);
      harness::fill_uniform(&v_new, rng);
    }
    harness::poison(&out);
    harness::poison(&lse);
  }

  // Linear element index of (token t of sequence b, head h, dim 0), by the documented addressing.
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

// Device mirrors of a HostKVCase, byte for byte, and the call's arguments on them.
struct DeviceKVCase {
  DeviceTensor q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, out, lse;
  const HostKVCase& host;

  explicit DeviceKVCase(const HostKVCase& h) : host(h) {
    for (auto [dst, src] : {std::pair{&q, &h.q}, {&k_cache, &h.k_cache}, {&v_cache, &h.v_cache},
                            {&cache_seqlens, &h.cache_seqlens}, {&out, &h.out}, {&lse, &h.lse}})
      dst->upload(*src);
    if (h.spec.page_size) block_table.upload(h.block_table);
    if (h.spec.seqlen_new) {
      k_new.upload(h.k_new);
      v_new.upload(h.v_new);
    }
  }

  fa::KVCacheArgs args() const {
    fa::KVCacheArgs a;
    a.q = q.view();
    a.k_cache = k_cache.view();
    a.v_cache = v_cache.view();
    a.cache_seqlens = cache_seqlens.view();
    if (host.spec.page_size) a.block_table = block_table.view();
    if (host.spec.seqlen_new) {
      a.k_new = k_new.view();
      a.v_new = v_new.view();
    }
    a.out = out.view();
    a.lse = lse.view();
    a.causal = host.spec.causal;
    a.window_left = host.spec.window_left;
    a.window_right = host.spec.window_right;
    a.softcap = host.spec.softcap;
    a.num_splits = host.spec.num_splits;
    a.backend = fa::Backend::kCUDA;
    return a;
  }

  // Results back into `h` (out, lse and both caches).
  void download(HostKVCase* h) const {
    out.download(&h->out);
    lse.download(&h->lse);
    k_cache.download(&h->k_cache);
    v_cache.download(&h->v_cache);
  }
};

// The reference problem: varlen, one sequence per batch entry, keys gathered from the expected caches.
struct Expected {
  HostTensor k_cache, v_cache;
  reference::Result exact, naive;
  std::vector<double> lse_exact, lse_naive;
};

std::vector<double> lse_to_batched(const DecodeSpec& s, const std::vector<double>& varlen) {
  std::vector<double> r(varlen.size());
  const int64_t total_q = s.batch() * s.seqlen_q;
  for (int64_t b = 0; b < s.batch(); ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seqlen_q; ++i)
        r[size_t((b * s.heads_q + h) * s.seqlen_q + i)] = varlen[size_t(h * total_q + b * s.seqlen_q + i)];
  return r;
}

Expected expected_for(const HostKVCase& c) {
  Expected e;
  c.expected_caches(&e.k_cache, &e.v_cache);
  const DecodeSpec& s = c.spec;
  int64_t total_k = 0;
  for (size_t b = 0; b < s.cache_lens.size(); ++b) total_k += s.len_k(b);
  const int64_t total_q = s.batch() * s.seqlen_q, d = s.head_dim;
  HostTensor q = HostTensor::make(s.dtype, {total_q, s.heads_q, d});
  for (int64_t i = 0; i < q.numel(); ++i) q.set(i, c.q.get(i));
  HostTensor k = HostTensor::make(s.dtype, {total_k, s.heads_kv, d});
  HostTensor v = HostTensor::make(s.dtype, {total_k, s.heads_kv, d});
  HostTensor cu_q = HostTensor::make(DType::kInt32, {s.batch() + 1});
  HostTensor cu_k = HostTensor::make(DType::kInt32, {s.batch() + 1});
  HostTensor out = HostTensor::make(s.dtype, {total_q, s.heads_q, d});
  cu_q.set(0, 0);
  cu_k.set(0, 0);
  int64_t row = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    for (int64_t t = 0; t < s.len_k(size_t(b)); ++t, ++row)
      for (int64_t h = 0; h < s.heads_kv; ++h) {
        const int64_t src = c.cache_index(b, t, h), dst = (row * s.heads_kv + h) * d;
        for (int64_t x = 0; x < d; ++x) {
          k.set(dst + x, e.k_cache.get(src + x));
          v.set(dst + x, e.v_cache.get(src + x));
        }
      }
    cu_q.set(b + 1, double((b + 1) * s.seqlen_q));
    cu_k.set(b + 1, double(row));
  }
  fa::AttentionArgs a;
  a.q = q.view;
  a.k = k.view;
  a.v = v.view;
  a.out = out.view;
  a.cu_seqlens_q = cu_q.view;
  a.cu_seqlens_k = cu_k.view;
  a.causal = s.causal;
  a.window_left = s.window_left;
  a.window_right = s.window_right;
  a.softcap = s.softcap;
  EXPECT_TRUE(reference::forward(a, reference::Precision::kFloat64, &e.exact).ok());
  EXPECT_TRUE(reference::forward(a, reference::Precision::kNaive, &e.naive).ok());
  e.lse_exact = lse_to_batched(s, e.exact.lse);
  e.lse_naive = lse_to_batched(s, e.naive.lse);
  return e;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.storage.size() == b.storage.size() && std::memcmp(a.storage.data(), b.storage.data(), a.storage.size()) == 0;
}

void expect_result(const HostKVCase& c, const Expected& e) {
  EXPECT_TRUE(same_bytes(c.k_cache, e.k_cache)) << "k_cache: differs from the old cache plus the appended tokens";
  EXPECT_TRUE(same_bytes(c.v_cache, e.v_cache)) << "v_cache: differs from the old cache plus the appended tokens";
  fa::testing::expect_matches_reference("out", c.out, e.exact.out, e.naive.out, c.spec.dtype);
  for (int64_t i = 0; i < c.lse.numel(); ++i)
    ASSERT_EQ(std::isinf(c.lse.get(i)), std::isinf(e.lse_exact[size_t(i)])) << "lse row " << i;
  fa::testing::expect_matches_reference("lse", c.lse, e.lse_exact, e.lse_naive, c.spec.dtype);
}

// Runs `c` on the GPU (on `stream`), downloads the results into `c`. Call under ASSERT_NO_FATAL_FAILURE.
void run_on_gpu(HostKVCase* c, cudaStream_t stream = nullptr) {
  DeviceKVCase d(*c);
  fa::KVCacheArgs a = d.args();
  a.stream = stream;
  fa::RunInfo info;
  const fa::Status s = fa::forward_kvcache(a, &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(info.backend, fa::Backend::kCUDA);
  EXPECT_EQ(info.kernel.rfind(kKernelPrefix, 0), 0u) << info.kernel;
  d.download(c);
}

uint64_t announce_seed(const std::string& label) {
  const uint64_t seed = harness::pick_seed();
  std::cout << "[" << label << "] seed " << seed << " (FLASHATTN_SEED to repeat)\n";
  return seed;
}

std::vector<DecodeSpec> cases() {
  const std::pair<int64_t, int64_t> ratios[] = {{4, 4}, {8, 2}, {16, 2}, {6, 1}};  // 1:1, 4:1, 8:1, MQA
  const DType dtypes[] = {DType::kBFloat16, DType::kFloat16};
  const int splits[] = {0, 3, fa::kMaxKVSplits, 1};
  // 64, 128, 256, and two that pad up to the next kernel.
  const int64_t head_dims[] = {128, 64, 256, 40, 96};
  std::vector<DecodeSpec> v;
  int n = 0;
  for (int64_t sq : {1, 2, 7, 16})
    for (int64_t page : {0, 1, 16, 64, 256}) {
      DecodeSpec s;
      s.seqlen_q = sq;
      s.page_size = page;
      s.heads_q = ratios[n % 4].first;
      s.heads_kv = ratios[n % 4].second;
      s.dtype = dtypes[n % 2];
      s.head_dim = head_dims[(n / 2) % 5];
      s.seqlen_new = (n / 3) % 2 ? sq : 0;  // with and without appended tokens
      switch (n % 4) {
        case 1: s.causal = true; break;
        case 2: s.window_left = 300; s.window_right = 0; break;
        case 3: s.softcap = 0.5f; break;
        default: break;
      }
      s.num_splits = splits[(n / 2) % 4];
      v.push_back(s);
      ++n;
    }
  return v;
}

class DecodeGpu : public ::testing::TestWithParam<DecodeSpec> {};

TEST_P(DecodeGpu, MatchesReferenceAndAppendsInPlace) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed(GetParam().name());
  SCOPED_TRACE(GetParam().name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostKVCase c(GetParam(), rng);
  const Expected e = expected_for(c);
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
  expect_result(c, e);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<DecodeSpec>& info) {
                           std::string n = std::to_string(info.index) + "_" + info.param.name();
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Split counts change only the rounding: 1, 3 and the maximum each match the reference and each other.
TEST(DecodeGpuSplits, OneThreeAndMaximumAgree) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("splits");
  SCOPED_TRACE("seed " + std::to_string(seed));
  DecodeSpec s;
  s.cache_lens = {4097, 300, 1};
  s.seqlen_q = 2;
  s.seqlen_new = 2;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 16;
  s.causal = true;
  std::vector<HostTensor> outs;
  for (int splits : {1, 3, fa::kMaxKVSplits}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    std::mt19937_64 rng(seed);  // the same inputs for every split count
    s.num_splits = splits;
    HostKVCase c(s, rng);
    const Expected e = expected_for(c);
    ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
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

// Several split calls queued back to back on one non-default stream: each relies on the merge tickets the
// previous one left at zero, and nothing may run on another stream.
TEST(DecodeGpuSplits, BackToBackCallsOnOneStreamReuseTheTickets) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("stream");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DecodeSpec s;
  s.cache_lens = {3000, 5000};
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 64;
  HostKVCase c(s, rng);
  const Expected e = expected_for(c);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  constexpr int kCalls = 4;
  std::vector<HostKVCase> results(kCalls, c);
  {
    DeviceKVCase d(c);
    std::vector<DeviceTensor> outs(kCalls), lses(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      outs[size_t(i)].upload(c.out);
      lses[size_t(i)].upload(c.lse);
      fa::KVCacheArgs a = d.args();
      a.out = outs[size_t(i)].view();
      a.lse = lses[size_t(i)].view();
      a.stream = stream;
      a.num_splits = i % 2 ? 0 : 7;
      const fa::Status st = fa::forward_kvcache(a);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (int i = 0; i < kCalls; ++i) {
      outs[size_t(i)].download(&results[size_t(i)].out);
      lses[size_t(i)].download(&results[size_t(i)].lse);
    }
  }
  cudaStreamDestroy(stream);
  for (int i = 0; i < kCalls; ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    fa::testing::expect_matches_reference("out", results[size_t(i)].out, e.exact.out, e.naive.out, s.dtype);
    fa::testing::expect_matches_reference("lse", results[size_t(i)].lse, e.lse_exact, e.lse_naive, s.dtype);
  }
}

TEST(DecodeGpuLong, OneHundredThirtyOneThousandKeys) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("long");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DecodeSpec s;
  s.cache_lens = {131072 - 1};
  s.seqlen_new = 1;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 16;
  HostKVCase c(s, rng);
  const Expected e = expected_for(c);
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
  expect_result(c, e);
}

// ---- refusals and validation on device tensors: the message names the rule; nothing is written ---------

// Runs `c` (whose inputs the caller broke) and checks the error and that no byte of out, lse or either cache
// changed.
void expect_refused(HostKVCase& c, fa::StatusCode code, const std::string& message_part) {
  const HostKVCase before = c;
  DeviceKVCase d(c);
  const fa::Status st = fa::forward_kvcache(d.args());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(message_part), std::string::npos)
      << "message \"" << st.message() << "\" lacks \"" << message_part << "\"";
  d.download(&c);
  EXPECT_TRUE(same_bytes(c.out, before.out)) << "out was written despite the error";
  EXPECT_TRUE(same_bytes(c.lse, before.lse)) << "lse was written despite the error";
  EXPECT_TRUE(same_bytes(c.k_cache, before.k_cache)) << "k_cache was written despite the error";
  EXPECT_TRUE(same_bytes(c.v_cache, before.v_cache)) << "v_cache was written despite the error";
}

DecodeSpec small_paged_spec() {
  DecodeSpec s;
  s.cache_lens = {5, 17, 0};
  s.seqlen_q = 2;
  s.seqlen_new = 2;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.page_size = 4;
  return s;
}

struct Broken {
  const char* name;
  const char* message_part;
  void (*breaks)(HostKVCase&);
};

TEST(DecodeGpuValidation, BadBlockTablesAndLengthsReturnAnErrorAndWriteNothing) {
  FA_SKIP_WITHOUT_GPU();
  const Broken rules[] = {
      {"page index past the pages", "block_table[1][2]: page index",
       [](HostKVCase& c) { c.block_table.set(1 * c.pages_per_seq + 2, double(c.k_cache.view.shape[0])); }},
      {"negative page index", "block_table[0][0]: page index -1", [](HostKVCase& c) { c.block_table.set(0, -1); }},
      {"negative cache length", "cache_seqlens[2]: must be >= 0", [](HostKVCase& c) { c.cache_seqlens.set(2, -1); }},
      {"length past capacity", "cache_seqlens[0]: ",
       [](HostKVCase& c) { c.cache_seqlens.set(0, double(c.capacity - 1)); }},
  };
  for (const Broken& r : rules) {
    SCOPED_TRACE(r.name);
    std::mt19937_64 rng(harness::pick_seed());
    HostKVCase c(small_paged_spec(), rng);
    r.breaks(c);
    expect_refused(c, fa::StatusCode::kInvalidArgument, r.message_part);
  }
}

TEST(DecodeGpuValidation, Fp32IsRefusedNamingTheDtype) {
  FA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(harness::pick_seed());
  DecodeSpec s = small_paged_spec();
  s.dtype = DType::kFloat32;
  HostKVCase c(s, rng);
  expect_refused(c, fa::StatusCode::kNotSupported, "dtype fp32 is not supported by the CUDA KV-cache");
}

TEST(DecodeGpuValidation, HeadDimNotAMultipleOfEightIsRefusedBeforeTheAppend) {
  FA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(harness::pick_seed());
  DecodeSpec s = small_paged_spec();
  s.head_dim = 20;
  HostKVCase c(s, rng);
  expect_refused(c, fa::StatusCode::kNotSupported, "head_dim 20");
}

}  // namespace
