// forward_kvcache on the CUDA backend (the split-KV decode kernels) against the float64 reference:
// contiguous and paged caches (page sizes 1..256, pages shuffled), appended tokens landing in the right slots
// with every other cache byte unchanged, GQA/MQA, causal / window / softcap, forced and heuristic split
// counts, a 131072-key sequence, repeated calls on one stream (the merge tickets must return to zero), and
// refusals that write nothing; with check_indices off (trusted device indices: no host round trip, a CUDA
// graph recording, bad indices clamped); and forward() with `auto` on few query rows, which runs the same
// kernels on full caches. Fresh seeded inputs every run; out and lse poisoned before every call.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "api/kvcache_problem.h"
#include "common/kvcache_case.h"
#include "common/random_case.h"
#include "cuda/decode/decode_heuristic.h"
#include "cuda/decode/decode_kernels.h"
#include "device_case.h"
#include "device_tensor.h"
#include "flashattn/kvcache.h"
#include "forward_check.h"

namespace fa = flashattn;
using fa::DType;
using fa::testing::announce_seed;
using fa::testing::DeviceTensor;
using fa::testing::expect_result;
using fa::testing::expected_for;
using fa::testing::HostKVCase;
using fa::testing::KVCaseSpec;
using fa::testing::KVExpected;
using fa::testing::same_bytes;
namespace harness = fa::harness;

namespace {

constexpr char kKernelPrefix[] = "fa2_decode_splitkv";

// The suite's defaults: the CUDA kernels take fp16 and bf16 only, and head_dim 128 is the common decode shape.
KVCaseSpec decode_spec() {
  KVCaseSpec s;
  s.dtype = DType::kBFloat16;
  s.head_dim = 128;
  return s;
}

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

