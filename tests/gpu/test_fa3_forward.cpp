// What only the Hopper fa3 forward has, beyond the suite it shares with fa2 (test_forward_gpu.cpp): small
// shapes for the sanitizers, bitwise-equal results over many runs of a multi-tile grid (a race in the
// warp-specialized pipeline shows up as a run that differs), the tile order's L2 sections and the work queue
// (several sections, the counter back at zero after every call, a call recorded into a CUDA graph), the
// masked leading key blocks a consumer warpgroup passes over, the choice `auto` makes on a compute capability
// 9.0 device, and every ablation variant (forward_fa3_ablation) against the float64 reference. Every GPU test
// skips with a message on a device that is not compute capability 9.0; the section rule (Fa3Schedule) is host
// code and runs everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "cuda/common/stream_counters.h"
#include "cuda/sm90/fa3_schedule.h"
#include "device_case.h"
#include "flashattn/attention.h"
#include "forward_check.h"
#include "reference/harness.h"

namespace {

using flashattn::Algorithm;
using flashattn::DType;
using flashattn::Fa3Ablation;
using flashattn::RunInfo;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::testing::DeviceCase;
using flashattn::testing::HostCase;
using Case = flashattn::testing::CaseSpec;
namespace harness = flashattn::harness;
namespace fat = flashattn::testing;

constexpr const char* kFa3Prefix = "fa3_fwd_sm90_";
constexpr const char* kFa2Prefix = "fa2_fwd_sm80_";
constexpr const char* kFa2BackwardPrefix = "fa2_bwd_sm80_";

Case fa3_case(std::string name, DType dtype, int64_t d, int64_t sq, int64_t sk) {
  return fat::forward_case(fat::fa3_algo(), std::move(name), dtype, d, sq, sk);
}

// One shape of a kernel-selection table: run contiguous and with padded rows (the padding must stay
// untouched), each against the reference, with the kernel's name read back.
struct KernelShape {
  DType dtype;
  int64_t d, sq, sk, hq, hkv;
  bool causal;
  const char* kernel;
};
void check_kernel_shapes(const std::string& name, std::initializer_list<KernelShape> shapes) {
  for (const KernelShape& v : shapes) {
    for (fat::Layout layout : {fat::Layout::kContiguous, fat::Layout::kPadded}) {
      Case c = fa3_case(name, v.dtype, v.d, v.sq, v.sk);
      c.heads_q = v.hq;
      c.heads_kv = v.hkv;
      c.causal = v.causal;
      c.layout = layout;
      fat::check_forward_case(c, v.kernel);
    }
  }
}

constexpr int kPoisonByte = 0xFF;  // all-ones is NaN in bf16 and fp32

// One forward call (d's arguments, or `args` on them) on outputs poisoned first (an element the call skips
// stays NaN), synchronized.
void poisoned_forward(DeviceCase& d, const HostCase& h, const flashattn::AttentionArgs& args, RunInfo* info) {
  ASSERT_EQ(cudaMemset(d.out.view().data, kPoisonByte, h.out.storage.size()), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.lse.view().data, kPoisonByte, h.lse.storage.size()), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // args.stream may not be ordered after the memsets
  const Status s = flashattn::forward(args, info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}
void poisoned_forward(DeviceCase& d, const HostCase& h, RunInfo* info) {
  poisoned_forward(d, h, d.forward_args(), info);
}

// Every feature once on shapes small enough for compute-sanitizer (scripts/gpu_check.sh runs this test
// under memcheck and racecheck).
TEST(Fa3Forward, SmallShapes) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  Case causal = fa3_case("small-causal", DType::kBFloat16, 128, 17, 17);
  causal.batch = 2;
  causal.heads_q = 4;
  causal.heads_kv = 2;
  causal.causal = true;
  fat::check_forward_case(causal, kFa3Prefix);

  Case causal64 = fa3_case("small-causal-hd64", DType::kBFloat16, 64, 130, 200);  // 128-row tiles (fa3_consumers)
  causal64.heads_q = 4;
  causal64.heads_kv = 2;
  causal64.causal = true;
  fat::check_forward_case(causal64, "fa3_fwd_sm90_bf16_hd64_m128n128");

  Case gqa = fa3_case("small-gqa", DType::kFloat16, 64, 113, 203);
  gqa.heads_q = 8;
  gqa.heads_kv = 1;
  fat::check_forward_case(gqa, kFa3Prefix);

  Case empty_rows = fa3_case("small-empty-rows", DType::kBFloat16, 256, 64, 1);
  empty_rows.causal = true;
  fat::check_forward_case(empty_rows, kFa3Prefix);

  Case varlen = fa3_case("small-varlen", DType::kBFloat16, 128, 0, 0);
  varlen.lens_q = {17, 0, 130, 5};
  varlen.lens_k = {33, 12, 0, 140};
  varlen.causal = true;
  fat::check_forward_case(varlen, kFa3Prefix);

  Case window = fa3_case("small-window-softcap", DType::kFloat16, 64, 100, 150);
  window.window_left = 20;
  window.window_right = 3;
  window.softcap = 5.0f;
  window.scale = 0.5f;
  window.layout = fat::Layout::kPadded;
  fat::check_forward_case(window, kFa3Prefix);
}

// The same inputs give bitwise-equal out and lse in every run. The shape has several 128-row tiles per
// SM (2 x 16 heads x 16 tiles on ~132 SMs), so the persistent scheduler, the producer/consumer barriers
// and the ping-pong between warpgroups are all exercised; outputs are poisoned before every run, so an
// element a run skips also differs. The first run is also checked against the reference on sampled rows:
// equal garbage must not pass.
TEST(Fa3Forward, HundredRunsBitwiseEqual) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  constexpr int kRuns = 100;
  constexpr int kSampleRows = 8;
  for (bool causal : {false, true}) {
    Case c = fa3_case("race", DType::kBFloat16, 128, 2048, 2048);
    c.batch = 2;
    c.heads_q = c.heads_kv = 16;
    c.causal = causal;
    const uint64_t seed = fat::next_forward_seed();
    SCOPED_TRACE(c.name() + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    HostCase h(c, rng);
    DeviceCase d(h);
    std::vector<uint8_t> first_out, first_lse;
    for (int run = 0; run < kRuns; ++run) {
      RunInfo info;
      ASSERT_NO_FATAL_FAILURE(poisoned_forward(d, h, &info));
      d.download_forward(&h);
      if (run == 0) {
        fat::expect_kernel(info, kFa3Prefix);
        ASSERT_NO_FATAL_FAILURE(fat::expect_sampled_rows_match(h, kSampleRows, rng, info.kernel));
        first_out = h.out.storage;
        first_lse = h.lse.storage;
        continue;
      }
      ASSERT_EQ(h.out.storage, first_out) << "out differs from run 0 in run " << run;
      ASSERT_EQ(h.lse.storage, first_lse) << "lse differs from run 0 in run " << run;
    }
    std::cout << "  " << c.name() << ": " << kRuns << " runs bitwise equal\n";
  }
}

// GQA packing where it takes fewer tiles (host code: runs without a GPU).
TEST(Fa3Schedule, GqaPackingWhereItTakesFewerTiles) {
  using flashattn::cuda::fa3::gqa_pack_group;
  EXPECT_EQ(gqa_pack_group(16, 2, 1, 128), 8);     // decode: 16 tiles of one row each -> 2
  EXPECT_EQ(gqa_pack_group(32, 8, 5, 192), 4);     // 32 tiles -> 8 (20 rows each)
  EXPECT_EQ(gqa_pack_group(16, 2, 33, 128), 8);    // 16 tiles -> 2 x 3
  EXPECT_EQ(gqa_pack_group(8, 1, 100, 128), 8);    // MQA: 8 tiles -> 7
  EXPECT_EQ(gqa_pack_group(8, 2, 128, 128), 1);    // full tiles: 8 either way
  EXPECT_EQ(gqa_pack_group(8, 2, 4096, 128), 1);
  EXPECT_EQ(gqa_pack_group(12, 4, 17, 128), 1);    // G = 3 does not divide 128 rows
  EXPECT_EQ(gqa_pack_group(12, 4, 17, 192), 3);    // ... but 192
  EXPECT_EQ(gqa_pack_group(16, 16, 1, 128), 1);    // no GQA
  EXPECT_EQ(gqa_pack_group(256, 1, 1, 128), 1);    // G larger than the tile
  EXPECT_EQ(gqa_pack_group(16, 2, int64_t(1) << 28, 128), 1);  // seqlen_q x G near the int range
}

// The section rule on the benchmark's shapes and at its edges (host code: runs without a GPU).
TEST(Fa3Schedule, PairByPairWithoutAMaskTwoWavesWithOneAtMostAQuarterOfTheGrid) {
  using flashattn::cuda::fa3::kGridCtasPerSectionPair;
  using flashattn::cuda::fa3::kL2SectionBytes;
  using flashattn::cuda::fa3::l2_section_heads;
  constexpr int kGrid = 132;
  static_assert(kGridCtasPerSectionPair == 4, "the expectations below take 32 pairs as the cap on 132 SMs");
  // Equal tiles (no mask): one pair per section, whatever the sizes.
  EXPECT_EQ(l2_section_heads(16, 16, 16, 1024, 128, 2, 8, kGrid, false), 1);
  EXPECT_EQ(l2_section_heads(32, 8, 8, 512, 256, 2, 4, kGrid, false), 1);
  EXPECT_EQ(l2_section_heads(1, 16, 16, 16384, 128, 2, 128, kGrid, false), 1);
  EXPECT_EQ(l2_section_heads(4, 32, 8, 4096, 128, 2, 32, kGrid, false), 1);
  EXPECT_EQ(l2_section_heads(1, 1, 1, int64_t(1) << 30, 256, 2, 1, 1, false), 1);
  // Unequal tiles (causal): the K/V that fit 16 MB, at least two waves, at most 32 pairs (132 / 4, rounded
  // down to a power of two). d 128, N 2048, batch 8 x 16 heads: 1 MB of K/V per head, 16 fit; 16 Q tiles per
  // head, so two waves (264 tiles) need 17 heads: 32 (the next power of two), which the cap allows.
  EXPECT_EQ(l2_section_heads(8, 16, 16, 2048, 128, 2, 16, kGrid, true), 32);
  // d 128, N 1024: two waves need 33 heads, 64; the cap: 32.
  EXPECT_EQ(l2_section_heads(16, 16, 16, 1024, 128, 2, 8, kGrid, true), 32);
  // d 256, N 512: 66 heads for two waves, 128; the cap: 32.
  EXPECT_EQ(l2_section_heads(32, 8, 8, 512, 256, 2, 4, kGrid, true), 32);
  // d 64, N 512, batch 32 x 32 heads: 128 KB per head, 128 fit; the cap: 32.
  EXPECT_EQ(l2_section_heads(32, 32, 32, 512, 64, 2, 4, kGrid, true), 32);
  // d 128, N 16384: 128 Q tiles per head, so two waves need 3 heads: 4.
  EXPECT_EQ(l2_section_heads(1, 16, 16, 16384, 128, 2, 128, kGrid, true), 4);
  // GQA 4:1: sections are whole groups of query heads (multiples of 4) and count the K/V once per group.
  EXPECT_EQ(l2_section_heads(1, 32, 8, 16384, 128, 2, 128, kGrid, true), 8);
  EXPECT_EQ(l2_section_heads(32, 32, 8, 512, 128, 2, 4, kGrid, true), 32);  // the cap: 8 KV heads
  // MQA with more query heads than the cap: one KV head, all of its query heads.
  EXPECT_EQ(l2_section_heads(4, 64, 1, 512, 128, 2, 4, kGrid, true), 64);
  // Never more than all pairs, never fewer than one.
  EXPECT_EQ(l2_section_heads(1, 2, 2, 64, 64, 2, 1, kGrid, true), 2);
  EXPECT_EQ(l2_section_heads(1, 1, 1, int64_t(1) << 30, 256, 2, 1, 1, true), 1);
  EXPECT_EQ(l2_section_heads(1, 1, 1, 0, 64, 2, 0, 0, true), 1);
  // The benchmark's causal shapes (16384 tokens, hidden 2048, 128-row tiles): sections of at most 32 pairs,
  // and of at least two waves of tiles wherever the cap leaves room for them.
  for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
    for (int64_t d : {64, 128, 256}) {
      const int64_t batch = 16384 / n, heads = 2048 / d;
      const int m_blocks = int(n / 128);
      const int pairs = l2_section_heads(batch, heads, heads, n, d, 2, m_blocks, kGrid, true);
      EXPECT_LE(pairs, 32) << n << " " << d;
      EXPECT_TRUE(pairs == 32 || int64_t(pairs) * m_blocks >= 2 * kGrid) << n << " " << d << ": " << pairs;
    }
  }
  // Where neither the floor nor the cap binds, the K/V that fit kL2SectionBytes: d 64, N 8192 on 64 CTAs
  // (cap 16 pairs, two waves 2 pairs): 2 MB per head, 8 fit.
  EXPECT_EQ(l2_section_heads(2, 32, 32, 8192, 64, 2, 64, 64, true), 8);
  EXPECT_EQ(8 * 8192 * 64 * 2 * 2, kL2SectionBytes);
}

