// RUN: attnc-opt %s -split-input-file --attn-lower-attention | FileCheck %s

// Dense causal with key padding: scores (scale 1/sqrt(64)), mask with
// lengths, softmax, weighted sum.
attn.variant @causal attributes {causal, key_padding, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_dense
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x100x64xf32>, %[[K:.+]]: tensor<2x4x100x64xf32>, %[[V:.+]]: tensor<2x4x100x64xf32>, %[[L:.+]]: tensor<2xi32>)
// CHECK-NEXT: %[[S:.+]] = attn.scores %[[Q]], %[[K]] {scale = 1.250000e-01 : f64} : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>) -> tensor<2x4x100x100xf32>
// CHECK-NEXT: %[[M:.+]] = attn.mask @causal %[[S]] lengths(%[[L]])
// CHECK-NEXT: %[[P:.+]], %[[LSE:.+]] = attn.softmax %[[M]]
// CHECK-NEXT: %[[O:.+]] = attn.weighted_sum %[[P]], %[[V]] : (tensor<2x4x100x100xf32>, tensor<2x4x100x64xf32>) -> tensor<2x4x100x64xf32>
// CHECK-NEXT: return %[[O]], %[[LSE]]
func.func @test_dense(%q: tensor<2x4x100x64xf32>, %k: tensor<2x4x100x64xf32>, %v: tensor<2x4x100x64xf32>, %len: tensor<2xi32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>) {
  %o, %lse = attn.attention @causal(%q, %k, %v) lengths(%len) : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2xi32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
  return %o, %lse : tensor<2x4x100x64xf32>, tensor<2x4x100xf32>
}

// -----

// A plain dense variant has no mask op; an explicit scale is kept.
attn.variant @plain attributes {scale = 0.5 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_plain
// CHECK: attn.scores %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f64}
// CHECK-NOT: attn.mask
// CHECK: attn.softmax
func.func @test_plain(%q: tensor<1x1x7x32xf32>) -> tensor<1x1x7x32xf32> {
  %o, %lse = attn.attention @plain(%q, %q, %q) : (tensor<1x1x7x32xf32>, tensor<1x1x7x32xf32>, tensor<1x1x7x32xf32>) -> (tensor<1x1x7x32xf32>, tensor<1x1x7xf32>)
  return %o : tensor<1x1x7x32xf32>
}

// -----

// Low-rank with kv sharing: K and V are both projected by E (sliced to the
// input's 100 positions inside seq_project), key padding goes to the
// projections, and the scores are over the k = 16 projected keys.
attn.variant @lin attributes {key_padding, lowrank = #attn.lowrank<k = 16, share = kv>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lowrank
// CHECK-SAME: (%[[Q:.+]]: tensor<1x2x100x32xf16>, %[[K:.+]]: tensor<1x2x100x32xf16>, %[[V:.+]]: tensor<1x2x100x32xf16>, %[[L:.+]]: tensor<1xi32>, %[[E:.+]]: tensor<16x128xf16>)
// CHECK-NEXT: %[[KP:.+]] = attn.seq_project %[[E]], %[[K]] lengths(%[[L]]) : (tensor<16x128xf16>, tensor<1x2x100x32xf16>, tensor<1xi32>) -> tensor<1x2x16x32xf16>
// CHECK-NEXT: %[[VP:.+]] = attn.seq_project %[[E]], %[[V]] lengths(%[[L]])
// CHECK-NEXT: %[[S:.+]] = attn.scores %[[Q]], %[[KP]] {{.*}} -> tensor<1x2x100x16xf32>
// CHECK-NEXT: %[[P:.+]], %{{.+}} = attn.softmax %[[S]]
// CHECK-NEXT: attn.weighted_sum %[[P]], %[[VP]]
func.func @test_lowrank(%q: tensor<1x2x100x32xf16>, %k: tensor<1x2x100x32xf16>, %v: tensor<1x2x100x32xf16>, %len: tensor<1xi32>, %e: tensor<16x128xf16>) -> tensor<1x2x100x32xf16> {
  %o, %lse = attn.attention @lin(%q, %k, %v) lengths(%len) E(%e) : (tensor<1x2x100x32xf16>, tensor<1x2x100x32xf16>, tensor<1x2x100x32xf16>, tensor<1xi32>, tensor<16x128xf16>) -> (tensor<1x2x100x32xf16>, tensor<1x2x100xf32>)
  return %o : tensor<1x2x100x32xf16>
}

// -----

// Headwise sharing projects V by F; a score modifier with per-head params
// becomes attn.score_mod.
attn.variant @lin2 attributes {lowrank = #attn.lowrank<k = 8, share = headwise>, params = [#attn.param<"t" = 1.0, learned>], tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %t = attn.head_param "t"[%h] : f32
  %r = arith.mulf %s, %t : f32
  attn.yield %r : f32
}
// CHECK-LABEL: func.func @test_headwise
// CHECK: attn.seq_project %[[E:[^,]+]], %{{.+}} :
// CHECK-NEXT: attn.seq_project %[[F:[^,]+]], %{{.+}} :
// CHECK: attn.score_mod @lin2 %{{.*}} params(%{{.*}})
func.func @test_headwise(%q: tensor<1x2x20x32xf32>, %e: tensor<8x20xf32>, %f: tensor<8x20xf32>, %p: tensor<1x2xf32>) -> tensor<1x2x20x32xf32> {
  %o, %lse = attn.attention @lin2(%q, %q, %q) E(%e) F(%f) params(%p) : (tensor<1x2x20x32xf32>, tensor<1x2x20x32xf32>, tensor<1x2x20x32xf32>, tensor<8x20xf32>, tensor<8x20xf32>, tensor<1x2xf32>) -> (tensor<1x2x20x32xf32>, tensor<1x2x20xf32>)
  return %o : tensor<1x2x20x32xf32>
}

// -----

// LSH variants are left for their own passes.
attn.variant @lsh attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lsh
// CHECK: attn.attention @lsh
func.func @test_lsh(%q: tensor<1x1x8x32xf32>) -> tensor<1x1x8x32xf32> {
  %o, %lse = attn.attention @lsh(%q, %q, %q) : (tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>, tensor<1x1x8x32xf32>) -> (tensor<1x1x8x32xf32>, tensor<1x1x8xf32>)
  return %o : tensor<1x1x8x32xf32>
}

// -----

// The variant's attention dropout goes onto the softmax.
attn.variant @drop attributes {dropout = 1.000000e-01 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_dropout
// CHECK: attn.softmax %{{.+}} {dropout = 1.000000e-01 : f64}
func.func @test_dropout(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) {
  %o, %lse = attn.attention @drop(%q, %k, %v) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}
