// RUN: attnc-opt %s --pass-pipeline="builtin.module(attn-expand-lsh,attn-lower-attention,attn-fuse-attention,attn-fuse-lsh,func.func(attn-derive-backward),attn-tile)" | attnc-translate --emit-cuda-kernels | FileCheck %s
// RUN: sed s/f16/f32/g %s | attnc-opt --pass-pipeline="builtin.module(attn-expand-lsh,attn-lower-attention,attn-fuse-attention,attn-fuse-lsh,func.func(attn-derive-backward),attn-tile{target=cpu})" | attnc-translate --emit-cpp-kernels | FileCheck %s --check-prefix=CPP
// RUN: attnc-opt %s --pass-pipeline="builtin.module(attn-expand-lsh,attn-lower-attention,attn-fuse-attention,attn-fuse-lsh,func.func(attn-derive-backward),attn-tile)" | attnc-translate --emit-kernel-manifest | FileCheck %s --check-prefix=MANIFEST
// RUN: sed s/f16/f32/g %s | attnc-opt --pass-pipeline="builtin.module(attn-expand-lsh,attn-lower-attention,attn-fuse-attention,attn-fuse-lsh,func.func(attn-derive-backward),attn-tile)" | attnc-translate --emit-cuda-kernels | FileCheck %s --check-prefix=F32

