// `flashattn run --kv-cache`: one forward_kvcache call on caches of random tokens, timed, with sampled rows
// checked against the float64 reference on a gathered contiguous copy of each sequence's keys, and the
// caches checked for the appended tokens (and for nothing else written).
//
// Every timed call appends the same new tokens at the same positions (cache_seqlens is not advanced),
// so repeating the call is idempotent and the caches after the timing are those of a single call.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention_case.h"
#include "cli_common.h"
#include "commands.h"
#include "device_buffers.h"
#include "flashattn/kvcache.h"
#include "json_writer.h"
#include "reference/harness.h"
#include "run_shared.h"

namespace flashattn::cli {
namespace {

constexpr double kBytesPerGiga = 1e9;
constexpr double kMsPerSecond = 1e3;
constexpr int kKvOperands = 2;  // K and V

// The shape of the caches and where each token lives in them.
struct CacheLayout {
  int64_t batch = 1;
  std::vector<int32_t> lens;  // tokens in each sequence's cache before the call
  int64_t new_tokens = 0;
  int64_t page_size = 0;  // 0: contiguous
  int64_t capacity = 0;   // tokens each sequence can hold
  int64_t pages_per_seq = 0, num_pages = 0;
  std::vector<int32_t> block_table;  // [batch, pages_per_seq], a shuffled permutation of the pages

