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

def ApplyTuning : Pass<"attn-apply-tuning", "::mlir::ModuleOp"> {
  let summary = "Give `auto` tunables the choices `attnc tune` measured";
  let description = [{
    The IR half of the tuner (docs/tuning.md). For each model, the attention
    variant of its layers gets what the tuning database `db` holds for the
    model's shape (head dim, sequence length and heads, as a shape bucket)
    wherever the spec left it `auto`:

    - the tile (`target=cpu`: the entry measured on this CPU, `device`, with
      this host compiler, `toolchain`; `target=cuda`: the newest entry of any
      GPU of `arch` with this NVRTC, `cuda-toolchain`); never for LSH on the
      CPU and never over an explicit tile;
    - with `accuracy`, low-rank `k` or LSH rounds and chunk: the choice of
      `attnc tune --max-error` with the tightest error budget measured;
    - (`target=cpu`) the layer's FFN row chunk, from the entry for its
      d_model, d_ff, activation, layer kind and sequence length; a measured
      "all rows at once" is chunk 0.

    The layers, first match wins: a run folder's pinned choices
    (`run-choices`: what `attnc train` chose on the run's first start, kept
    in its `kernel-choices.json` so that a resumed run sums in the same
    order), then the database, then the heuristics. Pins apply to the named
    model's `auto` settings only, like the database's entries; a pinned -1
    is the heuristic's choice, pinned (the database is not consulted for
    it).

    Everything it does not decide stays `auto` for `attn-resolve-tunables`,
    which runs after it (`attn-resolve-pipeline`). A database that cannot be
    read leaves the heuristics in charge. With `report` every choice, and
    every miss in a non-empty database, is a line on stderr ("attnc: ...").
    `device`, `toolchain` and `cuda-toolchain` default to this machine's.

    Before (an entry `bq=32,bkv=64` for @c at d64, n512-bh8):
    ```mlir
    attn.variant @c attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, ...>}
    ```
    After:
    ```mlir
    attn.variant @c attributes {causal, tile = #attn.tile<block_q = 32, block_kv = 64, warps = 1, stages = 1>}
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect"];
  let options = [
    Option<"db", "db", "std::string", /*default=*/"", "the tuning database (JSON)">,
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "whose entries: cpu or cuda">,
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_80\"",
           "cuda: the GPU architecture">,
    Option<"device", "device", "std::string", /*default=*/"",
           "cpu: the device id of the entries (default: this CPU's)">,
    Option<"toolchain", "toolchain", "std::string", /*default=*/"",
           "cpu: the toolchain id of the entries (default: this host compiler's)">,
    Option<"cudaToolchain", "cuda-toolchain", "std::string", /*default=*/"",
           "cuda: the toolchain id of the entries (default: this NVRTC's)">,
    ListOption<"runChoices", "run-choices", "std::string",
               "a run folder's pinned choices, the first layer: model=NAME, then "
               "block_q, block_kv, ffn_chunk, k, lsh_rounds, lsh_chunk as KEY=N">,
    Option<"accuracy", "accuracy", "bool", /*default=*/"true",
           "also low-rank k and LSH rounds / chunk (CPU measurements)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "print every choice and miss on stderr">,
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
    element type, head dim and target (`kernels/abi/attnc/abi/TileModel.h`, or the tuning
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

//===----------------------------------------------------------------------===//
// Whole-model compilation
//===----------------------------------------------------------------------===//

def ExpandModel : Pass<"attn-expand-model", "::mlir::ModuleOp"> {
  let summary = "Expand every attn.model into its training and inference graphs";
  let description = [{
    For each `attn.model` (its tunables resolved), adds
    `func.func @train_<model>(tokens, targets, parameters...) -> loss`: the
    byte embedding plus positions, `layers` copies of the layer template
    (pre-norm standard layers, or RevNet layers whose two streams are
    concatenated before the final norm), the final layer norm, the head and
    the mean cross-entropy, on `batch · seq` flattened rows. Linear maps are
    `attn.matmul` + `attn.bias_add`; attention is an `attn.attention` of the
    layer's variant; the feed-forward block is an `attn.row_chunks` over
    `ffn_chunk` rows when that is smaller than the row count; residual
    dropout is `attn.dropout` keyed by (layer, branch). Every op of layer
    `l` carries `attn.layer = l`, and a reversible layer's two residual sums
    carry `attn.rev = "y1"` / `"y2"` for `attn-derive-model-backward`.

    Arguments carry `attn.input` (tokens, targets) or `attn.param` with the
    training runtime's parameter names; LSH rotations are `attn.constant`.
    Each layer's output and the logits carry `attn.name` (e.g. "the output
    of layer 1"): the generated step checks them for NaN/Inf and names the
    first non-finite one.

    With `infer` (the default) it also adds
    `func.func @infer_<model>(tokens, parameters...) -> logits`, marked
    `attn.inference`: the same forward on `infer-batch` sequences (0: `batch`)
    without residual dropout and without the loss. Evaluation, generation and
    filling run it (the attention kernels see inference mode at run time);
    `attn-derive-model-backward` leaves it alone, `attn-fuse-rows` and
    `attn-plan-memory` treat it like the training function, so its arena is
    the memory plan of inference.

    Before:
    ```mlir
    attn.model @m dtype fp32 objective causal_lm attributes {d_ff = 128 : i64, d_model = 32 : i64, heads = 2 : i64, layers = 1 : i64, seq = 16 : i64, vocab = 256 : i64} {
      attn.layer @dense ffn(gelu, chunk = 8)
    }
    ```
    After (batch = 2; abridged):
    ```mlir
    func.func @train_m(%tokens: tensor<32xi32>, %targets: tensor<32xi32>, %tok_emb: tensor<256x32xf32>, ...) -> tensor<f32> {
      %x = attn.embed %tokens, %tok_emb, %pos_emb ...
      %z, %mean, %rstd = attn.layer_norm %x, %g, %b {attn.layer = 0 : i64} ...
      ...
      %loss, %count = attn.cross_entropy %logits, %targets ...
      return %loss : tensor<f32>
    }
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"batch", "batch", "int64_t", /*default=*/"1", "sequences per training step">,
    Option<"train", "train", "bool", /*default=*/"true", "add @train_<model>">,
    Option<"infer", "infer", "bool", /*default=*/"true", "add @infer_<model>">,
    Option<"inferBatch", "infer-batch", "int64_t", /*default=*/"0",
           "sequences per inference call (0: batch)">,
  ];
}

