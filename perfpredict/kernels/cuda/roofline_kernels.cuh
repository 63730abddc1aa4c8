// Roofline microkernels: one source for the CuPy RawKernel path (NVRTC) and the native build (nvcc, CMake).
// Rules (gpus.md section 3): >= 8 independent FMA chains per thread, fully unrolled; results stored only under a
// data-dependent never-true condition (or when `store` asks for a result check); 16-byte vector accesses with
// several loads in flight for the memory kernels; grid-stride loops over a persistent grid.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef PP_CHAINS
#define PP_CHAINS 8
#endif
#ifndef PP_UNROLL
#define PP_UNROLL 16
#endif

#define PP_FMA_KERNEL(NAME, T, FMA, FROM_FLOAT, SUM)                                                     \
  extern "C" __global__ void NAME(T* out, int iters, T a, T b, int store) {                            \
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;                                              \
    T x[PP_CHAINS];                                                                                     \
    _Pragma("unroll") for (int k = 0; k < PP_CHAINS; ++k) x[k] = FROM_FLOAT(1e-3f * (tid % 64 + k));  \
    for (int it = 0; it < iters; ++it) {                                                                \
      _Pragma("unroll") for (int u = 0; u < PP_UNROLL; ++u) {                                           \
        _Pragma("unroll") for (int k = 0; k < PP_CHAINS; ++k) x[k] = FMA(x[k], a, b);                   \
      }                                                                                                 \
    }                                                                                                   \
    T acc = x[0];                                                                                       \
    _Pragma("unroll") for (int k = 1; k < PP_CHAINS; ++k) acc = SUM(acc, x[k]);                        \
    if (store || SUM(acc, acc) == FROM_FLOAT(1234.5f)) out[tid] = acc;                                  \
  }

__device__ __forceinline__ float pp_fmaf(float x, float a, float b) { return __fmaf_rn(x, a, b); }
__device__ __forceinline__ double pp_fmad(double x, double a, double b) { return __fma_rn(x, a, b); }
__device__ __forceinline__ float pp_addf(float x, float y) { return x + y; }
__device__ __forceinline__ double pp_addd(double x, double y) { return x + y; }
__device__ __forceinline__ double pp_f2d(float x) { return (double)x; }
__device__ __forceinline__ float pp_f2f(float x) { return x; }
__device__ __forceinline__ __half2 pp_f2h2(float x) { return __float2half2_rn(x); }
__device__ __forceinline__ __half2 pp_addh2(__half2 x, __half2 y) { return __hadd2(x, y); }
__device__ __forceinline__ __half2 pp_fmah2(__half2 x, __half2 a, __half2 b) { return __hfma2(x, a, b); }
__device__ __forceinline__ __nv_bfloat162 pp_f2b2(float x) { return __float2bfloat162_rn(x); }
__device__ __forceinline__ __nv_bfloat162 pp_addb2(__nv_bfloat162 x, __nv_bfloat162 y) { return __hadd2(x, y); }
__device__ __forceinline__ __nv_bfloat162 pp_fmab2(__nv_bfloat162 x, __nv_bfloat162 a, __nv_bfloat162 b) {
  return __hfma2(x, a, b);
}

PP_FMA_KERNEL(pp_fp32_fma, float, pp_fmaf, pp_f2f, pp_addf)
PP_FMA_KERNEL(pp_fp64_fma, double, pp_fmad, pp_f2d, pp_addd)
PP_FMA_KERNEL(pp_fp16_hfma2, __half2, pp_fmah2, pp_f2h2, pp_addh2)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
PP_FMA_KERNEL(pp_bf16_hfma2, __nv_bfloat162, pp_fmab2, pp_f2b2, pp_addb2)
#endif

// ---- memory: float4 (16-byte) accesses, grid-stride; n4 = number of float4 elements.