  bool paged() const { return page_size > 0; }
  int64_t seqlen_k(int64_t b) const { return int64_t(lens[size_t(b)]) + new_tokens; }
  // Token rows of the cache tensor (batch * capacity, or num_pages * page_size).
  int64_t rows() const { return paged() ? num_pages * page_size : batch * capacity; }
  // The token row of the cache tensor that holds token t of sequence b.
  int64_t row_of(int64_t b, int64_t t) const {
    if (!paged()) return b * capacity + t;
    return int64_t(block_table[size_t(b * pages_per_seq + t / page_size)]) * page_size + t % page_size;
  }
};

struct KvBuffers {
  harness::HostTensor q, k_cache, v_cache, k_new, v_new, out, lse, seqlens, table;
  harness::HostTensor k_expected, v_expected;  // the caches as they must be after the call
};

struct KvResult {
  CacheLayout layout;
  double scale = 0;
  RunInfo info;
  Timing timing;
  double bytes = 0;  // K and V bytes of the visible keys
  RowCheck rows;
  int64_t appended_wrong = 0;  // token rows of the appended tokens that do not hold them
  int64_t stray_writes = 0;    // other token rows that changed
  bool cache_pass() const { return appended_wrong == 0 && stray_writes == 0; }
  double gbps() const { return timing.median_ms > 0 ? bytes / (timing.median_ms / kMsPerSecond) / kBytesPerGiga : 0; }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Builds the layout, or returns a one-line usage error.
std::string make_layout(const ArgParser& p, const RunOptions& o, std::mt19937_64& rng, CacheLayout* l) {
  l->batch = o.batch;
  if (o.cache_lens.size() > 1 && !p.given("batch")) l->batch = int64_t(o.cache_lens.size());
  if (o.cache_lens.size() == 1) {
    l->lens.assign(size_t(l->batch), o.cache_lens[0]);
  } else if (int64_t(o.cache_lens.size()) == l->batch) {
    l->lens = o.cache_lens;
  } else {
    return "--cache-len lists " + std::to_string(o.cache_lens.size()) + " lengths for --batch " +
           std::to_string(l->batch);
  }
  l->new_tokens = o.new_tokens;
  l->page_size = o.page_size;
  const int64_t longest = *std::max_element(l->lens.begin(), l->lens.end());
  const int64_t needed = longest + o.new_tokens;
  if (o.cache_capacity > 0 && needed > o.cache_capacity)
    return "--cache-len " + std::to_string(longest) + " + --new-tokens " + std::to_string(o.new_tokens) +
           " exceeds --cache-capacity " + std::to_string(o.cache_capacity);
  // A capacity of at least one token keeps every tensor non-empty when no sequence has a key.
  l->capacity = std::max<int64_t>(1, o.cache_capacity > 0 ? o.cache_capacity : needed);
  if (l->paged()) {
    l->pages_per_seq = ceil_div(l->capacity, l->page_size);
    l->capacity = l->pages_per_seq * l->page_size;
    l->num_pages = l->batch * l->pages_per_seq;
    l->block_table.resize(size_t(l->num_pages));
    for (int64_t i = 0; i < l->num_pages; ++i) l->block_table[size_t(i)] = int32_t(i);
    // Shuffled, so a kernel that ignored the block table would read the wrong tokens.
    std::shuffle(l->block_table.begin(), l->block_table.end(), rng);
  }
  if (l->paged() && l->num_pages > std::numeric_limits<int32_t>::max())
    return "the paged cache needs more than 2^31 pages";
  return "";
}

// Copies token row `src_row` of `src` (a [*, heads_kv, d] token layout) to row `dst_row` of `dst`.
void copy_token(const harness::HostTensor& src, int64_t src_row, harness::HostTensor* dst, int64_t dst_row,
                size_t row_bytes) {
  std::memcpy(dst->storage.data() + size_t(dst_row) * row_bytes, src.storage.data() + size_t(src_row) * row_bytes,
              row_bytes);
}

size_t token_bytes(const RunOptions& o) { return size_t(o.heads_kv * o.head_dim * dtype_size(o.dtype)); }

void create_buffers(const RunOptions& o, const CacheLayout& l, std::mt19937_64& rng, KvBuffers* b) {
  const DType dt = o.dtype;
  const int64_t hq = o.heads, hk = o.heads_kv, d = o.head_dim;
  const std::vector<int64_t> cache_shape = l.paged() ? std::vector<int64_t>{l.num_pages, l.page_size, hk, d}
                                                     : std::vector<int64_t>{l.batch, l.capacity, hk, d};
  b->q = harness::HostTensor::make(dt, {l.batch, o.seqlen_q, hq, d});
  b->out = harness::HostTensor::make(dt, {l.batch, o.seqlen_q, hq, d});
  b->lse = harness::HostTensor::make(DType::kFloat32, {l.batch, hq, o.seqlen_q});
  b->k_cache = harness::HostTensor::make(dt, cache_shape);
  b->v_cache = harness::HostTensor::make(dt, cache_shape);
  harness::fill_uniform(&b->q, rng);
  // The whole cache is random, the slots past each sequence's tokens too: a kernel that read past
  // seqlen_k or before the append would see wrong keys, never zeros.
  harness::fill_uniform(&b->k_cache, rng);
  harness::fill_uniform(&b->v_cache, rng);
  harness::poison(&b->out);
  harness::poison(&b->lse);
  b->k_expected = b->k_cache;
  b->v_expected = b->v_cache;
  if (l.new_tokens > 0) {
    b->k_new = harness::HostTensor::make(dt, {l.batch, l.new_tokens, hk, d});
    b->v_new = harness::HostTensor::make(dt, {l.batch, l.new_tokens, hk, d});
    harness::fill_uniform(&b->k_new, rng);
    harness::fill_uniform(&b->v_new, rng);
    const size_t row_bytes = token_bytes(o);
    for (int64_t s = 0; s < l.batch; ++s)
      for (int64_t t = 0; t < l.new_tokens; ++t) {
        const int64_t dst = l.row_of(s, l.lens[size_t(s)] + t);
        copy_token(b->k_new, s * l.new_tokens + t, &b->k_expected, dst, row_bytes);
        copy_token(b->v_new, s * l.new_tokens + t, &b->v_expected, dst, row_bytes);
      }
  }
  b->seqlens = harness::HostTensor::make(DType::kInt32, {l.batch});
  for (int64_t s = 0; s < l.batch; ++s) b->seqlens.set(s, double(l.lens[size_t(s)]));
  if (l.paged()) {
    b->table = harness::HostTensor::make(DType::kInt32, {l.batch, l.pages_per_seq});
    for (int64_t i = 0; i < l.num_pages; ++i) b->table.set(i, double(l.block_table[size_t(i)]));
  }
}

// Keys of sequence b some query row sees (causal and window aligned bottom-right). The visible
// interval [lo, hi] of query i only moves right as i grows, so the union is one sweep.
int64_t visible_keys(const RunOptions& o, int64_t seqlen_k) {
  const int64_t offset = seqlen_k - o.seqlen_q;
  int64_t covered_end = 0, count = 0;
  for (int64_t i = 0; i < o.seqlen_q; ++i) {
    const int64_t diagonal = i + offset;
    int64_t lo = o.window_left >= 0 ? std::max<int64_t>(0, diagonal - o.window_left) : 0;
    int64_t hi = seqlen_k - 1;
    if (o.window_right >= 0) hi = std::min(hi, diagonal + o.window_right);
    if (o.causal) hi = std::min(hi, diagonal);
    lo = std::max(lo, covered_end);
    if (hi >= lo) {
      count += hi - lo + 1;
      covered_end = hi + 1;
    }
  }
  return count;
}

// Where the call runs: host views on the CPU, device mirrors on CUDA.
struct Placement {
  DeviceMirror q, k_cache, v_cache, k_new, v_new, out, lse, seqlens, table;
};

// The host tensor's view, or its device mirror's when the call runs on CUDA; absent tensors stay absent.
TensorView where(const harness::HostTensor& host, const DeviceMirror& mirror, bool gpu) {
  if (!host.view.present()) return TensorView{};
  return gpu ? mirror.view() : host.view;
}

KVCacheArgs make_args(const RunOptions& o, const KvBuffers& b, const Placement& m, bool gpu) {
  KVCacheArgs a;
  const auto view = [gpu](const harness::HostTensor& host, const DeviceMirror& mirror) {
    return where(host, mirror, gpu);
  };
  a.q = view(b.q, m.q);
  a.k_cache = view(b.k_cache, m.k_cache);
  a.v_cache = view(b.v_cache, m.v_cache);
  a.k_new = view(b.k_new, m.k_new);
  a.v_new = view(b.v_new, m.v_new);
  a.out = view(b.out, m.out);
  a.lse = view(b.lse, m.lse);
  a.cache_seqlens = view(b.seqlens, m.seqlens);
  a.block_table = view(b.table, m.table);
  a.softmax_scale = float(o.scale);
  a.causal = o.causal;
  a.window_left = o.window_left;
  a.window_right = o.window_right;
  a.softcap = float(o.softcap);
  a.num_splits = o.splits;
  a.check_indices = !o.no_check_indices;
  a.backend = o.backend;
  a.algorithm = o.algorithm;
  a.num_threads = o.threads;
  return a;
}

Status upload(KvBuffers& b, Placement* m) {
  const harness::HostTensor* hosts[] = {&b.q, &b.k_cache, &b.v_cache, &b.k_new, &b.v_new,
                                        &b.out, &b.lse, &b.seqlens, &b.table};
  DeviceMirror* mirrors[] = {&m->q, &m->k_cache, &m->v_cache, &m->k_new, &m->v_new,
                             &m->out, &m->lse, &m->seqlens, &m->table};
  for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); ++i) {
    if (!hosts[i]->view.present()) continue;
    if (Status s = mirrors[i]->upload(*hosts[i], 0); !s.ok()) return s;
  }
  return Status::Ok();
}

Status download(KvBuffers* b, const Placement& m) {
  for (auto [host, mirror] : {std::pair{&b->out, &m.out}, std::pair{&b->lse, &m.lse},
                              std::pair{&b->k_cache, &m.k_cache}, std::pair{&b->v_cache, &m.v_cache}})
    if (Status s = mirror->download(host); !s.ok()) return s;
  return Status::Ok();
}

// Token rows of the cache that differ from the expected cache, split into appended rows and others.
void check_cache(const harness::HostTensor& got, const harness::HostTensor& expected,
                 const std::vector<char>& appended, size_t row_bytes, KvResult* r) {
  if (got.storage == expected.storage) return;
  for (size_t row = 0; row < appended.size(); ++row) {
    if (std::memcmp(got.storage.data() + row * row_bytes, expected.storage.data() + row * row_bytes, row_bytes) == 0)
      continue;
    if (appended[row]) {
      ++r->appended_wrong;
    } else {
      ++r->stray_writes;
    }
  }
}

// Sampled rows against reference::forward_row on each sequence's keys, gathered from the expected
// caches (the old tokens plus the new ones) into a contiguous [1, seqlen_k, heads_kv, d] problem.
Status check_rows(const RunOptions& o, const KvBuffers& b, const CacheLayout& l, RowCheck* rc) {
  std::vector<reference::RowId> rows = sample_rows(l.batch, o.heads, o.seqlen_q, o.samples, o.seed);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const reference::RowId& x, const reference::RowId& y) { return x.batch < y.batch; });
  const DType dt = o.dtype;
  const int64_t hq = o.heads, d = o.head_dim;
  const size_t row_bytes = token_bytes(o);
  const size_t q_batch_bytes = size_t(o.seqlen_q * hq * d * dtype_size(dt));
  harness::HostTensor k, v;
  harness::HostTensor scratch_out = harness::HostTensor::make(dt, {1, o.seqlen_q, hq, d});
  int64_t gathered = -1;
  double max_abs_lse = 1.0, magnitude = 0;
  std::vector<double> ref_out;
  for (const reference::RowId& id : rows) {
    const int64_t sk = l.seqlen_k(id.batch);
    double ref_lse = -std::numeric_limits<double>::infinity();
    ref_out.assign(size_t(d), 0.0);
    if (sk > 0) {  // a sequence without keys: every row is out = 0, lse = -inf by definition
      if (gathered != id.batch) {
        k = harness::HostTensor::make(dt, {1, sk, o.heads_kv, d});
        v = harness::HostTensor::make(dt, {1, sk, o.heads_kv, d});
        for (int64_t t = 0; t < sk; ++t) {
          copy_token(b.k_expected, l.row_of(id.batch, t), &k, t, row_bytes);
          copy_token(b.v_expected, l.row_of(id.batch, t), &v, t, row_bytes);
        }
        gathered = id.batch;
      }
      AttentionArgs a;
      a.q = TensorView::contiguous(const_cast<uint8_t*>(b.q.storage.data()) + size_t(id.batch) * q_batch_bytes, dt,
                                   {1, o.seqlen_q, hq, d});
      a.k = k.view;
      a.v = v.view;
      a.out = scratch_out.view;
      a.softmax_scale = float(o.scale);
      a.causal = o.causal;
      a.window_left = o.window_left;
      a.window_right = o.window_right;
      a.softcap = float(o.softcap);
      reference::RowId local = id;
      local.batch = 0;
      if (Status s = reference::forward_row(a, local, &ref_out, &ref_lse); !s.ok()) return s;
    }
    const int64_t base = ((id.batch * o.seqlen_q + id.row) * hq + id.head) * d;
    for (int64_t e = 0; e < d; ++e) {
      magnitude = std::max(magnitude, std::fabs(ref_out[size_t(e)]));
      const double got = b.out.get(base + e);
      const double diff =
          std::isnan(got) ? std::numeric_limits<double>::infinity() : std::fabs(got - ref_out[size_t(e)]);
      rc->out_error = std::max(rc->out_error, diff);
    }
    const int64_t lse_index = (id.batch * hq + id.head) * o.seqlen_q + id.row;
    rc->lse_error = std::max(rc->lse_error, lse_max_diff(std::vector<double>{b.lse.get(lse_index)}, {ref_lse}));
    if (std::isfinite(ref_lse)) max_abs_lse = std::max(max_abs_lse, std::fabs(ref_lse));
  }
  rc->rows = int(rows.size());
  rc->out_bound = sampled_out_bound(dt, magnitude);
  rc->lse_bound = sampled_lse_bound(dt, max_abs_lse);
  return Status::Ok();
}