// Many tiles per CTA of every kind in one call, so that each CTA changes tiles several times: varlen
// sequences whose query and key lengths cycle through empty, one row, whole 128-row tiles and odd lengths,
// so that a tile with keys can follow one without rows or keys and the reverse, for every head dim, with
// and without a mask. Tiles without keys take their Q phase with no data (skip_q) and release it at once:
// a pipeline in which one warp of a consumer warpgroup can run two Q phases ahead of another hangs here
// (an overlapped tile change did; FLASHATTN_MBAR_WATCHDOG names the barrier).
TEST(Fa3Forward, TileChangesAcrossManyTilesPerCta) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  constexpr int kSequences = 96;
  const int64_t q_lens[] = {0, 1, 128, 256, 77, 300, 129, 200};
  const int64_t k_lens[] = {256, 0, 128, 300, 1, 255, 512, 64, 129};
  struct Variant {
    int64_t d;
    DType dtype;
    bool causal;
    int64_t window_left;
  };
  for (const Variant& v : {Variant{128, DType::kBFloat16, false, -1}, Variant{64, DType::kFloat16, true, -1},
                           Variant{256, DType::kBFloat16, false, 100}}) {
    Case c = fa3_case("tile-changes", v.dtype, v.d, 0, 0);
    for (int i = 0; i < kSequences; ++i) {
      c.lens_q.push_back(q_lens[i % 8]);
      c.lens_k.push_back(k_lens[i % 9]);
    }
    c.heads_q = 4;
    c.heads_kv = 2;
    c.causal = v.causal;
    c.window_left = v.window_left;
    fat::check_forward_case(c, kFa3Prefix);
  }
}

