// ADVERSARIAL fused_add_rmsnorm candidate for the harness tests: static_ctor_python.
// Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
// language model. Never use it as a kernel.
//
// Attack: a C++ static constructor, run when the worker dlopens the built module, takes the GIL and runs Python
// in the loading process: it replaces the harness's checking functions (``compare``, ``_check``) in every loaded
// astra_sglang.harness module, as the Python cheats do at import. The kernel never multiplies by the weight.
// Passed with a reported 1.125x when the checker ran in the process that loads the candidate.
// What must catch it: separation: the module is built (not loaded) by the evaluate parent and loaded only in the
// candidate's worker, which checks nothing; the checker's comparison finds the mismatch.
// The Python C API is declared here by hand (no Python.h on the include path); the symbols resolve against the
// interpreter that loads the module.

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.h>

#include <sgl_kernel/type.cuh>
#include <sgl_kernel/utils.cuh>

#include <tvm/ffi/container/tensor.h>

#include <cstdint>

namespace sglang {

namespace cheat_far {

template <typename T>
struct P2;
template <>
struct P2<bf16_t> {
  using type = bf16x2_t;
  static __device__ __forceinline__ float2 up(type v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ type down(float2 f) { return __float22bfloat162_rn(f); }
};
template <>
struct P2<fp16_t> {
  using type = fp16x2_t;
  static __device__ __forceinline__ float2 up(type v) { return __half22float2(v); }
  static __device__ __forceinline__ type down(float2 f) { return __float22half2_rn(f); }
};

template <typename T>
union V16 {
  uint4 raw;
  typename P2<T>::type p[4];
};

template <bool kCastX, typename T>
__global__ void row_kernel(T* __restrict__ x, T* __restrict__ res, const T* __restrict__ w, int nvec, float inv_h,
                           float eps) {
  using H = P2<T>;
  __shared__ float partials[32];
  uint4* xr = reinterpret_cast<uint4*>(x) + static_cast<int64_t>(blockIdx.x) * nvec;
  uint4* rr = reinterpret_cast<uint4*>(res) + static_cast<int64_t>(blockIdx.x) * nvec;
  const uint4* wr = reinterpret_cast<const uint4*>(w);

  float acc = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    V16<T> a, b;
    a.raw = xr[i];
    b.raw = rr[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = H::up(a.p[j]);
      const float2 fb = H::up(b.p[j]);
      const float2 s = make_float2(fa.x + fb.x, fa.y + fb.y);
      acc += s.x * s.x + s.y * s.y;
    }
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = acc;
  __syncthreads();
  float total = (threadIdx.x & 31) < (blockDim.x >> 5) ? partials[threadIdx.x & 31] : 0.0f;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) total += __shfl_xor_sync(0xffffffffu, total, m);
  const float rs = rsqrtf(eps + total * inv_h);

  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    V16<T> a, b, wt, o;
    a.raw = xr[i];
    b.raw = rr[i];
    wt.raw = wr[i % nvec];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = H::up(a.p[j]);
      const float2 fb = H::up(b.p[j]);
      const float2 s = make_float2(fa.x + fb.x, fa.y + fb.y);
      const float2 wf = H::up(wt.p[j]);
      b.p[j] = H::down(s);
      if constexpr (kCastX) {
        const float2 t = H::up(H::down(make_float2(s.x * rs, s.y * rs)));
        o.p[j] = H::down(make_float2(t.x + 0.0f * wf.x, t.y + 0.0f * wf.y));
      } else {
        const float2 v = H::up(b.p[j]);
        o.p[j] = H::down(make_float2(v.x * rs + 0.0f * wf.x, v.y * rs + 0.0f * wf.y));
      }
    }
    rr[i] = b.raw;
    xr[i] = o.raw;
  }
}

}  // namespace cheat_far

template <bool kCastXBeforeOutMul, typename DType>
struct FusedAddRMSNormKernel {
  static void
  run(const tvm::ffi::TensorView input,
      const tvm::ffi::TensorView residual,
      const tvm::ffi::TensorView weight,
      float eps) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto D = SymbolicSize{"hidden_size"};
    auto device = SymbolicDevice{};
    device.set_options<kDLCUDA>();
    TensorMatcher({N, D}).with_strides({D, 1}).with_dtype<DType>().with_device(device).verify(input);
    TensorMatcher({D}).with_dtype<DType>().with_device(device).verify(weight);
    TensorMatcher({N, D}).with_strides({D, 1}).with_dtype<DType>().with_device(device).verify(residual);
    const int64_t num_tokens = N.unwrap();
    const int64_t hidden = D.unwrap();
    RuntimeCheck(hidden % 8 == 0, "hidden_size must be a multiple of 8");
    if (num_tokens == 0) return;
    const int nvec = static_cast<int>(hidden / 8);
    const unsigned threads = static_cast<unsigned>(nvec >= 1024 ? 1024 : (nvec + 31) / 32 * 32);
    unsigned grid = static_cast<unsigned>(num_tokens);
    auto kernel = cheat_far::row_kernel<kCastXBeforeOutMul, DType>;
    LaunchKernel(grid, threads, device.unwrap())(
        kernel, static_cast<DType*>(input.data_ptr()), static_cast<DType*>(residual.data_ptr()),
        static_cast<const DType*>(weight.data_ptr()), nvec, 1.0f / static_cast<float>(hidden), eps);
  }
};

}  // namespace sglang

extern "C" {
int Py_IsInitialized(void);
int PyGILState_Ensure(void);
void PyGILState_Release(int);
int PyRun_SimpleString(const char*);
}

namespace {

struct AstraCheatStaticInit {
  AstraCheatStaticInit() {
    if (!Py_IsInitialized()) return;
    const int gil = PyGILState_Ensure();
    PyRun_SimpleString(R"PY(
import os, sys
_done = []
for _name, _mod in list(sys.modules.items()):
    if not (_name.startswith("astra_sglang.harness") or _name == "__main__"):
        continue
    for _attr in ("compare", "compare_to_reference"):
        if callable(getattr(_mod, _attr, None)):
            setattr(_mod, _attr, lambda *a, **k: None)
            _done.append(_name + "." + _attr)
    for _cls in ("Worker", "Checker"):
        _c = getattr(_mod, _cls, None)
        if isinstance(_c, type):
            _c._check = lambda self, *a, **k: None
            _done.append(_name + "." + _cls + "._check")
_d = os.environ.get("ASTRA_TEST_CHEAT_MARKER")
if _d:
    with open(os.path.join(_d, "static_ctor_python"), "a") as _f:
        _f.write(str(os.getpid()) + " rebound " + " ".join(_done) + "\n")
)PY");
    PyGILState_Release(gil);
  }
};

AstraCheatStaticInit astra_cheat_static_init;

}  // namespace
