#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.h>

#include <sgl_kernel/tile.cuh>
#include <sgl_kernel/type.cuh>
#include <sgl_kernel/utils.cuh>
#include <sgl_kernel/vec.cuh>

#include <tvm/ffi/container/tensor.h>

#include <cstdint>
#include <type_traits>

namespace sglang {

namespace fused_add_rmsnorm_impl {

// ---------------------------------------------------------------------------------------------
// Memory helpers. input/residual are read and then overwritten in place by the same thread, so
// they are never loaded through the non-coherent path; only the weight uses __ldg.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint4 ld_stream_v4(const uint4* ptr) {
  uint4 r;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(ptr));
  return r;
}

__device__ __forceinline__ void st_v4(uint4* ptr, const uint4& v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Bulk L2 prefetch (sm_90): address 16-B aligned, size a multiple of 16 bytes.
__device__ __forceinline__ void prefetch_l2_bulk(const void* ptr, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ptr), "r"(bytes) : "memory");
}

__device__ __forceinline__ uint32_t get_u32(const uint4& v, int j) {
  return j == 0 ? v.x : (j == 1 ? v.y : (j == 2 ? v.z : v.w));
}

__device__ __forceinline__ void set_u32(uint4& v, int j, uint32_t u) {
  if (j == 0) {
    v.x = u;
  } else if (j == 1) {
    v.y = u;
  } else if (j == 2) {
    v.z = u;
  } else {
    v.w = u;
  }
}

template <typename DType>
__device__ __forceinline__ float2 unpack_f2(uint32_t u) {
  using P = packed_t<DType>;
  static_assert(sizeof(P) == 4, "packed type must be 4 bytes");
  const P p = *reinterpret_cast<const P*>(&u);
  return device::cast<fp32x2_t, P>(p);
}

template <typename DType>
__device__ __forceinline__ uint32_t pack_f2(float2 f) {
  using P = packed_t<DType>;
  const P p = device::cast<P, fp32x2_t>(f);
  return *reinterpret_cast<const uint32_t*>(&p);
}

