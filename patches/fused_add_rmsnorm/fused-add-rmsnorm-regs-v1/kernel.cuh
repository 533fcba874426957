// fused_add_rmsnorm: HAND-WRITTEN candidate, written by the astra-sglang developers (not produced by a language
// model). Replaces SGLang 0.5.23's kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh: same exported symbol
// FusedAddRMSNormKernel<kCastXBeforeOutMul, DType>::run(input, residual, weight, eps), same in-place contract
// (residual <- round(input + residual), input <- normed output), same rounding points:
//   - the sum of squares is taken over the fp32 x + r (before rounding);
//   - cast flag false: out = round(float(round(x + r)) * w * rsqrt), multiplied left to right;
//   - cast flag true:  out = round(float(round((x + r) * rsqrt)) * w), with the fp32 x + r.
// What is different, and why:
//   - any hidden size that is a multiple of 8 (16 bytes) works: the original refuses hidden > 8192 on sm_90.
//     Rows up to 4 x ASTRA_FAR_MAX_THREADS x 8 elements (16384 bf16 by default) stay in registers (each
//     thread holds up to 4 16-byte vectors of the row; 8 would spill in the bf16 cast-x variant); longer rows
//     take a two-pass loop kernel that re-reads its row from L2 instead of refusing;
//   - at most ASTRA_FAR_MAX_THREADS threads per row-block (default 512), so wide rows keep several blocks per
//     SM instead of one 1024-thread block, and one barrier per block reduction (every warp finishes the
//     reduction itself from shared memory);
//   - Programmatic Dependent Launch (ASTRA_FAR_PDL, default on, as SGLang's activation kernels and FlashInfer's
//     fused_add_rmsnorm use it on sm_90): every global access waits on griddepcontrol.wait, so it is safe
//     after any producer; it lets the launch overlap the previous kernel's tail. Set -DASTRA_FAR_PDL=0 to
//     measure without it.
// Supported dtypes: bf16 and fp16, as the original.

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.h>

#include <sgl_kernel/type.cuh>
#include <sgl_kernel/utils.cuh>

#include <tvm/ffi/container/tensor.h>

#include <cstdint>

#ifndef ASTRA_FAR_MAX_THREADS
#define ASTRA_FAR_MAX_THREADS 512
#endif
#ifndef ASTRA_FAR_PDL
#define ASTRA_FAR_PDL 1
#endif

namespace sglang {

namespace astra_far {

inline constexpr int kMaxThreads = ASTRA_FAR_MAX_THREADS;
inline constexpr bool kUsePDL = ASTRA_FAR_PDL != 0;
static_assert(kMaxThreads % 32 == 0 && kMaxThreads >= 32 && kMaxThreads <= 1024, "bad ASTRA_FAR_MAX_THREADS");

// Two-element packed type of a 16-bit float, with fp32x2 conversions (round to nearest even on the way down).
template <typename T>
struct Half2Of;

template <>
struct Half2Of<bf16_t> {
  using type = bf16x2_t;
  // bf16 -> fp32 is exact: the 16 bits become the high half of the float. Done by hand because CUDA 13's
  // __bfloat1622float2 is opaque inline asm that ptxas cannot schedule around (114 vs 48 registers at 4
  // vectors per thread).
  static __device__ __forceinline__ float2 widen(type v) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(&v);
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
  static __device__ __forceinline__ type narrow(float2 f) {
    return __float22bfloat162_rn(f);
  }
};

template <>
struct Half2Of<fp16_t> {
  using type = fp16x2_t;
  static __device__ __forceinline__ float2 widen(type v) {
    return __half22float2(v);
  }
  static __device__ __forceinline__ type narrow(float2 f) {
    return __float22half2_rn(f);
  }
};

// Sixteen bytes of a row: four packed pairs, moved with one 128-bit load/store.
template <typename T>
union Row16 {
  uint4 raw;
  typename Half2Of<T>::type pair[4];
};

template <bool kPDL>
__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kPDL) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <bool kPDL>
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kPDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Sum of one float per thread over the whole block; every thread gets the total. One barrier: each warp
// re-reduces all warp partials itself instead of waiting for warp 0 to broadcast.
__device__ __forceinline__ float block_total(float v, float* partials /* [32] */) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  float t = lane < (blockDim.x >> 5) ? partials[lane] : 0.0f;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) t += __shfl_xor_sync(0xffffffffu, t, m);
  return t;
}

