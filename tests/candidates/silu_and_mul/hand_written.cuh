// silu_and_mul (activation.cuh): HAND-WRITTEN candidate, written by the astra-sglang developers (not produced
// by a language model). Replaces SGLang 0.5.23's kernels/jit/csrc/elementwise/activation.cuh and defines the
// same six entry points of ActivationKernel<T, kUsePDL> with the same signatures and semantics:
//   run_activation(input [N, 2H], out [N, H], "silu" | "gelu" | "gelu_tanh")         out = act(gate) * up
//   run_activation_with_rounding(input, out, type, clamp_limit)   act(gate) rounded to T before the multiply;
//                                                                 clamp_limit > 0 (silu only): gate <= L,
//                                                                 -L <= up <= L, L rounded to T first
//   run_activation_with_rounding_input_inplace(input, out=input[:, :H], type)  as above, written over gate
//   run_activation_filtered(input, out, expert_ids, expert_step, type)   rows whose expert_ids[row / step]
//                                                                         is -1 are skipped (left unwritten)
//   run_activation_sorted_filtered(..., sorted_token_ids, num_tokens_post_padded, num_valid_tokens, type)
//                                   also skips rows >= *num_tokens_post_padded and padding ids >= num_valid
//   run_unary_activation(input, out, "relu2")                      out = relu(x)^2, any [N, D]
// gate = input[:, :H], up = input[:, H:], math in fp32, one rounding to T at the end (as the original).
//
// What is different, and why (silu_and_mul is at the copy limit for large T; small T is latency-bound):
//   - each thread issues all its loads (ASTRA_ACT_VPT_SMALL 16-byte gate+up pairs when the whole problem fits
//     in about one wave of the GPU, else ASTRA_ACT_VPT_LARGE) before any math or store, so more bytes are in
//     flight per thread and fewer blocks are scheduled;
//   - the griddepcontrol.wait is issued before every global access, including the MoE filter arrays (the
//     original reads those before the wait, relying on the producer's own wait);
//   - ASTRA_ACT_EARLY_TRIGGER=1 lets the dependent kernel launch as soon as this one's loads are issued
//     (default 0: trigger after the stores, as the original).
// Honest expectation: at most a few percent on T=128; no change at large T (already at the copy ceiling).

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.h>

#include <sgl_kernel/type.cuh>
#include <sgl_kernel/utils.cuh>

#include <tvm/ffi/container/tensor.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#ifndef ASTRA_ACT_VPT_SMALL
#define ASTRA_ACT_VPT_SMALL 2
#endif
#ifndef ASTRA_ACT_VPT_LARGE
#define ASTRA_ACT_VPT_LARGE 1
#endif
#ifndef ASTRA_ACT_BLOCK
#define ASTRA_ACT_BLOCK 256
#endif
#ifndef ASTRA_ACT_EARLY_TRIGGER
#define ASTRA_ACT_EARLY_TRIGGER 0
#endif
// "About one wave": problems up to this many 16-byte output vectors use the small-problem setting
// (132 SMs x 2048 threads on an H200).
#ifndef ASTRA_ACT_SMALL_ITEMS
#define ASTRA_ACT_SMALL_ITEMS (132u * 2048u)
#endif

