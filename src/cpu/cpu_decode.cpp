// KV-cache attention (decode) on the CPU, Flash-Decoding style.
//
// 1. Append: k_new/v_new are copied into the cache slots cache_seqlens[b] .. + seqlen_new - 1 (paged or
//    contiguous addressing); nothing else in the caches is written.
// 2. Split-KV attention: the query rows of one sequence that read one KV head are stacked into a tile
//    (packed GQA: the whole group of query heads together, so every K/V row is converted once per KV
//    head, not once per query head). The keys that tile can see are cut into chunks; each (tile, chunk)
//    task runs the FA2 inner loop (S = Q K^T in log2 units, online softmax, O += P V) over its chunk and
//    leaves a normalized partial output and its LSE. Tiles of at most kInPlaceMaxRows rows (a decode step:
//    a group of query heads, one or a few tokens) read K and V where they lie in the cache (cache_rows.h)
//    on CPUs with AVX-512; larger ones, and other CPUs, gather each block into fp32 buffers for the tile
//    products.
// 3. Merge: per row, lse = log(sum_i exp(lse_i)) (core::merge_lse) and out = sum_i exp(lse_i - lse) * o_i.
//    A tile with a single chunk skips the partial buffers and writes out and lse directly.
#include "cpu/cpu_decode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "api/backend.h"
#include "core/softmax_online.h"
#include "cpu/bf16_tile_products.h"
#include "cpu/cache_rows.h"
#include "cpu/cpu_kernels.h"
#include "cpu/row_ops.h"
#include "cpu/scratch.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_io.h"
#include "cpu/tile_softmax.h"
#include "cpu/tiling.h"

