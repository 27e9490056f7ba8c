// forward_kvcache on the CPU backend against the float64 reference: contiguous and paged caches, appended
// tokens, GQA/MQA, masks, forced and heuristic split counts, and the validation rules (an error writes
// nothing, the caches included). Fresh seeded inputs each run; outputs poisoned before every call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/bf16_products.h"
#include "common/kvcache_case.h"
#include "common/random_case.h"
#include "cpu/cpu_decode.h"
#include "flashattn/flashattn_c.h"
#include "flashattn/kvcache.h"

namespace fa = flashattn;
using fa::DType;
using fa::harness::HostTensor;
using fa::testing::expect_result;
using fa::testing::expected_for;
using fa::testing::HostKVCase;
using fa::testing::KVCaseSpec;
using fa::testing::KVExpected;
using fa::testing::same_bytes;
namespace harness = fa::harness;

namespace {

std::vector<KVCaseSpec> cases() {
  return fa::testing::kv_case_grid(KVCaseSpec{}, [](KVCaseSpec& s, int n) {
    const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    s.dtype = dtypes[n % 3];
    s.head_dim = n % 5 == 4 ? 128 : 64;
    s.seqlen_new = n % 2 ? s.seqlen_q : 0;  // with and without appended tokens
    // The heuristic with many workers splits even this small batch.
    if (s.num_splits == 0 && n % 3 == 0) s.num_threads = 16;
    s.padded_q = n % 3 == 1;
  });
}

class KVCacheCpu : public ::testing::TestWithParam<KVCaseSpec> {};

TEST_P(KVCacheCpu, MatchesReferenceAndAppendsInPlace) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE(GetParam().name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostKVCase c(GetParam(), rng);
  const KVExpected e = expected_for(c);
  fa::RunInfo info;
  const fa::Status s = fa::forward_kvcache(c.args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(info.backend, fa::Backend::kCPU);
  EXPECT_NE(info.kernel.find("decode"), std::string::npos) << info.kernel;
  expect_result(c, e);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KVCacheCpu, ::testing::ValuesIn(cases()),
                         fa::testing::param_test_name<KVCaseSpec>);

// `count` random KV-cache cases (tests/common/random_case.h) drawn under `rules`, the seed announced under
// `label`: each call against the reference, its caches appended in place; check_info(info) looks at what ran.
template <typename CheckInfo>
void check_random_kv_cases(const fa::testing::RandomKVRules& rules, int count, const std::string& label,
                           CheckInfo check_info) {
  const uint64_t seed = fa::testing::announce_seed(label);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i) {
    const KVCaseSpec spec = fa::testing::random_kv_case(rules, rng);
    SCOPED_TRACE(spec.name() + " (seed " + std::to_string(seed) + ")");
    HostKVCase c(spec, rng);
    const KVExpected e = expected_for(c);
    fa::RunInfo info;
    const fa::Status s = fa::forward_kvcache(c.args(), &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    check_info(info);
    ASSERT_NO_FATAL_FAILURE(expect_result(c, e));
  }
}

// Every path of the decode kernel on the same grid, head dims that fill whole vectors and ones that do not:
// the K/V rows read in place (up to kInPlaceMaxRows stacked rows; the AVX-512 form where the CPU has it,
// the portable loops otherwise), the bf16 tile products (AMX, and its portable emulation; bf16 and fp16
// with head_dim a multiple of 32) and the rows gathered into fp32 blocks.
std::vector<KVCaseSpec> path_cases() {
  return fa::testing::kv_case_grid(KVCaseSpec{}, [](KVCaseSpec& s, int n) {
    const DType dtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
    const int64_t dims[] = {128, 40, 256, 72, 64};
    s.dtype = dtypes[n % 3];
    s.head_dim = dims[n % 5];
    s.seqlen_new = n % 2 ? s.seqlen_q : 0;
    s.cache_lens = {0, 1, 255, 1100};  // several blocks and chunks, a quarter of the grid's longest
  });
}

struct DecodePathScope {
  explicit DecodePathScope(fa::detail::cpu::DecodePath path) { fa::detail::cpu::override_decode_path(path); }
  ~DecodePathScope() { fa::detail::cpu::override_decode_path(fa::detail::cpu::DecodePath::kAuto); }
};

struct ForcedPath {
  fa::detail::cpu::DecodePath path;
  fa::detail::cpu::Bf16Products products;  // of kTiles
  const char* name;
};

// Each test runs with its path forced (and the tile path's products), skipped where the CPU cannot run it.
class KVCacheCpuPaths : public ::testing::TestWithParam<ForcedPath> {
 protected:
  void SetUp() override {
    if (forced().path == fa::detail::cpu::DecodePath::kTiles && !fa::testing::bf16_products_runnable(forced().products))
      GTEST_SKIP() << "this CPU (or this build) has no AMX bf16 tile multiplies";
    scope_.emplace(forced().path);
    products_.emplace(forced().products);
  }
  const ForcedPath& forced() const { return GetParam(); }

 private:
  std::optional<DecodePathScope> scope_;
  std::optional<fa::testing::ScopedBf16Products> products_;
};

TEST_P(KVCacheCpuPaths, EachPathMatchesTheReference) {
  using fa::detail::cpu::DecodePath;
  const ForcedPath& forced = this->forced();
  const uint64_t seed = harness::pick_seed();
  std::mt19937_64 rng(seed);
  for (const KVCaseSpec& spec : path_cases()) {
    SCOPED_TRACE(spec.name() + " seed " + std::to_string(seed));
    HostKVCase c(spec, rng);
    const KVExpected e = expected_for(c);
    fa::RunInfo info;
    const fa::Status s = fa::forward_kvcache(c.args(), &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const bool few_rows = spec.heads_q / spec.heads_kv * spec.seqlen_q <= fa::detail::cpu::kInPlaceMaxRows;
    const bool half = spec.dtype != DType::kFloat32 && spec.head_dim % 32 == 0;
    EXPECT_EQ(info.kernel.find("inplace") != std::string::npos, forced.path == DecodePath::kInPlace && few_rows)
        << info.kernel;
    EXPECT_EQ(info.kernel.find("tiles") != std::string::npos, forced.path == DecodePath::kTiles && half)
        << info.kernel;
    expect_result(c, e);
  }
}

// Random KV-cache cases (tests/common/random_case.h) on each forced path: any head dim and dtype, or on the
// tile path the head dims and dtypes it takes (multiples of 32, bf16 and fp16), so that it runs every case.
TEST_P(KVCacheCpuPaths, RandomCasesMatchTheReference) {
  using fa::detail::cpu::DecodePath;
  const ForcedPath& forced = this->forced();
  fa::testing::RandomKVRules rules;
  rules.head_dims = fa::testing::head_dims_up_to_256(1);
  if (forced.path == DecodePath::kTiles) {
    rules.dtypes = {DType::kBFloat16, DType::kFloat16};
    rules.head_dims = fa::testing::head_dims_up_to_256(32);
  }
  rules.threads = true;
  check_random_kv_cases(rules, 24, std::string("cpu random kv-cache cases, ") + forced.name,
                        [&](const fa::RunInfo& info) {
                          if (forced.path == DecodePath::kTiles)
                            EXPECT_NE(info.kernel.find("tiles"), std::string::npos) << info.kernel;
                        });
}

INSTANTIATE_TEST_SUITE_P(
    Forced, KVCacheCpuPaths,
    ::testing::Values(ForcedPath{fa::detail::cpu::DecodePath::kGathered, fa::detail::cpu::Bf16Products::kFp32, "Gathered"},
                      ForcedPath{fa::detail::cpu::DecodePath::kInPlace, fa::detail::cpu::Bf16Products::kFp32, "InPlace"},
                      ForcedPath{fa::detail::cpu::DecodePath::kTiles, fa::detail::cpu::Bf16Products::kAmx, "TilesAmx"},
                      ForcedPath{fa::detail::cpu::DecodePath::kTiles, fa::detail::cpu::Bf16Products::kEmulated,
                                 "TilesEmulated"}),
    [](const ::testing::TestParamInfo<ForcedPath>& info) { return std::string(info.param.name); });

TEST(KVCacheCpuSplits, OneThreeAndMaximumAgree) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  KVCaseSpec s = fa::testing::split_counts_case(KVCaseSpec{});
  s.dtype = DType::kBFloat16;
  fa::testing::expect_split_counts_agree(s, seed,
                                         [](HostKVCase* c) { ASSERT_TRUE(fa::forward_kvcache(c->args()).ok()); });
}

TEST(KVCacheCpuLong, OneHundredThirtyOneThousandKeys) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  KVCaseSpec s;
  s.cache_lens = {131072 - 1};
  s.seqlen_new = 1;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 32;
  s.page_size = 64;
  s.dtype = DType::kBFloat16;
  HostKVCase c(s, rng);
  const KVExpected e = expected_for(c);
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
  // A task takes the tiles of all KV heads of a sequence's rows: 8 KV heads are still one task.
  p.heads_q = 32;
  p.heads_kv = 8;
  p.cache_seqlens = {4096};
  EXPECT_EQ(fa::detail::cpu::heuristic_kv_splits(p, 2), 4);
  // Unless their query rows and accumulators outgrow a task's budget: 256 rows of head_dim 256 per KV head
  // give groups of 4 heads, two tasks before the split.
  p.heads_q = 8;
  p.seqlen_q = 256;
  p.head_dim = 256;
  EXPECT_EQ(fa::detail::cpu::heuristic_kv_splits(p, 2), 2);
}

// Long query rows with many KV heads: the heads of a task are cut into groups (see above), each group
// gathering its own heads of every key.
TEST(KVCacheCpuGroups, ManyKVHeadsWithLongQueryRowsMatchTheReference) {
  const uint64_t seed = harness::pick_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  KVCaseSpec s;
  s.cache_lens = {300, 77};
  s.seqlen_q = 256;
  s.seqlen_new = 0;
  s.heads_q = 8;
  s.heads_kv = 8;
  s.head_dim = 256;
  s.causal = true;
  s.num_splits = 3;
  s.dtype = DType::kBFloat16;
  HostKVCase c(s, rng);
  const KVExpected e = expected_for(c);
  ASSERT_TRUE(fa::forward_kvcache(c.args()).ok());
  expect_result(c, e);
}

TEST(KVCacheCpuEdge, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  std::mt19937_64 rng(21);
  KVCaseSpec s;
  s.cache_lens = {0, 3};
  s.seqlen_q = 5;
  s.causal = true;  // sequence 1: rows 0 and 1 sit left of the first key
  s.heads_q = 2;
  s.head_dim = 16;
  s.num_splits = 2;
  HostKVCase c(s, rng);
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
  void (*breaks)(HostKVCase&, fa::KVCacheArgs&);
};

void run_broken(const Broken& r, bool check_indices = true) {
  SCOPED_TRACE(std::string(r.name) + (check_indices ? "" : ", check_indices off"));
  std::mt19937_64 rng(7);
  KVCaseSpec s;
  s.cache_lens = {5, 17, 0};
  s.seqlen_q = 2;
  s.seqlen_new = 2;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 16;
  s.page_size = 4;
  HostKVCase c(s, rng);
  fa::KVCacheArgs a = c.args();
  a.check_indices = check_indices;
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

// The rules on the values of the index tensors.
const Broken kIndexRules[] = {
    {"page index past the pages", fa::StatusCode::kInvalidArgument, "block_table[1][2]: page index",
     [](HostKVCase& c, fa::KVCacheArgs&) {
       c.block_table.set(1 * c.pages_per_seq + 2, double(c.k_cache.view.shape[0]));
     }},
    {"negative page index", fa::StatusCode::kInvalidArgument, "block_table[0][0]: page index -1",
     [](HostKVCase& c, fa::KVCacheArgs&) { c.block_table.set(0, -1); }},
    {"negative cache length", fa::StatusCode::kInvalidArgument, "cache_seqlens[2]: must be >= 0",
     [](HostKVCase& c, fa::KVCacheArgs&) { c.cache_seqlens.set(2, -1); }},
    {"length past capacity", fa::StatusCode::kInvalidArgument, "cache_seqlens[0]: ",
     [](HostKVCase& c, fa::KVCacheArgs&) { c.cache_seqlens.set(0, double(c.capacity - 1)); }},
};

TEST(KVCacheValidation, EachRuleNamesTheArgumentAndWritesNothing) {
  for (const Broken& r : kIndexRules) run_broken(r);
  using C = fa::StatusCode;
  const Broken rules[] = {
      {"k_new without v_new", C::kInvalidArgument, "v_new: is absent but k_new is present",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.v_new = fa::TensorView(); }},
      {"v_new without k_new", C::kInvalidArgument, "k_new: is absent but v_new is present",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.k_new = fa::TensorView(); }},
      {"cache dtype", C::kInvalidArgument, "v_cache: dtype fp16 must equal the dtype of q",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.v_cache.dtype = DType::kFloat16; }},
      {"k_new dtype", C::kInvalidArgument, "k_new: dtype bf16 must equal",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.k_new.dtype = DType::kBFloat16; }},
      {"cache_seqlens dtype", C::kInvalidArgument, "cache_seqlens: dtype must be int32",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.cache_seqlens.dtype = DType::kFloat32; }},
      {"block_table dtype", C::kInvalidArgument, "block_table: dtype must be int32",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.block_table.dtype = DType::kFloat32; }},
      {"lse dtype", C::kInvalidArgument, "lse: dtype must be float32",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.lse.dtype = DType::kFloat16; }},
      {"missing cache_seqlens", C::kInvalidArgument, "cache_seqlens: is required",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.cache_seqlens = fa::TensorView(); }},
      {"block_table rows", C::kInvalidArgument, "block_table: has 2 rows",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.block_table.shape[0] = 2; }},
      {"k_new shape", C::kInvalidArgument, "k_new: shape",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.k_new.shape[2] = 1; }},
      {"contiguous cache batch", C::kInvalidArgument, "k_cache: batch",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.block_table = fa::TensorView(); }},
      {"gqa ratio", C::kInvalidArgument, "must be a multiple of heads_kv",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.q.shape[2] = a.out.shape[2] = 3; }},
      {"cache last dim strided", C::kInvalidArgument, "k_cache: the last dimension must be contiguous",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.k_cache.stride[3] = 2; }},
      {"num_splits", C::kInvalidArgument, "num_splits: must be in [0, 128]",
       [](HostKVCase&, fa::KVCacheArgs& a) { a.num_splits = fa::kMaxKVSplits + 1; }},
      {"head_dim past the cpu limit", C::kNotSupported, "head_dim 512",
       [](HostKVCase&, fa::KVCacheArgs& a) {
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

// check_indices = false trusts only index tensors in CUDA memory: host ones cost nothing to read and are
// checked whatever the flag says.
TEST(KVCacheValidation, HostIndicesAreCheckedWithCheckIndicesOff) {
  for (const Broken& r : kIndexRules) run_broken(r, /*check_indices=*/false);
}

TEST(KVCacheValidation, CApiMirrorsTheCall) {
  std::mt19937_64 rng(harness::pick_seed());
  KVCaseSpec s;
  s.cache_lens = {9, 0};
  s.seqlen_q = 1;
  s.seqlen_new = 1;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 16;
  s.page_size = 4;
  HostKVCase c(s, rng);
  const KVExpected e = expected_for(c);
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
  EXPECT_EQ(ca.check_indices, 1) << "the C defaults must check the index tensors, as KVCacheArgs does";
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

// Every option at once, drawn at random (tests/common/random_case.h): any head dim up to 256, the three
// dtypes, caches of unrelated lengths, contiguous or paged with any page size, appended tokens, GQA/MQA,
// masks, softcap, split counts, worker counts, padded q.
TEST(KVCacheCpuRandom, CombinedOptionsMatchTheReference) {
  fa::testing::RandomKVRules rules;
  rules.head_dims = fa::testing::head_dims_up_to_256(1);
  rules.threads = true;
  check_random_kv_cases(rules, 40, "cpu random kv-cache cases",
                        [](const fa::RunInfo& info) { EXPECT_EQ(info.backend, fa::Backend::kCPU); });
}

}  // namespace
