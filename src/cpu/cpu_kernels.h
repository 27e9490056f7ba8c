// The CPU attention kernels behind cpu_forward / cpu_backward (src/cpu/cpu_backend.cpp).
#pragma once

#include "api/problem.h"
#include "cpu/bf16_tiles.h"
#include "cpu/tiling.h"

namespace flashattn::detail::cpu {

// Tile shapes: the measured best for the head dim, made smaller while the problem has too few tasks to
// share among workers. They depend on the problem only, never on the thread count.
TileShape forward_tile_shape(const Problem& p);
TileShape backward_tile_shape(const Problem& p);

// How the forward and the backward multiply the tiles of `p`: bf16_products() for bf16 and fp16 inputs whose
// head dim is a multiple of 32, else kFp32. (Every block of the tile shapes above is a multiple of 32 keys.)
Bf16Products tile_products(const Problem& p);

// FA2 forward: tasks over query tiles; writes out and (when present) lse. `workers` <= 0: all hardware
// threads. The problem must have passed cpu_check.
Status run_forward(const Problem& p, const TileShape& shape, int workers);

// Backward by recomputation from the saved LSE: a KV-parallel pass writes dK and dV, a query-parallel
// pass writes dQ. Every output element has exactly one writer and a fixed summation order, so the
// gradients are bitwise identical for any worker count.
Status run_backward(const Problem& p, const TileShape& shape, int workers);

}  // namespace flashattn::detail::cpu
