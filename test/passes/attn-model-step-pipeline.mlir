// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-model-step-pipeline="batch=2" | FileCheck %s
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-model-step-pipeline="batch=2 recompute-layers=true" | FileCheck %s --check-prefix=RECOMPUTE
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-model-step-pipeline="batch=2 fuse-in-chunks=false infer=false" | FileCheck %s --check-prefix=UNFUSED
// RUN: attnc compile %S/Inputs/model-graph.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-model-step-pipeline="batch=2 infer-batch=1 train=false" | FileCheck %s --check-prefix=INFER

// The whole model pipeline: each model becomes a planned training step: the
// forward graph with its derived backward (attn.grad_of), row-local chains
// fused into attn.fused_rows kernels, every value at an arena offset, and
// the arena and what the backward keeps on the function.
// CHECK-LABEL: func.func @train_m(
// CHECK-SAME: attn.arena_bytes = 111744 : i64
// CHECK-SAME: attn.grad_of
// CHECK-SAME: attn.kept_bytes = 78976
// CHECK: attn.fused_rows rows 32({{.*}}) kernel "rows0" attributes {attn.arena_offsets = array<i64:
// CHECK: attn.matmul {{.*}}attn.arena_offsets
// CHECK: attn.attention
// CHECK: attn.attention_grad
// CHECK-LABEL: func.func @train_rev(
// CHECK-LABEL: func.func @train_enc(

// Standard layers recomputed in the backward keep less.
// RECOMPUTE-LABEL: func.func @train_m(
// RECOMPUTE-SAME: attn.arena_bytes = 78208 : i64
// RECOMPUTE-SAME: attn.kept_bytes = 45440

// Without fusion inside the chunked FFN body, more (smaller) row kernels.
// UNFUSED-COUNT-57: attn.fused_rows
// UNFUSED-NOT: attn.fused_rows

// The inference functions are planned like the steps: fused row kernels,
// arena offsets, an arena that is the memory plan of inference, and nothing
// kept for a backward. At one sequence (16 rows) the logits take 16 KiB.
// INFER-NOT: func.func @train_
// INFER-LABEL: func.func @infer_m(
// INFER-SAME: -> tensor<16x256xf32>
// INFER-SAME: attn.arena_bytes = [[ARENA:[0-9]+]] : i64
// INFER-SAME: attn.inference
// INFER-SAME: attn.kept_bytes = 0 : i64
// INFER: attn.fused_rows rows 16({{.*}}) kernel "rows{{[0-9]+}}" attributes {attn.arena_offsets = array<i64:
// INFER: attn.attention
// INFER-NOT: attn.attention_grad
// INFER-LABEL: func.func @infer_rev(
// INFER-LABEL: func.func @infer_enc(
