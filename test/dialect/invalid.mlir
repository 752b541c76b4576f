// RUN: attnc-opt %s -split-input-file -verify-diagnostics
// One case per verifier error of the attn dialect.

// expected-error @+1 {{cannot be both low-rank and LSH-bucketed}}
attn.variant @a attributes {shared_qk, lowrank = #attn.lowrank<k = 4, share = none>, lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{LSH attention needs shared_qk}}
attn.variant @a attributes {lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{causal low-rank attention is not supported}}
attn.variant @a attributes {causal, lowrank = #attn.lowrank<k = 4, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{scale must be positive, found 0}}
attn.variant @a attributes {scale = 0.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{dropout must be in [0, 1), found 1}}
attn.variant @a attributes {dropout = 1.0 : f64, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{declares parameter 'p' twice}}
attn.variant @a attributes {params = [#attn.param<"p" = 1.0, learned>, #attn.param<"p" = alibi, fixed>], tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{'score' region must take 5 arguments}}
attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32):
  attn.yield %s : f32
}

// -----

// expected-error @+1 {{'score' region must yield one 'f32'}}
attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  attn.yield %q : index
}

// -----

// expected-error @+1 {{'mask' region must yield one 'i1'}}
attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  attn.yield %q : index
}

// -----

attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  // expected-error @+1 {{reads undeclared per-head parameter 'slope'}}
  %0 = attn.head_param "slope"[%h] : f32
  attn.yield %0 : f32
}

// -----

func.func @f(%h: index) -> f32 {
  // expected-error @+1 {{must be inside an attn.variant}}
  %0 = attn.head_param "slope"[%h] : f32
  return %0 : f32
}

// -----

// expected-error @+1 {{heads (3) must divide d_model (32)}}
attn.model @m dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 3 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
}

// -----

// expected-error @+1 {{attribute 'seq' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
attn.model @m dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 0 : i64, vocab = 256 : i64} {
}

// -----

// expected-error @+1 {{the duplicate objective needs an even seq, found 15}}
attn.model @m dtype fp32 objective duplicate attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 15 : i64, vocab = 256 : i64} {
}

// -----

attn.variant @a attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @+1 {{body must hold exactly one attn.layer}}
attn.model @m dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  attn.layer @a
  attn.layer @a
}

// -----

attn.variant @a attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  // expected-error @+1 {{a reversible layer needs a feed-forward block}}
  attn.layer reversible @a
}

// -----

attn.model @m dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  // expected-error @+1 {{refers to unknown attention variant @nope}}
  attn.layer @nope
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 32, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
attn.model @m dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  // expected-error @+1 {{low-rank k = 32 of @lin exceeds seq = 16}}
  attn.layer @lin
}

// -----

attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
  // expected-error @+1 {{objective causal_lm needs causal attention, but @a is not causal}}
  attn.layer @a
}

// -----

