// RUN: attnc-opt %s --pass-pipeline="builtin.module(attn-lower-attention,attn-fuse-attention,func.func(attn-derive-backward),attn-tile)" | attnc-translate --emit-cuda-kernels | FileCheck %s
// RUN: attnc-opt %s --pass-pipeline="builtin.module(attn-lower-attention,attn-fuse-attention,func.func(attn-derive-backward),attn-tile{target=cpu})" | attnc-translate --emit-cpp-kernels | FileCheck %s --check-prefix=CPP
// RUN: attnc-opt %s --pass-pipeline="builtin.module(attn-lower-attention,attn-fuse-attention,func.func(attn-derive-backward),attn-tile)" | attnc-translate --emit-kernel-manifest | FileCheck %s --check-prefix=MANIFEST

// A user variant with a score modifier over two per-head parameters (one
// fixed, one learned) and a window mask, forward and backward.
attn.variant @alibi attributes {causal, key_padding, params = [#attn.param<"slope" = alibi, fixed>, #attn.param<"temp" = 1.0, learned>], tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %sl = attn.head_param "slope"[%h] : f32
  %t = attn.head_param "temp"[%h] : f32
  %st = arith.mulf %s, %t : f32
  %d = arith.subi %q, %kv : index
  %di = arith.index_cast %d : index to i64
  %df = arith.sitofp %di : i64 to f32
  %m = arith.mulf %sl, %df : f32
  %r = arith.subf %st, %m : f32
  attn.yield %r : f32
} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %c = arith.constant 256 : index
  %d = arith.subi %q, %kv : index
  %w = arith.cmpi slt, %d, %c : index
  attn.yield %w : i1
}
func.func @f(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>, %v: tensor<?x4x?x64xf32>, %len: tensor<?xi32>, %p: tensor<2x4xf32>) -> (tensor<?x4x?x64xf32>, tensor<?x4x?xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @alibi(%q, %k, %v) lengths(%len) params(%p) : (tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?xi32>, tensor<2x4xf32>) -> (tensor<?x4x?x64xf32>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x4x?x64xf32>, tensor<?x4x?xf32>
}

// CHECK: #include "attnc/attention.cuh"
// CHECK: ATTNC_HD int attnc_clamp_head(int h, int H)
// CHECK-LABEL: // attn0_f32_d64: forward, f32, head dim 64, kv direct
// CHECK: struct Variant_attn0_f32_d64 {
// CHECK-NEXT: static constexpr bool kCausal = true;
// CHECK-NEXT: static constexpr bool kKeyPadding = true;
// CHECK-NEXT: static constexpr bool kHasScoreMod = true;
// CHECK-NEXT: static constexpr bool kHasMask = true;
// CHECK-NEXT: static constexpr int kNumParams = 2;
// CHECK: ATTNC_HD static float score(float s, int b, int h, int q, int kv, const float *params, int H) {
// CHECK: const float [[SL:v[0-9]+]] = params[0 * H + attnc_clamp_head(h, H)];
// CHECK: const float [[T:v[0-9]+]] = params[1 * H + attnc_clamp_head(h, H)];
// CHECK: const float [[ST:v[0-9]+]] = (s * [[T]]);
// CHECK: const int [[D:v[0-9]+]] = (q - kv);
// Forward-mode derivatives: d/ds = temp, d/dtemp = s, the fixed slope has none.
// CHECK: ATTNC_HD static float score_grad(
// CHECK: const float [[T2:v[0-9]+]]_t2 = 1.0f;
// CHECK: const float [[ST2:v[0-9]+]]_t0 = 1.0f * [[T2]] + s * 0.0f;
// CHECK: dparams[0] = 0.0f;
// CHECK-NEXT: dparams[1] = v{{[0-9]+}}_t2;
// CHECK-NEXT: return v{{[0-9]+}}_t0;
// CHECK: ATTNC_HD static bool keep(int b, int h, int q, int kv, const float *params, int H) {
// CHECK: const int [[C:v[0-9]+]] = 256;
// CHECK: const bool [[W:v[0-9]+]] = ({{v[0-9]+}} < [[C]]);
// CHECK-NEXT: return [[W]];
// The tile is one macro the runtime may define first (re-tiling for its GPU).
// CHECK: #ifndef ATTNC_TILE_attn0_f32_d64
// CHECK-NEXT: #define ATTNC_TILE_attn0_f32_d64 {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}
// CHECK-NEXT: #endif
// CHECK-NEXT: extern "C" __global__ void __launch_bounds__(ATTNC_TILE_THREADS(ATTNC_TILE_attn0_f32_d64), 1) attnc_fwd_attn0_f32_d64(attnc::AttnFwdArgs a) {
// CHECK-NEXT: attnc::flash_fwd<ATTNC_FLASH_ARGS(ATTNC_TILE_attn0_f32_d64, 64, float, Variant_attn0_f32_d64)>(a);
// CHECK-LABEL: // attn_bwd1_f32_d64: backward
// CHECK: attnc_bwd_preprocess_attn_bwd1_f32_d64(attnc::AttnBwdArgs a)
// CHECK: attnc_bwd_dkdv_attn_bwd1_f32_d64(attnc::AttnBwdArgs a)
// CHECK: attnc_bwd_dq_attn_bwd1_f32_d64(attnc::AttnBwdArgs a)
// CHECK: attnc_bwd_dparams_attn_bwd1_f32_d64(attnc::AttnBwdArgs a)

// CPP: #include "attnc/attention.h"
// CPP: struct Variant_attn0_f32_d64 {
// CPP: extern "C" int attnc_cpu_fwd_attn0_f32_d64(const attnc::AttnFwdArgs *a) {
// CPP-NEXT: return attnc::cpu::flash_fwd<64, 64, 64, Variant_attn0_f32_d64>(*a);
// CPP: extern "C" int attnc_cpu_bwd_attn_bwd1_f32_d64(const attnc::AttnBwdArgs *a) {
// CPP-NEXT: return attnc::cpu::flash_bwd<64, 64, 64, Variant_attn_bwd1_f32_d64>(*a);

// MANIFEST: "kernels": [
// MANIFEST: "entry_points": [
// MANIFEST-NEXT: "attnc_fwd_attn0_f32_d64"
// MANIFEST: "kind": "forward",
// MANIFEST: "num_params": 2,
// MANIFEST: "smem_bytes": {{[1-9][0-9]*}},
// MANIFEST: "deterministic": true,
// MANIFEST: "attnc_bwd_dparams_attn_bwd1_f32_d64"
// MANIFEST: "kind": "backward",
