// RUN: attnc-opt %s -split-input-file --attn-lower-attention --attn-fuse-attention | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-lower-attention --attn-fuse-attention | attnc-opt -split-input-file | FileCheck %s

// The whole chain becomes one kernel op carrying the variant's masks and
// regions; nothing tensor-level is left.
attn.variant @alibi attributes {causal, key_padding, params = [#attn.param<"slope" = alibi, fixed>], tile = #attn.tile<block_q = 32, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %sl = attn.head_param "slope"[%h] : f32
  %r = arith.subf %s, %sl : f32
  attn.yield %r : f32
} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %c = arith.constant 4 : index
  %d = arith.subi %q, %kv : index
  %w = arith.cmpi slt, %d, %c : index
  attn.yield %w : i1
}
// CHECK-LABEL: func.func @test_alibi
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x100x64xf16>, %[[K:.+]]: tensor<2x4x100x64xf16>, %[[V:.+]]: tensor<2x4x100x64xf16>, %[[L:.+]]: tensor<2xi32>, %[[P:.+]]: tensor<1x4xf32>)
// CHECK-NEXT: %[[O:.+]], %[[LSE:.+]] = attn.fused_attention direct %[[Q]], %[[K]], %[[V]] lengths(%[[L]]) params(%[[P]]) attributes
// CHECK-SAME: causal
// CHECK-SAME: key_padding
// CHECK-SAME: param_decls = [#attn.param<"slope" = alibi, fixed>]
// CHECK-SAME: scale = 1.250000e-01 : f64
// CHECK-SAME: tile = #attn.tile<block_q = 32, block_kv = auto, warps = auto, stages = auto>
// CHECK-SAME: score {
// CHECK-NEXT: ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
// CHECK-NEXT: attn.head_param "slope"[%h] : f32
// CHECK: } mask {
// CHECK: arith.cmpi slt
// CHECK-NOT: attn.scores
// CHECK-NOT: attn.softmax
// CHECK: return %[[O]], %[[LSE]]
func.func @test_alibi(%q: tensor<2x4x100x64xf16>, %k: tensor<2x4x100x64xf16>, %v: tensor<2x4x100x64xf16>, %len: tensor<2xi32>, %p: tensor<1x4xf32>) -> (tensor<2x4x100x64xf16>, tensor<2x4x100xf32>) {
  %o, %lse = attn.attention @alibi(%q, %k, %v) lengths(%len) params(%p) : (tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2xi32>, tensor<1x4xf32>) -> (tensor<2x4x100x64xf16>, tensor<2x4x100xf32>)
  return %o, %lse : tensor<2x4x100x64xf16>, tensor<2x4x100xf32>
}

// -----

// Low-rank: the projections fold into the kernel op as kv_source = lowrank,
// the sharing mode is read off the operands.
attn.variant @kv attributes {key_padding, lowrank = #attn.lowrank<k = 16, share = layerwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
attn.variant @hw attributes {lowrank = #attn.lowrank<k = 16, share = headwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
attn.variant @none attributes {lowrank = #attn.lowrank<k = 16, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lowrank
// CHECK: attn.fused_attention lowrank(kv) %{{.+}}, %{{.+}}, %{{.+}} lengths(%{{.+}}) E(%{{.+}}) attributes {key_padding, scale
// CHECK: attn.fused_attention lowrank(headwise) %{{.+}}, %{{.+}}, %{{.+}} E(%{{.+}}) F(%{{.+}}) attributes {scale
// CHECK: attn.fused_attention lowrank(none) %{{.+}}, %{{.+}}, %{{.+}} E(%{{.+}}) F(%{{.+}}) attributes {scale
// CHECK-NOT: attn.seq_project
func.func @test_lowrank(%q: tensor<1x2x50x32xf32>, %len: tensor<1xi32>, %e: tensor<16x64xf32>, %f: tensor<16x64xf32>, %eh: tensor<2x16x64xf32>) -> (tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>) {
  %o1, %l1 = attn.attention @kv(%q, %q, %q) lengths(%len) E(%e) : (tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<1xi32>, tensor<16x64xf32>) -> (tensor<1x2x50x32xf32>, tensor<1x2x50xf32>)
  %o2, %l2 = attn.attention @hw(%q, %q, %q) E(%e) F(%f) : (tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<16x64xf32>, tensor<16x64xf32>) -> (tensor<1x2x50x32xf32>, tensor<1x2x50xf32>)
  %o3, %l3 = attn.attention @none(%q, %q, %q) E(%eh) F(%eh) : (tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> (tensor<1x2x50x32xf32>, tensor<1x2x50xf32>)
  return %o1, %o2, %o3 : tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>, tensor<1x2x50x32xf32>
}

// -----

// A chain whose probabilities escape is not fused (the kernel never
// materialises them).
// CHECK-LABEL: func.func @test_escaping
// CHECK: attn.scores
// CHECK: attn.softmax
// CHECK: attn.weighted_sum
// CHECK-NOT: attn.fused_attention
func.func @test_escaping(%q: tensor<1x1x8x32xf32>) -> (tensor<1x1x8x32xf32>, tensor<1x1x8x8xf32>) {
  %s = attn.scores %q, %q {scale = 1.0 : f64} : (tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>) -> tensor<1x1x8x8xf32>
  %p, %lse = attn.softmax %s : (tensor<1x1x8x8xf32>) -> (tensor<1x1x8x8xf32>, tensor<1x1x8xf32>)
  %o = attn.weighted_sum %p, %q : (tensor<1x1x8x8xf32>, tensor<1x1x8x32xf32>) -> tensor<1x1x8x32xf32>
  return %o, %p : tensor<1x1x8x32xf32>, tensor<1x1x8x8xf32>
}

// -----

// Attention dropout (a variant with no mask or score to carry it): lowering
// puts it on attn.softmax, fusion onto the kernel op.
attn.variant @drop attributes {dropout = 1.000000e-01 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_dropout
// CHECK: attn.fused_attention direct
// CHECK-SAME: dropout = 1.000000e-01 : f64
func.func @test_dropout(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) {
  %o, %lse = attn.attention @drop(%q, %k, %v) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}
