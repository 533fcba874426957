// astra-sglang test fixture (ours): out = x * alpha + 1, one thread per element.
// Written by hand for the loader/harness tests; not an SGLang kernel and not produced by a language model.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include "h_scale_math.h"

namespace sglang {

template <typename T>
__global__ void h_scale_kernel(T* __restrict__ out, const T* __restrict__ x, float alpha, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<T>(h_scale_apply(static_cast<float>(x[i]), alpha));
}

template <typename T>
struct HScaleKernel {
  static void run(tvm::ffi::TensorView x, tvm::ffi::TensorView out, double alpha) {
    const int64_t n = x.numel();
    TVM_FFI_ICHECK(out.numel() == n) << "out and x differ in size";
    if (n == 0) return;
    auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    h_scale_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<T*>(out.data_ptr()),
                                                      static_cast<const T*>(x.data_ptr()), (float)alpha, n);
    cudaError_t err = cudaGetLastError();
    TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
  }
};

}  // namespace sglang