Status execute(const RunOptions& o, KvBuffers* b, KvResult* r, const char** step) {
  const bool gpu = o.backend == Backend::kCUDA;
  const CacheLayout& l = r->layout;
  Progress progress("run");
  Placement mirrors;
  if (gpu) {
    *step = "upload";
    progress.phase("copying inputs to the device");
    if (Status s = upload(*b, &mirrors); !s.ok()) return s;
    progress.done();
  }
  *step = "forward_kvcache";
  const KVCacheArgs args = make_args(o, *b, mirrors, gpu);
  std::vector<double> times;
  progress.phase("timing forward_kvcache (" + warmup_text(o) + " + " + std::to_string(o.repeat) + " runs)");
  Status s = time_calls(
      gpu, o.warmup, o.repeat, [&] { return forward_kvcache(args, &r->info); }, &times, o.warmup_ms);
  progress.done();
  if (!s.ok()) return s;
  int64_t keys = 0;
  for (int64_t i = 0; i < l.batch; ++i) keys += visible_keys(o, l.seqlen_k(i));
  r->bytes = double(kKvOperands) * double(keys) * double(token_bytes(o));
  r->timing = summarize(times, 0.0);
  if (gpu) {
    *step = "download";
    if (s = download(b, mirrors); !s.ok()) return s;
  }

  std::vector<char> appended(size_t(l.rows()), 0);
  for (int64_t i = 0; i < l.batch; ++i)
    for (int64_t t = 0; t < l.new_tokens; ++t) appended[size_t(l.row_of(i, l.lens[size_t(i)] + t))] = 1;
  check_cache(b->k_cache, b->k_expected, appended, token_bytes(o), r);
  check_cache(b->v_cache, b->v_expected, appended, token_bytes(o), r);

  r->rows.unwritten = harness::count_nan(b->out) + harness::count_nan(b->lse);
  *step = "reference";
  progress.phase("checking sampled rows against the float64 reference");
  s = check_rows(o, *b, l, &r->rows);
  progress.done();
  return s;
}

