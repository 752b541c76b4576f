//===- CudaLshVoltaTest.cpp - The LSH kernels on Volta's path -------------===//
//
// The LSH kernels as they compile for sm_70, on the block emulator: the
// fp16 forward's matrix products on mma.sync.m8n8k4
// (tensor_core_emulator.h models it from the PTX ISA's fragment tables),
// bf16's on the SIMT path of mma.cuh (Volta has no bf16 MMA), copies
// through registers (no cp.async), no ldmatrix. Against the double
// reference of test/unit/support/CudaEmulatedLsh.h, as CudaLshTest.cpp
// checks the m16n8k16 path. The NVRTC builds for sm_70 (no spills) are in
// CudaLshTest.cpp.
//
//===----------------------------------------------------------------------===//
#define ATTNC_EMULATE_ARCH 700

#include "test/unit/support/CudaEmulatedLsh.h"

namespace {

static_assert(attnc::MmaKindOf<__half, 8>::value == attnc::MmaKind::M8n8k4, "Volta's fp16 path");
static_assert(attnc::MmaKindOf<__nv_bfloat16, 8>::value == attnc::MmaKind::Simt,
              "Volta's bf16 path");

// Reformer's defaults at D = 64 (64 x 64 tensor-core tiles, 4 warps),
// dense and modified (causal, key padding, score modifier, window), with
// self-only rows; D = 128 (64 x 32 tiles) with a two-sided window.
TEST(CudaLshVolta, Fp16D64) {
  size_t selfRows = 0;
  runLsh<__half, 64, 1, 0, 64, 32, 32, 4, EmuDense>({1, 2, 150, 2, 8, 0.5f}, kTolFp16, "fp16");
  runLsh<__half, 64, 1, 0, 64, 32, 32, 4, EmuMod>({2, 2, 70, 5, 8, 0.5f}, kTolFp16, "fp16",
                                                  &selfRows);
  EXPECT_GE(selfRows, 4u);
}
TEST(CudaLshVolta, Fp16D128TwoSided) {
  runLsh<__half, 32, 1, 1, 128, 16, 16, 4, EmuMod>({2, 1, 77, 2, 4, 0.2f}, kTolFp16, "fp16");
}
TEST(CudaLshVolta, Fp16Dropout) {
  runLsh<__half, 32, 1, 0, 64, 32, 32, 4, emu::WithDropout<EmuMod>>({2, 2, 70, 2, 8, 0.5f},
                                                                    kTolFp16, "fp16");
}
TEST(CudaLshVolta, Bf16D32) {
  runLsh<__nv_bfloat16, 32, 1, 1, 32, 32, 32, 4, EmuMod>({3, 1, 61, 3, 6, 1.0f}, kTolBf16, "bf16");
}

} // namespace
