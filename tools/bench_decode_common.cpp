// What the decode benchmarks (GPU: bench_decode.cpp, CPU: bench_decode_cpu.cpp) share: the block tables
// of the paged caches and the call on one copy of a shape's caches.
#include <algorithm>
#include <numeric>
#include <random>

#include "bench.h"
#include "json_writer.h"

namespace flashattn::cli {

void deal_decode_pages(const DecodeShape& shape, int copies, int32_t* tables) {
  const int64_t pages = shape.batch * shape.seqlen_k / kDecodePageSize;
  std::mt19937_64 rng(kDecodeSeed);
  for (int c = 0; c < copies; ++c) {
    int32_t* first = tables + c * pages;
    std::iota(first, first + pages, int32_t(c * pages));
    std::shuffle(first, first + pages, rng);
  }
}

KVCacheArgs decode_call_args(const DecodeTensors& t, const DecodeShape& shape, bool paged, int copy) {
  auto view = [&t](void* p, DType type, std::initializer_list<int64_t> dims) {
    return TensorView::contiguous(p, type, dims, t.device, 0);
  };
  KVCacheArgs a;
  a.q = view(t.q, kDecodeDtype, {shape.batch, kDecodeSeqlenQ, kDecodeHeadsQ, kDecodeHeadDim});
  a.out = view(t.out, kDecodeDtype, {shape.batch, kDecodeSeqlenQ, kDecodeHeadsQ, kDecodeHeadDim});
  a.cache_seqlens = view(t.seqlens, DType::kInt32, {shape.batch});
  if (paged) {
    const int64_t pages_per_seq = shape.seqlen_k / kDecodePageSize;
    const int64_t all_pages = t.cache_tokens / kDecodePageSize;
    a.k_cache = view(t.k, kDecodeDtype, {all_pages, kDecodePageSize, kDecodeHeadsKV, kDecodeHeadDim});
    a.v_cache = view(t.v, kDecodeDtype, {all_pages, kDecodePageSize, kDecodeHeadsKV, kDecodeHeadDim});
    a.block_table = view(t.tables + copy * shape.batch * pages_per_seq, DType::kInt32, {shape.batch, pages_per_seq});
  } else {
    const int64_t offset = copy * shape.batch * shape.seqlen_k * kDecodeRowElems * kDecodeElemBytes;
    a.k_cache = view(static_cast<char*>(t.k) + offset, kDecodeDtype,
                     {shape.batch, shape.seqlen_k, kDecodeHeadsKV, kDecodeHeadDim});
    a.v_cache = view(static_cast<char*>(t.v) + offset, kDecodeDtype,
                     {shape.batch, shape.seqlen_k, kDecodeHeadsKV, kDecodeHeadDim});
  }
  return a;
}

void begin_decode_row(JsonWriter& j, int64_t batch, int64_t seqlen_k, bool paged, int copies, double bytes) {
  j.begin_object().field("b", batch).field("seqlen_k", seqlen_k);
  j.field("layout", paged ? "paged" : "contiguous").field("page_size", paged ? kDecodePageSize : int64_t(0));
  j.field("rotated_caches", copies).field("bytes", bytes);
}

}  // namespace flashattn::cli