namespace flashattn::detail::cpu {
namespace {

// Tile shape of the decode tasks: Br stacked query rows (a decode step has few rows per head, so the
// group's heads fill the tile), Bc keys per block as in the forward kernel for head_dim <= 128.
constexpr TileShape kDecodeTile{/*stacked_rows=*/256, /*block_keys=*/128};
// Tasks per worker the heuristic aims for: more than one, so the dynamic queue can even out chunks of
// sequences with very different lengths.
constexpr int64_t kDecodeTasksPerWorker = 2;
// A task's K and V blocks of all its KV heads, in fp32, should fit a core's L2 cache: at most this many
// bytes, with blocks of no fewer than kMinGroupBlockKeys keys (the products' column panels).
constexpr int64_t kGroupBlockBytes = 512 * 1024;
constexpr int64_t kMinGroupBlockKeys = 32;
// At most this many bytes of a task's query rows and output accumulators (fp32) for all its tiles.
constexpr int64_t kGroupTileBytes = 2 * 1024 * 1024;

std::atomic<int> g_decode_path{int(DecodePath::kAuto)};

// The query side of the call as a detail::Problem (padded layout, no varlen), so the tiling helpers
// (query tiles, stacked loads and stores) and the bf16 tile products serve the decode kernel too. Only the
// query-side fields, the scale and the softcap are set.
Problem query_view(const KVCacheProblem& kp) {
  Problem p;
  p.dtype = kp.dtype;
  p.device = kp.device;
  p.device_index = kp.device_index;
  p.batch = kp.batch;
  p.heads_q = kp.heads_q;
  p.heads_kv = kp.heads_kv;
  p.head_dim = kp.head_dim;
  p.seqlen_q = kp.seqlen_q;
  p.seqlen_k = kp.max_len_k();
  p.total_q = kp.batch * kp.seqlen_q;
  p.q = kp.q;
  p.out = kp.out;
  p.lse = kp.lse;
  p.algorithm = kp.algorithm;
  p.num_threads = kp.num_threads;
  p.scale = kp.scale;
  p.softcap = kp.softcap;  // the bf16 tile products scale capped scores themselves
  return p;
}

// Keys [begin, end) that some row of the tile sees, cut into `splits` chunks of `chunk` keys (the last
// one shorter). A tile that sees no key has one empty chunk, so its rows still get out = 0, lse = -inf.
struct KeySplit {
  int64_t begin = 0, end = 0;
  int64_t chunk = 0, splits = 1;
  int64_t chunk_begin(int64_t i) const { return begin + i * chunk; }
  int64_t chunk_end(int64_t i) const { return std::min(end, begin + (i + 1) * chunk); }
};

KeySplit split_keys(const core::MaskSpec& mask, const QueryTile& tile, int64_t wanted) {
  KeySplit k;
  k.begin = mask.tile_key_begin(tile.row_begin);
  k.end = mask.tile_key_end(tile.row_end());
  const int64_t keys = k.end - k.begin;
  if (keys <= 0) {
    k.end = k.begin;
    return k;
  }
  const int64_t n = std::max<int64_t>(1, std::min(wanted, keys));
  k.chunk = (keys + n - 1) / n;
  // Rounding the chunk up can leave trailing chunks empty: recount so that every chunk has keys.
  k.splits = (keys + k.chunk - 1) / k.chunk;
  return k;
}

// Splits wanted for a tile whose rows see `keys` keys: the forced count, or the heuristic's count
// limited so that chunks keep at least kMinSplitKeys keys.
int64_t wanted_splits(const KVCacheProblem& p, int64_t heuristic, int64_t keys) {
  if (p.num_splits > 0) return p.num_splits;
  return std::max<int64_t>(1, std::min(heuristic, keys / kMinSplitKeys));
}

// The tiles one task attends together: every KV head's tile of the same sequence, query rows and query
// heads within the group. Their rows see the same keys (the mask depends on the sequence and the rows
// only), so one pass over a key's cache row gathers K (or V) for all of them: in the token-major cache
// the KV heads of one key are contiguous, where one head's rows alone lie heads_kv * head_dim apart, a
// pattern that streams at half the rate on the CPU.
struct TileGroup {
  std::vector<size_t> tiles;  // into DecodePlan::tiles, in KV-head order
};

struct DecodeTask {
  size_t group = 0;
  int64_t split = 0;
};

struct DecodePlan {
  std::vector<QueryTile> tiles;
  std::vector<KeySplit> keys;          // per tile (the same within a group)
  std::vector<int64_t> partial_base;   // per tile: first partial row (of stacked x splits), -1: direct store
  std::vector<TileGroup> groups;
  std::vector<DecodeTask> tasks;
  int64_t partial_rows = 0;
  int64_t group_tiles = 1;  // tiles per group (heads_kv)
  int64_t block_keys = 0;   // keys per block of a task
  DecodePath path = DecodePath::kGathered;  // kInPlace, kTiles or kGathered (decode_path)
  Bf16Products products = Bf16Products::kFp32;  // of kTiles
};

// Tiles per group at most: their query rows and output accumulators in fp32 (decode's few rows: a few KB a
// tile) stay within kGroupTileBytes, which only a long seqlen_q with many KV heads reaches.
int64_t group_tile_limit(const Problem& qp) {
  const int64_t tile_bytes =
      2 * heads_per_tile(qp, kDecodeTile) * rows_per_tile(qp, kDecodeTile) * qp.head_dim * int64_t(sizeof(float));
  return std::max<int64_t>(1, kGroupTileBytes / std::max<int64_t>(1, tile_bytes));
}

// Tasks before the split: query tiles over KV heads, each KV head's tiles cut into groups of at most
// group_tile_limit consecutive heads (every KV head has the same query tiles).
int64_t count_groups(const KVCacheProblem& p, const Problem& qp) {
  const int64_t heads_kv = std::max<int64_t>(1, p.heads_kv);
  const int64_t per_group = std::min(heads_kv, group_tile_limit(qp));
  return count_query_tiles(qp, kDecodeTile) / heads_kv * ((heads_kv + per_group - 1) / per_group);
}

// Keys per block: kDecodeTile's, halved while a group's K and V blocks in fp32 exceed kGroupBlockBytes
// (so they stay in a core's L2), but not below kMinGroupBlockKeys.
int64_t group_block_keys(int64_t group_tiles, int64_t head_dim) {
  int64_t keys = kDecodeTile.block_keys;
  while (keys > kMinGroupBlockKeys && 2 * group_tiles * keys * head_dim * int64_t(sizeof(float)) > kGroupBlockBytes)
    keys /= 2;
  return keys;
}

// The most stacked rows a tile of the call has: the query heads of a tile times its query rows (at most
// seqlen_q, which a KV-cache call has the same for every sequence).
int64_t max_tile_rows(const Problem& qp) {
  return heads_per_tile(qp, kDecodeTile) * std::min(rows_per_tile(qp, kDecodeTile), std::max<int64_t>(1, qp.seqlen_q));
}

// Which products the tiles of this call take (cpu_decode.h): the cache rows in place where their stacked
// rows are few enough and the CPU runs an AVX-512 form of them (the portable loops lose to the tile
// products); else the bf16 tiles where the forward kernel takes them (bf16/fp16, head_dim a multiple of 32,
// AMX); else fp32 blocks. A forced path takes its products wherever they can run.
DecodePath decode_path(const Problem& qp) {
  const DecodePath forced = DecodePath(g_decode_path.load(std::memory_order_relaxed));
  const bool tiles = tile_products(qp) != Bf16Products::kFp32;
  const int64_t rows = max_tile_rows(qp);
  switch (forced) {
    case DecodePath::kGathered: return DecodePath::kGathered;
    case DecodePath::kTiles: return tiles ? DecodePath::kTiles : DecodePath::kGathered;
    case DecodePath::kInPlace: return rows <= kInPlaceMaxRows ? DecodePath::kInPlace : DecodePath::kGathered;
    case DecodePath::kAuto: break;
  }
  const bool avx512 = cache_rows_best_impl(qp.dtype) != CacheRowsImpl::kPortable;
  if (avx512 && rows <= (tiles ? kInPlaceMaxRowsBesideTiles : kInPlaceMaxRows)) return DecodePath::kInPlace;
  return tiles ? DecodePath::kTiles : DecodePath::kGathered;
}

// The kernel name's last part for `path`.
std::string decode_path_name(DecodePath path, const Problem& qp) {
  switch (path) {
    case DecodePath::kInPlace: return std::string("inplace_") + cache_rows_impl_name(cache_rows_best_impl(qp.dtype));
    case DecodePath::kTiles: return std::string("tiles_") + bf16_products_name(tile_products(qp));
    default: return tile_gemm_impl();
  }
}

DecodePlan make_plan(const KVCacheProblem& kp, const Problem& qp, int64_t heuristic, DecodePath path) {
  DecodePlan plan;
  plan.tiles = make_query_tiles(qp, kDecodeTile);
  // Tiles of one group differ only in their KV head (and so in their query heads): a group is found by
  // its sequence, first row and first query head within the group of heads.
  const int64_t heads_per_kv = kp.heads_q / kp.heads_kv;
  std::map<std::tuple<int64_t, int64_t, int64_t>, size_t> group_of;
  for (size_t t = 0; t < plan.tiles.size(); ++t) {
    const QueryTile& tile = plan.tiles[t];
    const core::MaskSpec mask = kp.mask(tile.batch);
    const int64_t visible = mask.tile_key_end(tile.row_end()) - mask.tile_key_begin(tile.row_begin);
    const KeySplit k = split_keys(mask, tile, wanted_splits(kp, heuristic, visible));
    plan.keys.push_back(k);
    plan.partial_base.push_back(k.splits > 1 ? plan.partial_rows : -1);
    if (k.splits > 1) plan.partial_rows += k.splits * tile.stacked();
    const auto key = std::make_tuple(tile.batch, tile.row_begin, tile.head_begin - tile.kv_head * heads_per_kv);
    const auto found = group_of.emplace(key, plan.groups.size());
    if (found.second) plan.groups.emplace_back();
    plan.groups[found.first->second].tiles.push_back(t);
  }
  // Groups keep the order of their first tile (the most expensive first); tiles go in KV-head order, and a
  // group with more tiles than group_tile_limit allows is cut into runs of consecutive KV heads.
  const size_t limit = size_t(group_tile_limit(qp));
  std::vector<TileGroup> groups;
  for (TileGroup& g : plan.groups) {
    std::sort(g.tiles.begin(), g.tiles.end(),
              [&](size_t a, size_t b) { return plan.tiles[a].kv_head < plan.tiles[b].kv_head; });
    for (size_t first = 0; first < g.tiles.size(); first += limit) {
      TileGroup part;
      part.tiles.assign(g.tiles.begin() + first, g.tiles.begin() + std::min(g.tiles.size(), first + limit));
      plan.group_tiles = std::max(plan.group_tiles, int64_t(part.tiles.size()));
      groups.push_back(std::move(part));
    }
  }
  plan.groups = std::move(groups);
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (int64_t i = 0; i < plan.keys[plan.groups[g].tiles.front()].splits; ++i) plan.tasks.push_back({g, i});
  // Without fp32 blocks the keys per block need no limit for the L2: the in-place path keeps only the
  // scores of the group's tiles (group_tiles x rows x block_keys floats), the tiles one block of bf16 rows.
  plan.path = path;
  plan.products = plan.path == DecodePath::kTiles ? tile_products(qp) : Bf16Products::kFp32;
  plan.block_keys = plan.path == DecodePath::kGathered ? group_block_keys(plan.group_tiles, kp.head_dim)
                                                       : kDecodeTile.block_keys;
  return plan;
}

// Step 1: k_new/v_new into their slots. Same dtype on both sides, so a row is a byte copy.
void append_new_tokens(const KVCacheProblem& p) {
  if (!p.has_new()) return;
  const int64_t elem = dtype_size(p.dtype);
  const size_t row_bytes = size_t(p.head_dim * elem);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 0; t < p.seqlen_new; ++t) {
      const int64_t pos = p.cache_seqlens[size_t(b)] + t;
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t src_off = b * p.k_new.batch_stride + t * p.k_new.row_stride + h * p.k_new.head_stride;
        const int64_t vsrc_off = b * p.v_new.batch_stride + t * p.v_new.row_stride + h * p.v_new.head_stride;
        const int64_t kdst = p.cache_row(p.k_cache, b, pos, h);
        const int64_t vdst = p.cache_row(p.v_cache, b, pos, h);
        std::memcpy(static_cast<char*>(p.k_cache.ptr) + kdst * elem,
                    static_cast<const char*>(p.k_new.ptr) + src_off * elem, row_bytes);
        std::memcpy(static_cast<char*>(p.v_cache.ptr) + vdst * elem,
                    static_cast<const char*>(p.v_new.ptr) + vsrc_off * elem, row_bytes);
      }
    }
}

