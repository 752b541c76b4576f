// RUN: attnc-opt %s -split-input-file --attn-tile -verify-diagnostics | FileCheck %s

// Defaults per (dtype, head dim, arch) from kernels/abi/attnc/abi/TileModel.h, names for
// the emitters; a fixed block_q derives the warps (16 rows per warp).
// CHECK-LABEL: func.func @test_defaults
// CHECK: attn.fused_attention direct {{.*}}kernel = "attn0_f16_d64", scale = 1.250000e-01 : f64, tile = #attn.tile<block_q = 128, block_kv = 128, warps = 8, stages = 2>
// CHECK: attn.fused_attention direct {{.*}}kernel = "attn1_f32_d128", scale = 1.250000e-01 : f64, tile = #attn.tile<block_q = 32, block_kv = 64, warps = 2, stages = 1>
// CHECK: attn.fused_attention_grad direct {{.*}}kernel = "attn_bwd2_f16_d64"
func.func @test_defaults(%q: tensor<2x4x100x64xf16>, %q32: tensor<2x4x100x128xf32>) {
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 0.125 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>) -> (tensor<2x4x100x64xf16>, tensor<2x4x100xf32>)
  %o2, %l2 = attn.fused_attention direct %q32, %q32, %q32 attributes {scale = 0.125 : f64, tile = #attn.tile<block_q = 32, block_kv = auto, warps = auto, stages = 1>} : (tensor<2x4x100x128xf32>, tensor<2x4x100x128xf32>, tensor<2x4x100x128xf32>) -> (tensor<2x4x100x128xf32>, tensor<2x4x100xf32>)
  %dq, %dk, %dv = attn.fused_attention_grad direct %q, %q, %q, %o, %l, %o attributes {deterministic, resultSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>, scale = 0.125 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100xf32>, tensor<2x4x100x64xf16>) -> (tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>)
  return
}

// -----

func.func @test_too_much_smem(%q: tensor<1x1x64x256xf16>) {
  // expected-error @+1 {{tile config #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 4> (f16, head dim 256, forward, sm_80) needs 304128 bytes of shared memory; sm_80 allows 166912}}
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 4>} : (tensor<1x1x64x256xf16>, tensor<1x1x64x256xf16>, tensor<1x1x64x256xf16>) -> (tensor<1x1x64x256xf16>, tensor<1x1x64xf32>)
  return
}

// -----

func.func @test_bad_shape(%q: tensor<1x1x64x64xf16>) {
  // expected-error @+1 {{is not a shape the kernel supports: block sizes must be multiples of 16, block_q = 16 x warps}}
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = 64, block_kv = 24, warps = 4, stages = 1>} : (tensor<1x1x64x64xf16>, tensor<1x1x64x64xf16>, tensor<1x1x64x64xf16>) -> (tensor<1x1x64x64xf16>, tensor<1x1x64xf32>)
  return
}

// -----

func.func @test_head_dim(%q: tensor<1x1x64x48xf16>) {
  // expected-error @+1 {{head dim 48 has no CUDA kernel (supported: 32, 64, 80, 96, 128, 256)}}
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<1x1x64x48xf16>, tensor<1x1x64x48xf16>, tensor<1x1x64x48xf16>) -> (tensor<1x1x64x48xf16>, tensor<1x1x64xf32>)
  return
}

// -----

func.func @test_registers(%q: tensor<1x1x64x256xf16>) {
  // expected-error @+1 {{needs 192 accumulator floats per thread; the budget that avoids register spills is 160 (of 255 registers)}}
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = 64, block_kv = 128, warps = 4, stages = 1>} : (tensor<1x1x64x256xf16>, tensor<1x1x64x256xf16>, tensor<1x1x64x256xf16>) -> (tensor<1x1x64x256xf16>, tensor<1x1x64xf32>)
  return
}

// -----

// LSH on CUDA: the default tile of kernels/abi/attnc/abi/LshTileModel.h (square tiles of
// the largest power of two <= 64 dividing the chunk that fit 48 KiB of
// static shared memory: 32 at D = 64), stages = 1.
// CHECK-LABEL: func.func @test_lsh_default
// CHECK: kernel = "lsh{{[0-9]+}}_f16_d64"
// CHECK-SAME: tile = #attn.tile<block_q = 32, block_kv = 32, warps = 4, stages = 1>
func.func @test_lsh_default(%q: tensor<1x2x100x64xf16>, %rot: tensor<2x64x4xf32>) {
  %o, %l = attn.fused_lsh_attention %q, %q, %rot attributes {after = 0 : i64, before = 1 : i64, chunk = 64 : i64, num_buckets = 8 : i64, rounds = 2 : i64, scale = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<1x2x100x64xf16>, tensor<1x2x100x64xf16>, tensor<2x64x4xf32>) -> (tensor<1x2x100x64xf16>, tensor<1x2x100xf32>)
  return
}

// -----

// A tile that does not divide the chunk, and one over the static shared
// memory the LSH kernels may use, are errors naming the config and limit.
func.func @test_lsh_bad(%q: tensor<1x2x100x64xf32>, %rot: tensor<2x64x4xf32>) {
  // expected-error @+1 {{LSH tile config #attn.tile<block_q = 32, block_kv = 32, warps = 4, stages = 1> (f32, head dim 64, chunk 48, forward, sm_80) is not a shape the LSH kernels support: block_q and block_kv must divide the chunk}}
  %o, %l = attn.fused_lsh_attention %q, %q, %rot attributes {after = 0 : i64, before = 1 : i64, chunk = 48 : i64, num_buckets = 8 : i64, rounds = 2 : i64, scale = 1.0 : f64, tile = #attn.tile<block_q = 32, block_kv = 32, warps = 4, stages = auto>} : (tensor<1x2x100x64xf32>, tensor<1x2x100x64xf32>, tensor<2x64x4xf32>) -> (tensor<1x2x100x64xf32>, tensor<1x2x100xf32>)
  return
}

// -----

func.func @test_lsh_smem(%q: tensor<1x2x100x128xf32>, %rot: tensor<2x128x4xf32>) {
  // expected-error @+1 {{LSH tile config #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 1> (f32, head dim 128, chunk 64, forward, sm_80) needs}}
  %o, %l = attn.fused_lsh_attention %q, %q, %rot attributes {after = 0 : i64, before = 1 : i64, chunk = 64 : i64, num_buckets = 8 : i64, rounds = 2 : i64, scale = 1.0 : f64, tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = auto>} : (tensor<1x2x100x128xf32>, tensor<1x2x100x128xf32>, tensor<2x128x4xf32>) -> (tensor<1x2x100x128xf32>, tensor<1x2x100xf32>)
  return
}
