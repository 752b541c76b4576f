// RUN: attnc compile %S/Inputs/apply-tuning.attn --emit=mlir | attnc-opt --attn-resolve-pipeline="db=%S/Inputs/apply-tuning-db.json target=cpu device=cpu:TestCPU:avx2:2cpus toolchain=test-cc" | FileCheck %s
// RUN: attnc compile %S/Inputs/apply-tuning.attn --emit=mlir | attnc-opt --attn-resolve-pipeline | FileCheck %s --check-prefix=HEUR

// attn-apply-tuning's choice (k = 128 from the database), then
// attn-resolve-tunables' heuristics for everything else: no `auto` is left
// but tiles, which attn-tile picks.
// CHECK: attn.variant @la attributes {lowrank = #attn.lowrank<k = 128, share = headwise>
// CHECK: attn.model @gm
// CHECK: ffn(gelu, chunk = 128)
// CHECK-NOT: k = auto

// Without a database, the heuristics alone: k = min(256, seq).
// HEUR: attn.variant @la attributes {lowrank = #attn.lowrank<k = 256, share = headwise>