enum DecodeBuffer : size_t {
  kQ,       // [group tiles][stacked x d] query rows, fp32
  kO,       // [group tiles][stacked x d] unnormalized output accumulators; the merged output in the merge pass
  kS,       // [stacked x Bc] scores, then probabilities in place (one tile at a time); in place: [group tiles][..]
  kK,       // [group tiles][Bc x d] K rows gathered from the cache, fp32 (not in place)
  kV,       // [group tiles][Bc x d] V rows (not in place)
  kFactor,  // [stacked] 1 / row sum at the end
  kQPacked, // [group tiles][stacked x stride] query rows as cache_scores reads them (in place only)
  kRowsK,   // [Bc x d] one head's K rows as stored, 16-bit (tiles only)
  kRowsV,   // [Bc x d] its V rows
};

// One task's tiles and keys, as both paths of DecodeRunner::attend see them.
struct TaskKeys {
  const std::vector<size_t>& tiles;  // into DecodePlan::tiles, consecutive KV heads
  const QueryTile& lead;             // the first of them
  core::MaskSpec mask;
  int64_t m;                         // stacked rows of every tile
  int64_t c0, c1;                    // the chunk's keys [c0, c1)
  float alpha;                       // the scores' scale
};

// Step 2 for one (tile group, chunk) task, and step 3 for one tile.
class DecodeRunner {
 public:
  DecodeRunner(const KVCacheProblem& kp, const Problem& qp, const DecodePlan& plan, float* partial_o,
               float* partial_lse)
      : kp_(kp),
        qp_(qp),
        plan_(plan),
        d_(kp.head_dim),
        // Rounded up to whole 32-row blocks, the rows the bf16 tile products touch.
        max_stacked_(round_up_to_tile(max_tile_rows(qp))),
        tile_floats_(max_stacked_ * d_),
        block_floats_(plan.block_keys * d_),
        partial_o_(partial_o),
        partial_lse_(partial_lse),
        impl_(cache_rows_best_impl(kp.dtype)),
        scratch_({plan.group_tiles * tile_floats_, plan.group_tiles * tile_floats_,
                  (in_place() ? plan.group_tiles : 1) * max_stacked_ * plan.block_keys,
                  gathered() ? plan.group_tiles * block_floats_ : 0,
                  gathered() ? plan.group_tiles * block_floats_ : 0, max_stacked_,
                  in_place() ? plan.group_tiles * max_stacked_ * cache_query_stride(impl_, kp.dtype, d_) *
                                   cache_query_elem_bytes(impl_, kp.dtype) / int64_t(sizeof(float))
                             : 0,
                  tiles() ? Scratch::halves(block_floats_) : 0, tiles() ? Scratch::halves(block_floats_) : 0}),
        rows_(size_t(plan.group_tiles * max_stacked_)),
        key_rows_(size_t(in_place() ? plan.block_keys : 0)),
        value_rows_(key_rows_.size()) {}

