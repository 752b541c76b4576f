// RUN: attnc-opt %s --attn-kernel-pipeline="target=cpu" | FileCheck %s --check-prefix=CPU
// RUN: attnc-opt %s --attn-kernel-pipeline="target=cuda arch=sm_90" | FileCheck %s --check-prefix=SM90
// RUN: attnc-opt %s --attn-kernel-pipeline="target=cpu" | attnc-opt | FileCheck %s --check-prefix=CPU

// The whole kernel pipeline on one differentiable attention function: the
// chain is lowered and fused into one kernel op, the backward derived (the
// function now also returns dq, dk, dv), and both ops tiled for the target.
// CPU-LABEL: func.func @c_attention
// CPU-SAME: attributes {attn.grad_of = [0, 1, 2]}
// CPU: attn.fused_attention direct
// CPU-SAME: causal
// CPU-SAME: tile = #attn.tile<block_q = 64, block_kv = 64, warps = 1, stages = 1>
// CPU: attn.fused_attention_grad direct
// CPU-SAME: deterministic
// CPU-SAME: tile = #attn.tile<block_q = 64, block_kv = 64, warps = 1, stages = 1>
// CPU-NOT: attn.attention
// CPU-NOT: attn.softmax

// On sm_90 fp32 D = 64: the arch's default forward and backward tiles.
// SM90: attn.fused_attention direct
// SM90-SAME: tile = #attn.tile<block_q = 128, block_kv = 128, warps = 8, stages = 2>
// SM90: attn.fused_attention_grad direct
// SM90-SAME: tile = #attn.tile<block_q = 64, block_kv = 64, warps = 8, stages = 2>
attn.variant @c attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
func.func @c_attention(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>, %v: tensor<?x4x?x64xf32>) -> (tensor<?x4x?x64xf32>, tensor<?x4x?xf32>) attributes {attn.differentiate} {
  %o, %lse = attn.attention @c(%q, %k, %v) : (tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>) -> (tensor<?x4x?x64xf32>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x4x?x64xf32>, tensor<?x4x?xf32>
}
