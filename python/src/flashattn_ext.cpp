// flashattn._ext: the nanobind module over the C++ API.
//
// Arrays arrive through nanobind's ndarray caster, which speaks DLPack (torch, CuPy, JAX, numpy >= 1.22)
// and the buffer protocol. Nothing here copies: a TensorView takes the producer's pointer and strides as they
// are, and the library's validation rejects what it cannot address (the Python layer makes the contiguous
// copy where the last dimension is strided). Errors leave as Python exceptions carrying the Status message:
// invalid argument -> ValueError, wrong dtype -> TypeError, not supported -> NotImplementedError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>

#include "flashattn/attention.h"
#include "flashattn/kvcache.h"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

// Inputs may be read-only (a numpy view of a constant, a JAX array); outputs must be writable.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// DLPack device codes (dlpack.h, DLDeviceType) that map onto the library's two kinds of memory.
enum DLDevice : int {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,      // pinned host memory: host-addressable, the CPU backend may read it
  kDLCUDAManaged = 13,  // managed memory: treated as device memory of its device
};

[[noreturn]] void raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

[[noreturn]] void raise_status(const Status& s) {
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
    case StatusCode::kNotSupported: type = PyExc_NotImplementedError; break;
    case StatusCode::kOutOfMemory: type = PyExc_MemoryError; break;
    case StatusCode::kOk:
    case StatusCode::kRuntimeError: type = PyExc_RuntimeError; break;
  }
  raise(type, s.message());
}

