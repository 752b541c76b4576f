// RUN: attnc-opt %s -split-input-file --pass-pipeline="builtin.module(attn-expand-lsh,attn-lower-attention,attn-fuse-attention,attn-fuse-lsh,func.func(attn-derive-backward))" | FileCheck %s
// RUN: attnc-opt %s -split-input-file --pass-pipeline="builtin.module(attn-lower-attention,attn-fuse-attention,func.func(attn-derive-backward{deterministic=false}))" | FileCheck %s --check-prefix=ATOMIC

// The cotangent of `out` becomes a new argument; dq, dk, dv are appended to
// the results and attn.grad_of says which arguments they belong to.
attn.variant @d attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_dense
// CHECK-SAME: (%[[Q:.+]]: tensor<1x2x9x32xf32>, %[[K:.+]]: tensor<1x2x9x32xf32>, %[[V:.+]]: tensor<1x2x9x32xf32>, %[[DO:.+]]: tensor<1x2x9x32xf32>)
// CHECK-SAME: -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>)
// CHECK-SAME: attributes {attn.grad_of = [0, 1, 2]}
// CHECK-NEXT: %[[O:.+]], %[[LSE:.+]] = attn.fused_attention direct %[[Q]], %[[K]], %[[V]]
// CHECK-NEXT: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = attn.fused_attention_grad direct %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]], %[[DO]] attributes {causal, deterministic,
// CHECK-NEXT: return %[[O]], %[[LSE]], %[[DQ]], %[[DK]], %[[DV]]
// ATOMIC-LABEL: func.func @test_dense
// ATOMIC: attn.fused_attention_grad direct
// ATOMIC-NOT: deterministic
// ATOMIC-SAME: resultSegmentSizes
func.func @test_dense(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @d(%q, %k, %v) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}

// -----

// Low-rank with per-head parameters: gradients for E, F and params too; the
// lengths argument gets none.
attn.variant @lin attributes {key_padding, lowrank = #attn.lowrank<k = 4, share = headwise>, params = [#attn.param<"t" = 1.0, learned>], tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %t = attn.head_param "t"[%h] : f32
  %r = arith.mulf %s, %t : f32
  attn.yield %r : f32
}
// CHECK-LABEL: func.func @test_lowrank
// CHECK-SAME: attributes {attn.grad_of = [0, 1, 2, 4, 5, 6]}
// CHECK: %dq, %dk, %dv, %dE, %dF, %dparams = attn.fused_attention_grad lowrank(headwise)
// CHECK-SAME: score {
// CHECK: return %{{.+}}, %dq, %dk, %dv, %dE, %dF, %dparams
func.func @test_lowrank(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>, %len: tensor<1xi32>, %e: tensor<4x16xf32>, %f: tensor<4x16xf32>, %p: tensor<1x2xf32>) -> tensor<1x2x9x32xf32> attributes {attn.differentiate} {
  %o, %lse = attn.attention @lin(%q, %k, %v) lengths(%len) E(%e) F(%f) params(%p) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1xi32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<1x2xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o : tensor<1x2x9x32xf32>
}

// -----

// A function without the attribute is left alone.
attn.variant @d2 attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_inference
// CHECK-NOT: attn.fused_attention_grad
// CHECK-NOT: attn.grad_of
func.func @test_inference(%q: tensor<1x1x4x32xf32>) -> tensor<1x1x4x32xf32> {
  %o, %lse = attn.attention @d2(%q, %q, %q) : (tensor<1x1x4x32xf32>, tensor<1x1x4x32xf32>, tensor<1x1x4x32xf32>) -> (tensor<1x1x4x32xf32>, tensor<1x1x4xf32>)
  return %o : tensor<1x1x4x32xf32>
}

// -----

// LSH: dq (through the normalised keys too) and dv; the rotations get no
// gradient. The grad op recomputes the hashes from the same rotations.
attn.variant @lsh attributes {causal, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 4, before = 1, after = 0, seed = 3, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lsh
// CHECK-SAME: (%[[Q:.+]]: tensor<1x2x9x32xf32>, %[[V:.+]]: tensor<1x2x9x32xf32>, %[[R:.+]]: tensor<2x32x4xf32>, %[[DO:.+]]: tensor<1x2x9x32xf32>)
// CHECK-SAME: attributes {attn.grad_of = [0, 1]}
// CHECK-NEXT: %[[O:.+]], %[[LSE:.+]] = attn.fused_lsh_attention %[[Q]], %[[V]], %[[R]]
// CHECK-NEXT: %[[DQ:.+]], %[[DV:.+]] = attn.fused_lsh_attention_grad %[[Q]], %[[V]], %[[R]], %[[O]], %[[LSE]], %[[DO]] attributes {after = 0 : i64, before = 1 : i64, causal, chunk = 4 : i64, deterministic, num_buckets = 8 : i64, rounds = 2 : i64
// CHECK-NEXT: return %[[O]], %[[LSE]], %[[DQ]], %[[DV]]
func.func @test_lsh(%q: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>, %rot: tensor<2x32x4xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @lsh(%q, %q, %v) rotations(%rot) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<2x32x4xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}

// -----

// LSH with attention dropout: the grad op keeps the forward's rate, so the
// backward kernels redraw the same masks.
attn.variant @lshdrop attributes {causal, dropout = 2.500000e-01 : f64, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 4, before = 1, after = 0, seed = 3, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lsh_dropout
// CHECK: attn.fused_lsh_attention
// CHECK-SAME: dropout = 2.500000e-01 : f64
// CHECK-NEXT: attn.fused_lsh_attention_grad
// CHECK-SAME: dropout = 2.500000e-01 : f64
func.func @test_lsh_dropout(%q: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>, %rot: tensor<2x32x4xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @lshdrop(%q, %q, %v) rotations(%rot) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<2x32x4xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}

// -----

// LSH's dense fallback: shared_qk, so the key operand is the query and only
// dq (with the key path folded in) and dv flow back.
attn.variant @short attributes {causal, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 16, before = 1, after = 0, seed = 3, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_shared_qk
// CHECK-SAME: attributes {attn.grad_of = [0, 1]}
// CHECK-NEXT: %[[O:.+]], %[[LSE:.+]] = attn.fused_attention direct %[[Q:.+]], %[[Q]], %[[V:[^ ]+]] attributes {causal, scale = 1.000000e+00 : f64, self_score = -1.000000e+05 : f64, shared_qk
// CHECK-NEXT: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = attn.fused_attention_grad direct %[[Q]], %[[Q]], %[[V]], %[[O]], %[[LSE]], %{{.+}} attributes {causal, deterministic, {{.*}}self_score = -1.000000e+05 : f64, shared_qk
// CHECK-NEXT: return %[[O]], %[[LSE]], %[[DQ]], %[[DV]]
func.func @test_shared_qk(%q: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>, %rot: tensor<2x32x4xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @short(%q, %q, %v) rotations(%rot) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<2x32x4xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}
