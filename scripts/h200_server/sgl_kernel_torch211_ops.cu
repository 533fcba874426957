// ON THE H200 image only (torch 2.11): CUDA kernels for the sgl_kernel ops a dense LLaMA-style model reaches in
// SGLang 0.5.23 with `--attention-backend triton --sampling-backend pytorch`, built here for torch 2.11.
//
// Why: sglang-kernel 0.4.10's library is compiled against torch 2.14.1's headers, and its kernels read tensor
// metadata through inline TensorImpl accessors. torch 2.14 shrank c10::impl::PyObjectSlot from 16 to 8 bytes
// (offsetof(TensorImpl, sizes_and_strides_) is 64 in 2.11, 56 in 2.14; measured with both wheels' headers), so
// under torch 2.11 every size, stride, dtype and device it reads is another field: the first call on the H200
// failed "input must be a CUDA tensor". No symbol shim can fix inline code. The ops' schemas still come from
// sglang-kernel's own library (loaded through the shim); this file only supplies CUDA kernels for three of them.
//
// What runs: the same FlashInfer functions sgl_kernel's rmsnorm and fused_add_rmsnorm wrap (flashinfer/norm.cuh,
// the FlashInfer 0.7.2 headers `astra-sglang extract` pins for fused_add_rmsnorm's served baseline), with the
// argument checks of sgl_kernel's csrc; weak_ref_tensor as sgl_kernel defines it. On this path SGLang 0.5.23 runs
// silu_and_mul and rotary embedding through its own JIT kernels (tvm-ffi, not torch's ABI), so those are real.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <flashinfer/norm.cuh>

namespace {

void check_2d_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.dim() == 2, name, " must be 2-D [tokens, hidden] here (the 3-D QK-norm form is not rebuilt)");
  TORCH_CHECK(t.stride(1) == 1, name, " rows must be contiguous");
}

template <typename F>
void dispatch_half(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kHalf: f(static_cast<half*>(nullptr)); break;
    case at::kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    default: TORCH_CHECK(false, "sgl_kernel norm (torch-2.11 rebuild): unsupported dtype ", dtype);
  }
}

// Both norms take input [T, H], a second [T, H] tensor of its dtype (output, or residual) and weight [H].
void check_norm_args(const at::Tensor& input, const at::Tensor& other, const char* other_name, const at::Tensor& weight) {
  check_2d_rows(input, "input");
  check_2d_rows(other, other_name);
  TORCH_CHECK(weight.is_cuda() && weight.dim() == 1 && weight.is_contiguous(), "weight must be a contiguous 1-D CUDA tensor");
  TORCH_CHECK(other.sizes() == input.sizes(), other_name, " and input shapes differ");
  TORCH_CHECK(weight.size(0) == input.size(1), "weight and hidden size differ");
  TORCH_CHECK(other.scalar_type() == input.scalar_type() && weight.scalar_type() == input.scalar_type(), "dtypes differ");
}

void rmsnorm(at::Tensor& output, at::Tensor& input, at::Tensor& weight, double eps, bool enable_pdl) {
  check_norm_args(input, output, "output", weight);
  const c10::cuda::CUDAGuard guard(input.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  dispatch_half(input.scalar_type(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cudaError_t status = flashinfer::norm::RMSNorm<T>(
        static_cast<T*>(input.data_ptr()), static_cast<T*>(weight.data_ptr()), static_cast<T*>(output.data_ptr()),
        input.size(0), input.size(1), input.stride(0), output.stride(0), static_cast<float>(eps), enable_pdl, stream);
    TORCH_CHECK(status == cudaSuccess, "FlashInfer RMSNorm failed: ", cudaGetErrorString(status));
  });
}

// The C++ signatures are those of the kernels sglang-kernel registers (nm -C of its library): the dispatcher
// refuses a second kernel for an op with another one.
void fused_add_rmsnorm(at::Tensor input, at::Tensor residual, at::Tensor weight, double eps, bool enable_pdl) {
  check_norm_args(input, residual, "residual", weight);
  const c10::cuda::CUDAGuard guard(input.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  dispatch_half(input.scalar_type(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cudaError_t status = flashinfer::norm::FusedAddRMSNorm<T>(
        static_cast<T*>(input.data_ptr()), static_cast<T*>(residual.data_ptr()), static_cast<T*>(weight.data_ptr()),
        input.size(0), input.size(1), input.stride(0), residual.stride(0), static_cast<float>(eps), enable_pdl,
        stream);
    TORCH_CHECK(status == cudaSuccess, "FlashInfer FusedAddRMSNorm failed: ", cudaGetErrorString(status));
  });
}

at::Tensor weak_ref_tensor(const at::Tensor& tensor) {  // sgl_kernel's: a view of the same memory that owns nothing
  TORCH_CHECK(tensor.is_cuda(), "weak_ref_tensor: a CUDA tensor");
  return at::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.strides(), tensor.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) {
  m.impl("rmsnorm", &rmsnorm);
  m.impl("fused_add_rmsnorm", &fused_add_rmsnorm);
  m.impl("weak_ref_tensor", &weak_ref_tensor);
}
