// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=2 --attn-derive-model-backward | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-derive-model-backward -verify-diagnostics
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model="batch=2 infer=false" --attn-derive-model-backward=recompute-layers=true | FileCheck %s --check-prefix=RECOMP
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=2 --attn-derive-model-backward | FileCheck %s --check-prefix=INFER

// The inference functions have no loss: the pass leaves them as they are.
// INFER-LABEL: func.func @infer_m(
// INFER-SAME: -> tensor<32x256xf32>
// INFER-NOT: attn.constant
// INFER-NOT: _grad
// INFER: return %{{.*}} : tensor<32x256xf32>
// INFER-NEXT: }

// recompute-layers: the standard layer's backward differentiates a clone
// of its forward from the layer input (the embedding here), so its
// attention runs again after the loss seed and the gradient uses the
// clone's out and lse; the embedding and head are not recomputed.
// RECOMP-LABEL: func.func @train_m(
// RECOMP: %[[X:.*]] = attn.embed
// RECOMP: %[[O1:.*]], %[[L1:.*]] = attn.attention @dense(
// RECOMP: attn.constant 1.0
// RECOMP-NOT: attn.embed
// RECOMP: attn.layer_norm %[[X]],
// RECOMP: %[[O2:.*]], %[[L2:.*]] = attn.attention @dense(
// RECOMP: attn.attention_grad @dense(%{{.*}}, %{{.*}}, %{{.*}}, %[[O2]], %[[L2]],
// RECOMP: attn.embed_grad
// Reversible layers are unchanged by the option: one rebuild per layer.
// RECOMP-LABEL: func.func @train_rev(
// RECOMP-COUNT-4: attn.attention @lsh(
// RECOMP-NOT: attn.attention @lsh(

// Standard layer: the loss is seeded with 1; a linear map's backward is two
// transposed GEMMs and a column sum; the chunked FFN's backward is a chunked
// body that recomputes the chunk and sums the weight gradients over chunks.
// CHECK-LABEL: func.func @train_m(
// CHECK-SAME: -> (tensor<f32>, tensor<256x32xf32>, tensor<16x32xf32>,
// CHECK-SAME: attn.grad_of = [2, 3, 4, 5,
// CHECK: %[[L:.*]], %[[C:.*]] = attn.cross_entropy %[[LOGITS:[^,]*]], %arg1
// CHECK: %[[ONE:.*]] = attn.constant 1.000000e+00 : tensor<f32>
// CHECK: %[[DL:.*]] = attn.cross_entropy_grad %[[LOGITS]], %arg1, %[[C]], %[[ONE]]
// CHECK: %[[DB:.*]] = attn.column_sum %[[DL]] : (tensor<32x256xf32>) -> tensor<256xf32>
// CHECK: attn.matmul %[[DL]], %arg22 {transpose_b}
// CHECK: %[[DW:.*]] = attn.matmul %{{.*}}, %[[DL]] {transpose_a} : (tensor<32x32xf32>, tensor<32x256xf32>) -> tensor<32x256xf32>
// CHECK: attn.layer_norm_grad
// CHECK: attn.layer_norm_param_grad
// CHECK: attn.row_chunks chunk 8(%{{.*}}, %arg16, %arg17, %arg18, %arg19, %{{.*}}) split [true, false, false, false, false, true] sums [false, true, true, true, true]
// CHECK: attn.activation gelu
// CHECK: attn.activation_grad gelu
// CHECK: attn.chunks_yield {{.*}} : tensor<8x32xf32>, tensor<32x64xf32>, tensor<64xf32>, tensor<64x32xf32>, tensor<32xf32>
// CHECK: attn.attention_grad @dense({{.*}}) {attn.layer = 0 : i64, layer = 0 : i64}
// CHECK: attn.embed_grad %arg0
// CHECK: return %[[L]], {{.*}}, %[[DW]], %[[DB]] :

// Reversible: no forward activation of layer 1 is used by its backward but
// its outputs; x2 = y2 − Drop(FFN(LN(y1))) and x1 = y1 − Drop(Attn(LN(x2)))
// are rebuilt with the forward's dropout streams, and layer 0 rebuilds from
// them. The bottom layer's x1 is never needed (dead, removed): 3 rebuilds.
// CHECK-LABEL: func.func @train_rev(
// CHECK: %[[Y1A:.*]] = attn.add %{{.*}} {attn.layer = 1 : i64, attn.name = "the output of layer 1 (y1)", attn.rev = "y1"}
// CHECK: %[[Y2A:.*]] = attn.add %{{.*}} {attn.layer = 1 : i64, attn.name = "the output of layer 1 (y2)", attn.rev = "y2"}
// CHECK: attn.constant 1.0
// CHECK: attn.dropout {{.*}}stream = 65539
// CHECK: %[[X2:.*]] = attn.sub %[[Y2A]], %{{.*}} {attn.layer = 1 : i64}
// CHECK: attn.attention @lsh(
// CHECK: attn.dropout {{.*}}stream = 65538
// CHECK: %[[X1:.*]] = attn.sub %[[Y1A]], %{{.*}} {attn.layer = 1 : i64}
// CHECK: attn.attention_grad @lsh({{.*}}) rotations(%arg33) {attn.layer = 1 : i64, layer = 1 : i64}
// CHECK: attn.dropout {{.*}}stream = 65537
// CHECK: attn.sub %[[X2]], %{{.*}} {attn.layer = 0 : i64}
// CHECK-NOT: attn.sub
// CHECK: attn.attention_grad @lsh({{.*}}) rotations(%arg18) {attn.layer = 0 : i64, layer = 0 : i64}
// Rotations are constants: no gradient is returned for them.
// CHECK: return
// CHECK-SAME: tensor<f32>, tensor<256x8xf32>, tensor<16x8xf32>, tensor<8xf32>

// Low-rank: the attention gradient includes E and F.
// CHECK-LABEL: func.func @train_enc(
// CHECK: %param_grads:2 = attn.attention_grad @lin({{.*}}) E(%arg14) F(%arg15)
// CHECK-SAME: -> (tensor<2x2x16x4xf32>, tensor<2x2x16x4xf32>, tensor<2x2x16x4xf32>, tensor<4x16xf32>, tensor<4x16xf32>)

// -----

func.func @train_t(%x: tensor<4x8xf32> {attn.param = "x"}, %w: tensor<4x16xf32> {attn.param = "w"}, %t: tensor<8xi32> {attn.input = "targets"}) -> tensor<f32> attributes {attn.model = @t} {
  // expected-error @below {{differentiating a transposed matmul is not supported}}
  %l = attn.matmul %x, %w {transpose_a} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %loss, %count = attn.cross_entropy %l, %t : (tensor<8x16xf32>, tensor<8xi32>) -> (tensor<f32>, tensor<f32>)
  return %loss : tensor<f32>
}
