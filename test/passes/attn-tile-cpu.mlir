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
