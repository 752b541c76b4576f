// RUN: attnc-opt %s -split-input-file --attn-resolve-tunables | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-resolve-tunables="seq=100 report=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT

// k = min(256, seq of the smallest model using the variant); the ffn chunk
// min(seq, 128); tiles stay auto (attn-tile decides them per target).
// CHECK-LABEL: attn.variant @lin
// CHECK-SAME: lowrank = #attn.lowrank<k = 64, share = layerwise>
// CHECK-SAME: tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>
// CHECK: attn.layer @lin ffn(gelu, chunk = 64)
// CHECK: attn.layer @lin ffn(gelu, chunk = 128)
// REPORT: remark: low-rank k = auto resolved to 64 (heuristic)
// REPORT-NOT: remark: tile
attn.variant @lin attributes {lowrank = #attn.lowrank<k = auto, share = layerwise>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
attn.model @small dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 64 : i64, vocab = 256 : i64} {
  attn.layer @lin ffn(gelu, chunk = auto)
}
attn.model @big dtype fp32 objective mlm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 4096 : i64, vocab = 256 : i64} {
  attn.layer @lin ffn(gelu, chunk = auto)
}

// -----

// Fixed values are kept; LSH buckets ≈ 2·seq/chunk (even), rounds 4.
// CHECK-LABEL: attn.variant @lsh
// CHECK-SAME: lsh = #attn.lsh<buckets = 32, rounds = 4, chunk = 64, before = 1, after = 0, seed = 3, dense_fallback = true>
// CHECK-SAME: tile = #attn.tile<block_q = 32, block_kv = auto, warps = 8, stages = auto>
// REPORT: remark: LSH rounds = auto resolved to 4 (heuristic)
// REPORT: remark: LSH buckets = auto resolved to 32 (heuristic)
attn.variant @lsh attributes {shared_qk, causal, lsh = #attn.lsh<buckets = auto, rounds = auto, chunk = 64, before = 1, after = 0, seed = 3, dense_fallback = true>, tile = #attn.tile<block_q = 32, block_kv = auto, warps = 8, stages = auto>}
attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 64 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 1024 : i64, vocab = 256 : i64} {
  attn.layer reversible @lsh ffn(gelu, chunk = 256)
}

// -----

// A variant no model uses takes the `seq` option (default 4096).
// CHECK-LABEL: attn.variant @unused
// CHECK-SAME: #attn.lowrank<k = 256, share = none>
// REPORT: remark: low-rank k = auto resolved to 100 (heuristic)
attn.variant @unused attributes {lowrank = #attn.lowrank<k = auto, share = none>, tile = #attn.tile<block_q = 16, block_kv = 16, warps = 1, stages = 1>}