namespace sglang {

namespace astra_act {

enum class Act : int { kSiLU, kGELU, kGELUTanh, kReLU2 };
enum class Rows : int { kAll, kExpert, kSorted };

template <Act kAct>
__device__ __forceinline__ float activate(float v) {
  if constexpr (kAct == Act::kSiLU) {
    return v / (1.0f + expf(-v));
  } else if constexpr (kAct == Act::kGELU) {
    return v * (0.5f * (1.0f + erff(v * 0.7071067811865475f)));
  } else if constexpr (kAct == Act::kGELUTanh) {
    const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return v * (0.5f * (1.0f + tanhf(inner)));
  } else {
    const float p = v > 0.0f ? v : 0.0f;
    return p * p;
  }
}

template <typename T>
__device__ __forceinline__ float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, bf16_t>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <typename T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, bf16_t>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

// 16 bytes of T, moved with one 128-bit access.
template <typename T>
union Vec16 {
  static constexpr int kN = 16 / sizeof(T);
  uint4 raw;
  T e[kN];
};

template <bool kPDL>
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kPDL) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <bool kPDL>
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kPDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

struct GatedArgs {
  const uint4* in;       // [num_tokens, 2 * hv] in 16-byte vectors
  uint4* out;            // [num_tokens, hv] (or the gate half of `in` when in place)
  uint32_t hv;           // output vectors per token
  uint32_t total;        // num_tokens * hv
  const int32_t* expert_ids;
  uint32_t expert_step;
  float clamp_limit;
  const int32_t* sorted_ids;
  const int32_t* num_post;
  uint32_t num_valid;
};

template <Rows kRows>
__device__ __forceinline__ bool row_is_live(const GatedArgs& a, uint32_t token) {
  if constexpr (kRows == Rows::kExpert) {
    return a.expert_ids[token / a.expert_step] != -1;
  } else if constexpr (kRows == Rows::kSorted) {
    return token < static_cast<uint32_t>(*a.num_post) &&
           static_cast<uint32_t>(a.sorted_ids[token]) < a.num_valid && a.expert_ids[token / a.expert_step] != -1;
  } else {
    return true;
  }
}

template <typename T, Act kAct, bool kPDL, Rows kRows, bool kRound, bool kInPlace, bool kClamp, int kVPT>
__global__ void __launch_bounds__(ASTRA_ACT_BLOCK) gated_act_kernel(const __grid_constant__ GatedArgs a) {
  using V = Vec16<T>;
  const uint32_t first = blockIdx.x * (blockDim.x * kVPT) + threadIdx.x;
  V gate[kVPT], up[kVPT];
  uint64_t dst[kVPT];
  bool live[kVPT];

  pdl_wait<kPDL>();
#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
    const uint32_t item = first + k * blockDim.x;
    live[k] = item < a.total;
    if (live[k]) {
      const uint32_t token = item / a.hv;
      const uint32_t col = item - token * a.hv;
      live[k] = row_is_live<kRows>(a, token);
      const uint64_t src = static_cast<uint64_t>(token) * (2u * a.hv) + col;
      dst[k] = kInPlace ? src : item;
      if (live[k]) {
        gate[k].raw = a.in[src];
        up[k].raw = a.in[src + a.hv];
      }
    }
  }
  if constexpr (ASTRA_ACT_EARLY_TRIGGER) pdl_trigger<kPDL>();

  const float limit = to_f32<T>(from_f32<T>(a.clamp_limit));
#pragma unroll
  for (int k = 0; k < kVPT; ++k) {
    if (!live[k]) continue;
    V o;
#pragma unroll
    for (int j = 0; j < V::kN; ++j) {
      float g = to_f32<T>(gate[k].e[j]);
      float u = to_f32<T>(up[k].e[j]);
      if constexpr (kClamp) {
        g = g > limit ? limit : g;
        u = u > limit ? limit : (u < -limit ? -limit : u);
      }
      if constexpr (kRound) {
        o.e[j] = from_f32<T>(to_f32<T>(from_f32<T>(activate<kAct>(g))) * u);
      } else {
        o.e[j] = from_f32<T>(activate<kAct>(g) * u);
      }
    }
    if constexpr (kInPlace) {
      const_cast<uint4*>(a.in)[dst[k]] = o.raw;
    } else {
      a.out[dst[k]] = o.raw;
    }
  }
  if constexpr (!ASTRA_ACT_EARLY_TRIGGER) pdl_trigger<kPDL>();
}

template <typename T, Act kAct, bool kPDL>
__global__ void __launch_bounds__(ASTRA_ACT_BLOCK)
    unary_act_kernel(const uint4* __restrict__ in, uint4* __restrict__ out, uint32_t nvec) {
  using V = Vec16<T>;
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  pdl_wait<kPDL>();
  if (i < nvec) {
    V x, o;
    x.raw = in[i];
#pragma unroll
    for (int j = 0; j < V::kN; ++j) o.e[j] = from_f32<T>(activate<kAct>(to_f32<T>(x.e[j])));
    out[i] = o.raw;
  }
  pdl_trigger<kPDL>();
}

}  // namespace astra_act

template <typename T, bool kUsePDL>
struct ActivationKernel {
  static_assert(16 % sizeof(T) == 0, "unsupported data type");
  static constexpr uint32_t kVecElems = 16 / sizeof(T);
  static constexpr uint32_t kBlock = ASTRA_ACT_BLOCK;