std::string describe(const RunOptions& o, const CacheLayout& l) {
  std::ostringstream s;
  s << "kv-cache b" << l.batch << " sq" << o.seqlen_q << " cache";
  const bool uniform = std::all_of(l.lens.begin(), l.lens.end(), [&](int32_t n) { return n == l.lens[0]; });
  if (uniform) {
    s << l.lens[0];
  } else {
    for (size_t i = 0; i < l.lens.size(); ++i) s << (i ? "," : "") << l.lens[i];
  }
  s << "+" << l.new_tokens << " capacity " << l.capacity;
  if (l.paged()) s << " (" << l.pages_per_seq << " pages of " << l.page_size << ")";
  s << " h" << o.heads << "/" << o.heads_kv << " d" << o.head_dim;
  if (o.causal) s << " causal";
  if (o.window_left >= 0 || o.window_right >= 0) s << " win" << o.window_left << "," << o.window_right;
  if (o.softcap > 0) s << " cap" << o.softcap;
  if (o.scale > 0) s << " scale" << o.scale;
  s << " splits " << (o.splits > 0 ? std::to_string(o.splits) : "auto");
  if (o.no_check_indices) s << " unchecked-indices";
  return s.str();
}

void report_json(const RunOptions& o, const KvResult& r, bool pass) {
  const CacheLayout& l = r.layout;
  JsonWriter j;
  j.begin_object().field("seed", o.seed).field("mode", "kv-cache");
  j.key("problem").begin_object();
  j.field("batch", l.batch).field("seqlen_q", o.seqlen_q).key("cache_lens").begin_array();
  for (int32_t n : l.lens) j.value(int64_t(n));
  j.end_array().field("new_tokens", l.new_tokens).field("capacity", l.capacity).field("page_size", l.page_size);
  j.field("splits", o.splits).field("check_indices", !o.no_check_indices);
  j.field("heads", o.heads).field("heads_kv", o.heads_kv).field("head_dim", o.head_dim);
  j.field("causal", o.causal).field("window_left", o.window_left).field("window_right", o.window_right);
  j.field("softcap", o.softcap).field("scale", r.scale).field("dtype", to_string(o.dtype)).end_object();
  j.field("backend", to_string(r.info.backend)).field("algorithm", to_string(r.info.algorithm));
  j.field("kernel", r.info.kernel);
  if (r.info.backend == Backend::kCPU) j.field("threads", o.threads > 0 ? o.threads : hardware_threads());
  j.key("forward").begin_object().field("ms", r.timing.median_ms).field("ms_min", r.timing.min_ms);
  j.field("runs", r.timing.runs).field("kv_bytes", r.bytes).field("gbps", r.gbps()).end_object();
  j.key("forward_check").begin_object().field("rows", r.rows.rows).field("out_error", r.rows.out_error);
  j.field("out_bound", r.rows.out_bound).field("lse_error", r.rows.lse_error).field("lse_bound", r.rows.lse_bound);
  j.field("unwritten", r.rows.unwritten).field("pass", r.rows.pass()).end_object();
  j.key("cache_check").begin_object().field("appended_rows_wrong", r.appended_wrong);
  j.field("other_rows_changed", r.stray_writes).field("pass", r.cache_pass()).end_object();
  j.field("pass", pass).end_object();
  std::printf("%s\n", j.str().c_str());
}