  void attend(const DecodeTask& task) {
    const std::vector<size_t>& tiles = plan_.groups[task.group].tiles;
    // The tiles of a group share the sequence, the rows and so the mask, the key chunks and the row count.
    const QueryTile& lead = plan_.tiles[tiles.front()];
    const KeySplit& keys = plan_.keys[tiles.front()];
    const int64_t m = lead.stacked();
    // The bf16 tile products accumulate whole 32-row blocks.
    const int64_t o_rows = this->tiles() ? Bf16TileProducts::padded_rows(m) : m;
    // One set of bf16 tile operands per tile of a group (each holds its tile's query rows), made by the
    // first task (the merge pass needs none).
    while (this->tiles() && tile_products_.size() < tiles.size())
      tile_products_.push_back(std::make_unique<Bf16TileProducts>(qp_, max_stacked_, plan_.block_keys, plan_.products));
    for (size_t g = 0; g < tiles.size(); ++g) {
      if (this->tiles())
        tile_products_[g]->load_q(plan_.tiles[tiles[g]]);
      else
        load_stacked(qp_, qp_.q, plan_.tiles[tiles[g]], q_of(int64_t(g)));
      fill_row(o_of(int64_t(g)), o_rows * d_, 0.0f);
      std::fill(rows_of(int64_t(g)), rows_of(int64_t(g)) + m, core::OnlineSoftmaxRow{});
    }
    // Softcap needs the score in natural units before the cap; without it fold log2(e) into the product.
    const float alpha = kp_.softcap > 0.0f ? kp_.scale : kp_.scale * core::kLog2e;
    const TaskKeys range{tiles, lead, kp_.mask(lead.batch), m, keys.chunk_begin(task.split),
                         keys.chunk_end(task.split), alpha};
    if (in_place())
      attend_in_place(range);
    else if (this->tiles())
      attend_tiles(range);
    else
      attend_gathered(range);
    for (size_t g = 0; g < tiles.size(); ++g) finish(tiles[g], task.split, o_of(int64_t(g)), rows_of(int64_t(g)));
  }