  // The host case's arguments with the device tensors in place of the host ones, on the CUDA backend.
  fa::KVCacheArgs args() const {
    fa::KVCacheArgs a = host.args();
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

// Runs `c` on the GPU (on `stream`), downloads the results into `c`. Call under ASSERT_NO_FATAL_FAILURE.
void run_on_gpu(HostKVCase* c, cudaStream_t stream = nullptr, bool check_indices = true,
                std::string* kernel = nullptr) {
  DeviceKVCase d(*c);
  fa::KVCacheArgs a = d.args();
  a.stream = stream;
  a.check_indices = check_indices;
  fa::RunInfo info;
  const fa::Status s = fa::forward_kvcache(a, &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(info.backend, fa::Backend::kCUDA);
  EXPECT_EQ(info.kernel.rfind(kKernelPrefix, 0), 0u) << info.kernel;
  if (kernel != nullptr) *kernel = info.kernel;
  d.download(c);
}

std::vector<KVCaseSpec> cases() {
  return fa::testing::kv_case_grid(decode_spec(), [](KVCaseSpec& s, int n) {
    const DType dtypes[] = {DType::kBFloat16, DType::kFloat16};
    // 64, 128, 256, and two that pad up to the next kernel.
    const int64_t head_dims[] = {128, 64, 256, 40, 96};
    s.dtype = dtypes[n % 2];
    s.head_dim = head_dims[(n / 2) % 5];
    s.seqlen_new = (n / 3) % 2 ? s.seqlen_q : 0;  // with and without appended tokens
  });
}

class DecodeGpu : public ::testing::TestWithParam<KVCaseSpec> {};

TEST_P(DecodeGpu, MatchesReferenceAndAppendsInPlace) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed(GetParam().name());
  SCOPED_TRACE(GetParam().name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostKVCase c(GetParam(), rng);
  const KVExpected e = expected_for(c);
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
  expect_result(c, e);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeGpu, ::testing::ValuesIn(cases()),
                         fa::testing::param_test_name<KVCaseSpec>);

// Split counts change only the rounding: 1, 3 and the maximum each match the reference and each other.
TEST(DecodeGpuSplits, OneThreeAndMaximumAgree) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("splits");
  SCOPED_TRACE("seed " + std::to_string(seed));
  fa::testing::expect_split_counts_agree(fa::testing::split_counts_case(decode_spec()), seed,
                                         [](HostKVCase* c) { run_on_gpu(c); });
}

// Several split calls queued back to back on one non-default stream: each relies on the merge tickets the
// previous one left at zero, and nothing may run on another stream.
// Queues one call per entry of `splits` (its num_splits) on one non-default stream, each into its own out
// and lse, and checks every result against the reference: the per-stream tickets and claim counters must
// be back at zero after each call.
void expect_back_to_back_calls_match(const KVCaseSpec& s, const std::vector<int>& splits, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostKVCase c(s, rng);
  const KVExpected e = expected_for(c);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const size_t calls = splits.size();
  std::vector<HostKVCase> results(calls, c);
  {
    DeviceKVCase d(c);
    std::vector<DeviceTensor> outs(calls), lses(calls);
    for (size_t i = 0; i < calls; ++i) {
      outs[i].upload(c.out);
      lses[i].upload(c.lse);
      fa::KVCacheArgs a = d.args();
      a.out = outs[i].view();
      a.lse = lses[i].view();
      a.stream = stream;
      a.num_splits = splits[i];
      const fa::Status st = fa::forward_kvcache(a);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t i = 0; i < calls; ++i) {
      outs[i].download(&results[i].out);
      lses[i].download(&results[i].lse);
    }
  }
  cudaStreamDestroy(stream);
  for (size_t i = 0; i < calls; ++i) {
    SCOPED_TRACE("call " + std::to_string(i) + ", num_splits " + std::to_string(splits[i]));
    fa::testing::expect_matches_reference("out", results[i].out, e.exact.out, e.naive.out, s.dtype);
    fa::testing::expect_matches_reference("lse", results[i].lse, e.lse_exact, e.lse_naive, s.dtype);
  }
}

TEST(DecodeGpuSplits, BackToBackCallsOnOneStreamReuseTheTickets) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("stream");
  SCOPED_TRACE("seed " + std::to_string(seed));
  KVCaseSpec s = decode_spec();
  s.cache_lens = {3000, 5000};
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 64;
  expect_back_to_back_calls_match(s, {7, 0, 7, 0}, seed);
}

// Long sequences with the heuristic's many splits, back to back on one stream: a 60000-key sequence in 4
// tiles gets 33 splits on the wide head-dim-128 kernel (66 on the head-dim-64 one), the 1000-key sequence
// beside it 3. Contiguous, page 16 and page 1 (a block-table entry per key), three heuristic calls and a
// forced count after them.
TEST(DecodeGpuSplits, LongSequencesWithManySplitsOnBackToBackCalls) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("long splits");
  struct Case {
    int64_t head_dim, page_size;
  };
  for (const Case k : {Case{128, 0}, Case{128, 16}, Case{64, 1}}) {
    KVCaseSpec s = decode_spec();
    s.cache_lens = {60000, 1000};
    s.heads_q = 8;
    s.heads_kv = 2;
    s.head_dim = k.head_dim;
    s.page_size = k.page_size;
    SCOPED_TRACE(s.name() + ", seed " + std::to_string(seed));
    expect_back_to_back_calls_match(s, {0, 0, 0, 9}, seed);
  }
}

// The split heuristic counts on each kernel's planned CTAs per SM (its launch bounds and shared memory):
// on an SM with 228 KB of shared memory (sm90), every kernel must fit that many. The head-dim-64 kernel's
// two CTAs leave less than 0.5 KB of it (2 x (113 KB + 1 KB reserved)), so a little more shared memory would
// halve its occupancy without any other sign.
TEST(DecodeGpuKernels, EachKernelFitsItsPlannedCtasPerSm) {
  FA_SKIP_WITHOUT_GPU();
  int smem_per_sm = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0), cudaSuccess);
  constexpr int kSm90SmemPerSm = 228 * 1024;
  if (smem_per_sm < kSm90SmemPerSm) GTEST_SKIP() << "the kernels are sized for 228 KB of shared memory per SM";
  namespace dk = flashattn::cuda::decode;
  for (const dk::DecodeKernel& k : {dk::decode_kernel_hd64(), dk::decode_kernel_hd128(),
                                    dk::decode_kernel_hd128_wide(), dk::decode_kernel_hd256()}) {
    for (const DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      int ctas = 0;
      const fa::Status st = k.prepare(dtype, &ctas);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(ctas, k.planned_ctas_per_sm) << "head dim " << k.head_dim << ", " << k.warps << " warps, "
                                             << k.smem_bytes << " bytes of shared memory, " << fa::to_string(dtype);
    }
  }
}

