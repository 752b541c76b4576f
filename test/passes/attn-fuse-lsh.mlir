// RUN: attnc-opt %s -split-input-file --attn-expand-lsh --attn-fuse-lsh | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-expand-lsh --attn-fuse-lsh | attnc-opt -split-input-file | FileCheck %s

// The LSH chain becomes one kernel op with the bucketing parameters, the
// variant's masks, constant per-head parameters, score/mask regions and seed.
attn.variant @lsh attributes {causal, key_padding, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 32, before = 1, after = 0, seed = 3, dense_fallback = true>, params = [#attn.param<"slope" = alibi, fixed>], shared_qk, tile = #attn.tile<block_q = 16, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %sl = attn.head_param "slope"[%h] : f32
  %r = arith.subf %s, %sl : f32
  attn.yield %r : f32
} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %c = arith.constant 40 : index
  %d = arith.subi %q, %kv : index
  %w = arith.cmpi slt, %d, %c : index
  attn.yield %w : i1
}
// CHECK-LABEL: func.func @test_lsh
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x100x64xf32>, %[[V:.+]]: tensor<2x4x100x64xf32>, %[[L:.+]]: tensor<2xi32>, %[[R:.+]]: tensor<2x64x4xf32>, %[[P:.+]]: tensor<1x4xf32>)
// CHECK-NEXT: %[[O:.+]], %[[LSE:.+]] = attn.fused_lsh_attention %[[Q]], %[[V]], %[[R]] lengths(%[[L]]) params(%[[P]]) attributes
// CHECK-SAME: after = 0 : i64, before = 1 : i64, causal, chunk = 32 : i64, key_padding, num_buckets = 8 : i64
// CHECK-SAME: param_decls = [#attn.param<"slope" = alibi, fixed>], rounds = 2 : i64, scale = 1.000000e+00 : f64, seed = 3 : i64
// CHECK-SAME: tile = #attn.tile<block_q = 16, block_kv = auto, warps = auto, stages = auto>
// CHECK-SAME: score {
// CHECK: attn.head_param "slope"
// CHECK: } mask {
// CHECK: arith.cmpi slt
// CHECK-NOT: attn.lsh_
// CHECK: return %[[O]], %[[LSE]]
func.func @test_lsh(%q: tensor<2x4x100x64xf32>, %v: tensor<2x4x100x64xf32>, %len: tensor<2xi32>, %rot: tensor<2x64x4xf32>, %p: tensor<1x4xf32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>) {
  %o, %lse = attn.attention @lsh(%q, %q, %v) lengths(%len) rotations(%rot) params(%p) : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2xi32>, tensor<2x64x4xf32>, tensor<1x4xf32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
  return %o, %lse : tensor<2x4x100x64xf32>, tensor<2x4x100xf32>
}

// -----

// A chain whose intermediate escapes (the per-round results are returned)
// is not fused.
attn.variant @lsh2 attributes {lsh = #attn.lsh<buckets = 4, rounds = 1, chunk = 8, before = 1, after = 0, seed = 0, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_escape
// CHECK: attn.lsh_combine
// CHECK-NOT: attn.fused_lsh_attention
func.func @test_escape(%q: tensor<1x1x20x32xf32>, %k: tensor<1x1x20x32xf32>, %v: tensor<1x1x20x32xf32>, %perm: tensor<1x1x1x24xi32>) -> (tensor<1x1x20x32xf32>, tensor<1x1x1x20xf32>) {
  %so, %sl = attn.lsh_chunk_attention @lsh2 %q, %k, %v, %perm {after = 0 : i64, before = 1 : i64, chunk = 8 : i64, scale = 1.0 : f64} : (tensor<1x1x20x32xf32>, tensor<1x1x20x32xf32>, tensor<1x1x20x32xf32>, tensor<1x1x1x24xi32>) -> (tensor<1x1x1x24x32xf32>, tensor<1x1x1x24xf32>)
  %uo, %ul = attn.lsh_unsort %so, %sl, %perm : (tensor<1x1x1x24x32xf32>, tensor<1x1x1x24xf32>, tensor<1x1x1x24xi32>) -> (tensor<1x1x1x20x32xf32>, tensor<1x1x1x20xf32>)
  %o, %lse = attn.lsh_combine %uo, %ul : (tensor<1x1x1x20x32xf32>, tensor<1x1x1x20xf32>) -> (tensor<1x1x20x32xf32>, tensor<1x1x20xf32>)
  return %o, %ul : tensor<1x1x20x32xf32>, tensor<1x1x1x20xf32>
}

// -----

// The variant's attention dropout rides on the fused op (the kernels draw
// each round's masks).
attn.variant @lshdrop attributes {dropout = 2.500000e-01 : f64, lsh = #attn.lsh<buckets = 4, rounds = 2, chunk = 8, before = 1, after = 0, seed = 1, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_dropout
// CHECK: attn.fused_lsh_attention
// CHECK-SAME: dropout = 2.500000e-01 : f64
func.func @test_dropout(%q: tensor<1x1x40x32xf32>, %v: tensor<1x1x40x32xf32>, %rot: tensor<2x32x2xf32>) -> (tensor<1x1x40x32xf32>, tensor<1x1x40xf32>) {
  %o, %lse = attn.attention @lshdrop(%q, %q, %v) rotations(%rot) : (tensor<1x1x40x32xf32>, tensor<1x1x40x32xf32>, tensor<1x1x40x32xf32>, tensor<2x32x2xf32>) -> (tensor<1x1x40x32xf32>, tensor<1x1x40xf32>)
  return %o, %lse : tensor<1x1x40x32xf32>, tensor<1x1x40xf32>
}