attn.variant @a attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @+1 {{'attn.layer' op expects parent op 'attn.model'}}
attn.layer @a

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{query must be [B, H, N, Dh]}}
  %o, %l = attn.attention @d(%q, %q, %q) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xi32>) {
  // expected-error @+1 {{element type must be f32, f16 or bf16, found 'i32'}}
  %o, %l = attn.attention @d(%q, %q, %q) : (tensor<1x2x8x16xi32>, tensor<1x2x8x16xi32>, tensor<1x2x8x16xi32>) -> (tensor<1x2x8x16xi32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf16>) {
  // expected-error @+1 {{query, key and value must share one element type}}
  %o, %l = attn.attention @d(%q, %k, %k) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf16>, tensor<1x2x8x16xf16>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x32xf32>) {
  // expected-error @+1 {{query, key and value must agree on B, H and Dh}}
  %o, %l = attn.attention @d(%q, %k, %k) : (tensor<1x2x8x16xf32>, tensor<1x2x8x32xf32>, tensor<1x2x8x32xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x9x16xf32>, %v: tensor<1x2x10x16xf32>) {
  // expected-error @+1 {{key and value must have the same length N; found 9 and 10}}
  %o, %l = attn.attention @d(%q, %k, %v) : (tensor<1x2x8x16xf32>, tensor<1x2x9x16xf32>, tensor<1x2x10x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{result 'lse' must be f32 [B, H, N] matching the query}}
  %o, %l = attn.attention @d(%q, %q, %q) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x7xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{result 'out' must have the query's type}}
  %o, %l = attn.attention @d(%q, %q, %q) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<2x2x8x16xf32>, %len: tensor<3xi32>) {
  // expected-error @+1 {{lengths must be i32 [B]}}
  %o, %l = attn.attention @d(%q, %q, %q) lengths(%len) : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<3xi32>) -> (tensor<2x2x8x16xf32>, tensor<2x2x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{refers to unknown attention variant @missing}}
  %o, %l = attn.attention @missing(%q, %q, %q) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = headwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{low-rank variant @lin needs E}}
  %o, %l = attn.attention @lin(%q, %q, %q) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %e: tensor<4x8xf32>) {
  // expected-error @+1 {{with share = none E must be [H, k, N]}}
  %o, %l = attn.attention @lin(%q, %q, %q) E(%e) F(%e) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = headwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %e: tensor<5x8xf32>) {
  // expected-error @+1 {{E has 5 rows but the variant's k is 4}}
  %o, %l = attn.attention @lin(%q, %q, %q) E(%e) F(%e) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<5x8xf32>, tensor<5x8xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = layerwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %e: tensor<4x8xf32>) {
  // expected-error @+1 {{with share = layerwise only E is given (E = F)}}
  %o, %l = attn.attention @lin(%q, %q, %q) E(%e) F(%e) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = headwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %e: tensor<4x8xf32>) {
  // expected-error @+1 {{with share = headwise F is needed}}
  %o, %l = attn.attention @lin(%q, %q, %q) E(%e) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<4x8xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lin attributes {lowrank = #attn.lowrank<k = 4, share = headwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %e: tensor<4x6xf32>) {
  // expected-error @+1 {{E covers 6 positions, fewer than the key length 8}}
  %o, %l = attn.attention @lin(%q, %q, %q) E(%e) F(%e) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<4x6xf32>, tensor<4x6xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %e: tensor<4x8xf32>) {
  // expected-error @+1 {{E/F given to non-low-rank variant @d}}
  %o, %l = attn.attention @d(%q, %q, %q) E(%e) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<4x8xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lsh attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{shared-QK variant @lsh takes the query as its key operand}}
  %o, %l = attn.attention @lsh(%q, %k, %k) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @lsh attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %r: tensor<2x16x8xf32>) {
  // expected-error @+1 {{rotations must be f32 [rounds, Dh, buckets/2]}}
  %o, %l = attn.attention @lsh(%q, %q, %q) rotations(%r) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<2x16x8xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @d attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @f(%q: tensor<1x2x8x16xf32>, %r: tensor<2x16x4xf32>) {
  // expected-error @+1 {{rotations given to non-LSH variant @d}}
  %o, %l = attn.attention @d(%q, %q, %q) rotations(%r) : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<2x16x4xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

attn.variant @a attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @+1 {{train: unknown setting 'momentum'}}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, train = {momentum = 9.000000e-01 : f64}, vocab = 256 : i64} {
  attn.layer @a
}

// -----

attn.variant @a attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @+1 {{train: warmup must be an i64}}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, train = {warmup = 3.000000e+00 : f64}, vocab = 256 : i64} {
  attn.layer @a
}

// -----

attn.variant @a attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// expected-error @+1 {{train: batch must be in [1, 65536], found 0}}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, train = {batch = 0 : i64}, vocab = 256 : i64} {
  attn.layer @a
}