// Head dim 64 takes 128-row tiles (two consumer warpgroups) for causal problems of at most 1024 queries and
// keys and 192-row tiles otherwise (fa3_consumers): each against the reference, the tile shape read from the
// kernel name, on both sides of the limit.
TEST(Fa3Forward, HeadDim64TileRowsByShape) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  struct Shape {
    DType dtype;
    int64_t sq, sk;
    bool causal;
    const char* kernel;
  };
  for (const Shape& v : {Shape{DType::kBFloat16, 1024, 1024, true, "fa3_fwd_sm90_bf16_hd64_m128n128"},
                         Shape{DType::kFloat16, 300, 1000, true, "fa3_fwd_sm90_fp16_hd64_m128n128"},
                         Shape{DType::kBFloat16, 1024, 1025, true, "fa3_fwd_sm90_bf16_hd64_m192n128"},
                         Shape{DType::kBFloat16, 1025, 700, true, "fa3_fwd_sm90_bf16_hd64_m192n128"},
                         Shape{DType::kFloat16, 1024, 1024, false, "fa3_fwd_sm90_fp16_hd64_m192n128"}}) {
    Case c = fa3_case("hd64-tile-rows", v.dtype, 64, v.sq, v.sk);
    c.heads_q = 4;
    c.heads_kv = 2;
    c.causal = v.causal;
    fat::check_forward_case(c, v.kernel);
  }
  // Varlen: the longest sequence decides.
  Case varlen = fa3_case("hd64-tile-rows-varlen", DType::kBFloat16, 64, 0, 0);
  varlen.lens_q = {1000, 3, 0, 517};
  varlen.lens_k = {1000, 64, 9, 1024};
  varlen.causal = true;
  fat::check_forward_case(varlen, "fa3_fwd_sm90_bf16_hd64_m128n128");
}