template <typename DType>
__device__ __forceinline__ float to_float(DType v) {
  if constexpr (std::is_same_v<DType, fp16_t>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}

template <typename DType>
__device__ __forceinline__ DType from_float(float f) {
  if constexpr (std::is_same_v<DType, fp16_t>) {
    return __float2half_rn(f);
  } else {
    return __float2bfloat16_rn(f);
  }
}

__device__ __forceinline__ float warp_allreduce_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// Block-wide sum, result identical (bitwise) in every thread. One __syncthreads.
// blockDim.x must be a multiple of 32 (<= 1024); smem must not be reused afterwards
// without another barrier.
__device__ __forceinline__ float block_allreduce_sum(float v, float* smem) {
  v = warp_allreduce_sum(v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  float t = (lane < nwarps) ? smem[lane] : 0.0f;
  return warp_allreduce_sum(t);
}

// Output of one packed pair (kCastXBeforeOutMul == false): out = (x_rounded * w) * rs
// (kCastXBeforeOutMul == true): out = round(x_fp32 * rs) * w
template <bool kCastXBeforeOutMul, typename DType>
__device__ __forceinline__ uint32_t rms_out_pair(uint32_t x_rounded, float2 s, uint32_t w, float rs) {
  const float2 wf = unpack_f2<DType>(w);
  if constexpr (kCastXBeforeOutMul) {
    const uint32_t r = pack_f2<DType>(make_float2(s.x * rs, s.y * rs));
    const float2 rf = unpack_f2<DType>(r);
    return pack_f2<DType>(make_float2(rf.x * wf.x, rf.y * wf.y));
  } else {
    const float2 xf = unpack_f2<DType>(x_rounded);
    return pack_f2<DType>(make_float2(xf.x * wf.x * rs, xf.y * wf.y * rs));
  }
}

// ---------------------------------------------------------------------------------------------
// Generic fallback: any hidden size / alignment. One CTA per row, two passes; the second pass
// re-reads the (still unmodified) input and residual, which are L2-hot.
// ---------------------------------------------------------------------------------------------
template <bool kCastXBeforeOutMul, typename DType>
__global__ void __launch_bounds__(1024) fused_add_rmsnorm_generic_kernel(
    DType* __restrict__ input, DType* __restrict__ residual, const DType* __restrict__ weight, int hidden_size,
    float eps) {
  __shared__ float warp_sums[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * hidden_size;
  DType* p_in = input + off;
  DType* p_res = residual + off;

  float acc = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float s = to_float<DType>(p_in[i]) + to_float<DType>(p_res[i]);
    acc += s * s;
  }
  const float total = block_allreduce_sum(acc, warp_sums);
  const float rs = rsqrtf(eps + total * (1.0f / static_cast<float>(hidden_size)));

  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float s = to_float<DType>(p_in[i]) + to_float<DType>(p_res[i]);
    const DType sr = from_float<DType>(s);
    const float wf = to_float<DType>(weight[i]);
    float o;
    if constexpr (kCastXBeforeOutMul) {
      o = to_float<DType>(from_float<DType>(s * rs)) * wf;
    } else {
      o = to_float<DType>(sr) * wf * rs;
    }
    p_res[i] = sr;
    p_in[i] = from_float<DType>(o);
  }
}

// ---------------------------------------------------------------------------------------------
// Register-resident single-pass kernel. Each CTA handles ROWS rows; thread t owns the 16-byte
// vectors t + k * blockDim.x (k < VPT) of each of its rows. All loads are issued before any math.
// ---------------------------------------------------------------------------------------------
template <bool kCastXBeforeOutMul, typename DType, int VPT, int ROWS, bool kPDL>
__global__ void __launch_bounds__((VPT >= 4) ? 512 : 1024, (VPT == 4) ? 2 : 1) fused_add_rmsnorm_vec_kernel(
    DType* __restrict__ input,
    DType* __restrict__ residual,
    const DType* __restrict__ weight,
    int nvec,
    int hidden_size,
    int num_rows,
    float eps) {
  __shared__ float warp_sums[ROWS][32];

  const int tid = threadIdx.x;
  const int nthr = blockDim.x;
  const int row0 = blockIdx.x * ROWS;
  const uint4* p_w = reinterpret_cast<const uint4*>(weight);

  const uint4* in_row[ROWS];
  const uint4* res_row[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int64_t row = (row0 + r < num_rows) ? (row0 + r) : row0;
    in_row[r] = reinterpret_cast<const uint4*>(input) + row * nvec;
    res_row[r] = reinterpret_cast<const uint4*>(residual) + row * nvec;
  }

  if constexpr (kPDL) {
    // PDL prologue: while the previous grid may still be draining, warm L2 with this CTA's rows
    // (CTA 0 also the weight). A prefetch is only a hint and cannot change any value read after
    // griddepcontrol.wait (L2 is the point of coherence; the data loads below bypass L1).
    if (tid == 0) {
      const uint32_t row_bytes = static_cast<uint32_t>(nvec) * 16u;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (row0 + r < num_rows) {
          prefetch_l2_bulk(in_row[r], row_bytes);
          prefetch_l2_bulk(res_row[r], row_bytes);
        }
      }
      if (blockIdx.x == 0) prefetch_l2_bulk(p_w, row_bytes);
    }
    // Wait for the previous grid's memory to be visible before touching global memory, then let
    // the next PDL launch start its prologue (it waits for this grid's completion itself).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
  }

  uint4 xv[ROWS][VPT];
  uint4 rv[ROWS][VPT];
  uint4 wv[VPT];
  // With many vectors per thread, the weight is fetched after the residual add so that the
  // input/residual registers are already dead (keeps VPT>=4 spill-free); its L2 latency then
  // overlaps the block reduction.
  constexpr bool kLateWeight = VPT >= 4;

  // ---- issue all loads ----
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int idx = tid + k * nthr;
    const bool col_ok = idx < nvec;
    if constexpr (!kLateWeight) {
      wv[k] = col_ok ? __ldg(p_w + idx) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const bool ok = col_ok && (row0 + r < num_rows);
      if (ok) {
        xv[r][k] = ld_stream_v4(in_row[r] + idx);
        rv[r][k] = ld_stream_v4(res_row[r] + idx);
      } else {
        xv[r][k] = make_uint4(0u, 0u, 0u, 0u);
        rv[r][k] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }

  // ---- residual add, sum of squares, store residual_out ----
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float ax = 0.0f, ay = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      uint4 sum_v;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 a = unpack_f2<DType>(get_u32(xv[r][k], j));
        const float2 b = unpack_f2<DType>(get_u32(rv[r][k], j));
        const float2 s = make_float2(a.x + b.x, a.y + b.y);
        ax += s.x * s.x;
        ay += s.y * s.y;
        set_u32(sum_v, j, pack_f2<DType>(s));
      }
      const int idx = tid + k * nthr;
      if (idx < nvec && row0 + r < num_rows) {
        st_v4(const_cast<uint4*>(res_row[r]) + idx, sum_v);
      }
      if constexpr (!kCastXBeforeOutMul) {
        xv[r][k] = sum_v;  // keep only the rounded sum
      }
    }
    acc[r] = ax + ay;
  }

  if constexpr (kLateWeight) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = tid + k * nthr;
      wv[k] = (idx < nvec) ? __ldg(p_w + idx) : make_uint4(0u, 0u, 0u, 0u);
    }
  }

  // ---- block reduction (one barrier for all rows) ----
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int nwarps = nthr >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) warp_sums[r][warp] = acc[r];
  }
  __syncthreads();
  float rs[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) rs[r] = (lane < nwarps) ? warp_sums[r][lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], o);
  }
  const float inv_h = 1.0f / static_cast<float>(hidden_size);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) rs[r] = rsqrtf(eps + rs[r] * inv_h);

  // ---- normalize, scale, store output ----
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = tid + k * nthr;
      if (idx < nvec && row0 + r < num_rows) {
        uint4 out_v;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float2 s = make_float2(0.0f, 0.0f);
          if constexpr (kCastXBeforeOutMul) {
            const float2 a = unpack_f2<DType>(get_u32(xv[r][k], j));
            const float2 b = unpack_f2<DType>(get_u32(rv[r][k], j));
            s = make_float2(a.x + b.x, a.y + b.y);
          }
          set_u32(out_v, j, rms_out_pair<kCastXBeforeOutMul, DType>(get_u32(xv[r][k], j), s, get_u32(wv[k], j), rs[r]));
        }
        st_v4(const_cast<uint4*>(in_row[r]) + idx, out_v);
      }
    }
  }
}

}  // namespace fused_add_rmsnorm_impl

