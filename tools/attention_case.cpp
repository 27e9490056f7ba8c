// Host tensors, device mirrors and argument structs of one attention problem.
#include "attention_case.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace flashattn::cli {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

int64_t sum(const std::vector<int32_t>& lens) {
  int64_t total = 0;
  for (int32_t n : lens) total += n;
  return total;
}

// Prefix sums [0, l0, l0+l1, ...] as an int32 host tensor.
harness::HostTensor prefix_sums(const std::vector<int32_t>& lens) {
  harness::HostTensor t = harness::HostTensor::make(DType::kInt32, {int64_t(lens.size()) + 1});
  int64_t acc = 0;
  t.set(0, 0.0);
  for (size_t i = 0; i < lens.size(); ++i) {
    acc += lens[i];
    t.set(int64_t(i) + 1, double(acc));
  }
  return t;
}

Status upload_if(bool present, const harness::HostTensor& host, int device, DeviceMirror* mirror) {
  return present ? mirror->upload(host, device) : Status::Ok();
}

double lse_diff(double got, double ref) {
  if (std::isnan(got) || std::isnan(ref)) return std::numeric_limits<double>::infinity();
  // A row that sees no key has lse = -inf in both: that is agreement, not an infinite error.
  if (std::isinf(got) || std::isinf(ref)) return got == ref ? 0.0 : std::numeric_limits<double>::infinity();
  return std::fabs(got - ref);
}

}  // namespace

std::string ProblemSpec::describe() const {
  std::ostringstream s;
  if (varlen()) {
    s << "varlen[";
    for (size_t i = 0; i < lens_q.size(); ++i) s << (i ? "," : "") << lens_q[i] << "x" << lens_k[i];
    s << "]";
  } else {
    s << "b" << batch << " sq" << seqlen_q << " sk" << seqlen_k;
  }
  s << " h" << heads_q << "/" << heads_kv << " d" << head_dim;
  if (causal) s << " causal";
  if (window_left >= 0 || window_right >= 0) s << " win" << window_left << "," << window_right;
  if (softcap > 0) s << " cap" << softcap;
  if (scale > 0) s << " scale" << scale;
  if (pad > 0) s << " pad" << pad;
  return s.str();
}

void ProblemBuffers::create(const ProblemSpec& spec, bool backward, const Target& target) {
  spec_ = spec;
  target_ = target;
  backward_ = backward;
  const DType dt = spec.dtype;
  const int64_t hq = spec.heads_q, hk = spec.heads_kv, d = spec.head_dim;
  std::vector<int64_t> q_shape, k_shape, lse_shape;
  if (spec.varlen()) {
    const int64_t tq = sum(spec.lens_q), tk = sum(spec.lens_k);
    q_shape = {tq, hq, d};
    k_shape = {tk, hk, d};
    lse_shape = {hq, tq};
    cu_q = prefix_sums(spec.lens_q);
    cu_k = prefix_sums(spec.lens_k);
  } else {
    q_shape = {spec.batch, spec.seqlen_q, hq, d};
    k_shape = {spec.batch, spec.seqlen_k, hk, d};
    lse_shape = {spec.batch, hq, spec.seqlen_q};
    cu_q = harness::HostTensor{};
    cu_k = harness::HostTensor{};
  }
  q = harness::HostTensor::make(dt, q_shape, spec.pad);
  k = harness::HostTensor::make(dt, k_shape, spec.pad);
  v = harness::HostTensor::make(dt, k_shape, spec.pad);
  out = harness::HostTensor::make(dt, q_shape, spec.pad);
  lse = harness::HostTensor::make(DType::kFloat32, lse_shape);
  if (backward) {
    dout = harness::HostTensor::make(dt, q_shape, spec.pad);
    dq = harness::HostTensor::make(dt, q_shape, spec.pad);
    dk = harness::HostTensor::make(dt, k_shape, spec.pad);
    dv = harness::HostTensor::make(dt, k_shape, spec.pad);
  } else {
    dout = dq = dk = dv = harness::HostTensor{};
  }
}

void ProblemBuffers::fill(std::mt19937_64& rng) {
  harness::fill_uniform(&q, rng);
  harness::fill_uniform(&k, rng);
  harness::fill_uniform(&v, rng);
  harness::poison(&out);
  harness::poison(&lse);
  if (backward_) {
    harness::fill_uniform(&dout, rng);
    harness::poison(&dq);
    harness::poison(&dk);
    harness::poison(&dv);
  }
}