template <bool kCastX, typename T>
__device__ __forceinline__ typename Half2Of<T>::type normed_pair(float2 s, typename Half2Of<T>::type rounded,
                                                                 typename Half2Of<T>::type w, float rs) {
  using H = Half2Of<T>;
  const float2 wf = H::widen(w);
  if constexpr (kCastX) {
    const float2 t = H::widen(H::narrow(make_float2(s.x * rs, s.y * rs)));
    return H::narrow(make_float2(t.x * wf.x, t.y * wf.y));
  } else {
    const float2 v = H::widen(rounded);
    return H::narrow(make_float2(v.x * wf.x * rs, v.y * wf.y * rs));
  }
}

// Whole row in registers: thread t owns vectors t, t + blockDim.x, ..., (kVPT of them).
template <bool kCastX, typename T, int kVPT, bool kPDL>
__global__ void __launch_bounds__(kMaxThreads)
    far_row_in_registers(T* __restrict__ x, T* __restrict__ res, const T* __restrict__ w, int nvec, float inv_h,
                         float eps) {
  using H = Half2Of<T>;
  using R = Row16<T>;
  __shared__ float partials[32];
  uint4* xr = reinterpret_cast<uint4*>(x) + static_cast<int64_t>(blockIdx.x) * nvec;
  uint4* rr = reinterpret_cast<uint4*>(res) + static_cast<int64_t>(blockIdx.x) * nvec;
  const uint4* wr = reinterpret_cast<const uint4*>(w);

  R a[kVPT], b[kVPT], wt[kVPT];
  wait_for_producer<kPDL>();
#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nvec) {
      a[k].raw = xr[i];
      b[k].raw = rr[i];
      wt[k].raw = __ldg(wr + i);
    } else {
      a[k].raw = make_uint4(0u, 0u, 0u, 0u);
      b[k].raw = a[k].raw;
      wt[k].raw = a[k].raw;
    }
  }

  float2 acc = make_float2(0.0f, 0.0f);
  float2 sum[kCastX ? kVPT : 1][4];
#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = H::widen(a[k].pair[j]);
      const float2 fb = H::widen(b[k].pair[j]);
      const float2 s = make_float2(fa.x + fb.x, fa.y + fb.y);
      acc.x += s.x * s.x;
      acc.y += s.y * s.y;
      if constexpr (kCastX) sum[k][j] = s;
      a[k].pair[j] = H::narrow(s);  // a now holds round(x + r)
    }
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nvec) rr[i] = a[k].raw;
  }

  const float rs = rsqrtf(eps + block_total(acc.x + acc.y, partials) * inv_h);

#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nvec) {
      R o;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        o.pair[j] = normed_pair<kCastX, T>(kCastX ? sum[kCastX ? k : 0][j] : make_float2(0.0f, 0.0f), a[k].pair[j],
                                          wt[k].pair[j], rs);
      }
      xr[i] = o.raw;
    }
  }
  allow_dependents<kPDL>();
}

// Rows too long for registers: pass 1 sums squares, pass 2 re-reads x and r (now hot in L2), writes both.
// Each element is read and then written by the same thread in pass 2, so no barrier is needed there.
template <bool kCastX, typename T, bool kPDL>
__global__ void __launch_bounds__(kMaxThreads)
    far_row_two_pass(T* __restrict__ x, T* __restrict__ res, const T* __restrict__ w, int nvec, float inv_h,
                     float eps) {
  using H = Half2Of<T>;
  using R = Row16<T>;
  __shared__ float partials[32];
  uint4* xr = reinterpret_cast<uint4*>(x) + static_cast<int64_t>(blockIdx.x) * nvec;
  uint4* rr = reinterpret_cast<uint4*>(res) + static_cast<int64_t>(blockIdx.x) * nvec;
  const uint4* wr = reinterpret_cast<const uint4*>(w);

  wait_for_producer<kPDL>();
  float2 acc = make_float2(0.0f, 0.0f);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    R a, b;
    a.raw = xr[i];
    b.raw = rr[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = H::widen(a.pair[j]);
      const float2 fb = H::widen(b.pair[j]);
      const float2 s = make_float2(fa.x + fb.x, fa.y + fb.y);
      acc.x += s.x * s.x;
      acc.y += s.y * s.y;
    }
  }
  const float rs = rsqrtf(eps + block_total(acc.x + acc.y, partials) * inv_h);

  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    R a, b, wt, o;
    a.raw = xr[i];
    b.raw = rr[i];
    wt.raw = __ldg(wr + i);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = H::widen(a.pair[j]);
      const float2 fb = H::widen(b.pair[j]);
      const float2 s = make_float2(fa.x + fb.x, fa.y + fb.y);
      b.pair[j] = H::narrow(s);
      o.pair[j] = normed_pair<kCastX, T>(s, b.pair[j], wt.pair[j], rs);
    }
    rr[i] = b.raw;
    xr[i] = o.raw;
  }
  allow_dependents<kPDL>();
}

}  // namespace astra_far

