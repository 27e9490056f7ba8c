// Naive attention over materialized score rows, in float64 (the oracle) or in the inputs' precision
// (the baseline of the tolerance rule). Deliberately independent of src/core's masks and tiling.
#include "reference/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "core/numeric.h"
#include "reference/harness.h"

namespace flashattn::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The shape of one call, read straight from the tensors (padded [b, s, h, d] or varlen [t, h, d]).
struct Shape {
  bool varlen = false;
  int64_t batch = 0, heads_q = 0, heads_kv = 0, dim = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;  // padded only
  int64_t total_q = 0, total_k = 0;    // rows of the packed (or flattened padded) tensors
  std::vector<int64_t> cu_q, cu_k;     // varlen offsets

  int64_t len_q(int64_t b) const { return varlen ? cu_q[b + 1] - cu_q[b] : seqlen_q; }
  int64_t len_k(int64_t b) const { return varlen ? cu_k[b + 1] - cu_k[b] : seqlen_k; }
  int64_t row0_q(int64_t b) const { return varlen ? cu_q[b] : b * seqlen_q; }
  int64_t row0_k(int64_t b) const { return varlen ? cu_k[b] : b * seqlen_k; }
};

std::vector<int64_t> read_offsets(const TensorView& t) {
  std::vector<int64_t> v(size_t(t.shape[0]));
  const int32_t* p = static_cast<const int32_t*>(t.data);
  for (size_t i = 0; i < v.size(); ++i) v[i] = p[int64_t(i) * t.stride[0]];
  return v;
}

Status read_shape(const AttentionArgs& a, Shape* s) {
  if (!a.q.present() || !a.k.present() || !a.v.present()) return Status::Invalid("reference: q, k, v required");
  if (a.q.device != Device::kCPU) return Status::Invalid("reference: tensors must be in host memory");
  s->varlen = a.cu_seqlens_q.present();
  const int nd = s->varlen ? 3 : 4;
  if (a.q.ndim != nd || a.k.ndim != nd || a.v.ndim != nd) return Status::Invalid("reference: bad ndim");
  s->dim = a.q.shape[nd - 1];
  s->heads_q = a.q.shape[nd - 2];
  s->heads_kv = a.k.shape[nd - 2];
  if (s->heads_kv <= 0 || s->heads_q % s->heads_kv != 0) return Status::Invalid("reference: bad head counts");
  if (s->varlen) {
    s->cu_q = read_offsets(a.cu_seqlens_q);
    s->cu_k = read_offsets(a.cu_seqlens_k);
    s->batch = int64_t(s->cu_q.size()) - 1;
    s->total_q = a.q.shape[0];
    s->total_k = a.k.shape[0];
  } else {
    s->batch = a.q.shape[0];
    s->seqlen_q = a.q.shape[1];
    s->seqlen_k = a.k.shape[1];
    s->total_q = s->batch * s->seqlen_q;
    s->total_k = s->batch * s->seqlen_k;
  }
  return Status::Ok();
}

// Element (global row, head, x) of a q/k/v-like tensor, whatever its layout and dtype.
double element(const TensorView& t, const Shape& s, int64_t b, int64_t row, int64_t head, int64_t x,
               bool is_q_side) {
  int64_t off;
  if (s.varlen) {
    int64_t g = (is_q_side ? s.cu_q[b] : s.cu_k[b]) + row;
    off = g * t.stride[0] + head * t.stride[1] + x;
  } else {
    off = b * t.stride[0] + row * t.stride[1] + head * t.stride[2] + x;
  }
  const uint8_t* base = static_cast<const uint8_t*>(t.data);
  switch (t.dtype) {
    case DType::kFloat32: return reinterpret_cast<const float*>(base)[off];
    case DType::kFloat16: return core::fp16_bits_to_float(reinterpret_cast<const uint16_t*>(base)[off]);
    case DType::kBFloat16: return core::bf16_bits_to_float(reinterpret_cast<const uint16_t*>(base)[off]);
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

// Key j is visible to query i (both within one sequence): bottom-right aligned causal / window.
bool sees(const AttentionArgs& a, int64_t i, int64_t j, int64_t lq, int64_t lk) {
  const int64_t shift = lk - lq;
  const int64_t right = a.causal ? 0 : a.window_right;
  if (right >= 0 && j > i + shift + right) return false;
  if (a.window_left >= 0 && j < i + shift - a.window_left) return false;
  return true;
}

// Rounds to the precision of `dtype` (identity for fp32 data computed in float).
float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::kFloat16: return core::fp16_bits_to_float(core::float_to_fp16_bits(x));
    case DType::kBFloat16: return core::bf16_bits_to_float(core::float_to_bf16_bits(x));
    default: return x;
  }
}