// Head dims between the kernel sizes run on the next larger kernel in its partial-column form
// (Fa3Config::kPartialCols): TMA zero-fills the columns past the head dim, the epilogue stores only the
// problem's. Each kernel form against the reference, its name read back, with padded rows (the padding must
// stay untouched), GQA, a window, softcap and a varlen batch.
TEST(Fa3Forward, HeadDimsBetweenKernelSizes) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  check_kernel_shapes("partial-cols", {
      {DType::kBFloat16, 96, 300, 300, 4, 2, false, "fa3_fwd_sm90_bf16_hd128_m128n128_d96"},
      {DType::kFloat16, 96, 257, 520, 4, 2, true, "fa3_fwd_sm90_fp16_hd128_m128n128_d96"},
      {DType::kBFloat16, 192, 200, 333, 4, 2, true, "fa3_fwd_sm90_bf16_hd256_m128n64_d192"},
      {DType::kFloat16, 192, 129, 64, 4, 2, false, "fa3_fwd_sm90_fp16_hd256_m128n64_d192"},
      {DType::kBFloat16, 40, 250, 250, 4, 2, true, "fa3_fwd_sm90_bf16_hd64_m128n128_d40"},
      {DType::kFloat16, 8, 400, 190, 4, 2, false, "fa3_fwd_sm90_fp16_hd64_m192n128_d8"},
      {DType::kBFloat16, 136, 150, 150, 4, 2, false, "fa3_fwd_sm90_bf16_hd256_m128n64_d136"},
      {DType::kFloat16, 248, 77, 300, 4, 2, true, "fa3_fwd_sm90_fp16_hd256_m128n64_d248"},
  });
  Case w = fa3_case("partial-cols-window-softcap", DType::kBFloat16, 96, 300, 400);
  w.window_left = 70;
  w.window_right = 10;
  w.softcap = 30.0f;
  fat::check_forward_case(w, "fa3_fwd_sm90_bf16_hd128_m128n128_d96_softcap");
  Case varlen = fa3_case("partial-cols-varlen", DType::kFloat16, 192, 0, 0);
  varlen.lens_q = {130, 0, 7, 300};
  varlen.lens_k = {200, 5, 0, 290};
  varlen.heads_q = 6;
  varlen.heads_kv = 3;
  varlen.causal = true;
  fat::check_forward_case(varlen, "fa3_fwd_sm90_fp16_hd256_m128n64_d192");
}

// GQA packing (Fa3Config::kPackGqa): the query heads of one KV head share a tile's rows, token-major, where
// that takes fewer tiles (gqa_pack_group). Decode-like and short queries on both head-dim-64 tile shapes and
// head dim 128, causal (the mask goes by token, so a token's G rows share their keys), a window with
// softcap, MQA, padded rows, a varlen batch with a sequence whose queries see no key (its rows written as
// empty through the packed addresses), and shapes that must not pack (the name says which ran).
TEST(Fa3Forward, GqaPackedTiles) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  check_kernel_shapes("gqa-packed", {
      {DType::kBFloat16, 128, 1, 300, 16, 2, true, "fa3_fwd_sm90_bf16_hd128_m128n128_gqa8"},
      {DType::kFloat16, 128, 1, 1000, 16, 2, false, "fa3_fwd_sm90_fp16_hd128_m128n128_gqa8"},
      {DType::kFloat16, 64, 5, 700, 32, 8, false, "fa3_fwd_sm90_fp16_hd64_m192n128_gqa4"},
      {DType::kBFloat16, 64, 33, 33, 16, 2, true, "fa3_fwd_sm90_bf16_hd64_m128n128_gqa8"},
      {DType::kBFloat16, 64, 7, 2000, 8, 2, true, "fa3_fwd_sm90_bf16_hd64_m192n128_gqa4"},
      {DType::kFloat16, 128, 37, 290, 8, 1, true, "fa3_fwd_sm90_fp16_hd128_m128n128_gqa8"},
      {DType::kFloat16, 128, 17, 400, 12, 4, true, "fa3_fwd_sm90_fp16_hd128_m128n128"},
      {DType::kBFloat16, 128, 128, 256, 8, 2, false, "fa3_fwd_sm90_bf16_hd128_m128n128"},
      {DType::kBFloat16, 256, 1, 300, 16, 2, true, "fa3_fwd_sm90_bf16_hd256_m128n64"},
  });
  Case w = fa3_case("gqa-packed-window-softcap", DType::kBFloat16, 128, 100, 100);
  w.heads_q = 8;
  w.heads_kv = 1;
  w.window_left = 30;
  w.window_right = 5;
  w.softcap = 20.0f;
  fat::check_forward_case(w, "fa3_fwd_sm90_bf16_hd128_m128n128_gqa8_softcap");
  Case varlen = fa3_case("gqa-packed-varlen", DType::kBFloat16, 128, 0, 0);
  varlen.lens_q = {1, 0, 3, 9};
  varlen.lens_k = {50, 7, 0, 300};
  varlen.heads_q = 8;
  varlen.heads_kv = 2;
  varlen.causal = true;
  fat::check_forward_case(varlen, "fa3_fwd_sm90_bf16_hd128_m128n128_gqa4");
  varlen.layout = fat::Layout::kBatchHeadMajor;
  fat::check_forward_case(varlen, "fa3_fwd_sm90_bf16_hd128_m128n128_gqa4");
}