  template <astra_act::Act kAct, astra_act::Rows kRows, bool kRound, bool kInPlace, bool kClamp>
  static void launch_one(const astra_act::GatedArgs& args, DLDevice device) {
    using namespace astra_act;
    const bool small = args.total <= ASTRA_ACT_SMALL_ITEMS;
    const uint32_t vpt = small ? ASTRA_ACT_VPT_SMALL : ASTRA_ACT_VPT_LARGE;
    const uint32_t per_block = kBlock * vpt;
    const uint32_t blocks = static_cast<uint32_t>((static_cast<uint64_t>(args.total) + per_block - 1) / per_block);
    auto go = [&](auto kernel) { host::LaunchKernel(blocks, kBlock, device).enable_pdl(kUsePDL)(kernel, args); };
    if (small) {
      go(gated_act_kernel<T, kAct, kUsePDL, kRows, kRound, kInPlace, kClamp, ASTRA_ACT_VPT_SMALL>);
    } else {
      go(gated_act_kernel<T, kAct, kUsePDL, kRows, kRound, kInPlace, kClamp, ASTRA_ACT_VPT_LARGE>);
    }
  }

  template <astra_act::Rows kRows, bool kRound, bool kInPlace>
  static void dispatch_type(const std::string& type, const astra_act::GatedArgs& args, DLDevice device) {
    using astra_act::Act;
    if (type == "silu") {
      launch_one<Act::kSiLU, kRows, kRound, kInPlace, false>(args, device);
    } else if (type == "gelu") {
      launch_one<Act::kGELU, kRows, kRound, kInPlace, false>(args, device);
    } else if (type == "gelu_tanh") {
      launch_one<Act::kGELUTanh, kRows, kRound, kInPlace, false>(args, device);
    } else {
      host::Panic("unsupported activation type: ", type);
    }
  }

