// RUN: attnc-opt %s --attn-tile="arch=sm_75" -verify-diagnostics

// Turing has no cp.async, so no multi-stage pipeline; and 64 KiB of shared memory.
func.func @test_turing(%q: tensor<1x1x64x64xf16>) {
  // expected-error @+1 {{pipelines 2 stages, which needs cp.async (sm_80 or newer)}}
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 2>} : (tensor<1x1x64x64xf16>, tensor<1x1x64x64xf16>, tensor<1x1x64x64xf16>) -> (tensor<1x1x64x64xf16>, tensor<1x1x64xf32>)
  return
}