// LSH attention with a constant per-head bias and a window mask, forward
// and backward, and a short input that takes the dense fallback.
attn.variant @lsh attributes {causal, key_padding, lsh = #attn.lsh<buckets = 16, rounds = 4, chunk = 32, before = 1, after = 0, seed = 5, dense_fallback = true>, params = [#attn.param<"slope" = alibi, fixed>], shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>} score {
^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
  %sl = attn.head_param "slope"[%h] : f32
  %r = arith.subf %s, %sl : f32
  attn.yield %r : f32
} mask {
^bb0(%b: index, %h: index, %q: index, %kv: index):
  %c = arith.constant 100 : index
  %d = arith.subi %q, %kv : index
  %w = arith.cmpi slt, %d, %c : index
  attn.yield %w : i1
}
attn.variant @short attributes {causal, lsh = #attn.lsh<buckets = 8, rounds = 2, chunk = 64, before = 1, after = 0, seed = 0, dense_fallback = true>, shared_qk, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// CHECK: #include "attnc/attention.cuh"
// CHECK: // lsh0_f16_d64: forward, f16, head dim 64, kv lsh buckets 16 rounds 4 chunk 32 window -1/+0, tile 32x32 warps 4 stages 1
// CHECK: struct Variant_lsh0_f16_d64 {
// CHECK-NEXT: static constexpr bool kCausal = true;
// CHECK-NEXT: static constexpr bool kKeyPadding = true;
// CHECK-NEXT: static constexpr bool kHasScoreMod = true;
// CHECK-NEXT: static constexpr bool kHasMask = true;
// CHECK-NEXT: static constexpr int kNumParams = 1;
// CHECK: extern "C" __global__ void __launch_bounds__(128, 1) attnc_lsh_hash_lsh0_f16_d64(attnc::AttnLshArgs a) {
// CHECK-NEXT: attnc::lsh_hash<32, 1, 0, 64, 32, 32, 4, __half, Variant_lsh0_f16_d64>(a);
// The multi-block sort: offsets per (b, h, round), then the scatter per tile.
// CHECK: extern "C" __global__ void __launch_bounds__(128, 1) attnc_lsh_sort_offsets_lsh0_f16_d64(attnc::AttnLshArgs a) {
// CHECK-NEXT: attnc::lsh_sort_offsets<32, 1, 0, 64, 32, 32, 4, __half, Variant_lsh0_f16_d64>(a);
// CHECK: attnc_lsh_sort_scatter_lsh0_f16_d64(attnc::AttnLshArgs a) {
// CHECK-NEXT: attnc::lsh_sort_scatter<32, 1, 0, 64, 32, 32, 4, __half, Variant_lsh0_f16_d64>(a);
// The fp16 forward runs on tensor cores with its own tile (LshTileModel.h
// lshMmaFwdTile: 16 query rows per warp, 32 x 32 in a chunk of 32).
// CHECK: extern "C" __global__ void __launch_bounds__(64, 1) attnc_lsh_fwd_lsh0_f16_d64(attnc::AttnLshArgs a) {
// CHECK-NEXT: attnc::lsh_fwd_mma<32, 1, 0, 64, 32, 32, 2, __half, Variant_lsh0_f16_d64>(a);
// CHECK: attnc_lsh_combine_lsh0_f16_d64(attnc::AttnLshArgs a) {
// CHECK: // lsh_bwd1_f16_d64: backward
// CHECK: attnc_lsh_hash_lsh_bwd1_f16_d64(
// CHECK: attnc_lsh_sort_offsets_lsh_bwd1_f16_d64(
// CHECK: attnc_lsh_sort_scatter_lsh_bwd1_f16_d64(
// CHECK: attnc_lsh_bwd_preprocess_lsh_bwd1_f16_d64(
// CHECK: attnc_lsh_bwd_dq_lsh_bwd1_f16_d64(
// CHECK-NEXT: attnc::lsh_bwd_dq_mma<32, 1, 0, 64, 32, 32, 2, __half, Variant_lsh_bwd1_f16_d64>(a);
// CHECK: attnc_lsh_bwd_dkdv_lsh_bwd1_f16_d64(
// CHECK-NEXT: attnc::lsh_bwd_dkdv_mma<32, 1, 0, 64, 32, 32, 2, __half, Variant_lsh_bwd1_f16_d64>(a);
// CHECK: attnc_lsh_bwd_combine_lsh_bwd1_f16_d64(
// The dense fallback: shared-QK flash kernels whose score is the self score
// on the diagonal, with the normalisation kernels around them.
// CHECK: // attn2_f16_d32: forward, f16, head dim 32, kv direct, shared QK
// CHECK: struct Variant_attn2_f16_d32 {
// CHECK: static constexpr bool kHasScoreMod = true;
// CHECK: ATTNC_HD static float score(
// CHECK-NEXT: (void)b;
// CHECK-NEXT: if (q == kv)
// CHECK-NEXT: return -1.000000000e+05f; // self score
// CHECK-NEXT: return s;
// CHECK: ATTNC_HD static float score_grad(
// CHECK-NEXT: (void)s;
// CHECK-NEXT: if (q == kv) {
// CHECK-NEXT: return 0.0f;
// CHECK: attnc_shared_qk_normalise_attn2_f16_d32(attnc::SharedQkArgs a) {
// CHECK-NEXT: attnc::shared_qk_normalise<32, ATTNC_TILE_WARPS(ATTNC_TILE_attn2_f16_d32), __half>(a);
// CHECK: attnc_fwd_attn2_f16_d32(attnc::AttnFwdArgs a)
// CHECK: attnc_shared_qk_normalise_attn_bwd3_f16_d32(
// CHECK: attnc_shared_qk_fold_dk_attn_bwd3_f16_d32(
// CHECK: attnc_bwd_preprocess_attn_bwd3_f16_d32(

// CPP: #include "attnc/attention.h"
// CPP: extern "C" int attnc_cpu_lsh_fwd_lsh0_f32_d64(const attnc::AttnLshArgs *a) {
// CPP-NEXT: return attnc::cpu::lsh_fwd<32, 1, 0, 64, Variant_lsh0_f32_d64>(*a);
// CPP: extern "C" int attnc_cpu_lsh_bwd_lsh_bwd1_f32_d64(const attnc::AttnLshArgs *a) {
// CPP-NEXT: return attnc::cpu::lsh_bwd<32, 1, 0, 64, Variant_lsh_bwd1_f32_d64>(*a);
// CPP: extern "C" int attnc_cpu_fwd_attn2_f32_d32(const attnc::AttnFwdArgs *a) {
// CPP-NEXT: return attnc::cpu::shared_qk_fwd<64, 64, 32, Variant_attn2_f32_d32>(*a);
// CPP: extern "C" int attnc_cpu_bwd_attn_bwd3_f32_d32(const attnc::AttnBwdArgs *a) {
// CPP-NEXT: return attnc::cpu::shared_qk_bwd<64, 64, 32, Variant_attn_bwd3_f32_d32>(*a);

// MANIFEST: "kv_source": "lsh"
// MANIFEST: "lsh": {
// MANIFEST-NEXT: "after": 0,
// MANIFEST-NEXT: "before": 1,
// MANIFEST-NEXT: "chunk": 32,
// MANIFEST-NEXT: "num_buckets": 16,
// MANIFEST-NEXT: "rounds": 4,
// MANIFEST-NEXT: "seed": 5
// MANIFEST: "name": "lsh0_f16_d64"
// MANIFEST: "shared_qk": true
// MANIFEST: "name": "attn2_f16_d32"
// MANIFEST: "self_score": -100000
// MANIFEST: "shared_qk": true
func.func @lsh_attention(%q: tensor<2x4x256x64xf16>, %v: tensor<2x4x256x64xf16>, %len: tensor<2xi32>, %rot: tensor<4x64x8xf32>, %p: tensor<1x4xf32>) -> (tensor<2x4x256x64xf16>, tensor<2x4x256xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @lsh(%q, %q, %v) lengths(%len) rotations(%rot) params(%p) : (tensor<2x4x256x64xf16>, tensor<2x4x256x64xf16>, tensor<2x4x256x64xf16>, tensor<2xi32>, tensor<4x64x8xf32>, tensor<1x4xf32>) -> (tensor<2x4x256x64xf16>, tensor<2x4x256xf32>)
  return %o, %lse : tensor<2x4x256x64xf16>, tensor<2x4x256xf32>
}
func.func @short_attention(%q: tensor<1x2x50x32xf16>, %v: tensor<1x2x50x32xf16>, %rot: tensor<2x32x4xf32>) -> (tensor<1x2x50x32xf16>, tensor<1x2x50xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @short(%q, %q, %v) rotations(%rot) : (tensor<1x2x50x32xf16>, tensor<1x2x50x32xf16>, tensor<1x2x50x32xf16>, tensor<2x32x4xf32>) -> (tensor<1x2x50x32xf16>, tensor<1x2x50xf32>)
  return %o, %lse : tensor<1x2x50x32xf16>, tensor<1x2x50xf32>
}

// fp32 keeps the SIMT forward, at the op's tile.
// F32: extern "C" __global__ void __launch_bounds__(128, 1) attnc_lsh_fwd_lsh0_f32_d64(attnc::AttnLshArgs a) {
// F32-NEXT: attnc::lsh_fwd<32, 1, 0, 64, 32, 32, 4, float, Variant_lsh0_f32_d64>(a);
// F32: attnc_lsh_bwd_dq_lsh_bwd1_f32_d64(attnc::AttnLshArgs a) {
// F32-NEXT: attnc::lsh_bwd_dq<32, 1, 0, 64, 32, 32, 4, float, Variant_lsh_bwd1_f32_d64>(a);
