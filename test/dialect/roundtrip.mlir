// RUN: attnc-opt %s | attnc-opt | FileCheck %s
// RUN: attnc-opt %s --mlir-print-op-generic | attnc-opt | FileCheck %s
// Every op and attribute of the attn dialect prints and parses back.

// CHECK-LABEL: attn.variant @dense
// CHECK-SAME: key_padding, tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 2>
attn.variant @dense attributes {key_padding, tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 2>}

// Keys of struct-like attributes may come in any order; they print in one.
// CHECK-LABEL: attn.variant @lin
// CHECK-SAME: lowrank = #attn.lowrank<k = auto, share = kv>
// CHECK-SAME: tile = #attn.tile<block_q = auto, block_kv = 32, warps = auto, stages = 1>
attn.variant @lin attributes {lowrank = #attn.lowrank<share = kv, k = auto>, tile = #attn.tile<stages = 1, warps = auto, block_kv = 32, block_q = auto>}

// CHECK-LABEL: attn.variant @lin_none
// CHECK-SAME: #attn.lowrank<k = 16, share = none>
attn.variant @lin_none attributes {lowrank = #attn.lowrank<k = 16, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// CHECK-LABEL: attn.variant @lsh
// CHECK-SAME: causal, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 4, before = 1, after = 1, seed = 3, dense_fallback = false>, shared_qk
attn.variant @lsh attributes {causal, shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 4, before = 1, after = 1, seed = 3, dense_fallback = false>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// CHECK-LABEL: attn.variant @alibi
// CHECK-SAME: params = [#attn.param<"slope" = alibi, fixed>, #attn.param<"temp" = 2.500000e-01, learned>]
// CHECK: score {
// CHECK-NEXT: ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
// CHECK-NEXT: attn.head_param "slope"[%h] : f32
// CHECK: attn.yield %{{.*}} : f32
// CHECK: } mask {
// CHECK-NEXT: ^bb0(%b: index, %h: index, %q: index, %kv: index):
// CHECK: attn.yield %{{.*}} : i1
attn.variant @alibi attributes {params = [#attn.param<"slope" = alibi, fixed>, #attn.param<"temp" = 0.25, learned>], scale = 0.5 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %slope = attn.head_param "slope"[%h] : f32
  %0 = arith.subf %s, %slope : f32
  attn.yield %0 : f32
} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %0 = arith.cmpi sge, %q, %kv : index
  attn.yield %0 : i1
}

// CHECK-LABEL: attn.model @m dtype bf16 objective causal_lm attributes
// CHECK-SAME: d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 2 : i64, seq = 16 : i64, vocab = 256 : i64
// CHECK-NEXT: attn.layer reversible @lsh ffn(relu, chunk = auto)
attn.model @m dtype bf16 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 2 : i64, seq = 16 : i64, vocab = 256 : i64} {
  attn.layer reversible @lsh ffn(relu, chunk = auto)
}

// CHECK-LABEL: attn.model @enc dtype fp32 objective mlm
// CHECK-NEXT: attn.layer @lin{{$}}
attn.model @enc dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  attn.layer @lin
}

// CHECK-LABEL: func.func @apply
// CHECK: attn.attention @dense(%{{.*}}, %{{.*}}, %{{.*}}) lengths(%{{.*}}) : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2xi32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
// CHECK: attn.attention @lin(%{{.*}}, %{{.*}}, %{{.*}}) E(%{{.*}}) : {{.*}}tensor<7x128xf16>
// CHECK: attn.attention @lin_none(%{{.*}}, %{{.*}}, %{{.*}}) E(%{{.*}}) F(%{{.*}}) : {{.*}}tensor<4x16x128xf16>, tensor<4x16x128xf16>
// CHECK: attn.attention @lsh(%[[Q:.*]], %[[Q]], %{{.*}}) rotations(%{{.*}}) : {{.*}}tensor<2x64x4xf32>
func.func @apply(%q: tensor<2x4x100x64xf32>, %k: tensor<2x4x100x64xf32>, %v: tensor<2x4x100x64xf32>,
                 %len: tensor<2xi32>, %qh: tensor<2x4x100x64xf16>, %e: tensor<7x128xf16>,
                 %eh: tensor<4x16x128xf16>, %rot: tensor<2x64x4xf32>) {
  %o, %lse = attn.attention @dense(%q, %k, %v) lengths(%len) : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2xi32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
  %o2, %lse2 = attn.attention @lin(%qh, %qh, %qh) E(%e) : (tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<7x128xf16>) -> (tensor<2x4x100x64xf16>, tensor<2x4x100xf32>)
  %o3, %lse3 = attn.attention @lin_none(%qh, %qh, %qh) E(%eh) F(%eh) : (tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<2x4x100x64xf16>, tensor<4x16x128xf16>, tensor<4x16x128xf16>) -> (tensor<2x4x100x64xf16>, tensor<2x4x100xf32>)
  %o4, %lse4 = attn.attention @lsh(%q, %q, %v) rotations(%rot) : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x64x4xf32>) -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
  return
}