  // The tiles' products with the cache rows read in place: per block, the scores of every tile of the
  // group in one pass over the keys' K rows (all KV heads of a key together), each tile's online softmax,
  // then P V of every tile in one pass over the V rows.
  void attend_in_place(const TaskKeys& t) {
    const int64_t count = int64_t(t.tiles.size());
    const int64_t bc = plan_.block_keys;
    float* s = scratch_[kS];
    cache_query_pack(impl_, kp_.dtype, q_of(0), tile_floats_, count, t.m, d_, scratch_[kQPacked]);
    // A group's tiles are consecutive KV heads (make_plan), so head g's row is g head strides past the
    // first one's.
    const int64_t elem = dtype_size(kp_.dtype);
    const char* k_base = static_cast<const char*>(kp_.k_cache.ptr);
    const char* v_base = static_cast<const char*>(kp_.v_cache.ptr);
    for (int64_t k0 = t.c0; k0 < t.c1; k0 += bc) {
      const int64_t kn = std::min(bc, t.c1 - k0);
      for (int64_t i = 0; i < kn; ++i) {
        key_rows_[size_t(i)] = k_base + kp_.cache_row(kp_.k_cache, t.lead.batch, k0 + i, t.lead.kv_head) * elem;
        value_rows_[size_t(i)] = v_base + kp_.cache_row(kp_.v_cache, t.lead.batch, k0 + i, t.lead.kv_head) * elem;
      }
      const CacheBlock k_block{kp_.dtype, key_rows_.data(), kp_.k_cache.head_stride * elem, count, kn, d_};
      cache_scores(impl_, k_block, scratch_[kQPacked], t.m, t.alpha, s, t.m * bc, bc);
      for (int64_t g = 0; g < count; ++g) {
        float* sg = s + g * t.m * bc;
        ProbabilitiesInPlace probabilities(sg, bc, kn);
        online_softmax_block(sg, bc, t.m, kn, k0, plan_.tiles[t.tiles[size_t(g)]], t.mask, kp_.softcap,
                             /*score_scale=*/1.0f, o_of(g), d_, rows_of(g), probabilities, [] {});
      }
      const CacheBlock v_block{kp_.dtype, value_rows_.data(), kp_.v_cache.head_stride * elem, count, kn, d_};
      cache_accumulate(impl_, v_block, s, t.m * bc, bc, t.m, o_of(0), tile_floats_);
    }
    if (cache_output_interleaved(impl_, kp_.dtype, d_)) {
      // Each accumulator row back in column order (through the score buffer, free after the loop).
      for (int64_t g = 0; g < count; ++g)
        for (int64_t r = 0; r < t.m; ++r) {
          cache_output_deinterleave(o_of(g) + r * d_, d_, s);
          std::copy(s, s + d_, o_of(g) + r * d_);
        }
    }
  }