// Read: 4 independent 16-byte loads in flight per thread and trip, .cg (L2 only) so L1 does not hide DRAM.
extern "C" __global__ void pp_read_v4(const float4* __restrict__ a, long long n4, float* out, int store) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  float4 s0 = make_float4(0, 0, 0, 0), s1 = s0, s2 = s0, s3 = s0;
  for (; i + 3 * stride < n4; i += 4 * stride) {
    float4 v0 = __ldcg(a + i), v1 = __ldcg(a + i + stride), v2 = __ldcg(a + i + 2 * stride),
           v3 = __ldcg(a + i + 3 * stride);
    s0.x += v0.x; s0.y += v0.y; s0.z += v0.z; s0.w += v0.w;
    s1.x += v1.x; s1.y += v1.y; s1.z += v1.z; s1.w += v1.w;
    s2.x += v2.x; s2.y += v2.y; s2.z += v2.z; s2.w += v2.w;
    s3.x += v3.x; s3.y += v3.y; s3.z += v3.z; s3.w += v3.w;
  }
  for (; i < n4; i += stride) {
    float4 v = __ldcg(a + i);
    s0.x += v.x; s0.y += v.y; s0.z += v.z; s0.w += v.w;
  }
  float s = (s0.x + s0.y + s0.z + s0.w) + (s1.x + s1.y + s1.z + s1.w) + (s2.x + s2.y + s2.z + s2.w) +
            (s3.x + s3.y + s3.z + s3.w);
  if (store || s == 1234.5f) atomicAdd(out, s);
}

extern "C" __global__ void pp_write_v4(float4* __restrict__ a, long long n4, float value) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const float4 v = make_float4(value, value, value, value);
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) a[i] = v;
}

extern "C" __global__ void pp_copy_v4(const float4* __restrict__ a, float4* __restrict__ c, long long n4) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) c[i] = __ldcg(a + i);
}

// BabelStream triad: a = b + scalar * c.
extern "C" __global__ void pp_triad_v4(float4* __restrict__ a, const float4* __restrict__ b,
                                       const float4* __restrict__ c, long long n4, float scalar) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 x = __ldcg(b + i), y = __ldcg(c + i);
    a[i] = make_float4(x.x + scalar * y.x, x.y + scalar * y.y, x.z + scalar * y.z, x.w + scalar * y.w);
  }
}

// L2: many blocks re-read a working set smaller than L2, `passes` times, with .cg loads (bypass L1).
extern "C" __global__ void pp_l2_read_v4(const float4* __restrict__ a, long long n4, int passes, float* out,
                                         int store) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  float4 s = make_float4(0, 0, 0, 0);
  for (int p = 0; p < passes; ++p) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
      const float4 v = __ldcg(a + i);
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
  }
  const float t = s.x + s.y + s.z + s.w;
  if (store || t == 1234.5f) atomicAdd(out, t);
}

// L1: one block per SM re-reads its own small buffer (n4 float4 per block) `passes` times through L1 (.ca).
extern "C" __global__ void pp_l1_read_v4(const float4* __restrict__ a, int n4, int passes, float* out, int store) {
  const float4* base = a + (long long)blockIdx.x * n4;
  float4 s0 = make_float4(0, 0, 0, 0), s1 = s0;
  for (int p = 0; p < passes; ++p) {
    for (int i = threadIdx.x; i + (int)blockDim.x < n4; i += 2 * blockDim.x) {
      const float4 v = __ldca(base + i), w = __ldca(base + i + blockDim.x);
      s0.x += v.x; s0.y += v.y; s0.z += v.z; s0.w += v.w;
      s1.x += w.x; s1.y += w.y; s1.z += w.z; s1.w += w.w;
    }
  }
  const float t = s0.x + s0.y + s0.z + s0.w + s1.x + s1.y + s1.z + s1.w;
  if (store || t == 1234.5f) atomicAdd(out, t);
}

// Shared memory: conflict-free float4 reads (consecutive threads, consecutive 16-byte words), `passes` times.
#define PP_SHARED_FLOAT4 2048
extern "C" __global__ void pp_shared_read_v4(int passes, float* out, int store) {
  __shared__ float4 buf[PP_SHARED_FLOAT4];
  for (int i = threadIdx.x; i < PP_SHARED_FLOAT4; i += blockDim.x) buf[i] = make_float4(1.f, 1.f, 1.f, 1.f);
  __syncthreads();
  float4 s = make_float4(0, 0, 0, 0);
  for (int p = 0; p < passes; ++p) {
#pragma unroll 8
    for (int i = threadIdx.x; i < PP_SHARED_FLOAT4; i += blockDim.x) {
      const float4 v = buf[i];
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
  }
  const float t = s.x + s.y + s.z + s.w;
  if (store || t == 1234.5f) atomicAdd(out, t);
}

// Launch overhead: an empty kernel.
extern "C" __global__ void pp_empty(int) {}
