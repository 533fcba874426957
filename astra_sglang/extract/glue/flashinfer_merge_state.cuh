// astra-sglang glue (ours, hand-written): exports FlashInfer's MergeState (flashinfer/attention/cascade.cuh,
// what SGLang's FlashInfer backend calls for merge_state up to 64 heads at head_dim 128) through tvm-ffi.
// NOTE: FlashInfer's LSEs are base 2 (ptx_exp2/ptx_log2); SGLang's Triton merge_state_triton is base e.
// They are different functions: compare this one against a base-2 reference only.
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <flashinfer/attention/cascade.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace astra_glue {

template <typename T>
struct FlashInferMergeState {
  // v_a, v_b, v_merged: [T, NH, D] (T = tokens); s_a, s_b, s_merged: [T, NH] float32, base-2 LSE.
  static void run(tvm::ffi::TensorView v_a, tvm::ffi::TensorView s_a, tvm::ffi::TensorView v_b,
                  tvm::ffi::TensorView s_b, tvm::ffi::TensorView v_merged, tvm::ffi::TensorView s_merged) {
    TVM_FFI_ICHECK_EQ(v_a.ndim(), 3) << "v_a must be [T, NH, D]";
    TVM_FFI_ICHECK_EQ(s_a.ndim(), 2) << "s_a must be [T, NH]";
    TVM_FFI_ICHECK_EQ(v_a.size(0), s_a.size(0));
    TVM_FFI_ICHECK_EQ(v_a.size(1), s_a.size(1));
    const auto device = v_a.device();
    auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
    cudaError_t status = flashinfer::MergeState<T, T>(
        static_cast<T*>(v_a.data_ptr()), static_cast<float*>(s_a.data_ptr()), static_cast<T*>(v_b.data_ptr()),
        static_cast<float*>(s_b.data_ptr()), static_cast<T*>(v_merged.data_ptr()),
        static_cast<float*>(s_merged.data_ptr()), static_cast<uint32_t>(v_a.size(0)),
        static_cast<uint32_t>(v_a.size(1)), static_cast<uint32_t>(v_a.size(2)), stream);
    TVM_FFI_ICHECK(status == cudaSuccess) << "FlashInfer MergeState failed: " << cudaGetErrorString(status);
  }
};

}  // namespace astra_glue