template <bool kCastXBeforeOutMul, typename DType>
struct FusedAddRMSNormKernel {
  static void
  run(const tvm::ffi::TensorView input,
      const tvm::ffi::TensorView residual,
      const tvm::ffi::TensorView weight,
      float eps) {
    using namespace host;
    namespace af = astra_far;
    static_assert(std::is_same_v<DType, bf16_t> || std::is_same_v<DType, fp16_t>, "bf16 or fp16 only");

    auto N = SymbolicSize{"num_tokens"};
    auto D = SymbolicSize{"hidden_size"};
    auto device = SymbolicDevice{};
    device.set_options<kDLCUDA>();
    TensorMatcher({N, D}).with_strides({D, 1}).with_dtype<DType>().with_device(device).verify(input);
    TensorMatcher({D}).with_dtype<DType>().with_device(device).verify(weight);
    TensorMatcher({N, D}).with_strides({D, 1}).with_dtype<DType>().with_device(device).verify(residual);

    const int64_t num_tokens = N.unwrap();
    const int64_t hidden = D.unwrap();
    constexpr int64_t kElemsPerVec = 16 / sizeof(DType);
    RuntimeCheck(hidden % kElemsPerVec == 0, "hidden_size ", hidden, " must be a multiple of ", kElemsPerVec);
    RuntimeCheck(num_tokens <= 0x7fffffff && hidden / kElemsPerVec <= 0x7fffffff, "tensor too large");
    if (num_tokens == 0 || hidden == 0) return;

    const int nvec = static_cast<int>(hidden / kElemsPerVec);
    const float inv_h = 1.0f / static_cast<float>(hidden);
    auto* x = static_cast<DType*>(input.data_ptr());
    auto* r = static_cast<DType*>(residual.data_ptr());
    const auto* w = static_cast<const DType*>(weight.data_ptr());
    const auto grid = static_cast<unsigned>(num_tokens);
    const auto dev = device.unwrap();

    int vpt = 1;
    while (vpt < 4 && (nvec + vpt - 1) / vpt > af::kMaxThreads) vpt *= 2;
    const int per_thread_rows = (nvec + vpt - 1) / vpt;
    if (per_thread_rows > af::kMaxThreads) {
      LaunchKernel(grid, af::kMaxThreads, dev)
          .enable_pdl(af::kUsePDL)(
              af::far_row_two_pass<kCastXBeforeOutMul, DType, af::kUsePDL>, x, r, w, nvec, inv_h, eps);
      return;
    }
    const auto threads = static_cast<unsigned>((per_thread_rows + 31) / 32 * 32);
    auto launch = [&](auto kernel) {
      LaunchKernel(grid, threads, dev).enable_pdl(af::kUsePDL)(kernel, x, r, w, nvec, inv_h, eps);
    };
    switch (vpt) {
      case 1:
        launch(af::far_row_in_registers<kCastXBeforeOutMul, DType, 1, af::kUsePDL>);
        break;
      case 2:
        launch(af::far_row_in_registers<kCastXBeforeOutMul, DType, 2, af::kUsePDL>);
        break;
      default:
        launch(af::far_row_in_registers<kCastXBeforeOutMul, DType, 4, af::kUsePDL>);
        break;
    }
  }
};

}  // namespace sglang