std::string dlpack_dtype_name(nb::dlpack::dtype t) {
  const char* kind = "unknown";
  switch (nb::dlpack::dtype_code(t.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: break;
  }
  std::string name = kind + std::to_string(int(t.bits));
  if (t.lanes != 1) name += "x" + std::to_string(int(t.lanes));
  return name;
}

// Maps a DLPack dtype onto the library's; false for anything the library has no code for.
bool to_dtype(nb::dlpack::dtype t, DType* out) {
  if (t.lanes != 1) return false;
  const auto code = nb::dlpack::dtype_code(t.code);
  if (code == nb::dlpack::dtype_code::Float && t.bits == 32) *out = DType::kFloat32;
  else if (code == nb::dlpack::dtype_code::Float && t.bits == 16) *out = DType::kFloat16;
  else if (code == nb::dlpack::dtype_code::Bfloat && t.bits == 16) *out = DType::kBFloat16;
  else if (code == nb::dlpack::dtype_code::Int && t.bits == 32) *out = DType::kInt32;
  else return false;
  return true;
}

template <typename Array>
TensorView to_view(const char* name, const Array& a) {
  TensorView t;
  if (a.ndim() > size_t(TensorView::kMaxDims))
    raise(PyExc_ValueError, std::string(name) + ": has " + std::to_string(a.ndim()) + " dimensions; at most " +
                                std::to_string(TensorView::kMaxDims) + " are supported");
  if (!to_dtype(a.dtype(), &t.dtype))
    raise(PyExc_TypeError, std::string(name) + ": dtype " + dlpack_dtype_name(a.dtype()) +
                               " is not supported (float32, float16, bfloat16; int32 for index arrays)");
  switch (a.device_type()) {
    case kDLCPU:
    case kDLCUDAHost: t.device = Device::kCPU; break;
    case kDLCUDA:
    case kDLCUDAManaged: t.device = Device::kCUDA; break;
    default:
      raise(PyExc_ValueError, std::string(name) + ": lives on DLPack device type " +
                                  std::to_string(a.device_type()) + "; only CPU and CUDA memory are supported");
  }
  t.device_index = t.device == Device::kCUDA ? a.device_id() : 0;
  // data() already includes the DLPack byte_offset.
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.ndim = int(a.ndim());
  for (int i = 0; i < t.ndim; ++i) {
    t.shape[i] = int64_t(a.shape(size_t(i)));
    t.stride[i] = a.stride(size_t(i));
  }
  // An empty tensor may legitimately have no storage; give it a non-null address so it counts as
  // present (nothing is ever read from or written to a tensor of zero elements). Aligned as any kernel's
  // loads want their bases (16 bytes for cp.async and TMA), so that no alignment rule refuses it.
  if (t.data == nullptr && t.numel() == 0) {
    alignas(256) static unsigned char empty_storage[256];
    t.data = empty_storage;
  }
  return t;
}

template <typename Array>
std::optional<TensorView> to_view(const char* name, const std::optional<Array>& a) {
  if (!a) return std::nullopt;
  return to_view(name, *a);
}

// The dtype rules raise TypeError, before the library's shape and range checks raise ValueError.
void require_dtype(const char* name, const TensorView& t, DType want, const char* rule) {
  if (t.dtype != want)
    raise(PyExc_TypeError, std::string(name) + ": dtype " + to_string(t.dtype) + " must be " + to_string(want) +
                               " (" + rule + ")");
}

TensorView float_view(const char* name, const InArray& a) {
  TensorView t = to_view(name, a);
  if (t.dtype != DType::kFloat32 && t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16)
    raise(PyExc_TypeError, std::string(name) + ": dtype " + to_string(t.dtype) +
                               " is not supported; use float32, float16 or bfloat16");
  return t;
}

// The scalar options shared by forward and backward.
struct Options {
  double softmax_scale = 0.0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  std::string backend = "auto", algo = "auto";
  bool deterministic = false;
  int num_threads = 0;
  uint64_t stream = 0;
};

// The scalar options onto AttentionArgs or KVCacheArgs, which name them alike (deterministic is the
// caller's: only AttentionArgs has it). Unknown backend or algorithm names raise ValueError.
template <typename Args>
void apply_options(const Options& o, Args* a) {
  a->softmax_scale = float(o.softmax_scale);
  a->causal = o.causal;
  a->window_left = o.window_left;
  a->window_right = o.window_right;
  a->softcap = float(o.softcap);
  if (!parse_backend(o.backend, &a->backend))
    raise(PyExc_ValueError, "backend: unknown name '" + o.backend + "'; expected auto, cpu or cuda");
  if (!parse_algorithm(o.algo, &a->algorithm))
    raise(PyExc_ValueError, "algo: unknown name '" + o.algo + "'; expected auto, standard, fa1, fa2 or fa3");
  a->num_threads = o.num_threads;
  a->stream = reinterpret_cast<void*>(uintptr_t(o.stream));
}

// q arrives converted (and its dtype checked) so that its errors come first, whatever order the
// caller's other conversions run in.
AttentionArgs make_args(const TensorView& q, const InArray& k, const InArray& v, const TensorView& out,
                        const std::optional<TensorView>& lse, const std::optional<InArray>& cu_seqlens_q,
                        const std::optional<InArray>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                        const Options& o) {
  AttentionArgs a;
  a.q = q;
  a.k = to_view("k", k);
  a.v = to_view("v", v);
  a.out = out;
  require_dtype("k", a.k, a.q.dtype, "the dtype of q");
  require_dtype("v", a.v, a.q.dtype, "the dtype of q");
  require_dtype("out", a.out, a.q.dtype, "the dtype of q");
  if (lse) {
    a.lse = *lse;
    require_dtype("lse", a.lse, DType::kFloat32, "the log-sum-exp is always float32");
  }
  if (auto cu = to_view("cu_seqlens_q", cu_seqlens_q)) {
    a.cu_seqlens_q = *cu;
    require_dtype("cu_seqlens_q", a.cu_seqlens_q, DType::kInt32, "prefix sums of sequence lengths");
  }
  if (auto cu = to_view("cu_seqlens_k", cu_seqlens_k)) {
    a.cu_seqlens_k = *cu;
    require_dtype("cu_seqlens_k", a.cu_seqlens_k, DType::kInt32, "prefix sums of sequence lengths");
  }
  a.max_seqlen_q = max_seqlen_q;
  a.max_seqlen_k = max_seqlen_k;
  apply_options(o, &a);
  a.deterministic = o.deterministic;
  return a;
}

nb::dict run_info(const RunInfo& info) {
  nb::dict d;
  d["backend"] = to_string(info.backend);
  d["algo"] = to_string(info.algorithm);
  d["kernel"] = info.kernel;
  return d;
}

nb::dict py_forward(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                    const std::optional<OutArray>& lse, const std::optional<InArray>& cu_seqlens_q,
                    const std::optional<InArray>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                    double softmax_scale, bool causal, int64_t window_left, int64_t window_right, double softcap,
                    const std::string& backend, const std::string& algo, int num_threads, uint64_t stream) {
  Options o{softmax_scale, causal, window_left, window_right, softcap, backend, algo, false, num_threads, stream};
  const TensorView qv = float_view("q", q);
  AttentionArgs args = make_args(qv, k, v, to_view("out", out), to_view("lse", lse), cu_seqlens_q, cu_seqlens_k,
                                 max_seqlen_q, max_seqlen_k, o);
  RunInfo info;
  Status s;
  {
    // The CPU backend runs its own worker threads and a CUDA launch may wait on the driver: let other
    // Python threads go on meanwhile. Nothing below touches a Python object.
    nb::gil_scoped_release release;
    s = forward(args, &info);
  }
  if (!s.ok()) raise_status(s);
  return run_info(info);
}

nb::dict py_backward(const InArray& dout, const InArray& q, const InArray& k, const InArray& v, const InArray& out,
                     const InArray& lse, const OutArray& dq, const OutArray& dk, const OutArray& dv,
                     const std::optional<InArray>& cu_seqlens_q, const std::optional<InArray>& cu_seqlens_k,
                     int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, bool causal,
                     int64_t window_left, int64_t window_right, double softcap, const std::string& backend,
                     const std::string& algo, bool deterministic, int num_threads, uint64_t stream) {
  Options o{softmax_scale, causal, window_left, window_right, softcap, backend, algo, deterministic, num_threads,
            stream};
  BackwardArgs b;
  // `out` is an input of backward (read-only is fine); the forward argument struct names it out all the same.
  const TensorView qv = float_view("q", q);
  b.fwd = make_args(qv, k, v, to_view("out", out), to_view("lse", lse), cu_seqlens_q, cu_seqlens_k,
                    max_seqlen_q, max_seqlen_k, o);
  b.dout = to_view("dout", dout);
  b.dq = to_view("dq", dq);
  b.dk = to_view("dk", dk);
  b.dv = to_view("dv", dv);
  require_dtype("dout", b.dout, b.fwd.q.dtype, "the dtype of q");
  require_dtype("dq", b.dq, b.fwd.q.dtype, "the dtype of q");
  require_dtype("dk", b.dk, b.fwd.q.dtype, "the dtype of q");
  require_dtype("dv", b.dv, b.fwd.q.dtype, "the dtype of q");
  RunInfo info;
  Status s;
  {
    nb::gil_scoped_release release;
    s = backward(b, &info);
  }
  if (!s.ok()) raise_status(s);
  return run_info(info);
}

// The caches are written in place (when k_new/v_new are given), so they must be writable arrays; nothing
// else of the caller's is written but out and lse.
nb::dict py_forward_kvcache(const InArray& q, const OutArray& k_cache, const OutArray& v_cache,
                            const InArray& cache_seqlens, const OutArray& out, const std::optional<OutArray>& lse,
                            const std::optional<InArray>& k_new, const std::optional<InArray>& v_new,
                            const std::optional<InArray>& block_table, double softmax_scale, bool causal,
                            int64_t window_left, int64_t window_right, double softcap, int num_splits,
                            bool check_indices, const std::string& backend, const std::string& algo,
                            int num_threads, uint64_t stream) {
  KVCacheArgs a;
  a.q = float_view("q", q);
  a.k_cache = to_view("k_cache", k_cache);
  a.v_cache = to_view("v_cache", v_cache);
  a.out = to_view("out", out);
  require_dtype("k_cache", a.k_cache, a.q.dtype, "the dtype of q");
  require_dtype("v_cache", a.v_cache, a.q.dtype, "the dtype of q");
  require_dtype("out", a.out, a.q.dtype, "the dtype of q");
  if (auto t = to_view("k", k_new)) {
    a.k_new = *t;
    require_dtype("k", a.k_new, a.q.dtype, "the dtype of q");
  }
  if (auto t = to_view("v", v_new)) {
    a.v_new = *t;
    require_dtype("v", a.v_new, a.q.dtype, "the dtype of q");
  }
  a.cache_seqlens = to_view("cache_seqlens", cache_seqlens);
  require_dtype("cache_seqlens", a.cache_seqlens, DType::kInt32, "tokens already in each sequence's cache");
  if (auto t = to_view("block_table", block_table)) {
    a.block_table = *t;
    require_dtype("block_table", a.block_table, DType::kInt32, "page indices");
  }
  if (lse) {
    a.lse = to_view("lse", *lse);
    require_dtype("lse", a.lse, DType::kFloat32, "the log-sum-exp is always float32");
  }
  a.num_splits = num_splits;
  a.check_indices = check_indices;
  apply_options(Options{softmax_scale, causal, window_left, window_right, softcap, backend, algo, false, num_threads,
                        stream},
                &a);
  RunInfo info;
  Status s;
  {
    nb::gil_scoped_release release;
    s = forward_kvcache(a, &info);
  }
  if (!s.ok()) raise_status(s);
  return run_info(info);
}

nb::list py_capabilities() {
  nb::list result;
  for (const Capabilities& c : capabilities()) {
    nb::dict d;
    d["backend"] = to_string(c.backend);
    d["algo"] = to_string(c.algorithm);
    d["available"] = c.available;
    d["note"] = c.note;
    nb::list dtypes;
    for (DType t : c.dtypes) dtypes.append(to_string(t));
    d["dtypes"] = dtypes;
    d["head_dims"] = c.head_dims;
    d["max_head_dim"] = c.max_head_dim;
    d["backward"] = c.backward;
    d["causal"] = c.causal;
    d["window"] = c.window;
    d["softcap"] = c.softcap;
    d["gqa"] = c.gqa;
    d["varlen"] = c.varlen;
    result.append(d);
  }
  return result;
}

}  // namespace
}  // namespace flashattn::python