  // The tiles' products on bf16 tiles (AMX), as in the forward kernel: per block and tile, its head's K and
  // V rows packed (read in place from a contiguous cache, first copied as stored from a paged one, which
  // scatters them), S = Q K^T, the online softmax with P as two bf16 terms, O += P V.
  void attend_tiles(const TaskKeys& t) {
    const int64_t bc = plan_.block_keys;
    float* s = scratch_[kS];
    uint16_t* k_rows = scratch_.u16(kRowsK);
    uint16_t* v_rows = scratch_.u16(kRowsV);
    const size_t row_bytes = size_t(d_) * sizeof(uint16_t);
    for (int64_t k0 = t.c0; k0 < t.c1; k0 += bc) {
      const int64_t kn = std::min(bc, t.c1 - k0);
      for (int64_t g = 0; g < int64_t(t.tiles.size()); ++g) {
        const QueryTile& tile = plan_.tiles[t.tiles[size_t(g)]];
        auto row = [&](const CacheStrided& c, int64_t i) {
          return static_cast<const uint16_t*>(c.ptr) + kp_.cache_row(c, t.lead.batch, k0 + i, tile.kv_head);
        };
        Bf16TileProducts& products = *tile_products_[size_t(g)];
        if (!kp_.paged) {
          products.load_kv_rows(row(kp_.k_cache, 0), kp_.k_cache.row_stride, row(kp_.v_cache, 0),
                                kp_.v_cache.row_stride, kn);
        } else {
          for (int64_t i = 0; i < kn; ++i) {
            std::memcpy(k_rows + i * d_, row(kp_.k_cache, i), row_bytes);
            std::memcpy(v_rows + i * d_, row(kp_.v_cache, i), row_bytes);
          }
          products.load_kv_rows(k_rows, d_, v_rows, d_, kn);
        }
        float* o = o_of(g);
        const float score_scale = products.scores(t.m, kn, t.alpha, s, bc);
        auto probabilities = products.probabilities(s, bc, kn);
        online_softmax_block(s, bc, t.m, kn, k0, tile, t.mask, kp_.softcap, score_scale, o, d_, rows_of(g),
                             probabilities, [] {});
        products.accumulate(t.m, kn, s, bc, o);
      }
    }
  }

  // The tiles' products on fp32 blocks: per block, every tile's K and V rows gathered and converted, then
  // per tile S = Q K^T, the online softmax and O += P V through tile_gemm.
  void attend_gathered(const TaskKeys& t) {
    const int64_t bc = plan_.block_keys;
    float* s = scratch_[kS];
    float* k = scratch_[kK];
    float* v = scratch_[kV];
    for (int64_t k0 = t.c0; k0 < t.c1; k0 += bc) {
      const int64_t kn = std::min(bc, t.c1 - k0);
      gather_rows(kp_.k_cache, t.tiles, t.lead.batch, k0, kn, k);
      gather_rows(kp_.v_cache, t.tiles, t.lead.batch, k0, kn, v);
      for (int64_t g = 0; g < int64_t(t.tiles.size()); ++g) {
        const QueryTile& tile = plan_.tiles[t.tiles[size_t(g)]];
        float* o = o_of(g);
        tile_gemm(Op::kNone, Op::kTranspose, t.m, kn, d_, t.alpha, q_of(g), d_, k + g * block_floats_, d_,
                  /*beta=*/0.0f, s, bc);
        ProbabilitiesInPlace probabilities(s, bc, kn);
        online_softmax_block(s, bc, t.m, kn, k0, tile, t.mask, kp_.softcap, /*score_scale=*/1.0f, o, d_,
                             rows_of(g), probabilities, [] {});
        tile_gemm(Op::kNone, Op::kNone, t.m, d_, kn, /*alpha=*/1.0f, s, bc, v + g * block_floats_, d_,
                  /*beta=*/1.0f, o, d_);
      }
    }
  }