def DeriveModelBackward : Pass<"attn-derive-model-backward", "::mlir::ModuleOp"> {
  let summary = "Append the backward graph of every @train_<model> function";
  let description = [{
    Reverse-mode differentiation of the forward graph `attn-expand-model`
    wrote: the loss is seeded with 1, each graph op contributes its
    derivative ops (`attn.matmul` gives two transposed GEMMs, `attn.bias_add`
    an `attn.column_sum`, `attn.layer_norm` an `attn.layer_norm_grad` and an
    `attn.layer_norm_param_grad`, `attn.attention` an `attn.attention_grad`,
    `attn.dropout` the same mask on the cotangent, ...), and cotangents of a
    value used twice are summed with `attn.add`. An `attn.row_chunks` body
    is differentiated chunk by chunk in a new `attn.row_chunks` that
    recomputes the chunk, so the chunked feed-forward's backward also keeps
    `chunk × d_ff` intermediates; weight gradients are summed over chunks.

    Reversible layers (their sums tagged `attn.rev`) are not differentiated
    from their stored forward values: the backward clones the FFN branch to
    rebuild `x2 = y2 − FFN(LN(y1))`, the attention branch to rebuild
    `x1 = y1 − Attn(LN(x2))`, and differentiates the clones; the next layer
    down rebuilds from these rebuilt values. No forward activation of a
    reversible layer outlives the forward, so `attn-plan-memory` shows
    activation memory that does not grow with depth. Dropout ops cloned into
    the rebuild replay the forward's masks (counter-based RNG).

    With `recompute-layers`, a standard layer is treated alike: its
    backward differentiates a clone of the layer's forward computed from
    the layer's input, so only layer inputs are kept between the passes
    (activation checkpointing, one more forward per layer).

    The function then returns the loss followed by the gradient of every
    argument marked `attn.param` (not `attn.constant`), and records their
    argument numbers in `attn.grad_of`.

    Before:
    ```mlir
    func.func @train_m(...) -> tensor<f32> attributes {attn.model = @m} {
      ...
      return %loss : tensor<f32>
    }
    ```
    After:
    ```mlir
    func.func @train_m(...) -> (tensor<f32>, tensor<256x32xf32>, ...) attributes {attn.grad_of = [2, 3, ...], attn.model = @m} {
      ...
      %one = attn.constant 1.0 : tensor<f32>
      %dlogits = attn.cross_entropy_grad %logits, %targets, %count, %one ...
      ...
      return %loss, %dtok_emb, ... : ...
    }
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"recomputeLayers", "recompute-layers", "bool", /*default=*/"false",
           "standard layers keep only their inputs and recompute the rest in the backward">,
  ];
}

def FuseRows : Pass<"attn-fuse-rows", "::mlir::ModuleOp"> {
  let summary = "Fuse chains of row-local graph ops into attn.fused_rows kernels";
  let description = [{
    In every `@train_<model>` function, groups producer–consumer chains of
    row-local ops (`attn.embed`, `attn.layer_norm`, `attn.layer_norm_grad`,
    `attn.bias_add`, `attn.add`, `attn.sub`, `attn.activation`,
    `attn.activation_grad`, `attn.dropout`, `attn.concat_cols`,
    `attn.slice_cols`) with the same row count into one `attn.fused_rows`
    op: residual + layer norm, bias + activation, the gradient sums feeding
    a layer norm's backward. Codegen evaluates a group one row at a time, so
    only the values used outside the group are written to memory. An op
    joins the group of one of its producers when no op outside that group
    uses a group value before it; every row-local op ends up in a group
    (possibly of one), so codegen has one path for them. GEMMs, attention,
    reductions over rows and `attn.row_chunks` stay separate kernels; the
    ops inside a chunked body are grouped the same way, per chunk.

    Before:
    ```mlir
    %h = attn.add %x, %a : tensor<32x32xf32>
    %z, %mean, %rstd = attn.layer_norm %h, %g, %b : ...
    ```
    After:
    ```mlir
    %h, %z, %mean, %rstd = attn.fused_rows rows 32 (%x, %a, %g, %b) kernel "rows0" {
    ^bb0(...):
      %h0 = attn.add %x0, %a0 : tensor<32x32xf32>
      %z0, %m0, %r0 = attn.layer_norm %h0, %g0, %b0 : ...
      attn.rows_yield %h0, %z0, %m0, %r0 : ...
    } : (...) -> (...)
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"inChunks", "in-chunks", "bool", /*default=*/"true",
           "group chains inside attn.row_chunks bodies too (off: each op there is a kernel "
           "of its own, to measure what the grouping gains)">,
  ];
}

def PlanMemory : Pass<"attn-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Assign every activation of a @train_<model> function an arena offset";
  let description = [{
    Plans the memory of every function carrying `attn.model` (one block):
    each tensor result of a top-level op is a buffer (function arguments
    belong to the runtime, `attn.constant` scalars are materialised by it,
    and the intermediates inside an `attn.row_chunks` or `attn.fused_rows`
    body are the kernel's own). A buffer takes its element count × element
    width bytes, rounded up to 64, and is live from its defining op to its
    last use among the top-level ops (a use inside a region counts for the
    enclosing op; the returned loss lives to the end; an unused result only
    at its op). Returned gradients (every return operand after the loss) take
    no arena space: the generated step writes them straight into the
    runtime's gradient buffers. An `attn.row_chunks` op also gets a scratch buffer, live only at
    that op, sized by the sum of its body's tensor results (an upper bound).

    Offsets come from the greedy heuristic: buffers by size, largest first
    (ties: earlier definition), each at the lowest 64-byte-aligned offset
    that overlaps no placed buffer live at the same time. The results are
    attributes: `attn.arena_offsets` on every top-level op with results (one
    entry per result, -1 for those not in the arena) and on the ops inside
    an `attn.row_chunks` body (their values laid out one after another in
    the op's scratch), `attn.scratch_offset` and `attn.scratch_bytes` on
    `attn.row_chunks` ops, and on the function
    `attn.arena_bytes`, `attn.peak_live_bytes` (the most bytes live at one op,
    a lower bound on any arena) and `attn.kept_bytes`: the bytes of buffers
    defined before the backward starts (the first `attn.constant`, the loss
    seed `attn-derive-model-backward` inserts) and still live there, 0 for a
    forward-only function. Reversible layers keep that number flat as depth
    grows; standard layers add their activations per layer. `attn.peak_where`
    says at which op the live bytes peak ("layer 0 attention"). With
    `report`, a remark gives the totals.

    Before:
    ```mlir
    func.func @train_m(%x: tensor<16x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> attributes {attn.model = @m} {
      %0 = attn.matmul %x, %w : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
      %1 = attn.bias_add %0, %b : (tensor<16x16xf32>, tensor<16xf32>) -> tensor<16x16xf32>
      %2 = attn.add %1, %x : tensor<16x16xf32>
      return %2 : tensor<16x16xf32>
    }
    ```
    After (%2 reuses the bytes of %0, dead after %1):
    ```mlir
    func.func @train_m(...) -> tensor<16x16xf32> attributes {attn.arena_bytes = 2048 : i64, attn.kept_bytes = 0 : i64, attn.model = @m, attn.peak_live_bytes = 2048 : i64} {
      %0 = attn.matmul %x, %w {attn.arena_offsets = array<i64: 0>} : ...
      %1 = attn.bias_add %0, %b {attn.arena_offsets = array<i64: 1024>} : ...
      %2 = attn.add %1, %x {attn.arena_offsets = array<i64: 0>} : tensor<16x16xf32>
      return %2 : tensor<16x16xf32>
    }
    ```
  }];
  let dependentDialects = ["::attnc::attn::AttnDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "emit a remark with each function's arena, peak live and kept bytes">,
  ];
}

#endif // ATTNC_PASSES_TD