  // Shape/dtype/device checks shared by every gated entry point; returns the launch arguments.
  template <bool kInPlace>
  static astra_act::GatedArgs check_gated(
      const tvm::ffi::TensorView& input, const tvm::ffi::TensorView& out, DLDevice* device_out) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto D_in = SymbolicSize{"input_width"};
    auto D_out = SymbolicSize{"output_width"};
    auto device = SymbolicDevice{};
    device.set_options<kDLCUDA>();
    if constexpr (kInPlace) {
      TensorMatcher({N, D_out}).with_strides({D_in, 1}).with_dtype<T>().with_device(device).verify(out);
    } else {
      TensorMatcher({N, D_out}).with_dtype<T>().with_device(device).verify(out);
    }
    TensorMatcher({N, D_in}).with_dtype<T>().with_device(device).verify(input);
    const int64_t hidden = D_out.unwrap();
    const int64_t tokens = N.unwrap();
    *device_out = device.unwrap();
    RuntimeCheck(hidden * 2 == D_in.unwrap(), "invalid activation dimension");
    RuntimeCheck(hidden % kVecElems == 0, "hidden size must be divisible by vector size");
    if constexpr (kInPlace) {
      RuntimeCheck(input.data_ptr() == out.data_ptr(), "in-place activation output must alias input");
    }
    const int64_t total = tokens * (hidden / kVecElems);
    RuntimeCheck(total <= std::numeric_limits<uint32_t>::max(), "too many items for 32-bit indexing");
    astra_act::GatedArgs a{};
    a.in = static_cast<const uint4*>(input.data_ptr());
    a.out = kInPlace ? nullptr : static_cast<uint4*>(out.data_ptr());
    a.hv = static_cast<uint32_t>(hidden / kVecElems);
    a.total = static_cast<uint32_t>(total);
    a.expert_step = 1;
    return a;
  }

  static void run_activation(const tvm::ffi::TensorView input, const tvm::ffi::TensorView out, std::string type) {
    DLDevice device;
    const auto args = check_gated<false>(input, out, &device);
    if (args.total == 0) return;
    dispatch_type<astra_act::Rows::kAll, false, false>(type, args, device);
  }

  static void run_activation_with_rounding(
      const tvm::ffi::TensorView input, const tvm::ffi::TensorView out, std::string type, double clamp_limit) {
    DLDevice device;
    auto args = check_gated<false>(input, out, &device);
    if (args.total == 0) return;
    if (clamp_limit > 0) {
      host::RuntimeCheck(type == "silu", "clamping requires unfiltered SiLU");
      args.clamp_limit = static_cast<float>(clamp_limit);
      launch_one<astra_act::Act::kSiLU, astra_act::Rows::kAll, true, false, true>(args, device);
    } else {
      dispatch_type<astra_act::Rows::kAll, true, false>(type, args, device);
    }
  }

  static void run_activation_with_rounding_input_inplace(
      const tvm::ffi::TensorView input, const tvm::ffi::TensorView out, std::string type) {
    DLDevice device;
    const auto args = check_gated<true>(input, out, &device);
    if (args.total == 0) return;
    dispatch_type<astra_act::Rows::kAll, true, true>(type, args, device);
  }

  static void run_activation_filtered(
      const tvm::ffi::TensorView input,
      const tvm::ffi::TensorView out,
      const tvm::ffi::TensorView expert_ids,
      int64_t expert_step,
      std::string type) {
    using namespace host;
    RuntimeCheck(is_type<int32_t>(expert_ids.dtype()), "expert_ids must have dtype int32");
    RuntimeCheck(expert_step >= 1, "expert_step must be positive");
    DLDevice device;
    auto args = check_gated<false>(input, out, &device);
    if (args.total == 0) return;
    args.expert_ids = static_cast<const int32_t*>(expert_ids.data_ptr());
    args.expert_step = static_cast<uint32_t>(expert_step);
    dispatch_type<astra_act::Rows::kExpert, false, false>(type, args, device);
  }

  static void run_activation_sorted_filtered(
      const tvm::ffi::TensorView input,
      const tvm::ffi::TensorView out,
      const tvm::ffi::TensorView expert_ids,
      int64_t expert_step,
      const tvm::ffi::TensorView sorted_token_ids,
      const tvm::ffi::TensorView num_tokens_post_padded,
      int64_t num_valid_tokens,
      std::string type) {
    using namespace host;
    RuntimeCheck(is_type<int32_t>(expert_ids.dtype()), "expert_ids must have dtype int32");
    RuntimeCheck(is_type<int32_t>(sorted_token_ids.dtype()), "sorted_token_ids must have dtype int32");
    RuntimeCheck(is_type<int32_t>(num_tokens_post_padded.dtype()), "num_tokens_post_padded must have dtype int32");
    RuntimeCheck(expert_step >= 1, "expert_step must be positive, got ", expert_step);
    RuntimeCheck(sorted_token_ids.numel() >= input.size(0), "sorted_token_ids must cover every row");
    RuntimeCheck(expert_ids.numel() * expert_step >= input.size(0), "expert_ids must cover every row");
    RuntimeCheck(
        0 <= num_valid_tokens && num_valid_tokens <= std::numeric_limits<int32_t>::max(),
        "num_valid_tokens out of range: ",
        num_valid_tokens);
    DLDevice device;
    auto args = check_gated<false>(input, out, &device);
    if (args.total == 0) return;
    args.expert_ids = static_cast<const int32_t*>(expert_ids.data_ptr());
    args.expert_step = static_cast<uint32_t>(expert_step);
    args.sorted_ids = static_cast<const int32_t*>(sorted_token_ids.data_ptr());
    args.num_post = static_cast<const int32_t*>(num_tokens_post_padded.data_ptr());
    args.num_valid = static_cast<uint32_t>(num_valid_tokens);
    dispatch_type<astra_act::Rows::kSorted, false, false>(type, args, device);
  }

  static void run_unary_activation(const tvm::ffi::TensorView input, const tvm::ffi::TensorView out, std::string type) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto D = SymbolicSize{"hidden"};
    auto device = SymbolicDevice{};
    device.set_options<kDLCUDA>();
    TensorMatcher({N, D}).with_dtype<T>().with_device(device).verify(out).verify(input);
    const int64_t numel = N.unwrap() * D.unwrap();
    if (numel == 0) return;
    RuntimeCheck(type == "relu2", "unsupported unary activation type: ", type);
    RuntimeCheck(numel % kVecElems == 0, "num elements must be divisible by vector size");
    const int64_t nvec = numel / kVecElems;
    RuntimeCheck(nvec <= std::numeric_limits<uint32_t>::max(), "too many items for 32-bit indexing");
    const auto blocks = static_cast<uint32_t>((nvec + kBlock - 1) / kBlock);
    LaunchKernel(blocks, kBlock, device.unwrap())
        .enable_pdl(kUsePDL)(
            astra_act::unary_act_kernel<T, astra_act::Act::kReLU2, kUsePDL>,
            static_cast<const uint4*>(input.data_ptr()),
            static_cast<uint4*>(out.data_ptr()),
            static_cast<uint32_t>(nvec));
  }
};

}  // namespace sglang
