// The fa3 forward's tile order on the host side: how many (batch, query head) pairs one L2 section of the
// order holds (fa3_fwd_kernel.cuh, make_tile). CUDA-free, so the rule can be read and tested on its own.
#pragma once

#include <cstdint>

namespace flashattn::cuda::fa3 {

// K and V bytes one section may hold: a third of an H100's or H200's 50 MB L2, which leaves room for the
// Q tiles and output rows streaming past and for the L2's two halves (data in the far half counts twice).
constexpr int64_t kL2SectionBytes = int64_t(16) << 20;

// Under a mask a section holds at most one (batch, query head) pair per this many CTAs of the grid (rounded
// down to a power of two: 32 pairs on 132 SMs), below.
constexpr int kGridCtasPerSectionPair = 4;

// Pairs per section for a problem whose K/V heads hold seqlen_k keys of head_dim elements (elem_bytes
// each), with num_m_blocks Q tiles per pair, on a persistent grid of `grid` CTAs:
//  - with equal tiles (no mask): one, so the order runs pair by pair, each pair's Q tiles back to back.
//    The CTAs at work at one time then hold a few pairs' K/V between them, each pair read from device
//    memory once and then from L2 by all of its tiles together. Measured on an H200 against sections of
//    16 MB of K/V: +3-7% at head dims 128 and 256 up to N 2048 (and d 128, N 4096), 0-2% beyond, head dim
//    64 0-1%;
//  - under a mask with unequal tiles (`unequal_tiles`: causal, a window), where the longest tiles must go
//    first across many pairs: as many KV heads as fit kL2SectionBytes (a power of two, so power-of-two
//    head counts split into equal sections), times the query heads per KV head (the query heads of one KV
//    head are adjacent pairs), and at least two waves of the grid's tiles (rounded up to a power of two),
//    so that a section's work is long next to its longest tile: measured on an H200, sections of one wave
//    or less ran the causal head-dim-256 sweep 5-8% slower at N >= 2048 (8% faster at N 512), and one pair
//    per section ran causal problems up to 11% slower;
//  - but never more pairs than a quarter of the grid's CTAs (kGridCtasPerSectionPair; whole KV heads), which
//    binds at short sequences only, where the two-wave floor asks for many pairs of few tiles each: there
//    every pair's K/V must be read from device memory while the tiles that share it are still at work, and
//    the floor's sections (64 MB of K/V at head dim 256, more than the L2) had the Q tiles of one pair
//    find it evicted. Measured on an H100 (bench/results/h100-20261205-fa3-sections/, causal, against
//    cuDNN in one process): 32 pairs against the floor's 128 at N 512 lifted head dim 256 from 0.75x to
//    0.95x and head dim 128 from 0.83x to 1.01x, and 32 against 64 at N 1024 lifted head dim 256 from 0.95x
//    to 1.09x (head dim 128 1.08x to 1.10x); from N 2048 the floor asks for 32 or fewer and keeps them
//    (fewer pairs were slower there, by up to 17% at N 8192);
//  - at most all pairs (one section: the order is Q-tile index descending, pairs innermost).
// Always >= 1.
int l2_section_heads(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k, int64_t head_dim,
                     int elem_bytes, int num_m_blocks, int grid, bool unequal_tiles);

// GQA packing (Fa3Config::kPackGqa): the G = heads_q / heads_kv query heads of a KV head share one tile's
// block_m rows, token-major, where that takes fewer tiles than one tile row per query token and head, i.e.
// where a head's seqlen_q tokens leave its last tile partly empty (decode-like and short queries; an exact
// multiple of block_m gains nothing). G must be > 1 and divide block_m (the Q box is G heads x block_m / G
// tokens), and seqlen_q x G must stay far inside int. Returns G, or 1 for no packing.
int gqa_pack_group(int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int block_m);

}  // namespace flashattn::cuda::fa3
