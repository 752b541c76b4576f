//===- Passes.td - attnc pass definitions ------------------*- tablegen -*-===//
#ifndef ATTNC_PASSES_TD
#define ATTNC_PASSES_TD

include "mlir/Pass/PassBase.td"

def ResolveTunables : Pass<"attn-resolve-tunables", "::mlir::ModuleOp"> {
  let summary = "Replace `auto` tunables with heuristic defaults";
  let description = [{
    Every model-level tunable a spec leaves as `auto` (low-rank `k`, LSH
    buckets, rounds and chunk, feed-forward chunk) is replaced by a heuristic
    value, so that later passes see only numbers. Tile sizes stay `auto`
    here: `attn-tile` picks them, knowing the dtype, head dim and target. The tuner's database takes
    precedence once `attnc tune` has run; this pass is the fallback, and with
    `report` it emits one remark per decision so users see what was chosen.

    Heuristics: `k = min(256, seq)`; LSH `chunk = 64`, `rounds = 4`,
    `buckets` = the even number nearest `2·seq/chunk` (at least 2), as in
    the Reformer paper; feed-forward `chunk = min(seq, 128)`. `seq` is the smallest sequence length of the
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

def LowerAttention : Pass<"attn-lower-attention", "::mlir::ModuleOp"> {
  let summary = "Lower attn.attention to tensor-level scores, masks, softmax and sums";
  let description = [{
    Expands each dense or low-rank `attn.attention` into the textbook chain
    the semantics are written in: (low-rank: `attn.seq_project` of K by E and
    of V by F, or by E for `kv`/`layerwise` sharing, with key padding applied
    before projecting), `attn.scores` (scale = the variant's, else
    1/sqrt(D)), `attn.score_mod` when the variant has a score region,
    `attn.mask` when it is causal, has key padding or a mask region,
    `attn.softmax` and `attn.weighted_sum`. LSH variants are left alone (their
    own passes expand them).

    Before:
    ```mlir
    %o, %lse = attn.attention @causal(%q, %k, %v) : (...) -> (...)
    ```
    After:
    ```mlir
    %s = attn.scores %q, %k {scale = 0.125 : f64} : ...
    %m = attn.mask @causal %s : ...
    %p, %lse = attn.softmax %m : ...
    %o = attn.weighted_sum %p, %v : ...
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
}

def LowRankOrder : Pass<"attn-lowrank-order", "::mlir::ModuleOp"> {
  let summary = "Choose to project before or after the K/V linear map, by FLOPs";
  let description = [{
    `E·(X·W) = (E·X)·W`: when the projected tensor comes from an
    `attn.linear` used only there and the projection is shared by heads, the
    pass compares `2·B·N·C·HD + 2·B·H·k·N·D` (map first) with
    `2·B·k·N·C + 2·B·k·C·HD` (project first), rewrites to the cheaper order
    and records it as `order = "before"` or `"after"` on the
    `attn.seq_project`; a projection of K/V given directly is `"after"`.
    With `report`, a remark gives both FLOP counts. Slicing `E[:, :N]` for
    shorter inputs is part of `attn.seq_project`'s semantics and sharing was
    applied by `attn-lower-attention`.

    Before (k = 64, N = 1024):
    ```mlir
    %k = attn.linear %x, %wk : (tensor<1x1024x128xf32>, tensor<128x128xf32>) -> tensor<1x2x1024x64xf32>
    %kp = attn.seq_project %e, %k : (tensor<64x1024xf32>, tensor<1x2x1024x64xf32>) -> tensor<1x2x64x64xf32>
    ```
    After:
    ```mlir
    %ex = attn.seq_project %e, %x {order = "before"} : (tensor<64x1024xf32>, tensor<1x1024x128xf32>) -> tensor<1x64x128xf32>
    %kp = attn.linear %ex, %wk : (tensor<1x64x128xf32>, tensor<128x128xf32>) -> tensor<1x2x64x64xf32>
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "emit a remark with both FLOP counts for every decision">,
  ];
}

def ExpandLsh : Pass<"attn-expand-lsh", "::mlir::ModuleOp"> {
  let summary = "Expand LSH attn.attention into hash → sort → chunk attention → unsort → combine";
  let description = [{
    Writes each LSH `attn.attention` as the steps of its semantics
    (docs/kernels.md "LSH kernels"): `attn.lsh_normalize` (shared-QK keys),
    `attn.lsh_hash`, `attn.lsh_sort` (counting sort, padded to whole
    chunks), `attn.lsh_chunk_attention` (sorted order), `attn.lsh_unsort`
    and `attn.lsh_combine`. When ceil(N/chunk) ≤ min(before, after) + 1
    every query sees every key, so unless the variant sets
    `dense_fallback = false` it emits dense attention instead
    (`attn.scores` of the query against its normalised self,
    `attn.score_mod`, `attn.self_score`, `attn.mask`, `attn.softmax`,
    `attn.weighted_sum`) and, with `report`, says so in a remark.

    Before:
    ```mlir
    %o, %lse = attn.attention @lsh(%q, %q, %v) rotations(%rot) : (...) -> (...)
    ```
    After:
    ```mlir
    %k = attn.lsh_normalize %q : ...
    %b = attn.lsh_hash %q, %rot {num_buckets = 8 : i64} : ...
    %perm = attn.lsh_sort %b {chunk = 16 : i64, num_buckets = 8 : i64} : ...
    %so, %sl = attn.lsh_chunk_attention @lsh %q, %k, %v, %perm {...} : ...
    %uo, %ul = attn.lsh_unsort %so, %sl, %perm : ...
    %o, %lse = attn.lsh_combine %uo, %ul : ...
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark when the dense fallback is taken">,
  ];
}

def FuseLsh : Pass<"attn-fuse-lsh", "::mlir::ModuleOp"> {
  let summary = "Fuse the LSH chain into one attn.fused_lsh_attention kernel op";
  let description = [{
    Matches `lsh_normalize → lsh_hash → lsh_sort → lsh_chunk_attention →
    lsh_unsort → lsh_combine` (intermediates used only inside the chain) and
    replaces it with `attn.fused_lsh_attention`, carrying the bucket count,
    rounds, chunk, window, scale, masks, the variant's score/mask regions and
    its tile config. Its kernels: hash + counting sort, chunk attention with
    the gather in the prologue and the unsort in the epilogue, and the round
    combination.

    After:
    ```mlir
    %out, %lse = attn.fused_lsh_attention %q, %v, %rot attributes {after = 0 : i64, before = 1 : i64,
        causal, chunk = 16 : i64, num_buckets = 8 : i64, rounds = 2 : i64, scale = 1.0 : f64,
        tile = #attn.tile<...>} : (...) -> (...)
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
}

def FuseAttention : Pass<"attn-fuse-attention", "::mlir::ModuleOp"> {
  let summary = "Fuse scores → score_mod → mask → softmax → weighted_sum into one kernel op";
  let description = [{
    Matches the tensor-level chain ending in `attn.weighted_sum` (each
    intermediate used only inside the chain; `lse` may be used anywhere) and
    replaces it with one `attn.fused_attention` whose `score` and `mask`
    regions are cloned from the variant. When K and V come from
    `attn.seq_project` the fused op gets `kv_source = lowrank` with E and F
    as operands and `share` derived from them (`none` for per-head `[H, k, N]`
    projections, `kv` when K and V share one matrix, else `headwise`), and the
    projections' key padding becomes the op's `lengths`.

    Before: the output of `attn-lower-attention`. After:
    ```mlir
    %o, %lse = attn.fused_attention %q, %k, %v attributes {causal, kv_source = direct,
        scale = 0.125 : f64, tile = #attn.tile<block_q = auto, ...>} : (...) -> (...)
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
}

def KeyBand : Pass<"attn-key-band", "::mlir::ModuleOp"> {
  let summary = "Bound the keys each query can keep from the mask region (block skipping)";
  let description = [{
    Proves, from the `mask` region of each `attn.fused_attention` and
    `attn.fused_attention_grad`, that keys outside a band around the query
    are masked for every row, and records the band as `max_back` (every key
    with `q - kv > max_back` is masked) and `max_ahead` (every key with
    `kv - q > max_ahead` is masked). The kernels then skip whole key blocks
    (forward, dQ) and query blocks (dK/dV) outside the band, as
    FlexAttention's block masks do, instead of computing and masking them:
    a sliding window of W keys over N costs O(N·W), not O(N²).

    The proof is syntactic and sound: the mask's yielded value is split
    into conjuncts (`arith.andi`); each conjunct that is a signed `arith.cmpi`
    of two expressions linear in `q` and `kv` (built from `addi`, `subi`,
    `muli` by a constant, constants and `index_cast`) whose difference is
    `±(q - kv) + c` gives a bound. Anything else (an `ori`, an unsigned
    comparison, a bound through a per-head value) gives none, and the op is
    left as it was. Low-rank kernels (whose keys are projections, not
    positions) and LSH chunk kernels are not touched; `causal` stays its own
    attribute.

    Before:
    ```mlir
    attn.fused_attention direct ... mask {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %d = arith.subi %q, %kv : index
      %c256 = arith.constant 256 : index
      %keep = arith.cmpi slt, %d, %c256 : index
      attn.yield %keep : i1
    }
    ```
    After: the same op with `max_back = 255 : i64`.
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "emit a remark with the band found (or why none was)">,
  ];
}

def TileAttention : Pass<"attn-tile", "::mlir::ModuleOp"> {
  let summary = "Give every fused kernel a tile config that fits the target";
  let description = [{
    Fills the `auto` fields of each fused op's `tile` with the default for its
    element type, head dim and target (`codegen/TileModel.h`, or the tuning
    database later), then checks the result against the target's limits:
    supported head dims, threads per block, shared memory per block for the
    arch (forward and backward footprints). A config that cannot fit is an
    error naming the config, the footprint and the limit. Also names each
    kernel (`kernel = "<variant>_<dtype>_d<D>_<n>"`) for the emitters.

    Before:
    ```mlir
    ... tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto> ...
    ```
    After (f16, D = 64, sm_80):
    ```mlir
    ... kernel = "fused0_f16_d64", tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 2> ...
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cuda\"",
           "cuda or cpu">,
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_80\"",
           "CUDA architecture whose limits apply (sm_75 or newer)">,
  ];
}

def DeriveBackward : Pass<"attn-derive-backward", "::mlir::func::FuncOp"> {
  let summary = "Derive the backward kernels of a function marked attn.differentiate";
  let description = [{
    Reverse-mode differentiation over fused attention ops. For a function
    with the unit attribute `attn.differentiate`, every returned `out` of an
    `attn.fused_attention` gets a cotangent argument appended (`dout`), an
    `attn.fused_attention_grad` is inserted (FlashAttention-2 style,
    recomputing probabilities from the saved `lse`), and the gradients of
    the function arguments feeding Q, K, V, E, F and the per-head params are
    appended to the results, in argument order. `deterministic` (default on)
    selects the kernels without floating-point atomics.

    Before:
    ```mlir
    func.func @f(%q: T, %k: T, %v: T) -> (T, L) attributes {attn.differentiate} {
      %o, %lse = attn.fused_attention %q, %k, %v ...
      return %o, %lse : T, L
    }
    ```
    After:
    ```mlir
    func.func @f(%q: T, %k: T, %v: T, %dout: T) -> (T, L, T, T, T) {
      %o, %lse = attn.fused_attention %q, %k, %v ...
      %dq, %dk, %dv = attn.fused_attention_grad %q, %k, %v, %o, %lse, %dout ...
      return %o, %lse, %dq, %dk, %dv : T, L, T, T, T
    }
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"deterministic", "deterministic", "bool", /*default=*/"true",
           "use the schedule without floating-point atomics">,
  ];
}

#endif // ATTNC_PASSES_TD
