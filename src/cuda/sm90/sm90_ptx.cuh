// Hopper (sm90a) building blocks as inline PTX: shared-memory matrix descriptors for wgmma, the wgmma
// ordering instructions, mbarriers with transaction counts, TMA tile loads, register reallocation and named
// barriers. Everything here is compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); other targets see
// empty bodies and never launch the kernels that use them (the host checks the compute capability).
//
// wgmma fragment layouts (thread t of a warpgroup: warp w = t / 32, lane l, r = l / 4, q = l % 4):
//   fp32 accumulator register i of an m64nN tile: row 16w + r + 8 * ((i >> 1) & 1), column
//   8 * (i >> 2) + 2q + (i & 1). This is the mma.sync m16n8 C layout repeated over n8 column tiles.
//   16-bit A register j (packed pairs, low half = even column) of an m64k16 step: row 16w + r + 8 * (j & 1),
//   columns 8 * (j >> 1) + 2q, +1. So accumulator registers 8kk .. 8kk + 7, packed in pairs, are exactly
//   the A registers of k-step kk: P = softmax(S) feeds P V from registers without any shuffle.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>  // printf of the mbarrier watchdog (FLASHATTN_MBAR_WATCHDOG, below)

namespace flashattn::cuda::sm90 {

constexpr int kWarpgroupThreads = 128;
constexpr int kWarpgroupWarps = 4;
constexpr int kSwizzleBytes = 128;       // SWIZZLE_128B: one swizzle row is 128 bytes
constexpr int kSwizzleAtomBytes = 1024;  // 8 rows of 128 bytes: the pattern repeats every 1024 bytes
constexpr int kSwizzleElems = 64;        // 16-bit elements in one 128-byte row

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// wgmma shared-memory matrix descriptor for a tile in the 128-byte swizzle layout TMA writes: start
// address, leading- and stride-byte offsets (all >> 4), swizzle mode 1 (128B) in bits 62-63. The base
// offset field stays 0 because every tile starts on a 1024-byte boundary.
//   K-major operand (Q, K): rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); LBO unused.
//   MN-major operand (V as the B of P V): 64-column blocks `lbo` bytes apart along N, 8-key groups 1024
//   bytes apart along K.
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  constexpr uint64_t kSwizzle128B = 1;
  uint64_t desc = 0;
  desc |= uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t((lbo_bytes & 0x3FFFF) >> 4) << 16;
  desc |= uint64_t((sbo_bytes & 0x3FFFF) >> 4) << 32;
  desc |= kSwizzle128B << 62;
  return desc;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define FA_SM90_ASM(...) ((void)0)
#endif

// Orders register accesses before the next wgmma that reads or writes the same registers.
__device__ __forceinline__ void wgmma_fence() { FA_SM90_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { FA_SM90_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending of this warpgroup's committed wgmma groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  FA_SM90_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across a wgmma issue or wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// ---- mbarrier --------------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  FA_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes barrier initialization visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  FA_SM90_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  FA_SM90_ASM("{\n.reg .b64 state;\nmbarrier.arrive.release.cta.shared::cta.b64 state, [%0];\n}\n" ::"r"(
                  smem_u32(bar))
              : "memory");
}
// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  FA_SM90_ASM("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.release.cta.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                  smem_u32(bar)),
              "r"(bytes)
              : "memory");
}
// Blocks until the phase with the given parity has completed (try_wait returns early on a timeout hint;
// loop until it reports completion).
//
// Built with FLASHATTN_MBAR_WATCHDOG=1 (a debugging aid, off in every shipped build), a wait that lasts
// more than about two seconds prints the barrier (its shared-memory address), the parity and the waiting
// thread, then traps: a pipeline that hangs then fails its test with the waits that never completed named.
#ifndef FLASHATTN_MBAR_WATCHDOG
#define FLASHATTN_MBAR_WATCHDOG 0
#endif
#if FLASHATTN_MBAR_WATCHDOG
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok = 1;
  FA_SM90_ASM(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}
constexpr long long kWatchdogCycles = 4000000000LL;  // about 2 s at the clocks of an H100 or H200
#endif
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if FLASHATTN_MBAR_WATCHDOG
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > kWatchdogCycles) {
      printf("mbarrier watchdog: block %d thread %d waits on shared 0x%x for parity %u\n", int(blockIdx.x),
             int(threadIdx.x), smem_u32(bar), parity);
      __trap();
    }
  }
#else
  FA_SM90_ASM(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// ---- TMA ------------------------------------------------------------------------------------------------
// A 4-d tile load (coordinates innermost first, in elements) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
  FA_SM90_ASM(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(smem_u32(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3, int c4) {
  FA_SM90_ASM(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6, %7}], [%2];\n" ::"r"(smem_u32(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  FA_SM90_ASM("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- shared-memory fragments ---------------------------------------------------------------------------
// Four 8x8 matrices of 16-bit elements from registers to shared memory (warp-wide). Lane l gives the
// address of row l % 8 of matrix l / 8 (16 bytes); register i of a lane holds row lane / 4, columns
// 2 (lane % 4) and + 1 of matrix i: the layout of an mma / wgmma accumulator pair.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  FA_SM90_ASM("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r0),
              "r"(r1), "r"(r2), "r"(r3)
              : "memory");
}

// ---- registers and barriers ---------------------------------------------------------------------------
// Moves registers between warpgroups of a CTA compiled under __launch_bounds__ (warpgroup-wide).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  FA_SM90_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  FA_SM90_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// Named barriers 1..15 (0 is __syncthreads). `threads` counts every participant, syncing or arriving.
__device__ __forceinline__ void named_sync(int id, int threads) {
  FA_SM90_ASM("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  FA_SM90_ASM("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashattn::cuda::sm90