// Keys scaled up block by block towards the first key (the kernel visits a tile's key blocks from the last
// one down, so each block's scores tend to exceed the stored row max by more than the rescale threshold),
// and the first key row of the tensor by far more (the exponentials against the stored max overflow to inf
// for the rows that favour it). Blocks of 128 rows of the K tensor (a varlen batch's sequences share one
// row count, so there the steps run over the packed rows). A main-loop block whose exponentials against the
// stored max leave a thread's part of a row sum above 2^8 recomputes its scores from shared memory
// (Fa3Config::kStaleMax); here most blocks do. Each kernel form with that path (head dims up to 128, two and
// three consumers, partial columns, GQA-packed, causal) and head dim 256 without it, against the reference:
// a missing or wrong recomputation leaves inf, NaN or wrong rows.
void scale_keys_towards_the_start(fat::HostCase* h) {
  const flashattn::TensorView& k = h->k.view;  // [batch, rows, heads, d] or packed [rows, heads, d]
  const bool packed = k.ndim == 3;
  const int64_t batches = packed ? 1 : k.shape[0];
  const int64_t rows = packed ? k.shape[0] : k.shape[1];
  const int64_t per_row = k.shape[k.ndim - 2] * k.shape[k.ndim - 1];
  constexpr int64_t kBlock = 128;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t t = 0; t < rows; ++t) {
      const double steps = double((rows - 1) / kBlock - t / kBlock);  // 0 in the last block of rows
      const double factor = (1.0 + 12.0 * steps) * (t == 0 ? 60.0 : 1.0);
      for (int64_t i = 0; i < per_row; ++i) {
        const int64_t idx = (b * rows + t) * per_row + i;
        h->k.set(idx, h->k.get(idx) * factor);
      }
    }
  }
}

TEST(Fa3Forward, ScoresRisingPastTheStoredMax) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  struct Shape {
    DType dtype;
    int64_t d, sq, sk, hq, hkv;
    bool causal;
    const char* kernel;
  };
  for (const Shape& v : {Shape{DType::kBFloat16, 128, 1024, 1024, 2, 2, false, "fa3_fwd_sm90_bf16_hd128_m128n128"},
                         Shape{DType::kFloat16, 128, 700, 1000, 4, 2, true, "fa3_fwd_sm90_fp16_hd128_m128n128"},
                         Shape{DType::kBFloat16, 96, 300, 900, 2, 1, false, "fa3_fwd_sm90_bf16_hd128_m128n128_d96"},
                         Shape{DType::kBFloat16, 128, 3, 1100, 16, 2, true, "fa3_fwd_sm90_bf16_hd128_m128n128_gqa8"},
                         Shape{DType::kBFloat16, 64, 1024, 1024, 2, 2, true, "fa3_fwd_sm90_bf16_hd64_m128n128"},
                         Shape{DType::kFloat16, 64, 1024, 1024, 2, 2, false, "fa3_fwd_sm90_fp16_hd64_m192n128"},
                         Shape{DType::kBFloat16, 64, 1024, 1200, 2, 2, true, "fa3_fwd_sm90_bf16_hd64_m192n128"},
                         Shape{DType::kFloat16, 40, 500, 1200, 4, 2, false, "fa3_fwd_sm90_fp16_hd64_m192n128_d40"},
                         Shape{DType::kBFloat16, 64, 7, 2000, 8, 2, true, "fa3_fwd_sm90_bf16_hd64_m192n128_gqa4"},
                         Shape{DType::kBFloat16, 256, 600, 900, 2, 1, false, "fa3_fwd_sm90_bf16_hd256_m128n64"}}) {
    Case c = fa3_case("rising-scores", v.dtype, v.d, v.sq, v.sk);
    c.heads_q = v.hq;
    c.heads_kv = v.hkv;
    c.causal = v.causal;
    fat::check_forward_case(c, v.kernel, fat::plain_forward(), scale_keys_towards_the_start);
  }
  // Varlen and a window.
  Case varlen = fa3_case("rising-scores-varlen-window", DType::kBFloat16, 128, 0, 0);
  varlen.lens_q = {600, 5, 900};
  varlen.lens_k = {700, 300, 1000};
  varlen.window_left = 500;
  varlen.window_right = 40;
  fat::check_forward_case(varlen, "fa3_fwd_sm90_bf16_hd128_m128n128", fat::plain_forward(),
                          scale_keys_towards_the_start);
}

