// astra-sglang glue (ours, hand-written): exports FlashInfer's FusedAddRMSNorm (flashinfer/norm.cuh, the
// kernel behind sgl_kernel.fused_add_rmsnorm that SGLang serves with) through tvm-ffi, so it builds with the
// same wrapper and flags as an extracted SGLang JIT kernel. Semantics: residual <- input + residual,
// input <- rmsnorm(residual) * weight, both in place.
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <flashinfer/norm.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace astra_glue {

template <typename T, bool kEnablePDL>
struct FlashInferFusedAddRMSNorm {
  static void run(tvm::ffi::TensorView input, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight,
                  double eps) {
    TVM_FFI_ICHECK_EQ(input.ndim(), 2) << "input must be [T, H]";
    TVM_FFI_ICHECK_EQ(residual.ndim(), 2) << "residual must be [T, H]";
    TVM_FFI_ICHECK_EQ(weight.ndim(), 1) << "weight must be [H]";
    TVM_FFI_ICHECK_EQ(input.size(0), residual.size(0));
    TVM_FFI_ICHECK_EQ(input.size(1), residual.size(1));
    TVM_FFI_ICHECK_EQ(input.size(1), weight.size(0));
    TVM_FFI_ICHECK_EQ(input.stride(1), 1) << "input rows must be contiguous";
    TVM_FFI_ICHECK_EQ(residual.stride(1), 1) << "residual rows must be contiguous";
    const auto device = input.device();
    auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
    cudaError_t status = flashinfer::norm::FusedAddRMSNorm<T>(
        static_cast<T*>(input.data_ptr()), static_cast<T*>(residual.data_ptr()), static_cast<T*>(weight.data_ptr()),
        static_cast<uint32_t>(input.size(0)), static_cast<uint32_t>(input.size(1)),
        static_cast<uint32_t>(input.stride(0)), static_cast<uint32_t>(residual.stride(0)), static_cast<float>(eps),
        kEnablePDL, stream);
    TVM_FFI_ICHECK(status == cudaSuccess) << "FlashInfer FusedAddRMSNorm failed: " << cudaGetErrorString(status);
  }
};

}  // namespace astra_glue
