// astra-sglang test fixture (ours): the arithmetic of h_scale, in a header so tests can prove that editing a
// header invalidates the loader's build cache.
#pragma once

__device__ __forceinline__ float h_scale_apply(float x, float alpha) { return x * alpha + 1.0f; }