// Under a mask, a consumer warpgroup passes over the tile's first key blocks when none of its rows sees them
// (Fa3Config::kLeadSkip: head dim 64 on 192-row tiles, head dim 256): causal squares, bottom-right alignment
// both ways (rows that see no key at all, and rows that see more than the tile's diagonal), windows and a
// varlen batch, every element against the reference.
TEST(Fa3Forward, MaskedLeadBlocksPerWarpgroup) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  struct Shape {
    DType dtype;
    int64_t d, sq, sk;
    bool causal;
    int64_t window_left, window_right;
    int64_t batch, heads_q, heads_kv;
    const char* kernel;
  };
  const char* const kHd64 = "fa3_fwd_sm90_bf16_hd64_m192n128";
  const char* const kHd64Fp16 = "fa3_fwd_sm90_fp16_hd64_m192n128";
  for (const Shape& v : {Shape{DType::kBFloat16, 64, 1500, 1500, true, -1, -1, 1, 4, 2, kHd64},
                         Shape{DType::kFloat16, 64, 1300, 900, true, -1, -1, 1, 4, 2, kHd64Fp16},
                         Shape{DType::kBFloat16, 64, 1100, 1700, true, -1, -1, 1, 4, 2, kHd64},
                         Shape{DType::kBFloat16, 64, 1200, 1200, false, 100, 50, 1, 4, 2, kHd64},
                         Shape{DType::kBFloat16, 256, 700, 700, true, -1, -1, 1, 4, 2, "fa3_fwd_sm90_bf16_hd256"},
                         Shape{DType::kFloat16, 256, 300, 1000, true, -1, -1, 1, 4, 2, "fa3_fwd_sm90_fp16_hd256"},
                         Shape{DType::kBFloat16, 256, 600, 250, true, -1, -1, 1, 4, 2, "fa3_fwd_sm90_bf16_hd256"},
                         Shape{DType::kFloat16, 256, 500, 500, false, -1, 30, 1, 4, 2, "fa3_fwd_sm90_fp16_hd256"},
                         // More tiles than SMs, so that CTAs take several: a skip then follows the previous
                         // tile's deferred epilogue (head dim 64) and starts at a ring position other than 0.
                         // 1060 rows end in a 100-row tile in which warpgroup 0 skips a block while warpgroup
                         // 2 has no rows.
                         Shape{DType::kBFloat16, 64, 1060, 1060, true, -1, -1, 2, 16, 4, kHd64},
                         Shape{DType::kFloat16, 256, 200, 200, true, -1, -1, 8, 32, 8, "fa3_fwd_sm90_fp16_hd256"}}) {
    Case c = fa3_case("lead-blocks", v.dtype, v.d, v.sq, v.sk);
    c.batch = v.batch;
    c.heads_q = v.heads_q;
    c.heads_kv = v.heads_kv;
    c.causal = v.causal;
    c.window_left = v.window_left;
    c.window_right = v.window_right;
    fat::check_forward_case(c, v.kernel);
  }
  Case varlen = fa3_case("lead-blocks-varlen", DType::kBFloat16, 256, 0, 0);
  varlen.lens_q = {333, 70, 0, 129};
  varlen.lens_k = {333, 500, 40, 64};
  varlen.causal = true;
  fat::check_forward_case(varlen, "fa3_fwd_sm90_bf16_hd256");
}