// Head dim 128 has two kernels: the wide one (8 warps, one CTA per SM) while the tiles fit one wave of it,
// the 4-warp one beyond. Both against the reference, on either side of the switch, splitting or not.
TEST(DecodeGpuKernels, WideAndFourWarpHd128KernelsMatchTheReference) {
  FA_SKIP_WITHOUT_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  int smem_optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  const bool has_wide = smem_optin >= flashattn::cuda::decode::decode_kernel_hd128_wide().smem_bytes;
  const uint64_t seed = announce_seed("hd128 kernels");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // heads_kv 2, one row tile per KV head: batch 3 is 6 tiles; batch sms / 2 + 4 is sms + 8 tiles.
  for (const int64_t batch : {int64_t(3), int64_t(sms / 2 + 4)}) {
    for (const int splits : {0, 5}) {
      KVCaseSpec s = decode_spec();
      s.heads_q = 8;
      s.heads_kv = 2;
      s.num_splits = splits;
      const int64_t lens[] = {0, 1, 300, 777, 2049};
      s.cache_lens.clear();
      for (int64_t b = 0; b < batch; ++b) s.cache_lens.push_back(lens[b % 5]);
      SCOPED_TRACE(s.name());
      HostKVCase c(s, rng);
      const KVExpected e = expected_for(c);
      std::string kernel;
      ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c, nullptr, true, &kernel));
      // The wide kernel's name ends in "_w8", or "_w8_c<splits>" where its splits merge in clusters.
      const bool wide = kernel.find("_hd128_w8") != std::string::npos;
      EXPECT_EQ(wide, has_wide && batch * s.heads_kv <= sms) << kernel;
      expect_result(c, e);
    }
  }
}

// sm90: the wide kernel merges a tile's splits (up to 16) inside one thread block cluster over distributed
// shared memory when every tile's cluster fits on the device at once; the name ends in "_c<splits>" then.
// Cluster sizes 2, 7 and 16 (past the portable 8), one and two row tiles with padding rows, contiguous and
// paged caches, padded head dim 96, and lengths that leave some CTAs of a cluster without keys (0, 1, 300).
TEST(DecodeGpuKernels, ClusterMergeMatchesTheReference) {
  FA_SKIP_WITHOUT_GPU();
  namespace dk = flashattn::cuda::decode;
  const dk::DecodeKernel wide = dk::decode_kernel_hd128_wide();
  int smem_optin = 0, major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (smem_optin < wide.smem_bytes) GTEST_SKIP() << "no wide head-dim-128 decode kernel on this device";
  const uint64_t seed = announce_seed("cluster merge");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Case {
    int splits;
    int64_t seqlen_q, page_size, head_dim;
  };
  for (const Case k : {Case{2, 1, 0, 128}, Case{7, 7, 16, 128}, Case{16, 1, 0, 96}, Case{16, 7, 0, 128},
                       Case{16, 1, 1, 128}}) {
    KVCaseSpec s = decode_spec();
    s.heads_q = 8;
    s.heads_kv = 2;
    s.num_splits = k.splits;
    s.seqlen_q = k.seqlen_q;
    s.page_size = k.page_size;
    s.head_dim = k.head_dim;
    s.cache_lens = {2049, 0, 300, 1};
    SCOPED_TRACE(s.name());
    HostKVCase c(s, rng);
    const KVExpected e = expected_for(c);
    std::string kernel;
    ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c, nullptr, true, &kernel));
    const int64_t tiles = 4 * s.heads_kv * ((s.heads_q / s.heads_kv * s.seqlen_q + 15) / 16);
    int fit = 0;
    if (major >= 9) {
      const fa::Status st = wide.cluster_fit(DType::kBFloat16, k.splits, &fit);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    const std::string suffix = "_w8_c" + std::to_string(k.splits);
    const bool clustered = kernel.size() > suffix.size() &&
                           kernel.compare(kernel.size() - suffix.size(), suffix.size(), suffix) == 0;
    EXPECT_EQ(clustered, major >= 9 && fit >= tiles) << kernel << ", " << fit << " clusters fit";
    expect_result(c, e);
  }
}

