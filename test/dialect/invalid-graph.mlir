// RUN: attnc-opt %s -split-input-file -verify-diagnostics

// The whole-model graph ops' verifiers (dialect/AttnGraphOps.td).

func.func @matmul_inner(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{inner dimensions differ: 8 vs 4}}
  %c = attn.matmul %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

func.func @matmul_result(%a: tensor<4x8xf32>, %b: tensor<4x6xf32>) -> tensor<4x6xf32> {
  // expected-error @below {{result must be [8, 6], found 'tensor<4x6xf32>'}}
  %c = attn.matmul %a, %b {transpose_a} : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %c : tensor<4x6xf32>
}

// -----

func.func @split(%x: tensor<32x8xf32>) -> tensor<2x2x8x4xf32> {
  // expected-error @below {{cannot split}}
  %y = attn.split_heads %x : (tensor<32x8xf32>) -> tensor<2x2x8x4xf32>
  return %y : tensor<2x2x8x4xf32>
}

// -----

func.func @embed_rows(%t: tensor<30xi32>, %e: tensor<256x8xf32>, %p: tensor<16x8xf32>) -> tensor<30x8xf32> {
  // expected-error @below {{rows (30) must be a multiple of the positions (16)}}
  %y = attn.embed %t, %e, %p : (tensor<30xi32>, tensor<256x8xf32>, tensor<16x8xf32>) -> tensor<30x8xf32>
  return %y : tensor<30x8xf32>
}

// -----

func.func @layer_norm(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{gamma and beta must be [8]}}
  %y, %m, %r = attn.layer_norm %x, %g, %g : (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return %y : tensor<4x8xf32>
}

// -----

// A split body argument must be exactly one chunk tall.
func.func @chunk_arg(%x: tensor<10x8xf32>) -> tensor<10x8xf32> {
  // expected-error @below {{body argument #0 'tensor<3x8xf32>' does not fit input 'tensor<10x8xf32>' (split inputs are chunks of 4 rows)}}
  %y = attn.row_chunks chunk 4 (%x) split [true] sums [false] {
  ^bb0(%c: tensor<3x8xf32>):
    attn.chunks_yield %c : tensor<3x8xf32>
  } : (tensor<10x8xf32>) -> tensor<10x8xf32>
  return %y : tensor<10x8xf32>
}

// -----

// Concatenated results have the split inputs' rows.
func.func @chunk_rows(%x: tensor<10x8xf32>) -> tensor<7x8xf32> {
  // expected-error @below {{result #0 'tensor<7x8xf32>' does not fit the chunk value 'tensor<4x8xf32>'}}
  %y = attn.row_chunks chunk 4 (%x) split [true] sums [false] {
  ^bb0(%c: tensor<4x8xf32>):
    attn.chunks_yield %c : tensor<4x8xf32>
  } : (tensor<10x8xf32>) -> tensor<7x8xf32>
  return %y : tensor<7x8xf32>
}

// -----

func.func @chunk_split_rows(%x: tensor<10x8xf32>, %z: tensor<12x8xf32>) -> tensor<10x8xf32> {
  // expected-error @below {{split inputs have different row counts: 10 and 12}}
  %y = attn.row_chunks chunk 4 (%x, %z) split [true, true] sums [false] {
  ^bb0(%c: tensor<4x8xf32>, %d: tensor<4x8xf32>):
    attn.chunks_yield %c : tensor<4x8xf32>
  } : (tensor<10x8xf32>, tensor<12x8xf32>) -> tensor<10x8xf32>
  return %y : tensor<10x8xf32>
}

// -----

func.func @chunk_nosplit(%w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @below {{needs at least one split input}}
  %y = attn.row_chunks chunk 4 (%w) split [false] sums [true] {
  ^bb0(%c: tensor<8x8xf32>):
    attn.chunks_yield %c : tensor<8x8xf32>
  } : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

func.func @fused_types(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{body argument type 'tensor<4x4xf32>' differs from input 'tensor<4x8xf32>'}}
  %y = attn.fused_rows rows 4 (%x) kernel "k" {
  ^bb0(%a: tensor<4x4xf32>):
    attn.rows_yield %a : tensor<4x4xf32>
  } : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @fused_rows_count(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{result type 'tensor<4x8xf32>' does not have 2 rows}}
  %y = attn.fused_rows rows 2 (%x) kernel "k" {
  ^bb0(%a: tensor<4x8xf32>):
    attn.rows_yield %a : tensor<4x8xf32>
  } : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @layer_norm_result(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> tensor<4x4xf32> {
  // expected-error @below {{result must have the input's type 'tensor<4x8xf32>'}}
  %y, %m, %r = attn.layer_norm %x, %g, %g : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %y : tensor<4x4xf32>
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = headwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @attention_grad_param(%q: tensor<1x2x8x4xf32>, %o: tensor<1x2x8x4xf32>, %l: tensor<1x2x8xf32>, %e: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @below {{parameter gradient #0 has type 'tensor<4x4xf32>', its parameter 'tensor<4x8xf32>'}}
  %dq, %dk, %dv, %de = attn.attention_grad @lin(%q, %q, %q, %o, %l, %o) E(%e) {layer = 0 : i64} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8xf32>, tensor<1x2x8x4xf32>, tensor<4x8xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<4x4xf32>)
  return %de : tensor<4x4xf32>
}