  // A tile's rows after its chunk: the output (a tile with one chunk) or the chunk's partial rows.
  void finish(size_t t, int64_t split, const float* o, const core::OnlineSoftmaxRow* rows) {
    const QueryTile& tile = plan_.tiles[t];
    const int64_t m = tile.stacked();
    // Rows that saw no key keep O = 0 and a zero sum: inv_sum() is 0 and lse() is -inf, never NaN.
    float* factor = scratch_[kFactor];
    for (int64_t r = 0; r < m; ++r) factor[r] = rows[r].inv_sum();
    const int64_t base = plan_.partial_base[t];
    if (base < 0) {
      store_stacked(qp_, o, factor, tile, qp_.out);
      if (kp_.lse.present())
        for (int64_t r = 0; r < m; ++r) *lse_ptr(tile, r) = rows[r].lse();
      return;
    }
    // Partial rows of chunk i: [base + i * m, base + (i + 1) * m), normalized, with their LSE.
    const int64_t first = base + split * m;
    for (int64_t r = 0; r < m; ++r) {
      float* dst = partial_o_ + (first + r) * d_;
      for (int64_t x = 0; x < d_; ++x) dst[x] = o[r * d_ + x] * factor[r];
      partial_lse_[first + r] = rows[r].lse();
    }
  }

  // Step 3 for a tile with several chunks: out = sum_i exp(lse_i - lse) * o_i, lse = log sum_i exp(lse_i).
  void merge(size_t t) {
    const QueryTile& tile = plan_.tiles[t];
    const int64_t m = tile.stacked();
    const int64_t splits = plan_.keys[t].splits;
    const int64_t base = plan_.partial_base[t];
    float* merged = scratch_[kO];
    float* total = scratch_[kFactor];
    for (int64_t r = 0; r < m; ++r) {
      float lse = core::kNegInf;
      for (int64_t i = 0; i < splits; ++i) lse = core::merge_lse(lse, partial_lse_[base + i * m + r]);
      total[r] = lse;
      float* dst = merged + r * d_;
      fill_row(dst, d_, 0.0f);
      // A row with no visible key in any chunk stays 0 (and -inf - -inf would be NaN): skip its weights.
      if (lse == core::kNegInf) continue;
      for (int64_t i = 0; i < splits; ++i) {
        const float part_lse = partial_lse_[base + i * m + r];
        if (part_lse == core::kNegInf) continue;
        const float w = std::exp(part_lse - lse);
        const float* src = partial_o_ + (base + i * m + r) * d_;
        for (int64_t x = 0; x < d_; ++x) dst[x] += w * src[x];
      }
    }
    store_stacked(qp_, merged, /*factors=*/nullptr, tile, qp_.out);
    if (kp_.lse.present())
      for (int64_t r = 0; r < m; ++r) *lse_ptr(tile, r) = total[r];
  }

 private:
  // Keys [k0, k0 + kn) of every tile's KV head into that tile's block, key by key (a paged cache scatters
  // the keys); the heads of one key are read one after another (contiguous in the usual cache layout).
  void gather_rows(const CacheStrided& c, const std::vector<size_t>& tiles, int64_t batch, int64_t k0, int64_t kn,
                   float* dst) const {
    for (int64_t i = 0; i < kn; ++i) {
      const int64_t row = kp_.cache_row(c, batch, k0 + i);  // the page lookup once per key, not per head
      for (size_t g = 0; g < tiles.size(); ++g)
        load_row(c.ptr, kp_.dtype, row + plan_.tiles[tiles[g]].kv_head * c.head_stride, d_,
                 dst + int64_t(g) * block_floats_ + i * d_);
    }
  }

  bool in_place() const { return plan_.path == DecodePath::kInPlace; }
  bool tiles() const { return plan_.path == DecodePath::kTiles; }
  bool gathered() const { return plan_.path == DecodePath::kGathered; }
  float* q_of(int64_t g) const { return scratch_[kQ] + g * tile_floats_; }
  float* o_of(int64_t g) const { return scratch_[kO] + g * tile_floats_; }
  core::OnlineSoftmaxRow* rows_of(int64_t g) { return rows_.data() + g * max_stacked_; }

  float* lse_ptr(const QueryTile& tile, int64_t stacked_row) const {
    const int64_t g = stacked_row / tile.rows, r = stacked_row % tile.rows;
    return static_cast<float*>(kp_.lse.ptr) + tile.batch * kp_.lse.batch_stride +
           (tile.head_begin + g) * kp_.lse.head_stride + (tile.row_begin + r) * kp_.lse.row_stride;
  }