template <bool kCastXBeforeOutMul, typename DType>
struct FusedAddRMSNormKernel {
  static void
  run(const tvm::ffi::TensorView input,
      const tvm::ffi::TensorView residual,
      const tvm::ffi::TensorView weight,
      float eps) {
    using namespace host;
    namespace impl = fused_add_rmsnorm_impl;
    auto N = SymbolicSize{"num_tokens"};
    auto D = SymbolicSize{"hidden_size"};
    auto device = SymbolicDevice{};
    device.set_options<kDLCUDA>();

    TensorMatcher({N, D})  // input
        .with_strides({D, 1})
        .with_dtype<DType>()
        .with_device(device)
        .verify(input);
    TensorMatcher({D})  // weight
        .with_dtype<DType>()
        .with_device(device)
        .verify(weight);
    TensorMatcher({N, D})  // residual
        .with_strides({D, 1})
        .with_dtype<DType>()
        .with_device(device)
        .verify(residual);

    const int64_t num_tokens = static_cast<int64_t>(N.unwrap());
    const int64_t hidden = static_cast<int64_t>(D.unwrap());
    if (num_tokens <= 0 || hidden <= 0) return;

    DType* in_ptr = reinterpret_cast<DType*>(input.data_ptr());
    DType* res_ptr = reinterpret_cast<DType*>(residual.data_ptr());
    const DType* w_ptr = reinterpret_cast<const DType*>(weight.data_ptr());

    constexpr int kElemsPerVec = 16 / static_cast<int>(sizeof(DType));
    const bool aligned = ((reinterpret_cast<std::uintptr_t>(in_ptr) | reinterpret_cast<std::uintptr_t>(res_ptr) |
                           reinterpret_cast<std::uintptr_t>(w_ptr)) &
                          15u) == 0;
    const int64_t nvec64 = hidden / kElemsPerVec;
    using kernel_t = void (*)(DType*, DType*, const DType*, int, int, int, float);

    if (aligned && hidden % kElemsPerVec == 0 && nvec64 <= 4096) {
      const int nvec = static_cast<int>(nvec64);
      int vpt;
      kernel_t kernel;
      if (nvec <= 256) {
        vpt = 1;
        kernel = impl::fused_add_rmsnorm_vec_kernel<kCastXBeforeOutMul, DType, 1, 1, true>;
      } else if (nvec <= 1536) {
        vpt = 2;
        kernel = impl::fused_add_rmsnorm_vec_kernel<kCastXBeforeOutMul, DType, 2, 1, true>;
      } else if (nvec <= 2048) {
        vpt = 4;
        kernel = impl::fused_add_rmsnorm_vec_kernel<kCastXBeforeOutMul, DType, 4, 1, true>;
      } else {
        vpt = 8;
        kernel = impl::fused_add_rmsnorm_vec_kernel<kCastXBeforeOutMul, DType, 8, 1, true>;
      }
      const unsigned threads = static_cast<unsigned>(((nvec + vpt - 1) / vpt + 31) / 32 * 32);
      LaunchKernel(static_cast<unsigned>(num_tokens), threads, device.unwrap())
          .enable_pdl(true)(
              kernel, in_ptr, res_ptr, w_ptr, nvec, static_cast<int>(hidden), static_cast<int>(num_tokens), eps);
    } else {
      int64_t t = (hidden + 31) / 32 * 32;
      if (t > 1024) t = 1024;
      const unsigned threads = static_cast<unsigned>(t);
      auto kernel = impl::fused_add_rmsnorm_generic_kernel<kCastXBeforeOutMul, DType>;
      LaunchKernel(static_cast<unsigned>(num_tokens), threads, device.unwrap())
          .enable_pdl(false)(kernel, in_ptr, res_ptr, w_ptr, static_cast<int>(hidden), eps);
    }
  }
};

}  // namespace sglang
