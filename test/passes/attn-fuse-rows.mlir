// RUN: attnc-opt %s -split-input-file --attn-fuse-rows | FileCheck %s
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=2 --attn-derive-model-backward --attn-fuse-rows | FileCheck %s --check-prefix=MODEL
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=2 --attn-derive-model-backward --attn-fuse-rows=in-chunks=false | FileCheck %s --check-prefix=NOCHUNKS

// bias + residual + layer norm: one kernel. Only values used outside it
// (the residual sum, the norm, its mean) are results; the biased GEMM
// output and the unused rstd stay inside.
// CHECK-LABEL: func.func @train_chain
// CHECK: %[[MM:.*]] = attn.matmul
// CHECK-NEXT: %[[F:.*]]:3 = attn.fused_rows rows 4(%[[MM]], %arg2, %arg0, %arg3, %arg4) kernel "rows0" {
// CHECK-NEXT: ^bb0(%[[A0:.*]]: tensor<4x8xf32>, %[[A1:.*]]: tensor<8xf32>, %[[A2:.*]]: tensor<4x8xf32>, %[[A3:.*]]: tensor<8xf32>, %[[A4:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[B:.*]] = attn.bias_add %[[A0]], %[[A1]]
// CHECK-NEXT: %[[H:.*]] = attn.add %[[A2]], %[[B]]
// CHECK-NEXT: %[[Y:.*]], %[[M:.*]], %{{.*}} = attn.layer_norm %[[H]], %[[A3]], %[[A4]]
// CHECK-NEXT: attn.rows_yield %[[H]], %[[Y]], %[[M]] :
// CHECK: attn.matmul %[[F]]#1
// CHECK: return %[[F]]#0
func.func @train_chain(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>, %g: tensor<8xf32>, %be: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) attributes {attn.model = @m} {
  %mm = attn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = attn.bias_add %mm, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %h = attn.add %x, %a : tensor<4x8xf32>
  %y, %mean, %rstd = attn.layer_norm %h, %g, %be : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %z = attn.matmul %y, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %h, %z, %mean : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>
}

// -----

// A GEMM reads the bias add before the activation: fusing the activation
// into the bias add's kernel would move that kernel past the GEMM, so the
// activation gets a kernel of its own. Functions without attn.model are
// left alone.
// CHECK-LABEL: func.func @train_blocked
// CHECK: %[[K0:.*]] = attn.fused_rows rows 4(%arg0, %arg1) kernel "rows0"
// CHECK: attn.matmul %[[K0]]
// CHECK: attn.fused_rows rows 4(%[[K0]]) kernel "rows1"
// CHECK: attn.activation relu
// CHECK-LABEL: func.func @other
// CHECK-NOT: attn.fused_rows
func.func @train_blocked(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {attn.model = @m} {
  %a = attn.bias_add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %mm = attn.matmul %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = attn.activation relu %a : tensor<4x8xf32>
  return %mm, %r : tensor<4x8xf32>, tensor<4x8xf32>
}
func.func @other(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = attn.activation relu %x : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// The model: embedding + first layer norm in one kernel; the output
// projection's bias, the residual sum and the second layer norm in another.
// MODEL-LABEL: func.func @train_m
// MODEL: attn.fused_rows rows 32(%arg0, %arg2, %arg3, %arg4, %arg5) kernel "rows0"
// MODEL-NEXT: ^bb0
// MODEL-NEXT: attn.embed
// MODEL-NEXT: attn.layer_norm
// MODEL-NEXT: attn.rows_yield
// MODEL: attn.merge_heads
// MODEL-NEXT: attn.matmul
// MODEL-NEXT: attn.fused_rows rows 32
// MODEL-NEXT: ^bb0
// MODEL-NEXT: attn.bias_add
// MODEL-NEXT: attn.add
// MODEL-NEXT: attn.layer_norm
// MODEL-NEXT: attn.rows_yield
// MODEL-NEXT: }
// MODEL-NEXT: attn.row_chunks chunk 8
// Inside the chunked FFN body, bias + GELU become one kernel per chunk.
// MODEL-NEXT: ^bb0
// MODEL-NEXT: attn.matmul
// MODEL-NEXT: attn.fused_rows rows 8
// MODEL-NEXT: ^bb0
// MODEL-NEXT: attn.bias_add
// MODEL-NEXT: attn.activation gelu
// MODEL-NEXT: attn.rows_yield
// MODEL-LABEL: func.func @train_rev

// With in-chunks=false each row-local op of a chunked body is a kernel of
// its own: the bias add, then the activation.
// NOCHUNKS: attn.row_chunks chunk 8
// NOCHUNKS-NEXT: ^bb0
// NOCHUNKS-NEXT: attn.matmul
// NOCHUNKS-NEXT: attn.fused_rows rows 8
// NOCHUNKS-NEXT: ^bb0
// NOCHUNKS-NEXT: attn.bias_add
// NOCHUNKS-NEXT: attn.rows_yield
// NOCHUNKS-NEXT: }
// NOCHUNKS-NEXT: attn.fused_rows rows 8
// NOCHUNKS-NEXT: ^bb0
// NOCHUNKS-NEXT: attn.activation gelu
// NOCHUNKS-NEXT: attn.rows_yield