Status ProblemBuffers::upload() {
  if (!on_gpu()) return Status::Ok();
  const int dev = target_.device;
  const harness::HostTensor* hosts[] = {&q, &k, &v, &out, &lse};
  DeviceMirror* mirrors[] = {&d_q_, &d_k_, &d_v_, &d_out_, &d_lse_};
  for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); ++i) {
    Status s = mirrors[i]->upload(*hosts[i], dev);
    if (!s.ok()) return s;
  }
  const bool varlen = spec_.varlen();
  const harness::HostTensor* optional_hosts[] = {&cu_q, &cu_k, &dout, &dq, &dk, &dv};
  DeviceMirror* optional_mirrors[] = {&d_cu_q_, &d_cu_k_, &d_dout_, &d_dq_, &d_dk_, &d_dv_};
  const bool present[] = {varlen, varlen, backward_, backward_, backward_, backward_};
  for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); ++i) {
    Status s = upload_if(present[i], *optional_hosts[i], dev, optional_mirrors[i]);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status ProblemBuffers::download_forward() {
  if (!on_gpu()) return Status::Ok();
  Status s = d_out_.download(&out);
  return s.ok() ? d_lse_.download(&lse) : s;
}

Status ProblemBuffers::download_backward() {
  if (!on_gpu()) return Status::Ok();
  Status s = d_dq_.download(&dq);
  if (s.ok()) s = d_dk_.download(&dk);
  if (s.ok()) s = d_dv_.download(&dv);
  return s;
}

AttentionArgs ProblemBuffers::make_args(const TensorView& q_view, const TensorView& k_view, const TensorView& v_view,
                                        const TensorView& out_view, const TensorView& lse_view,
                                        const TensorView& cu_q_view, const TensorView& cu_k_view) const {
  AttentionArgs a;
  a.q = q_view;
  a.k = k_view;
  a.v = v_view;
  a.out = out_view;
  a.lse = lse_view;
  if (spec_.varlen()) {
    a.cu_seqlens_q = cu_q_view;
    a.cu_seqlens_k = cu_k_view;
  }
  a.softmax_scale = spec_.scale;
  a.causal = spec_.causal;
  a.window_left = spec_.window_left;
  a.window_right = spec_.window_right;
  a.softcap = spec_.softcap;
  a.backend = target_.backend;
  a.algorithm = target_.algorithm;
  a.deterministic = target_.deterministic;
  a.num_threads = target_.threads;
  return a;
}

AttentionArgs ProblemBuffers::host_args() const {
  AttentionArgs a = make_args(q.view, k.view, v.view, out.view, lse.view, cu_q.view, cu_k.view);
  a.backend = Backend::kCPU;
  return a;
}

AttentionArgs ProblemBuffers::run_args() const {
  if (!on_gpu()) return host_args();
  return make_args(d_q_.view(), d_k_.view(), d_v_.view(), d_out_.view(), d_lse_.view(), d_cu_q_.view(), d_cu_k_.view());
}

BackwardArgs ProblemBuffers::host_backward_args() const {
  BackwardArgs b;
  b.fwd = host_args();
  b.dout = dout.view;
  b.dq = dq.view;
  b.dk = dk.view;
  b.dv = dv.view;
  return b;
}

BackwardArgs ProblemBuffers::run_backward_args() const {
  if (!on_gpu()) return host_backward_args();
  BackwardArgs b;
  b.fwd = run_args();
  b.dout = d_dout_.view();
  b.dq = d_dq_.view();
  b.dk = d_dk_.view();
  b.dv = d_dv_.view();
  return b;
}

double lse_max_diff(const harness::HostTensor& got, const std::vector<double>& ref) {
  if (got.numel() != int64_t(ref.size())) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, lse_diff(got.get(i), ref[size_t(i)]));
  return worst;
}

double lse_max_diff(const std::vector<double>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, lse_diff(got[i], ref[i]));
  return worst;
}

int64_t unwritten_forward(const ProblemBuffers& b) { return harness::count_nan(b.out) + harness::count_nan(b.lse); }

int64_t unwritten_backward(const ProblemBuffers& b) {
  return harness::count_nan(b.dq) + harness::count_nan(b.dk) + harness::count_nan(b.dv);
}

uint64_t name_hash(const std::string& name) {
  uint64_t h = kFnvOffset;
  for (unsigned char c : name) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace flashattn::cli