void report_text(const RunOptions& o, const KvResult& r, bool pass) {
  std::printf("ran        %s %s  kernel %s", to_string(r.info.backend), to_string(r.info.algorithm),
              r.info.kernel.c_str());
  if (r.info.backend == Backend::kCPU) std::printf("  (%d threads)", o.threads > 0 ? o.threads : hardware_threads());
  std::printf("\n");
  std::printf("forward    %.3f ms  (median of %d, min %.3f ms)  %.2f MB of K/V  %.2f GB/s\n", r.timing.median_ms,
              r.timing.runs, r.timing.min_ms, r.bytes / 1e6, r.gbps());
  const std::string unwritten =
      r.rows.unwritten > 0 ? ", " + std::to_string(r.rows.unwritten) + " elements never written" : "";
  std::printf("check      forward: %d rows vs float64 reference: out err %s <= %s, lse err %s <= %s%s  %s\n",
              r.rows.rows, sci(r.rows.out_error).c_str(), sci(r.rows.out_bound).c_str(), sci(r.rows.lse_error).c_str(),
              sci(r.rows.lse_bound).c_str(), unwritten.c_str(), r.rows.pass() ? "PASS" : "FAIL");
  std::printf("check      cache: %lld appended token rows wrong, %lld other token rows changed  %s\n",
              (long long)r.appended_wrong, (long long)r.stray_writes, r.cache_pass() ? "PASS" : "FAIL");
  std::printf("result     %s\n", pass ? "PASS" : "FAIL");
}

}  // namespace