TEST(DecodeGpuLong, OneHundredThirtyOneThousandKeys) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("long");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  KVCaseSpec s = decode_spec();
  s.cache_lens = {131072 - 1};
  s.seqlen_new = 1;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.page_size = 16;
  HostKVCase c(s, rng);
  const KVExpected e = expected_for(c);
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
  expect_result(c, e);
}

// Keys scaled up along the cache (key t of a sequence by 1 + t / 128), so that each warp's running max climbs
// block after block, by more than the rescale threshold (8 in log2 units) every few blocks and by less in
// between: the rescale of O and of the row sums must be right on every block, skipped or not. Contiguous
// and paged, head dims 64, 128 and 256, one split, several and the heuristic's.
void scale_keys_along_the_cache(HostKVCase* c) {
  const KVCaseSpec& s = c->spec;
  for (int64_t b = 0; b < s.batch(); ++b)
    for (int64_t t = 0; t < s.cache_lens[size_t(b)]; ++t) {
      const double factor = 1.0 + double(t) / 128.0;
      const int64_t first = c->cache_index(b, t, 0);  // the token's heads are adjacent
      for (int64_t i = first; i < first + s.heads_kv * s.head_dim; ++i) c->k_cache.set(i, c->k_cache.get(i) * factor);
    }
}

TEST(DecodeGpuKernels, ScoresRisingAlongTheCache) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("rising scores");
  struct Case {
    DType dtype;
    int64_t head_dim, page_size;
    int splits;
    std::vector<int64_t> lens;
  };
  for (const Case& k : {Case{DType::kBFloat16, 128, 0, 0, {20000, 4097, 1}}, Case{DType::kFloat16, 128, 16, 3, {9000}},
                        Case{DType::kBFloat16, 128, 0, 1, {3000}}, Case{DType::kFloat16, 64, 16, 0, {3000, 9000}},
                        Case{DType::kBFloat16, 256, 0, 5, {5000, 700}}}) {
    KVCaseSpec s = decode_spec();
    s.dtype = k.dtype;
    s.head_dim = k.head_dim;
    s.page_size = k.page_size;
    s.num_splits = k.splits;
    s.cache_lens = k.lens;
    s.heads_q = 8;
    s.heads_kv = 2;
    SCOPED_TRACE(s.name() + ", seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    HostKVCase c(s, rng);
    scale_keys_along_the_cache(&c);
    const KVExpected e = expected_for(c);
    ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
    expect_result(c, e);
  }
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

KVCaseSpec small_paged_spec() {
  KVCaseSpec s = decode_spec();
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
  KVCaseSpec s = small_paged_spec();
  s.dtype = DType::kFloat32;
  HostKVCase c(s, rng);
  expect_refused(c, fa::StatusCode::kNotSupported, "dtype fp32 is not supported by the CUDA KV-cache");
}

TEST(DecodeGpuValidation, HeadDimNotAMultipleOfEightIsRefusedBeforeTheAppend) {
  FA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(harness::pick_seed());
  KVCaseSpec s = small_paged_spec();
  s.head_dim = 20;
  HostKVCase c(s, rng);
  expect_refused(c, fa::StatusCode::kNotSupported, "head_dim 20");
}

// ---- check_indices = false: trusted device indices, no host copy and no stream synchronization ----------

// The split-count tests' case (GQA, paged 16, causal, 2 appended tokens) with an empty cache among the lengths.
KVCaseSpec mixed_paged_spec() {
  KVCaseSpec s = fa::testing::split_counts_case(decode_spec());
  s.cache_lens = {0, 1, 255, 4097};
  return s;
}

// The split count comes from the capacity instead of the longest sequence, nothing else changes.
TEST(DecodeGpuTrusted, CheckIndicesOffMatchesTheReference) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("trusted");
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t page_size : {int64_t(0), int64_t(16)}) {
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    std::mt19937_64 rng(seed);
    KVCaseSpec s = mixed_paged_spec();
    s.page_size = page_size;
    HostKVCase c(s, rng);
    const KVExpected e = expected_for(c);
    ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c, nullptr, /*check_indices=*/false));
    expect_result(c, e);
  }
}