NB_MODULE(_ext, m) {
  using namespace flashattn::python;
  m.doc() = "flashattn C++ API (low level; use the functions of the flashattn package)";
  m.attr("__version__") = flashattn::version();

  // Scalar options are keyword arguments with the library's defaults, so the Python layer passes only what
  // it resolved. A softmax_scale of 0 means 1/sqrt(head_dim); window sides of -1 mean unbounded.
  m.def("forward", &py_forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
        nb::arg("lse").none() = nb::none(), nb::kw_only(), nb::arg("cu_seqlens_q").none() = nb::none(),
        nb::arg("cu_seqlens_k").none() = nb::none(), nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0,
        nb::arg("softmax_scale") = 0.0, nb::arg("causal") = false, nb::arg("window_left") = -1,
        nb::arg("window_right") = -1, nb::arg("softcap") = 0.0, nb::arg("backend") = "auto",
        nb::arg("algo") = "auto", nb::arg("num_threads") = 0, nb::arg("stream") = 0,
        "Runs the forward pass into the preallocated `out` (and `lse`); returns what ran.");

  m.def("backward", &py_backward, nb::arg("dout"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
        nb::arg("lse"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::kw_only(),
        nb::arg("cu_seqlens_q").none() = nb::none(), nb::arg("cu_seqlens_k").none() = nb::none(),
        nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0, nb::arg("softmax_scale") = 0.0,
        nb::arg("causal") = false, nb::arg("window_left") = -1, nb::arg("window_right") = -1,
        nb::arg("softcap") = 0.0, nb::arg("backend") = "auto", nb::arg("algo") = "auto",
        nb::arg("deterministic") = false, nb::arg("num_threads") = 0, nb::arg("stream") = 0,
        "Runs the backward pass into the preallocated `dq`, `dk`, `dv`; returns what ran.");

  m.def("forward_kvcache", &py_forward_kvcache, nb::arg("q"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("cache_seqlens"), nb::arg("out"), nb::arg("lse").none() = nb::none(), nb::kw_only(),
        nb::arg("k_new").none() = nb::none(), nb::arg("v_new").none() = nb::none(),
        nb::arg("block_table").none() = nb::none(), nb::arg("softmax_scale") = 0.0, nb::arg("causal") = false,
        nb::arg("window_left") = -1, nb::arg("window_right") = -1, nb::arg("softcap") = 0.0,
        nb::arg("num_splits") = 0, nb::arg("check_indices") = true, nb::arg("backend") = "auto",
        nb::arg("algo") = "auto", nb::arg("num_threads") = 0, nb::arg("stream") = 0,
        "Appends k_new/v_new to the caches in place, then attends q over them into the preallocated `out` "
        "(and `lse`); returns what ran.");

  m.def("capabilities", &py_capabilities, "What each backend and algorithm of this build supports.");
  m.def("cuda_built", &flashattn::cuda_built, "True when this build has CUDA kernels.");
  m.def("cuda_device_count", &flashattn::cuda_device_count, "CUDA devices visible (0 without CUDA).");
}
