// RUN: attnc-opt %s -split-input-file --attn-expand-lsh | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-expand-lsh=report 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: attnc-opt %s -split-input-file --attn-expand-lsh | attnc-opt -split-input-file | FileCheck %s --check-prefix=RT

// N = 100 > chunk: hash, sort (padded to 4 chunks of 32), chunk attention in
// sorted order, unsort, combine. Keys are the normalised queries; the
// default scale of shared-QK LSH is 1.
attn.variant @lsh attributes {causal, key_padding, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 32, before = 1, after = 0, seed = 3, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lsh
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x100x64xf32>, %[[V:.+]]: tensor<2x4x100x64xf32>, %[[L:.+]]: tensor<2xi32>, %[[R:.+]]: tensor<2x64x4xf32>)
// CHECK-NEXT: %[[K:.+]] = attn.lsh_normalize %[[Q]] : (tensor<2x4x100x64xf32>) -> tensor<2x4x100x64xf32>
// CHECK-NEXT: %[[B:.+]] = attn.lsh_hash %[[Q]], %[[R]] {num_buckets = 8 : i64} : (tensor<2x4x100x64xf32>, tensor<2x64x4xf32>) -> tensor<2x4x2x100xi32>
// CHECK-NEXT: %[[P:.+]] = attn.lsh_sort %[[B]] {chunk = 32 : i64, num_buckets = 8 : i64} : (tensor<2x4x2x100xi32>) -> tensor<2x4x2x128xi32>
// CHECK-NEXT: %[[SO:.+]], %[[SL:.+]] = attn.lsh_chunk_attention @lsh %[[Q]], %[[K]], %[[V]], %[[P]] lengths(%[[L]]) {after = 0 : i64, before = 1 : i64, chunk = 32 : i64, scale = 1.000000e+00 : f64}
// CHECK-SAME: -> (tensor<2x4x2x128x64xf32>, tensor<2x4x2x128xf32>)
// CHECK-NEXT: %[[UO:.+]], %[[UL:.+]] = attn.lsh_unsort %[[SO]], %[[SL]], %[[P]]
// CHECK-SAME: -> (tensor<2x4x2x100x64xf32>, tensor<2x4x2x100xf32>)
// CHECK-NEXT: %[[CO:.+]], %[[CL:.+]] = attn.lsh_combine %[[UO]], %[[UL]]
// CHECK-NEXT: return %[[CO]], %[[CL]]
// RT-LABEL: func.func @test_lsh
// RT: attn.lsh_combine
func.func @test_lsh(%q: tensor<2x4x100x64xf32>, %v: tensor<2x4x100x64xf32>, %len: tensor<2xi32>, %rot: tensor<2x64x4xf32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>) {
  %o, %lse = attn.attention @lsh(%q, %q, %v) lengths(%len) rotations(%rot) : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2xi32>, tensor<2x64x4xf32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
  return %o, %lse : tensor<2x4x100x64xf32>, tensor<2x4x100xf32>
}

// -----

// REMARK-NOT: remark
// Dense fallback: 2 chunks with before = after = 1, so every query sees every
// key. Dense attention against the normalised queries with the self score,
// and a remark saying why.
attn.variant @short attributes {causal, lsh = #attn.lsh<buckets = 8, rounds = 4, chunk = 16, before = 1, after = 1, seed = 0, dense_fallback = true>, scale = 5.000000e-01 : f64, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// REMARK: remark: LSH attention @short at N = 20 with chunk = 16 has 2 chunk(s), within min(before, after) + 1, so every query sees every key: emitting dense attention with the same masks (dense_fallback = false keeps LSH)
// CHECK-LABEL: func.func @test_fallback
// CHECK: %[[K:.+]] = attn.lsh_normalize %[[Q:[^ ]+]]
// CHECK-NEXT: %[[S:.+]] = attn.scores %[[Q]], %[[K]] {scale = 5.000000e-01 : f64}
// CHECK-NEXT: %[[SS:.+]] = attn.self_score %[[S]] {value = -1.000000e+05 : f64}
// CHECK-NEXT: attn.mask @short %[[SS]]
// CHECK-NEXT: attn.softmax
// CHECK-NEXT: attn.weighted_sum
// CHECK-NOT: attn.lsh_hash
func.func @test_fallback(%q: tensor<1x2x20x32xf32>, %v: tensor<1x2x20x32xf32>, %rot: tensor<4x32x4xf32>) -> (tensor<1x2x20x32xf32>, tensor<1x2x20xf32>) {
  %o, %lse = attn.attention @short(%q, %q, %v) rotations(%rot) : (tensor<1x2x20x32xf32>, tensor<1x2x20x32xf32>, tensor<1x2x20x32xf32>, tensor<4x32x4xf32>) -> (tensor<1x2x20x32xf32>, tensor<1x2x20xf32>)
  return %o, %lse : tensor<1x2x20x32xf32>, tensor<1x2x20xf32>
}

// -----

// dense_fallback = false keeps LSH even when every key is in range.
attn.variant @forced attributes {lsh = #attn.lsh<buckets = 4, rounds = 1, chunk = 16, before = 1, after = 1, seed = 0, dense_fallback = false>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_forced
// CHECK: attn.lsh_hash
// CHECK-NOT: attn.scores
func.func @test_forced(%q: tensor<1x1x20x32xf32>, %v: tensor<1x1x20x32xf32>, %rot: tensor<1x32x2xf32>) -> (tensor<1x1x20x32xf32>, tensor<1x1x20xf32>) {
  %o, %lse = attn.attention @forced(%q, %q, %v) rotations(%rot) : (tensor<1x1x20x32xf32>, tensor<1x1x20x32xf32>, tensor<1x1x20x32xf32>, tensor<1x32x2xf32>) -> (tensor<1x1x20x32xf32>, tensor<1x1x20xf32>)
  return %o, %lse : tensor<1x1x20x32xf32>, tensor<1x1x20xf32>
}
// REMARK-NOT: remark
