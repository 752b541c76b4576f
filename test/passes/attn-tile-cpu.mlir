// RUN: attnc-opt %s -split-input-file --attn-tile="target=cpu" -verify-diagnostics | FileCheck %s

// CPU defaults: 64 x 64 blocks (warps and stages do not apply).
// CHECK-LABEL: func.func @test_cpu_f32
// CHECK: kernel = "attn0_f32_d48", scale = 1.000000e+00 : f64, tile = #attn.tile<block_q = 64, block_kv = 64, warps = 1, stages = 1>
func.func @test_cpu_f32(%q: tensor<1x1x64x48xf32>) {
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<1x1x64x48xf32>, tensor<1x1x64x48xf32>, tensor<1x1x64x48xf32>) -> (tensor<1x1x64x48xf32>, tensor<1x1x64xf32>)
  return
}

// -----

// The CPU backend computes in f32.
func.func @test_cpu_f16(%q: tensor<1x1x64x64xf16>) {
  // expected-error @+1 {{the CPU backend computes in f32; found 'f16'}}
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<1x1x64x64xf16>, tensor<1x1x64x64xf16>, tensor<1x1x64x64xf16>) -> (tensor<1x1x64x64xf16>, tensor<1x1x64xf32>)
  return
}

// -----

// LSH on the CPU: one chunk per task (block_q = block_kv = chunk).
// CHECK-LABEL: func.func @test_cpu_lsh
// CHECK: kernel = "lsh0_f32_d64"
// CHECK-SAME: tile = #attn.tile<block_q = 24, block_kv = 24, warps = 1, stages = 1>
func.func @test_cpu_lsh(%q: tensor<1x2x100x64xf32>, %rot: tensor<2x64x4xf32>) {
  %o, %l = attn.fused_lsh_attention %q, %q, %rot attributes {after = 0 : i64, before = 1 : i64, chunk = 24 : i64, num_buckets = 8 : i64, rounds = 2 : i64, scale = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<1x2x100x64xf32>, tensor<1x2x100x64xf32>, tensor<2x64x4xf32>) -> (tensor<1x2x100x64xf32>, tensor<1x2x100xf32>)
  return
}
