// Thin wrappers over the sm80+ PTX instructions the FA2-style kernels use: cp.async, ldmatrix,
// mma.sync m16n8k16 with fp32 accumulation, fast exp2, and 16-bit packing; and the few sm90 ones they take
// where they run there (programmatic dependent launch, thread block clusters), guarded by __CUDA_ARCH__.
//
// Fragment layout of mma.sync.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4*g + t:
//   A (16x16, row-major):  a0:(g, 2t..2t+1)  a1:(g+8, 2t..)  a2:(g, 2t+8..)  a3:(g+8, 2t+8..)
//   B (16x8,  col-major):  b0:(k=2t..2t+1, n=g)  b1:(k=2t+8.., n=g)
//   C (16x8,  fp32):       c0,c1:(g, 2t..2t+1)  c2,c3:(g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses registers. With `valid` false the destination is
// zero-filled and global memory is not read (src-size 0), which is how out-of-range rows are loaded.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}
// The same copy with the L2::128B prefetch-size hint: L2 may fetch the surrounding 128 bytes along with the
// 16 asked for. For a pure stream of whole rows (the decode kernels) this measured 2-3% more read
// bandwidth on an H200 while their shared rows were padded, and no difference since they are swizzled on
// 32-byte boundaries (the .L2::256B hint: 5% less; docs/kvcache.md); the FA2 backward saw no change and
// keeps the plain copy.
__device__ __forceinline__ void cp_async_16_prefetch_128(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
}
// 4-byte global -> shared copy (through L1), zero-filling and reading nothing with `valid` false; the decode
// kernels fetch block-table entries with it, in the same commit groups as the cache rows they address.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `kPending` of the most recent commit groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Atomic add on a global int, acquire and release at GPU scope (sm70+): returns the value before the add.
// The decode split merge takes its ticket with it: the release publishes what the CTA wrote before the
// barrier ahead of it, the acquire (in the CTA that draws the last ticket) makes the other CTAs' writes
// visible to its reads after the barrier behind it.
__device__ __forceinline__ int atomic_add_acq_rel_gpu(int* p, int v) {
  int before;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(before) : "l"(p), "r"(v) : "memory");
  return before;
}

// Programmatic dependent launch (sm90+; no-ops on older devices, where launches never overlap). A kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it on
// the stream is still finishing: grid_dependency_wait() returns once that kernel has completed and its
// memory is visible, so it must come before the kernel's first global read or write.
// grid_dependents_may_launch() lets the next kernel on the stream start launching (when every CTA of this
// one has called it or exited); that kernel still waits for this one's completion before touching memory.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Thread block clusters (sm90+; the kernels that use them are launched with a cluster only on sm90, and trap
// if ever run elsewhere). cluster_sync(): every thread of every CTA of the cluster arrives (release) and waits
// (acquire), so shared-memory writes before it are visible to the whole cluster after it.
// cluster_map(): the shared::cluster address of the same shared variable in the cluster's CTA `rank`.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ int cluster_rank() {
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif
  return int(rank);
}
__device__ __forceinline__ uint32_t cluster_map(const void* smem, int rank) {
  uint32_t addr = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(addr) : "r"(smem_addr(smem)), "r"(rank));
#endif
  return addr;
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t addr) {
  float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
#endif
  return v;
}
__device__ __forceinline__ float4 ld_cluster_f32x4(uint32_t addr) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
#endif
  return v;
}

// Asks L2 to fetch the 128-byte line holding `gmem` (a hint: no register or shared memory receives data, and
// L2 is where every SM's writes meet, so a later load still sees the newest value of the line).
__device__ __forceinline__ void prefetch_l2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}

// ldmatrix: each lane supplies one 16-byte row address; x4 loads four 8x8 b16 matrices.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem_row)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem_row)));
}

// D = A * B + C on one 16x8x16 tile, fp32 accumulators (in place).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Packs two floats into one register of two 16-bit values (low half = first), round to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// exp2 on the special-function unit; flushes subnormal results to zero, exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// One 16-byte global store of four 32-bit words where `pred` holds; `dst` must be 16-byte aligned. Written
// out because from a plain uint4 store the compiler splits into 4-byte stores when the words do not sit in
// four consecutive registers, and predicated instead of branched because the compiler sinks the address
// arithmetic into a conditional block per store.
__device__ __forceinline__ void store_global_16_if(bool pred, void* dst, uint4 v) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(dst),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(int(pred))
      : "memory");
}

// Butterfly reductions across the 4 lanes of a quad (the lanes that share a row of an mma fragment).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flashattn::cuda
