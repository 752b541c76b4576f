// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=2 | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-expand-model -verify-diagnostics
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model="batch=2 infer-batch=1" | FileCheck %s --check-prefix=INFER
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model="batch=2 infer=false" | FileCheck %s --check-prefix=NOINFER
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model="batch=2 train=false" | FileCheck %s --check-prefix=NOTRAIN

// Standard layer, dense causal attention, FFN chunked by 8 of 32 rows.
// Parameters are arguments named like the training runtime's.
// CHECK-LABEL: func.func @train_m(
// CHECK-SAME: tensor<32xi32> {attn.input = "tokens"}, %{{.*}}: tensor<32xi32> {attn.input = "targets"}
// CHECK-SAME: tensor<256x32xf32> {attn.param = "tok_emb"}
// CHECK-SAME: tensor<16x32xf32> {attn.param = "pos_emb"}
// CHECK-SAME: {attn.param = "layers.0.attn.wk"}
// CHECK-SAME: {attn.param = "head.b"}) -> tensor<f32>
// CHECK-SAME: attn.batch = 2 : i64, attn.model = @m
// CHECK: %[[X:.*]] = attn.embed %arg0, %arg2, %arg3
// CHECK: %[[Z:.*]], %{{.*}}, %{{.*}} = attn.layer_norm %[[X]], %arg4, %arg5 {attn.layer = 0 : i64}
// CHECK: %[[Q:.*]] = attn.matmul %[[Z]], %arg6
// CHECK: attn.bias_add %[[Q]], %arg7
// CHECK: attn.split_heads {{.*}} -> tensor<2x2x16x16xf32>
// CHECK: %[[O:.*]], %{{.*}} = attn.attention @dense(
// CHECK: attn.merge_heads %[[O]]
// CHECK: %[[H:.*]] = attn.add %[[X]],
// CHECK: attn.row_chunks chunk 8(%{{.*}}, %arg16, %arg17, %arg18, %arg19) split [true, false, false, false, false] sums [false]
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<8x32xf32>,
// CHECK: attn.activation gelu {{.*}} : tensor<8x64xf32>
// CHECK: attn.chunks_yield {{.*}} : tensor<8x32xf32>
// CHECK: attn.add %[[H]],
// CHECK: %[[L:.*]], %{{.*}} = attn.cross_entropy
// CHECK: return %[[L]] : tensor<f32>

// Reversible LSH layers with dropout: shared QK (no wk), the rotations are
// constants, each residual branch is dropped with its own stream, the two
// streams are tagged for the backward and concatenated before the final
// norm. chunk 64 ≥ 32 rows: no row_chunks.
// CHECK-LABEL: func.func @train_rev(
// CHECK-NOT: attn.wk
// CHECK-SAME: tensor<2x4x2xf32> {attn.constant, attn.param = "layers.0.attn.lsh_rotations"}
// CHECK-SAME: tensor<16xf32> {attn.param = "final_ln.gamma"}
// CHECK: %[[E:.*]] = attn.embed
// CHECK: %[[Q0:.*]] = attn.split_heads
// CHECK: attn.attention @lsh(%[[Q0]], %[[Q0]], %{{.*}}) rotations(%arg18)
// CHECK: attn.dropout {{.*}}stream = 65536
// CHECK: %[[Y1:.*]] = attn.add %[[E]], %{{.*}} {attn.layer = 0 : i64, attn.name = "the output of layer 0 (y1)", attn.rev = "y1"}
// CHECK-NOT: attn.row_chunks
// CHECK: attn.dropout {{.*}}stream = 65537
// CHECK: %[[Y2:.*]] = attn.add %[[E]], %{{.*}} {attn.layer = 0 : i64, attn.name = "the output of layer 0 (y2)", attn.rev = "y2"}
// CHECK: attn.dropout {{.*}}stream = 65538
// CHECK: %[[Z1:.*]] = attn.add %[[Y1]], %{{.*}} {attn.layer = 1 : i64, attn.name = "the output of layer 1 (y1)", attn.rev = "y1"}
// CHECK: %[[Z2:.*]] = attn.add %[[Y2]], %{{.*}} {attn.layer = 1 : i64, attn.name = "the output of layer 1 (y2)", attn.rev = "y2"}
// CHECK: attn.concat_cols %[[Z1]], %[[Z2]] : (tensor<32x8xf32>, tensor<32x8xf32>) -> tensor<32x16xf32>

// The inference function of each model: the same forward on infer-batch
// sequences (16 rows here), tokens but no targets, no residual dropout, no
// loss: it returns the logits.
// INFER-LABEL: func.func @infer_m(
// INFER-SAME: %arg0: tensor<16xi32> {attn.input = "tokens"}, %arg1: tensor<256x32xf32> {attn.param = "tok_emb"}
// INFER-SAME: {attn.param = "head.b"}) -> tensor<16x256xf32>
// INFER-SAME: attn.batch = 1 : i64, attn.inference, attn.model = @m
// INFER: attn.embed %arg0, %arg1, %arg2
// INFER: attn.attention @dense(
// INFER: attn.row_chunks chunk 8(
// INFER: %[[LOGITS:.*]] = attn.bias_add %{{.*}} {attn.name = "the logits"}
// INFER-NOT: attn.cross_entropy
// INFER: return %[[LOGITS]] : tensor<16x256xf32>
// INFER-LABEL: func.func @infer_rev(
// INFER-NOT: attn.dropout
// INFER: attn.attention @lsh(
// INFER: attn.concat_cols
// INFER: return %{{.*}} : tensor<16x256xf32>
// NOINFER-NOT: func.func @infer_
// NOTRAIN-NOT: func.func @train_
// NOTRAIN: func.func @infer_m(
// NOTRAIN-SAME: tensor<32xi32> {attn.input = "tokens"}

// MLM with headwise low-rank attention and no FFN: the mask token is one
// more embedding row; E and F per layer, shared by the heads.
// CHECK-LABEL: func.func @train_enc(
// CHECK-SAME: tensor<257x8xf32> {attn.param = "tok_emb"}
// CHECK-SAME: tensor<4x16xf32> {attn.param = "layers.0.attn.E"}
// CHECK-SAME: tensor<4x16xf32> {attn.param = "layers.0.attn.F"}
// CHECK-NOT: ln2
// CHECK: attn.attention @lin({{.*}}) E(%{{.*}}) F(%{{.*}})
// CHECK-NOT: attn.activation

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = auto, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @below {{low-rank k of "lin" is auto; run attn-resolve-tunables first}}
attn.model @m dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  attn.layer @lin ffn(gelu, chunk = 8)
}

// -----

attn.variant @dense attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @below {{ffn chunk is auto; run attn-resolve-tunables first}}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  attn.layer @dense ffn(gelu, chunk = auto)
}
