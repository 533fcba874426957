// BROKEN fused_add_rmsnorm candidate for the harness tests: wrong_above_8192.
// Written by the astra-sglang developers as a deliberately broken fixture; not produced by a language model.
//
// Bug: the mean of squares divides by min(H, 8192) (a constant left over from the limit of SGLang's JIT kernel),
// so rows wider than 8192 come out about sqrt(H / 8192) too large (16% at H = 11008). Correct at H <= 8192,
// i.e. on every shape the extracted JIT original accepts.
// What must catch it: checking the shapes the original refuses (128x11008, 512x14336) against the kernel SGLang
// serves there (FlashInfer's, Baseline.serves); a harness that skips shapes the original refuses accepts it.
//
// Apart from the defect this is a plain, correct kernel: one block per row, a strided loop over 16-byte
// vectors, two passes (sum of squares, then normalise), the original's rounding points, bf16 and fp16.

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.h>

#include <sgl_kernel/type.cuh>
#include <sgl_kernel/utils.cuh>

#include <tvm/ffi/container/tensor.h>

#include <cstdint>

namespace sglang {

namespace broken_w8k {

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
        o.p[j] = H::down(make_float2(t.x * wf.x, t.y * wf.y));
      } else {
        const float2 v = H::up(b.p[j]);
        o.p[j] = H::down(make_float2(v.x * wf.x * rs, v.y * wf.y * rs));
      }
    }
    rr[i] = b.raw;
    xr[i] = o.raw;
  }
}

}  // namespace broken_w8k

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
    const unsigned grid = static_cast<unsigned>(num_tokens);
    const int64_t counted = hidden > 8192 ? 8192 : hidden;  // the bug
    auto kernel = broken_w8k::row_kernel<kCastXBeforeOutMul, DType>;
    LaunchKernel(grid, threads, device.unwrap())(
        kernel, static_cast<DType*>(input.data_ptr()), static_cast<DType*>(residual.data_ptr()),
        static_cast<const DType*>(weight.data_ptr()), nvec, 1.0f / static_cast<float>(counted), eps);
  }
};

}  // namespace sglang