// A causal GQA shape with three L2 sections of unequal size (8, 8 and 4 query-head pairs: 16384 keys of
// head dim 64 put 4 KV heads in a section), run twice on one stream: every element written (the outputs
// are poisoned), sampled rows of every head against the reference, both runs bitwise equal, and the
// work queue's counter back at zero after each call (else the second call would skip tiles).
TEST(Fa3Forward, SectionsAndWorkQueue) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  constexpr int kSampleRows = 8;
  Case c = fa3_case("sections", DType::kBFloat16, 64, 16384, 16384);
  c.heads_q = 20;
  c.heads_kv = 10;
  c.causal = true;
  const int sm_count = [] {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
  }();
  const int m_blocks = int((c.seqlen_q + 191) / 192);  // head dim 64: 192-row tiles
  ASSERT_EQ(flashattn::cuda::fa3::l2_section_heads(1, 20, 10, 16384, 64, 2, m_blocks, sm_count, true), 8)
      << "the shape no longer has three sections";
  const uint64_t seed = fat::next_forward_seed();
  SCOPED_TRACE(c.name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostCase h(c, rng);
  DeviceCase d(h);
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  int* counter = nullptr;  // the default stream's zero-at-rest counters, the queue's among them
  ASSERT_TRUE(flashattn::cuda::stream_counters(device, nullptr, 1, &counter).ok());
  std::vector<uint8_t> first_out;
  for (int run = 0; run < 2; ++run) {
    RunInfo info;
    ASSERT_NO_FATAL_FAILURE(poisoned_forward(d, h, &info));
    int left = -1;
    ASSERT_EQ(cudaMemcpy(&left, counter, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(left, 0) << "the work queue's counter after call " << run;
    d.download_forward(&h);
    if (run == 0) {
      fat::expect_kernel(info, kFa3Prefix);
      ASSERT_NO_FATAL_FAILURE(fat::expect_sampled_rows_match(h, kSampleRows, rng, info.kernel));
      first_out = h.out.storage;
    } else {
      EXPECT_EQ(h.out.storage, first_out) << "out differs between the two calls";
    }
  }
}

// A forward recorded into a CUDA graph: on a stream being captured the work queue takes a zeroed counter
// of the call's own (launch_counters) instead of the stream's. Recording must not run the kernel, and three
// replays must give the bytes a direct call on the same stream gave (itself checked on sampled rows).
TEST(Fa3Forward, RecordedInACudaGraphAndReplayed) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  constexpr int kSampleRows = 8;
  Case c = fa3_case("graph", DType::kBFloat16, 128, 1024, 1024);
  c.batch = 2;
  c.heads_q = 16;
  c.heads_kv = 4;
  c.causal = true;
  const uint64_t seed = fat::next_forward_seed();
  SCOPED_TRACE(c.name() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostCase h(c, rng);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    DeviceCase d(h);
    flashattn::AttentionArgs args = d.forward_args();
    args.stream = stream;
    RunInfo info;
    ASSERT_NO_FATAL_FAILURE(poisoned_forward(d, h, args, &info));
    d.download_forward(&h);
    fat::expect_kernel(info, kFa3Prefix);
    ASSERT_NO_FATAL_FAILURE(fat::expect_sampled_rows_match(h, kSampleRows, rng, info.kernel));
    const std::vector<uint8_t> direct = h.out.storage;

    ASSERT_EQ(cudaMemset(d.out.view().data, kPoisonByte, h.out.storage.size()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status s = flashattn::forward(args, &info);
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    d.download_forward(&h);
    EXPECT_EQ(harness::count_nan(h.out), h.out.numel()) << "recording the call must not run it";
    for (int replay = 0; replay < 3; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    d.download_forward(&h);
    EXPECT_EQ(h.out.storage, direct) << "the replays differ from the direct call";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

// `auto` tries fa3 first on a compute capability 9.0 device and falls to fa2 for what fa3 refuses.
TEST(Fa3Forward, AutoPicksFa3WhereItRuns) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  auto expect_auto = [](Case c, Algorithm expected, const char* prefix) {
    c.algorithm = Algorithm::kAuto;
    SCOPED_TRACE(c.name());
    std::mt19937_64 rng(fat::next_forward_seed());
    HostCase h(c, rng);
    RunInfo info;
    const Status s = flashattn::check_supported(DeviceCase(h).forward_args(), &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(info.algorithm, expected) << to_string(info.algorithm) << " " << info.kernel;
    fat::check_forward_case(c, prefix);
  };
  expect_auto(fa3_case("auto-bf16-d128", DType::kBFloat16, 128, 200, 200), Algorithm::kFA3, kFa3Prefix);
  Case causal = fa3_case("auto-fp16-d64", DType::kFloat16, 64, 150, 300);
  causal.causal = true;
  expect_auto(causal, Algorithm::kFA3, kFa3Prefix);
  expect_auto(fa3_case("auto-bf16-d96", DType::kBFloat16, 96, 200, 200), Algorithm::kFA3, kFa3Prefix);
  // Not a multiple of 8: fa3 and fa2 refuse it, fa1 (any head dim up to 128) runs it.
  expect_auto(fa3_case("auto-bf16-d100", DType::kBFloat16, 100, 200, 200), Algorithm::kFA1, "fa1_fwd_sm80_");
  Case negative = fa3_case("auto-negative-scale", DType::kBFloat16, 128, 100, 100);
  negative.scale = -0.2f;
  expect_auto(negative, Algorithm::kFA2, kFa2Prefix);

  // fa3 has no backward: `auto` runs the backward on fa2.
  Case bwd = fa3_case("auto-backward", DType::kBFloat16, 128, 64, 64);
  bwd.algorithm = Algorithm::kAuto;
  bwd.with_backward = true;
  std::mt19937_64 rng(fat::next_forward_seed());
  HostCase h(bwd, rng);
  RunInfo info;
  const Status s = flashattn::check_supported(DeviceCase(h).backward_args(), &info);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(info.algorithm, Algorithm::kFA2);
  fat::expect_kernel(info, kFa2BackwardPrefix);
}

// Problems with a softcap run the kernels that carry its code (Fa3Config::kSoftcap, "_softcap" in the name),
// every other problem the kernels without it: each kernel head dim and both head-dim-64 tile shapes, with and
// without a softcap, against the reference, the whole name compared.
TEST(Fa3Forward, SoftcapKernels) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  struct Shape {
    DType dtype;
    int64_t d, sq, sk;
    bool causal;
    const char* kernel;
  };
  for (const Shape& v : {Shape{DType::kBFloat16, 64, 300, 300, true, "fa3_fwd_sm90_bf16_hd64_m128n128"},
                         Shape{DType::kFloat16, 64, 200, 1100, false, "fa3_fwd_sm90_fp16_hd64_m192n128"},
                         Shape{DType::kBFloat16, 128, 257, 300, true, "fa3_fwd_sm90_bf16_hd128_m128n128"},
                         Shape{DType::kFloat16, 256, 130, 200, false, "fa3_fwd_sm90_fp16_hd256_m128n64"}}) {
    for (float softcap : {0.0f, 15.0f}) {
      Case c = fa3_case("softcap-kernels", v.dtype, v.d, v.sq, v.sk);
      c.causal = v.causal;
      c.softcap = softcap;
      const std::string expected = std::string(v.kernel) + (softcap > 0.0f ? "_softcap" : "");
      const fat::ForwardCall call = [expected](const flashattn::AttentionArgs& a, RunInfo* info) {
        const Status s = flashattn::forward(a, info);
        if (s.ok()) EXPECT_EQ(info->kernel, expected);
        return s;
      };
      fat::check_forward_case(c, expected, call);
    }
  }
}

constexpr Fa3Ablation kVariants[] = {Fa3Ablation::kFull, Fa3Ablation::kNoWarpSpecialization,
                                     Fa3Ablation::kNoPingPong, Fa3Ablation::kNoIntraWarpgroupOverlap};

// Every ablation variant computes the same attention: each against the reference on causal,
// non-causal, GQA and varlen shapes, with the kernel name saying which variant ran. The variants are
// built for head dim 128 (the ablation's shape).
TEST(Fa3Forward, AblationVariantsMatchReference) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  std::vector<Case> shapes;
  Case causal = fa3_case("ablation-causal", DType::kBFloat16, 128, 300, 300);
  causal.batch = 2;
  causal.causal = true;
  shapes.push_back(causal);
  shapes.push_back(fa3_case("ablation-noncausal", DType::kFloat16, 128, 257, 513));
  Case gqa = fa3_case("ablation-gqa", DType::kBFloat16, 128, 301, 301);
  gqa.heads_q = 16;
  gqa.heads_kv = 2;
  shapes.push_back(gqa);
  Case varlen = fa3_case("ablation-varlen", DType::kBFloat16, 128, 0, 0);
  varlen.lens_q = {17, 0, 200, 64};
  varlen.lens_k = {33, 12, 260, 0};
  varlen.heads_q = 4;
  varlen.heads_kv = 2;
  varlen.causal = true;
  shapes.push_back(varlen);
  Case capped = fa3_case("ablation-softcap", DType::kBFloat16, 128, 200, 300);  // the variants keep its code
  capped.softcap = 10.0f;
  capped.causal = true;
  shapes.push_back(capped);

  for (Fa3Ablation v : kVariants) {
    SCOPED_TRACE(std::string("variant ") + to_string(v));
    const fat::ForwardCall call = [v](const flashattn::AttentionArgs& a, RunInfo* info) {
      const Status s = flashattn::forward_fa3_ablation(a, v, info);
      const std::string suffix = std::string("_") + to_string(v);
      const std::string& kernel = info->kernel;
      const bool named = kernel.size() > suffix.size() &&
                         kernel.compare(kernel.size() - suffix.size(), suffix.size(), suffix) == 0;
      if (s.ok() && v != Fa3Ablation::kFull) EXPECT_TRUE(named) << kernel << " does not end with " << suffix;
      if (s.ok()) EXPECT_EQ(info->algorithm, Algorithm::kFA3);
      return s;
    };
    for (const Case& c : shapes) fat::check_forward_case(c, kFa3Prefix, call);
  }
}

// The ablation entry refuses what fa3 refuses (NotSupported) and other algorithms (InvalidArgument).
TEST(Fa3Forward, AblationRefusals) {
  FA_SKIP_UNLESS_DEVICE_RUNS(fat::fa3_algo());
  auto status_of = [](Case c) {
    c.with_lse = false;
    std::mt19937_64 rng(fat::next_forward_seed());
    HostCase h(c, rng);
    DeviceCase d(h);
    const Status s = flashattn::forward_fa3_ablation(d.forward_args(), Fa3Ablation::kNoPingPong);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // A refusal writes nothing: out keeps its poison.
    d.download_forward(&h);
    if (!s.ok()) EXPECT_EQ(harness::count_nan(h.out), h.out.numel()) << "a refused call wrote out";
    return s;
  };
  Status s = status_of(fa3_case("ablation-d96", DType::kBFloat16, 96, 64, 64));
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("fa3"), std::string::npos) << s.message();
  // The variants exist for head dim 128 only; the full kernel runs every head dim.
  s = status_of(fa3_case("ablation-d64", DType::kBFloat16, 64, 64, 64));
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("head_dim 128"), std::string::npos) << s.message();

  Case fa2 = fa3_case("ablation-algo-fa2", DType::kBFloat16, 128, 64, 64);
  fa2.algorithm = Algorithm::kFA2;
  s = status_of(fa2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();

  Case autoalgo = fa3_case("ablation-algo-auto", DType::kBFloat16, 128, 64, 64);
  autoalgo.algorithm = Algorithm::kAuto;
  s = status_of(autoalgo);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
