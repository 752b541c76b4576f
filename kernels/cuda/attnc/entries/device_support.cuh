//===- device_support.cuh - Entry points of the device support module ------===//
//
// The strided GEMMs (fp32 SIMT; fp16 / bf16 tensor cores, with the
// reduction of their split parts) and the dtype conversions of attnc/device_support.cuh as
// `extern "C"` kernels: the runtime compiles this file alone with NVRTC as
// one module per device (runtime/CudaAttention.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_ENTRIES_DEVICE_SUPPORT_CUH
#define ATTNC_CUDA_ENTRIES_DEVICE_SUPPORT_CUH

#include "attnc/device_support.cuh"
extern "C" __global__ void __launch_bounds__(attnc::kStridedGemmThreads)
    attnc_strided_gemm(attnc::StridedGemmArgs a) {
  attnc::strided_gemm(a);
}
// strided_gemm_mma per dtype and layout: attnc_strided_gemm_mma_<dtype>_<A's
// contiguous side k|m><B's k|n> (ProjectionTileModel.h projLayout).
#define ATTNC_STRIDED_GEMM_MMA(dtype, T, layout, A_K, B_K)                                         \
  extern "C" __global__ void __launch_bounds__(attnc::tile::kProjThreads, 1)                       \
      attnc_strided_gemm_mma_##dtype##_##layout(attnc::StridedGemmArgs a) {                        \
    attnc::strided_gemm_mma<T, A_K, B_K>(a);                                                       \
  }
ATTNC_STRIDED_GEMM_MMA(f16, __half, kk, true, true)
ATTNC_STRIDED_GEMM_MMA(f16, __half, kn, true, false)
ATTNC_STRIDED_GEMM_MMA(f16, __half, mk, false, true)
ATTNC_STRIDED_GEMM_MMA(f16, __half, mn, false, false)
ATTNC_STRIDED_GEMM_MMA(bf16, __nv_bfloat16, kk, true, true)
ATTNC_STRIDED_GEMM_MMA(bf16, __nv_bfloat16, kn, true, false)
ATTNC_STRIDED_GEMM_MMA(bf16, __nv_bfloat16, mk, false, true)
ATTNC_STRIDED_GEMM_MMA(bf16, __nv_bfloat16, mn, false, false)
#undef ATTNC_STRIDED_GEMM_MMA
extern "C" __global__ void __launch_bounds__(attnc::tile::kProjReduceThreads)
    attnc_strided_gemm_reduce(attnc::StridedGemmArgs a) {
  attnc::strided_gemm_reduce(a);
}
extern "C" __global__ void attnc_convert_f32_f16(attnc::ConvertArgs a) {
  attnc::convert<float, __half>(a);
}
extern "C" __global__ void attnc_convert_f16_f32(attnc::ConvertArgs a) {
  attnc::convert<__half, float>(a);
}
extern "C" __global__ void attnc_convert_f32_bf16(attnc::ConvertArgs a) {
  attnc::convert<float, __nv_bfloat16>(a);
}
extern "C" __global__ void attnc_convert_bf16_f32(attnc::ConvertArgs a) {
  attnc::convert<__nv_bfloat16, float>(a);
}

#endif // ATTNC_CUDA_ENTRIES_DEVICE_SUPPORT_CUH