  const KVCacheProblem& kp_;
  const Problem& qp_;
  const DecodePlan& plan_;
  const int64_t d_;
  const int64_t max_stacked_;
  const int64_t tile_floats_;   // one tile's q or o
  const int64_t block_floats_;  // one tile's K or V block
  float* partial_o_;
  float* partial_lse_;
  const CacheRowsImpl impl_;
  Scratch scratch_;
  std::vector<core::OnlineSoftmaxRow> rows_;
  std::vector<const char*> key_rows_, value_rows_;  // a block's cache rows (in place)
  std::vector<std::unique_ptr<Bf16TileProducts>> tile_products_;  // per tile of a group (tiles)
};

Status run_decode(const KVCacheProblem& kp, const Problem& qp, DecodePath path, int workers) {
  const DecodePlan plan = make_plan(kp, qp, heuristic_kv_splits(kp, workers), path);
  // Partial buffers before the append: running out of memory must not leave a half-done call behind.
  std::vector<float> partial_o(size_t(plan.partial_rows * kp.head_dim));
  std::vector<float> partial_lse(size_t(plan.partial_rows));
  append_new_tokens(kp);
  if (plan.tasks.empty()) return Status::Ok();

  Status s = run_workers(resolve_worker_count(workers, int64_t(plan.tasks.size())), int64_t(plan.tasks.size()),
                         [&](TaskQueue& queue) {
                           DecodeRunner runner(kp, qp, plan, partial_o.data(), partial_lse.data());
                           int64_t t = 0;
                           while (queue.pop(&t)) runner.attend(plan.tasks[size_t(t)]);
                           return Status::Ok();
                         });
  if (!s.ok() || plan.partial_rows == 0) return s;

  std::vector<size_t> merges;
  for (size_t t = 0; t < plan.tiles.size(); ++t)
    if (plan.partial_base[t] >= 0) merges.push_back(t);
  return run_workers(resolve_worker_count(workers, int64_t(merges.size())), int64_t(merges.size()),
                     [&](TaskQueue& queue) {
                       DecodeRunner runner(kp, qp, plan, partial_o.data(), partial_lse.data());
                       int64_t t = 0;
                       while (queue.pop(&t)) runner.merge(merges[size_t(t)]);
                       return Status::Ok();
                     });
}

}  // namespace

void override_decode_path(DecodePath path) { g_decode_path.store(int(path), std::memory_order_relaxed); }

// Flash-Decoding's point: with one or a few query rows per sequence, tasks (a sequence's query rows
// with all KV heads: make_plan's tile groups) are too few to occupy the workers, so the keys are split
// too. Aim for kDecodeTasksPerWorker tasks per worker, but never cut the longest sequence into chunks of
// fewer than kMinSplitKeys keys (shorter sequences are limited again per tile, in wanted_splits). The
// count depends on the worker count, so results can differ in rounding between thread counts; pass
// num_splits for bitwise-reproducible results.
int64_t heuristic_kv_splits(const KVCacheProblem& p, int workers) {
  const int64_t groups = count_groups(p, query_view(p));
  if (groups == 0) return 1;
  const int64_t target = int64_t(std::max(1, workers)) * kDecodeTasksPerWorker;
  const int64_t by_tasks = (target + groups - 1) / groups;
  const int64_t by_length = p.max_len_k() / kMinSplitKeys;
  return std::max<int64_t>(1, std::min({by_tasks, by_length, int64_t(kMaxKVSplits)}));
}

}  // namespace flashattn::detail::cpu

namespace flashattn::detail {

Status cpu_forward_kvcache(const KVCacheProblem& p, RunInfo* info) {
  // The backend's limits (device, dtype, head_dim, algorithm) are those of the forward kernel; check
  // them before the append so that a refusal leaves the caches untouched.
  const Problem qp = cpu::query_view(p);
  Status s = cpu_check(qp, /*info=*/nullptr);
  if (!s.ok()) return s;
  // The path is picked once: the kernel name and the plan both take it.
  const cpu::DecodePath path = cpu::decode_path(qp);
  if (info) {
    info->backend = Backend::kCPU;
    info->algorithm = Algorithm::kFA2;
    info->kernel = std::string("cpu_fa2_decode_splitkv_") + cpu::decode_path_name(path, qp);
  }
  try {
    const int workers = cpu::resolve_worker_count(p.num_threads, std::numeric_limits<int64_t>::max());
    return cpu::run_decode(p, qp, path, workers);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "backend cpu: out of host memory");
  } catch (const std::exception& e) {
    return Status::Runtime(std::string("backend cpu: ") + e.what());
  }
}

}  // namespace flashattn::detail
