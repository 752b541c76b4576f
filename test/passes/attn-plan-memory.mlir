// RUN: attnc-opt %s -split-input-file --attn-plan-memory=report=true -verify-diagnostics | FileCheck %s
// RUN: not attnc-opt %s -split-input-file --attn-plan-memory 2>&1 | FileCheck %s --check-prefix=QUIET
// RUN: attnc compile %S/Inputs/plan-memory-rev.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=1 --attn-derive-model-backward --attn-plan-memory=report=true -mlir-print-op-on-diagnostic=false 2>&1 >/dev/null | FileCheck %s --check-prefix=DEPTH
// RUN: attnc compile %S/Inputs/plan-memory-rev.attn --emit=mlir | attnc-opt --attn-resolve-tunables --attn-expand-model=batch=1 --attn-derive-model-backward --attn-plan-memory | FileCheck %s --check-prefix=GRAPH

// Without `report` the pass is silent; the multi-block function still fails.
// QUIET-NOT: remark
// QUIET: error: 'func.func' op has 2 blocks; attn-plan-memory needs a single straight-line block
// QUIET-NOT: remark

// A chain (16x32 f32 = 2048 bytes, 16x16 = 1024, 16 = 64). Live ranges in op
// indices: %h [0,1], %a [1,2], %y [2,3], %z [3,4], %s [4,5], %n [5,6]
// (returned), %mean and %rstd [5,5] (unused). Largest first: %h at 0, %a at
// 2048 (overlaps %h at op 1); %y takes %h's bytes once %h is dead, %z goes
// after %y, %s reuses 0 again, %n 1024, and the unused %mean / %rstd still
// get their own bytes above %n. Peak: %h + %a at op 1.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: attn.arena_bytes = 4096 : i64, attn.kept_bytes = 0 : i64, attn.model = @m, attn.peak_live_bytes = 4096 : i64
// CHECK-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: 0>}
// CHECK-NEXT: attn.activation gelu {{.*}}attn.arena_offsets = array<i64: 2048>}
// CHECK-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: 0>}
// CHECK-NEXT: attn.bias_add {{.*}}attn.arena_offsets = array<i64: 1024>}
// CHECK-NEXT: attn.add {{.*}}attn.arena_offsets = array<i64: 0>}
// CHECK-NEXT: attn.layer_norm {{.*}}attn.arena_offsets = array<i64: 1024, 2048, 2112>}
// CHECK-NEXT: return
// expected-remark @+1 {{arena 4096 bytes, peak live 4096 bytes, kept for the backward 0 bytes, 8 buffers}}
func.func @chain(%x: tensor<16x16xf32>, %w1: tensor<16x32xf32>, %w2: tensor<32x16xf32>, %b: tensor<16xf32>, %g: tensor<16xf32>) -> tensor<16x16xf32> attributes {attn.model = @m} {
  %h = attn.matmul %x, %w1 : (tensor<16x16xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
  %a = attn.activation gelu %h : tensor<16x32xf32>
  %y = attn.matmul %a, %w2 : (tensor<16x32xf32>, tensor<32x16xf32>) -> tensor<16x16xf32>
  %z = attn.bias_add %y, %b : (tensor<16x16xf32>, tensor<16xf32>) -> tensor<16x16xf32>
  %s = attn.add %z, %x : tensor<16x16xf32>
  %n, %mean, %rstd = attn.layer_norm %s, %g, %b : (tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return %n : tensor<16x16xf32>
}

// A function without attn.model is left alone.
// CHECK-LABEL: func.func @not_a_model
// CHECK-NOT: attn.arena
// CHECK: return
func.func @not_a_model(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = attn.add %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// The row_chunks op gets a scratch buffer (its body's two 8x16 results,
// 512 + 512 bytes) live only at op 2; the body's values sit in it one after
// another (3072, 3584).
// The loss seed (op 3) is not planned and splits forward from backward:
// %h [0,4] and %r [2,4] are kept across it, %t [1,2] and the scratch are
// not. All buffers are 1024 bytes: %h 0, %t 1024, %r 2048, scratch 3072,
// and %d [4,5] reuses %t's bytes.
// CHECK-LABEL: func.func @seeded
// CHECK-SAME: attn.arena_bytes = 4096 : i64, attn.kept_bytes = 2048 : i64, attn.model = @m, attn.peak_live_bytes = 4096 : i64
// CHECK-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: 0>}
// CHECK-NEXT: attn.bias_add {{.*}}attn.arena_offsets = array<i64: 1024>}
// CHECK-NEXT: attn.row_chunks {{.*}}attributes {attn.arena_offsets = array<i64: 2048>, attn.scratch_bytes = 1024 : i64, attn.scratch_offset = 3072 : i64}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: attn.matmul {{.*}}{attn.arena_offsets = array<i64: 3072>}
// CHECK-NEXT: attn.activation gelu {{.*}}{attn.arena_offsets = array<i64: 3584>}
// CHECK-NEXT: attn.chunks_yield
// CHECK: attn.constant 1.000000e+00 {attn.arena_offsets = array<i64: -1>}
// CHECK-NEXT: attn.add {{.*}}attn.arena_offsets = array<i64: 1024>}
// expected-remark @+1 {{arena 4096 bytes, peak live 4096 bytes, kept for the backward 2048 bytes, 5 buffers}}
func.func @seeded(%x: tensor<16x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> attributes {attn.model = @m} {
  %h = attn.matmul %x, %w : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %t = attn.bias_add %h, %b : (tensor<16x16xf32>, tensor<16xf32>) -> tensor<16x16xf32>
  %r = attn.row_chunks chunk 8 (%t, %w) split [true, false] sums [false] {
  ^bb0(%tc: tensor<8x16xf32>, %wc: tensor<16x16xf32>):
    %m = attn.matmul %tc, %wc : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    %gl = attn.activation gelu %m : tensor<8x16xf32>
    attn.chunks_yield %gl : tensor<8x16xf32>
  } : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %one = attn.constant 1.0 : tensor<f32>
  %d = attn.add %r, %h : tensor<16x16xf32>
  return %d : tensor<16x16xf32>
}

// -----

// Values returned after the first (the loss) are gradients: the generated
// step writes them into the runtime's gradient buffers, so %d takes no
// arena space (-1). %a [0,1] 2048 at 0, %b [1,2] 1024 above it at 2048, and
// %c [2,4], live with %b only, reuses %a's bytes at 0.
// CHECK-LABEL: func.func @gradient_outputs
// CHECK-SAME: attn.arena_bytes = 3072 : i64, attn.kept_bytes = 0 : i64, attn.model = @m, attn.peak_live_bytes = 3072 : i64
// CHECK-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: 0>}
// CHECK-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: 2048>}
// CHECK-NEXT: attn.bias_add {{.*}}attn.arena_offsets = array<i64: 0>}
// CHECK-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: -1>}
// expected-remark @+1 {{arena 3072 bytes, peak live 3072 bytes, kept for the backward 0 bytes, 3 buffers}}
func.func @gradient_outputs(%x: tensor<16x16xf32>, %w1: tensor<16x32xf32>, %w2: tensor<32x16xf32>, %bias: tensor<16xf32>) -> (tensor<16x16xf32>, tensor<16x32xf32>) attributes {attn.model = @m} {
  %a = attn.matmul %x, %w1 : (tensor<16x16xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
  %b = attn.matmul %a, %w2 : (tensor<16x32xf32>, tensor<32x16xf32>) -> tensor<16x16xf32>
  %c = attn.bias_add %b, %bias : (tensor<16x16xf32>, tensor<16xf32>) -> tensor<16x16xf32>
  %d = attn.matmul %x, %w1 : (tensor<16x16xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
  return %c, %d : tensor<16x16xf32>, tensor<16x32xf32>
}

// -----

// expected-error @+1 {{'func.func' op has 2 blocks; attn-plan-memory needs a single straight-line block}}
func.func @two_blocks(%x: tensor<4xf32>) -> tensor<4xf32> attributes {attn.model = @m} {
  return %x : tensor<4xf32>
^bb1:
  %y = attn.add %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// Whole models (Inputs/plan-memory-rev.attn: seq 128, d_model 32, d_ff 64,
// batch 1, so an activation row block is 128x32 f32 = 16384 bytes). At the
// loss seed a reversible model keeps only what its top needs: loss and
// count (64 + 64), logits 8192, the concatenated streams 32768, the final
// norm's output 32768 and mean/rstd 512 + 512, and the top layer's y1, y2
// (16384 each) to rebuild the layers below from: 107648 bytes at 2 and at 6
// layers. A standard layer keeps its input, norm outputs and statistics,
// Q, K, V, the attention output and lse, the merged heads and the
// residual sum, 9 x 16384 + 3 x 1024 = 150528 bytes more per layer. The returned
// parameter gradients take no arena space (written to the runtime's
// buffers), so the reversible arena is flat too; the standard one grows.
// DEPTH: remark: arena [[ARENA:[0-9]+]] bytes, peak live [[PEAK:[0-9]+]] bytes, kept for the backward [[REV:107648]] bytes, {{[0-9]+}} buffers
// DEPTH-NEXT: attn.model @rev2
// DEPTH: remark: arena [[ARENA]] bytes, peak live [[PEAK]] bytes, kept for the backward [[REV]] bytes, {{[0-9]+}} buffers
// DEPTH-NEXT: attn.model @rev6
// DEPTH: remark: arena {{[0-9]+}} bytes, peak live {{[0-9]+}} bytes, kept for the backward 343168 bytes, {{[0-9]+}} buffers
// DEPTH-NEXT: attn.model @std2
// DEPTH: remark: arena {{[0-9]+}} bytes, peak live {{[0-9]+}} bytes, kept for the backward 945280 bytes, {{[0-9]+}} buffers
// DEPTH-NEXT: attn.model @std6

// The attributes land on the generated graph: the loss seed is not in the
// arena, the chunked feed-forward gets scratch and its body's values
// offsets inside it, from the scratch offset on.
// GRAPH-LABEL: func.func @train_rev2
// GRAPH-SAME: attn.arena_bytes = {{[0-9]+}} : i64
// GRAPH-SAME: attn.kept_bytes = 107648 : i64
// GRAPH-SAME: attn.peak_live_bytes = {{[0-9]+}} : i64
// GRAPH: attn.embed {{.*}}attn.arena_offsets = array<i64: {{[0-9]+}}>
// GRAPH: attn.row_chunks {{.*}}attn.scratch_bytes = {{[1-9][0-9]*}} : i64, attn.scratch_offset = [[SCRATCH:[0-9]+]] : i64
// GRAPH-NEXT: ^bb0
// GRAPH-NEXT: attn.matmul {{.*}}attn.arena_offsets = array<i64: [[SCRATCH]]>
// GRAPH: attn.chunks_yield
// GRAPH: attn.constant 1.000000e+00 {attn.arena_offsets = array<i64: -1>}
// GRAPH-LABEL: func.func @train_std6
// GRAPH-SAME: attn.kept_bytes = 945280 : i64
