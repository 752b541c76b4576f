// RUN: attnc-opt %s -split-input-file --pass-pipeline="builtin.module(attn-lower-attention,attn-fuse-attention,func.func(attn-derive-backward),attn-key-band{report=true})" -verify-diagnostics | FileCheck %s
// RUN: attnc-opt %s -split-input-file --pass-pipeline="builtin.module(attn-lower-attention,attn-fuse-attention,attn-key-band)" | FileCheck %s --check-prefix=PLAIN

// A causal sliding window: q - kv < 256 gives max_back = 255, on the forward
// and on the backward op derived from it.
attn.variant @win attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %d = arith.subi %q, %kv : index
  %c = arith.constant 256 : index
  %keep = arith.cmpi slt, %d, %c : index
  attn.yield %keep : i1
}
// CHECK-LABEL: func.func @test_window
// CHECK: attn.fused_attention direct {{.*}}causal{{.*}}max_back = 255 : i64
// CHECK-NOT: max_ahead
// CHECK: attn.fused_attention_grad direct {{.*}}max_back = 255 : i64
// PLAIN-LABEL: func.func @test_window
// PLAIN: attn.fused_attention direct {{.*}}max_back = 255 : i64
func.func @test_window(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) attributes {attn.differentiate} {
  // expected-remark @+1 {{keys kept only where q - kv <= 255: key blocks outside the band are skipped}}
  %o, %lse = attn.attention @win(%q, %k, %v) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}

// -----

// Both sides, written the other way round and through i64 casts, a product
// with a constant and an `and` with an opaque conjunct (which adds no bound
// but does not hide the others): kv >= q - 2*8 and kv - q <= 3.
attn.variant @band attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %w = arith.muli %c2, %c8 : index
  %lo = arith.subi %q, %w : index
  %kv64 = arith.index_cast %kv : index to i64
  %lo64 = arith.index_cast %lo : index to i64
  %back = arith.cmpi sge, %kv64, %lo64 : i64
  %c3 = arith.constant 3 : index
  %ahead = arith.subi %kv, %q : index
  %fwd = arith.cmpi sle, %ahead, %c3 : index
  %c1 = arith.constant 1 : index
  %odd = arith.andi %h, %c1 : index
  %c0 = arith.constant 0 : index
  %head = arith.cmpi eq, %odd, %c0 : index
  %a = arith.andi %back, %fwd : i1
  %keep = arith.andi %a, %head : i1
  attn.yield %keep : i1
}
// CHECK-LABEL: func.func @test_band
// CHECK: attn.fused_attention direct {{.*}}max_ahead = 3 : i64, max_back = 16 : i64
func.func @test_band(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) {
  // expected-remark @+1 {{keys kept only where q - kv <= 16 and kv - q <= 3}}
  %o, %lse = attn.attention @band(%q, %k, %v) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}

// -----

// No bound: an `or` of two windows, an unsigned comparison and a comparison
// of q with itself are all left alone.
attn.variant @none attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %d = arith.subi %q, %kv : index
  %c4 = arith.constant 4 : index
  %near = arith.cmpi slt, %d, %c4 : index
  %c100 = arith.constant 100 : index
  %far = arith.cmpi sgt, %d, %c100 : index
  %either = arith.ori %near, %far : i1
  %u = arith.cmpi ult, %d, %c4 : index
  %self = arith.cmpi sle, %q, %q : index
  %a = arith.andi %either, %u : i1
  %keep = arith.andi %a, %self : i1
  attn.yield %keep : i1
}
// CHECK-LABEL: func.func @test_none
// CHECK-NOT: max_back
// CHECK-NOT: max_ahead
// CHECK: return
func.func @test_none(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) {
  // expected-remark @+1 {{no key band in the mask}}
  %o, %lse = attn.attention @none(%q, %k, %v) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}

// -----

// Low-rank keys are projections, not positions: never banded.
attn.variant @lr attributes {lowrank = #attn.lowrank<k = 4, share = kv>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// CHECK-LABEL: func.func @test_lowrank
// CHECK-NOT: max_back
// CHECK: return
func.func @test_lowrank(%q: tensor<1x2x9x32xf32>, %k: tensor<1x2x9x32xf32>, %v: tensor<1x2x9x32xf32>, %e: tensor<4x16xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>) {
  %o, %lse = attn.attention @lr(%q, %k, %v) E(%e) : (tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<1x2x9x32xf32>, tensor<4x16xf32>) -> (tensor<1x2x9x32xf32>, tensor<1x2x9xf32>)
  return %o, %lse : tensor<1x2x9x32xf32>, tensor<1x2x9xf32>
}
