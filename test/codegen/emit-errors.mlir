// RUN: not attnc-translate --emit-cuda-kernels %s 2>&1 | FileCheck %s

// The emitters need tiled, named kernels.
func.func @f(%q: tensor<1x1x8x32xf32>) {
  // CHECK: error: 'attn.fused_attention' op has no kernel name; run attn-tile before emitting
  %o, %l = attn.fused_attention direct %q, %q, %q attributes {scale = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} : (tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>) -> (tensor<1x1x8x32xf32>, tensor<1x1x8xf32>)
  return
}