class Engine {
 public:
  Engine(const AttentionArgs& a, const Shape& s, Precision prec, Result* r, const BackwardArgs* bwd)
      : a_(a), s_(s), prec_(prec), r_(r), bwd_(bwd) {
    scale_ = a.softmax_scale != 0.0f ? double(a.softmax_scale) : 1.0 / std::sqrt(double(s.dim));
  }

  void run() {
    const int64_t d = s_.dim;
    r_->out.assign(size_t(s_.total_q * s_.heads_q * d), 0.0);
    r_->lse.assign(size_t(s_.total_q * s_.heads_q), -kInf);
    if (bwd_) {
      r_->dq.assign(r_->out.size(), 0.0);
      r_->dk.assign(size_t(s_.total_k * s_.heads_kv * d), 0.0);
      r_->dv.assign(r_->dk.size(), 0.0);
    }
    const int64_t tasks = s_.batch * s_.heads_kv;
    std::atomic<int64_t> next{0};
    auto worker = [&] {
      for (int64_t t; (t = next.fetch_add(1)) < tasks;) one_kv_head(t / s_.heads_kv, t % s_.heads_kv);
    };
    unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), unsigned(tasks)));
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < n; ++i) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
  }

  // One row in float64 (forward only): for spot checks.
  void row(int64_t b, int64_t h, int64_t i, std::vector<double>* out, double* lse) const {
    const int64_t hk = h / (s_.heads_q / s_.heads_kv), d = s_.dim, lk = s_.len_k(b), lq = s_.len_q(b);
    std::vector<double> q(static_cast<size_t>(d)), sc(static_cast<size_t>(lk));
    for (int64_t x = 0; x < d; ++x) q[size_t(x)] = element(a_.q, s_, b, i, h, x, true);
    double m = -kInf;
    for (int64_t j = 0; j < lk; ++j) {
      sc[size_t(j)] = -kInf;
      if (!sees(a_, i, j, lq, lk)) continue;
      double dot = 0;
      for (int64_t x = 0; x < d; ++x) dot += q[size_t(x)] * element(a_.k, s_, b, j, hk, x, false);
      sc[size_t(j)] = cap(dot * scale_);
      m = std::max(m, sc[size_t(j)]);
    }
    out->assign(size_t(d), 0.0);
    if (m == -kInf) {
      *lse = -kInf;
      return;
    }
    double sum = 0;
    for (int64_t j = 0; j < lk; ++j) sum += std::exp(sc[size_t(j)] - m);
    for (int64_t j = 0; j < lk; ++j) {
      double p = std::exp(sc[size_t(j)] - m) / sum;
      if (p == 0) continue;
      for (int64_t x = 0; x < d; ++x) (*out)[size_t(x)] += p * element(a_.v, s_, b, j, hk, x, false);
    }
    *lse = m + std::log(sum);
  }

 private:
  double cap(double s) const { return a_.softcap > 0 ? a_.softcap * std::tanh(s / a_.softcap) : s; }

  // The query heads of a GQA group share the K/V (and accumulate into the dK/dV) of their KV head.
  void one_kv_head(int64_t b, int64_t hk) {
    const int64_t d = s_.dim, lq = s_.len_q(b), lk = s_.len_k(b), group = s_.heads_q / s_.heads_kv;
    std::vector<double> k(size_t(lk * d)), v(size_t(lk * d));
    for (int64_t j = 0; j < lk; ++j)
      for (int64_t x = 0; x < d; ++x) {
        k[size_t(j * d + x)] = element(a_.k, s_, b, j, hk, x, false);
        v[size_t(j * d + x)] = element(a_.v, s_, b, j, hk, x, false);
      }
    // Gradient accumulators of this KV head (float64, or float for the naive path, rounded at the end).
    std::vector<double> dk(size_t(lk * d), 0.0), dv(size_t(lk * d), 0.0);
    const size_t nd = static_cast<size_t>(d), nk = static_cast<size_t>(lk);
    std::vector<double> q(nd), dout(nd), raw(nk), p(nk), dp(nk);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (int64_t i = 0; i < lq; ++i) {
        for (int64_t x = 0; x < d; ++x) q[size_t(x)] = element(a_.q, s_, b, i, h, x, true);
        // Scores and probabilities of row i.
        bool any = false;
        for (int64_t j = 0; j < lk; ++j) {
          raw[size_t(j)] = -kInf;
          if (!sees(a_, i, j, lq, lk)) continue;
          any = true;
          if (prec_ == Precision::kFloat64) {
            double dot = 0;
            for (int64_t x = 0; x < d; ++x) dot += q[size_t(x)] * k[size_t(j * d + x)];
            raw[size_t(j)] = cap(dot * scale_);
          } else {
            float dot = 0;
            for (int64_t x = 0; x < d; ++x) dot += float(q[size_t(x)]) * float(k[size_t(j * d + x)]);
            float sf = dot * float(scale_);
            if (a_.softcap > 0) sf = a_.softcap * std::tanh(sf / a_.softcap);
            raw[size_t(j)] = round_to(a_.q.dtype, sf);
          }
        }
        const int64_t orow = s_.row0_q(b) + i;
        double* out = &r_->out[size_t((orow * s_.heads_q + h) * d)];
        double& lse = r_->lse[size_t(s_.varlen ? h * s_.total_q + orow : (b * s_.heads_q + h) * s_.seqlen_q + i)];
        if (!any) {
          lse = -kInf;  // out stays 0, gradients of this row are 0
          continue;
        }
        softmax(raw, lk, &p, &lse);
        for (int64_t x = 0; x < d; ++x) {
          double acc = 0;
          float accf = 0;
          for (int64_t j = 0; j < lk; ++j) {
            if (p[size_t(j)] == 0) continue;
            acc += p[size_t(j)] * v[size_t(j * d + x)];
            accf += float(p[size_t(j)]) * float(v[size_t(j * d + x)]);
          }
          out[x] = prec_ == Precision::kFloat64 ? acc : round_to(a_.q.dtype, accf);
        }
        if (bwd_) backward_row(b, h, i, orow, q, k, v, raw, p, &dk, &dv, &dp, &dout);
      }
    }
    if (!bwd_) return;
    const float scale_f = float(scale_);
    for (int64_t j = 0; j < lk; ++j)
      for (int64_t x = 0; x < d; ++x) {
        size_t dst = size_t(((s_.row0_k(b) + j) * s_.heads_kv + hk) * d + x);
        size_t src = size_t(j * d + x);
        r_->dk[dst] = prec_ == Precision::kFloat64 ? dk[src] * scale_ : round_to(a_.q.dtype, float(dk[src]) * scale_f);
        r_->dv[dst] = prec_ == Precision::kFloat64 ? dv[src] : round_to(a_.q.dtype, float(dv[src]));
      }
  }

  // p = softmax(raw) over the visible entries (raw = -inf elsewhere); lse natural log.
  void softmax(const std::vector<double>& raw, int64_t lk, std::vector<double>* p, double* lse) const {
    if (prec_ == Precision::kFloat64) {
      double m = -kInf, sum = 0;
      for (int64_t j = 0; j < lk; ++j) m = std::max(m, raw[size_t(j)]);
      for (int64_t j = 0; j < lk; ++j) sum += std::exp(raw[size_t(j)] - m);
      for (int64_t j = 0; j < lk; ++j) (*p)[size_t(j)] = std::exp(raw[size_t(j)] - m) / sum;
      *lse = m + std::log(sum);
      return;
    }
    float m = -std::numeric_limits<float>::infinity(), sum = 0;
    for (int64_t j = 0; j < lk; ++j) m = std::max(m, float(raw[size_t(j)]));
    for (int64_t j = 0; j < lk; ++j) sum += std::exp(float(raw[size_t(j)]) - m);
    for (int64_t j = 0; j < lk; ++j) (*p)[size_t(j)] = round_to(a_.q.dtype, std::exp(float(raw[size_t(j)]) - m) / sum);
    *lse = double(m) + double(std::log(sum));
  }

  void backward_row(int64_t b, int64_t h, int64_t i, int64_t orow, const std::vector<double>& q,
                    const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& raw,
                    const std::vector<double>& p, std::vector<double>* dk, std::vector<double>* dv,
                    std::vector<double>* dp, std::vector<double>* dout) {
    const int64_t d = s_.dim, lk = s_.len_k(b);
    const bool f64 = prec_ == Precision::kFloat64;
    for (int64_t x = 0; x < d; ++x) (*dout)[size_t(x)] = element(bwd_->dout, s_, b, i, h, x, true);
    double D = 0;
    float Df = 0;
    for (int64_t j = 0; j < lk; ++j) {
      (*dp)[size_t(j)] = 0;
      if (p[size_t(j)] == 0 && raw[size_t(j)] == -kInf) continue;
      double acc = 0;
      float accf = 0;
      for (int64_t x = 0; x < d; ++x) {
        acc += (*dout)[size_t(x)] * v[size_t(j * d + x)];
        accf += float((*dout)[size_t(x)]) * float(v[size_t(j * d + x)]);
      }
      (*dp)[size_t(j)] = f64 ? acc : round_to(a_.q.dtype, accf);
      D += p[size_t(j)] * (*dp)[size_t(j)];
      Df += float(p[size_t(j)]) * float((*dp)[size_t(j)]);
    }
    double* dq = &r_->dq[size_t((orow * s_.heads_q + h) * d)];
    std::vector<float> dqf(size_t(d), 0.0f);
    for (int64_t j = 0; j < lk; ++j) {
      if (raw[size_t(j)] == -kInf) continue;
      double ds;
      if (f64) {
        ds = p[size_t(j)] * ((*dp)[size_t(j)] - D);
        if (a_.softcap > 0) {
          double t = raw[size_t(j)] / a_.softcap;
          ds *= 1.0 - t * t;
        }
      } else {
        float dsf = round_to(a_.q.dtype, float(p[size_t(j)]) * (float((*dp)[size_t(j)]) - Df));
        if (a_.softcap > 0) {
          float t = float(raw[size_t(j)]) / a_.softcap;
          dsf = round_to(a_.q.dtype, dsf * (1.0f - t * t));
        }
        ds = dsf;
      }
      for (int64_t x = 0; x < d; ++x) {
        if (f64) {
          dq[x] += ds * scale_ * k[size_t(j * d + x)];
        } else {
          dqf[size_t(x)] += float(ds) * float(k[size_t(j * d + x)]);
        }
        (*dk)[size_t(j * d + x)] += f64 ? ds * q[size_t(x)] : double(float(ds) * float(q[size_t(x)]));
        (*dv)[size_t(j * d + x)] +=
            f64 ? p[size_t(j)] * (*dout)[size_t(x)] : double(float(p[size_t(j)]) * float((*dout)[size_t(x)]));
      }
    }
    if (!f64)
      for (int64_t x = 0; x < d; ++x) dq[x] = round_to(a_.q.dtype, dqf[size_t(x)] * float(scale_));
  }

  const AttentionArgs& a_;
  const Shape& s_;
  Precision prec_;
  Result* r_;
  const BackwardArgs* bwd_;
  double scale_ = 1.0;
};

}  // namespace

Status forward(const AttentionArgs& args, Precision precision, Result* result) {
  Shape s;
  Status st = read_shape(args, &s);
  if (!st.ok()) return st;
  Engine(args, s, precision, result, nullptr).run();
  return Status::Ok();
}

Status backward(const BackwardArgs& args, Precision precision, Result* result) {
  Shape s;
  Status st = read_shape(args.fwd, &s);
  if (!st.ok()) return st;
  if (!args.dout.present()) return Status::Invalid("reference: dout required");
  Engine(args.fwd, s, precision, result, &args).run();
  return Status::Ok();
}

Status forward_row(const AttentionArgs& args, RowId id, std::vector<double>* out, double* lse) {
  Shape s;
  Status st = read_shape(args, &s);
  if (!st.ok()) return st;
  if (id.batch < 0 || id.batch >= s.batch || id.head < 0 || id.head >= s.heads_q || id.row < 0 ||
      id.row >= s.len_q(id.batch))
    return Status::Invalid("reference: row id out of range");
  Result unused;
  Engine(args, s, Precision::kFloat64, &unused, nullptr).row(id.batch, id.head, id.row, out, lse);
  return Status::Ok();
}

}  // namespace flashattn::reference