// Without the host round trip the call can be recorded into a CUDA graph; each replay appends the same
// tokens at the same slots and recomputes out and lse (poisoned until the first replay).
TEST(DecodeGpuTrusted, RecordedInACudaGraphAndReplayed) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("graph");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostKVCase c(mixed_paged_spec(), rng);
  const KVExpected e = expected_for(c);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    DeviceKVCase d(c);
    fa::KVCacheArgs a = d.args();
    a.stream = stream;
    a.check_indices = false;
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const fa::Status st = fa::forward_kvcache(a);
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    HostKVCase untouched = c;
    d.download(&untouched);
    EXPECT_TRUE(same_bytes(untouched.out, c.out)) << "recording the call must not run it";
    for (int replay = 0; replay < 3; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    d.download(&c);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
  expect_result(c, e);
}

// Bad trusted indices give wrong results, never an access outside the caches: the kernels clamp lengths into
// [0, capacity - seqlen_new] and pages into [0, num_pages). (gpu_check.sh runs this test under memcheck.)
TEST(DecodeGpuTrusted, BadIndicesAreClampedIntoTheCaches) {
  FA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(harness::pick_seed());
  HostKVCase c(small_paged_spec(), rng);
  const int64_t num_pages = c.k_cache.view.shape[0];
  c.cache_seqlens.set(0, -3);
  c.cache_seqlens.set(1, double(c.capacity + 1000));
  c.block_table.set(0, -1);
  c.block_table.set(1 * c.pages_per_seq + 1, double(num_pages + 5));
  DeviceKVCase d(c);
  fa::KVCacheArgs a = d.args();
  a.check_indices = false;
  const fa::Status st = fa::forward_kvcache(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d.download(&c);
  EXPECT_EQ(harness::count_nan(c.out), 0) << "every row sees keys after the clamp and gets a finite result";
}

// ---- the split heuristic (host code: runs without a GPU) -----------------------------------------------

// The rule of decode_heuristic.cpp as docs/kvcache.md states it: no split once the tiles fill every CTA slot,
// else floor(slots / tiles) splits, never chunks under kMinSplitKeysGpu keys, never more than 128, at least 1.
TEST(DecodeHeuristic, FillsOneWaveWithoutShortChunks) {
  using flashattn::cuda::decode::heuristic_splits;
  using flashattn::cuda::decode::kMinSplitKeysGpu;
  constexpr int kSms = 132, kCtasPerSm = 2;
  EXPECT_EQ(heuristic_splits(8, 32768, kSms, kCtasPerSm), 33) << "batch 1 x 8 KV heads on an H200";
  EXPECT_EQ(heuristic_splits(128, 8192, kSms, kCtasPerSm), 2);
  EXPECT_EQ(heuristic_splits(264, 8192, kSms, kCtasPerSm), 1) << "the tiles alone fill the slots";
  EXPECT_EQ(heuristic_splits(512, 4096, kSms, kCtasPerSm), 1);
  EXPECT_EQ(heuristic_splits(8, 3 * kMinSplitKeysGpu + 5, kSms, kCtasPerSm), 3) << "chunks of 256 keys or more";
  EXPECT_EQ(heuristic_splits(8, 100, kSms, kCtasPerSm), 1);
  EXPECT_EQ(heuristic_splits(1, int64_t(1) << 20, kSms, kCtasPerSm), 128) << "at most kMaxKVSplits";
  EXPECT_EQ(heuristic_splits(0, 4096, kSms, kCtasPerSm), 1);
  EXPECT_EQ(heuristic_splits(4, 1 << 20, 0, 0), 1) << "a device that reports nothing gets one slot";
}

// The wide kernel (one CTA per SM) takes a call while its tiles fit one wave: at most one tile per SM.
TEST(DecodeHeuristic, WideKernelWhileTheTilesFitOneWaveOfIt) {
  using flashattn::cuda::decode::use_wide_kernel;
  EXPECT_TRUE(use_wide_kernel(8, 132, 1)) << "batch 1 x 8 KV heads";
  EXPECT_TRUE(use_wide_kernel(128, 132, 1)) << "batch 16 x 8 KV heads: one wave, no split";
  EXPECT_TRUE(use_wide_kernel(132, 132, 1));
  EXPECT_FALSE(use_wide_kernel(133, 132, 1));
  EXPECT_FALSE(use_wide_kernel(512, 132, 1)) << "batch 64 x 8 KV heads: the 4-warp kernel's two CTAs per SM";
  EXPECT_FALSE(use_wide_kernel(0, 132, 1));
  EXPECT_FALSE(use_wide_kernel(8, 132, 0)) << "a wide kernel that fits no SM";
  EXPECT_TRUE(use_wide_kernel(1, 0, 1)) << "a device that reports no SMs counts as one";
}

// The split-KV route of forward calls: one 16-row tile per KV head, or up to 64 rows while the (batch, KV
// head) pairs number at most a quarter of the SMs.
// The cluster merge's rule on the heuristic's split counts, with the cluster capacities measured on an H100
// (one CTA per SM, 132 SMs; bench/results/h100-20261205-decode-cluster/cluster_fit.txt): long sequences take
// it at 2 splits (45-66 tiles), 3 (34-39), 4 (27-30) and 8 (15 tiles), nowhere else.
TEST(DecodeHeuristic, ClusterMergeWhereEveryTilesClusterFitsAtOnce) {
  using flashattn::cuda::decode::cluster_merge_fits;
  using flashattn::cuda::decode::heuristic_splits;
  const int kH100Capacity[17] = {0, 132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7};
  auto fits = [&](int64_t tiles) {
    const int64_t splits = heuristic_splits(tiles, 1 << 20, 132, 1);
    return cluster_merge_fits(tiles, splits, splits <= 16 ? kH100Capacity[splits] : 0);
  };
  for (int64_t tiles = 1; tiles <= 140; ++tiles) {
    const bool expected = tiles == 15 || (tiles >= 27 && tiles <= 30) || (tiles >= 34 && tiles <= 39) ||
                          (tiles >= 45 && tiles <= 66);
    EXPECT_EQ(fits(tiles), expected) << tiles << " tiles, " << heuristic_splits(tiles, 1 << 20, 132, 1) << " splits";
  }
  EXPECT_FALSE(cluster_merge_fits(8, 16, 7)) << "batch 1 x 8 KV heads: 7 clusters of 16 fit, 8 are needed";
  EXPECT_TRUE(cluster_merge_fits(7, 16, 7));
  EXPECT_FALSE(cluster_merge_fits(4, 17, 100)) << "past the cluster size limit";
  EXPECT_FALSE(cluster_merge_fits(4, 1, 132)) << "one split: nothing to merge";
  EXPECT_FALSE(cluster_merge_fits(0, 2, 66));
}

TEST(DecodeHeuristic, ForwardRowsTakeTheSplitKvRouteWhereTheTileKernelsIdle) {
  using flashattn::cuda::decode::forward_rows_take_split_kv;
  EXPECT_TRUE(forward_rows_take_split_kv(4, 64, 132)) << "batch 8 x 8 KV heads, one token of 4 heads each";
  EXPECT_TRUE(forward_rows_take_split_kv(16, 100000, 132));
  EXPECT_FALSE(forward_rows_take_split_kv(17, 64, 132));
  EXPECT_FALSE(forward_rows_take_split_kv(64, 64, 132)) << "64 rows of 64 pairs lost to fa3 (0.61x)";
  EXPECT_TRUE(forward_rows_take_split_kv(64, 33, 132)) << "a quarter of 132 SMs";
  EXPECT_FALSE(forward_rows_take_split_kv(64, 34, 132));
  EXPECT_TRUE(forward_rows_take_split_kv(32, 16, 132));
  EXPECT_FALSE(forward_rows_take_split_kv(65, 1, 132));
  EXPECT_FALSE(forward_rows_take_split_kv(0, 1, 132)) << "no query rows";
  EXPECT_TRUE(forward_rows_take_split_kv(16, 1, 0)) << "a device that reports no SMs counts as one";
  EXPECT_FALSE(forward_rows_take_split_kv(64, 1, 0)) << "one pair is more than a quarter of one SM";
  EXPECT_TRUE(forward_rows_take_split_kv(64, 1, 4));
}

// forward() with `auto` where a KV head has at most kForwardMaxRows query rows (group x seqlen_q) and no
// varlen: the split-KV kernel on full caches, against the reference with outputs poisoned, contiguous and
// with padded rows: decode-like single tokens, a few causal tokens, the limit itself, more queries than keys
// (rows that see no key), many splits, every kernel head dim and one that pads up, window + softcap,
// a negative scale, no lse.
TEST(DecodeGpuForward, AutoRunsFewQueryRowsOnTheSplitKvKernel) {
  FA_SKIP_WITHOUT_GPU();
  namespace fat = fa::testing;
  constexpr int64_t kLimit = fa::cuda::decode::kForwardMaxRows;
  struct Shape {
    DType dtype;
    int64_t d, batch, sq, sk, hq, hkv;
    bool causal;
  };
  for (const Shape& v : {Shape{DType::kBFloat16, 128, 2, 1, 8192, 32, 8, false},
                         Shape{DType::kFloat16, 128, 1, 2, 3000, 16, 2, true},
                         Shape{DType::kBFloat16, 64, 3, kLimit / 4, 700, 8, 2, true},
                         Shape{DType::kFloat16, 256, 1, 2, 517, 4, 4, false},
                         Shape{DType::kBFloat16, 96, 2, 7, 5, 8, 8, true},
                         Shape{DType::kFloat16, 40, 1, 1, 33000, 4, 1, false}}) {
    for (fat::Layout layout : {fat::Layout::kContiguous, fat::Layout::kPadded}) {
      fat::CaseSpec c;
      c.label = "forward-few-rows";
      c.dtype = v.dtype;
      c.head_dim = v.d;
      c.batch = v.batch;
      c.seqlen_q = v.sq;
      c.seqlen_k = v.sk;
      c.heads_q = v.hq;
      c.heads_kv = v.hkv;
      c.causal = v.causal;
      c.layout = layout;
      c.with_backward = false;
      fat::check_forward_case(c, kKernelPrefix);
    }
  }
  fat::CaseSpec w;
  w.label = "forward-few-rows-window-softcap";
  w.dtype = DType::kBFloat16;
  w.head_dim = 128;
  w.seqlen_q = 4;
  w.seqlen_k = 900;
  w.heads_q = 8;
  w.heads_kv = 2;
  w.window_left = 100;
  w.window_right = 0;
  w.softcap = 15.0f;
  w.with_backward = false;
  fat::check_forward_case(w, kKernelPrefix);
  w.label = "forward-few-rows-negative-scale-no-lse";
  w.window_left = w.window_right = -1;
  w.softcap = 0.0f;
  w.scale = -0.1f;
  w.with_lse = false;
  fat::check_forward_case(w, kKernelPrefix);
}

// One row past the limit, a varlen batch and a named algorithm keep the query-tile kernels; with few
// (batch, KV head) pairs the limit is kForwardMaxRowsFewPairs.
TEST(DecodeGpuForward, MoreRowsVarlenOrANamedAlgorithmKeepTheTileKernels) {
  FA_SKIP_WITHOUT_GPU();
  namespace fat = fa::testing;
  auto kernel_of = [](const fat::CaseSpec& c) {
    std::mt19937_64 rng(fat::next_forward_seed());
    fat::HostCase h(c, rng);
    fa::RunInfo info;
    const fa::Status s = fa::check_supported(fat::DeviceCase(h).forward_args(), &info);
    EXPECT_TRUE(s.ok()) << c.name() << ": " << s.to_string();
    return info.kernel;
  };
  fat::CaseSpec c;
  c.label = "forward-past-the-limit";
  c.dtype = DType::kBFloat16;
  c.head_dim = 128;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seqlen_q = fa::cuda::decode::kForwardMaxRows / 4;
  c.seqlen_k = 500;
  c.batch = 40;  // 80 (batch, KV head) pairs: more than a quarter of any GPU's SMs this runs on
  c.with_backward = false;
  EXPECT_EQ(kernel_of(c).rfind(kKernelPrefix, 0), 0u) << kernel_of(c);
  c.seqlen_q += 1;
  EXPECT_NE(kernel_of(c).rfind(kKernelPrefix, 0), 0u) << kernel_of(c);
  fat::check_forward_case(c, "fa");
  // Few (batch, KV head) pairs: up to kForwardMaxRowsFewPairs rows run on the split-KV kernel.
  c.label = "forward-few-pairs";
  c.batch = 1;
  c.seqlen_q = fa::cuda::decode::kForwardMaxRowsFewPairs / 4;
  fat::check_forward_case(c, kKernelPrefix);
  c.seqlen_q += 1;
  EXPECT_NE(kernel_of(c).rfind(kKernelPrefix, 0), 0u) << kernel_of(c);
  c.label = "forward-varlen";
  c.seqlen_q = 1;
  c.lens_q = {1, 1};
  c.lens_k = {300, 40};
  EXPECT_NE(kernel_of(c).rfind(kKernelPrefix, 0), 0u) << kernel_of(c);
  c.label = "forward-named-fa2";
  c.lens_q.clear();
  c.lens_k.clear();
  c.algorithm = fa::Algorithm::kFA2;
  EXPECT_EQ(kernel_of(c).rfind("fa2_fwd_sm80_", 0), 0u) << kernel_of(c);
}

// With check_indices off the host never sees the lengths: the heuristic is fed the capacity instead.
TEST(DecodeHeuristic, TrustedIndicesBoundTheLongestSequenceByTheCapacity) {
  flashattn::detail::KVCacheProblem p;
  p.batch = 2;
  p.seqlen_new = 1;
  p.capacity = 5000;
  p.cache_seqlens = {10, 300};
  EXPECT_EQ(p.max_len_k(), 301);
  p.indices_on_host = false;
  p.cache_seqlens.clear();
  EXPECT_EQ(p.max_len_k(), 5000);
}

// Every option at once, drawn at random (tests/common/random_case.h): any multiple of 8 up to 256, fp16 and
// bf16, caches of unrelated lengths, contiguous or paged with any page size, appended tokens, GQA/MQA, masks,
// softcap, split counts, padded q.
TEST(DecodeGpuRandom, CombinedOptions) {
  FA_SKIP_WITHOUT_GPU();
  const uint64_t seed = announce_seed("decode random cases");
  std::mt19937_64 rng(seed);
  fa::testing::RandomKVRules rules;
  rules.dtypes = {DType::kFloat16, DType::kBFloat16};
  rules.head_dims = fa::testing::head_dims_up_to_256(8);
  for (int i = 0; i < 32; ++i) {
    const KVCaseSpec spec = fa::testing::random_kv_case(rules, rng);
    SCOPED_TRACE(spec.name() + " (seed " + std::to_string(seed) + ")");
    std::cout << "  " << spec.name() << "\n";
    HostKVCase c(spec, rng);
    const KVExpected e = expected_for(c);
    ASSERT_NO_FATAL_FAILURE(run_on_gpu(&c));
    ASSERT_NO_FATAL_FAILURE(expect_result(c, e));
  }
}

}  // namespace