int run_kvcache(const ArgParser& parser, const RunOptions& options) {
  RunOptions o = options;
  if (!parser.given("seqlen-q")) o.seqlen_q = kKvDefaultSeqlenQ;
  std::mt19937_64 rng(o.seed);
  KvResult r;
  if (const std::string error = make_layout(parser, o, rng, &r.layout); !error.empty()) {
    parser.usage_error(error);
    return kExitUsage;
  }
  if (o.backend == Backend::kCUDA && !gpu_present()) {
    std::fprintf(stderr, "flashattn run: backend cuda: %s\n",
                 cuda_built() ? "no CUDA device is present" : "this build of flashattn has no CUDA kernels");
    return kExitFailure;
  }
  r.scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(double(o.head_dim));
  if (!o.json)
    std::printf("seed       %llu\nproblem    %s %s\n", (unsigned long long)o.seed, describe(o, r.layout).c_str(),
                to_string(o.dtype));
  std::fflush(stdout);

  Progress progress("run");
  progress.phase("allocating and filling the caches");
  KvBuffers b;
  create_buffers(o, r.layout, rng, &b);
  progress.done();
  const char* step = "";
  if (const Status s = execute(o, &b, &r, &step); !s.ok()) {
    std::fprintf(stderr, "flashattn run: %s: %s\n", step, s.to_string().c_str());
    return kExitFailure;
  }
  const bool pass = r.rows.pass() && r.cache_pass();
  if (o.json) {
    report_json(o, r, pass);
  } else {
    report_text(o, r, pass);
  }
  return pass ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
