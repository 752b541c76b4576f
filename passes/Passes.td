//===- Passes.td - attnc pass definitions ------------------*- tablegen -*-===//
#ifndef ATTNC_PASSES_TD
#define ATTNC_PASSES_TD

include "mlir/Pass/PassBase.td"

def ResolveTunables : Pass<"attn-resolve-tunables", "::mlir::ModuleOp"> {
  let summary = "Replace `auto` tunables with heuristic defaults";
  let description = [{
    Every tunable a spec leaves as `auto` (low-rank `k`, LSH buckets, rounds
    and chunk, tile sizes, feed-forward chunk) is replaced by a heuristic
    value, so that later passes see only numbers. The tuner's database takes
    precedence once `attnc tune` has run; this pass is the fallback, and with
    `report` it emits one remark per decision so users see what was chosen.

    Heuristics: `k = min(256, seq)`; LSH `chunk = 64`, `rounds = 4`,
    `buckets` = the even number nearest `2·seq/chunk` (at least 2), as in
    the Reformer paper; tiles `64×64`, 4 warps, 2 stages; feed-forward
    `chunk = min(seq, 128)`. `seq` is the smallest sequence length of the
    models using the variant, or the `seq` option for unused variants.

    Before:
    ```mlir
    attn.variant @lin attributes {lowrank = #attn.lowrank<k = auto, share = none>, ...}
    ```
    After (used by a model with seq = 128):
    ```mlir
    attn.variant @lin attributes {lowrank = #attn.lowrank<k = 128, share = none>, ...}
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
  let options = [
    Option<"defaultSeq", "seq", "int64_t", /*default=*/"4096",
           "sequence length assumed for variants no model uses">,
    Option<"report", "report", "bool", /*default=*/"false",
           "emit a remark for every value chosen">,
  ];
}

#endif // ATTNC_PASSES_TD
