//===- AttnOps.td - Operations of the attn dialect ---------*- tablegen -*-===//
#ifndef ATTNC_ATTN_OPS_TD
#define ATTNC_ATTN_OPS_TD

include "dialect/AttnDialect.td"
include "dialect/AttnAttrs.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// attn.variant
//===----------------------------------------------------------------------===//

def Attn_VariantOp : Attn_Op<"variant", [Symbol, IsolatedFromAbove,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "an attention variant: K/V source, bucketing, masks and score";
  let description = [{
    Defines one attention variant. Without `lowrank` or `lsh` it is dense
    (exact) attention. The optional `score` region is the score modifier: its
    block takes the scaled score `s : f32` and the batch, head, query and key
    indices `(b, h, q, kv) : index` and yields the new score. The optional
    `mask` region takes `(b, h, q, kv)` and yields `i1` (true keeps the key);
    it is combined with `causal` and `key_padding` by AND. `params` declares
    per-head parameters the score reads with `attn.head_param`.

    ```mlir
    attn.variant @alibi_window attributes {
        params = [#attn.param<"slope" = alibi, fixed>],
        tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
    score {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %slope = attn.head_param "slope"[%h] : f32
      ...
      attn.yield %r : f32
    } mask {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      ...
      attn.yield %keep : i1
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<Attn_LowRankAttr>:$lowrank,
                       OptionalAttr<Attn_LshAttr>:$lsh,
                       UnitAttr:$shared_qk,
                       UnitAttr:$causal,
                       UnitAttr:$key_padding,
                       OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<F64Attr>:$dropout,
                       OptionalAttr<TypedArrayAttrBase<Attn_HeadParamAttr,
                                    "per-head parameters">>:$params,
                       Attn_TileAttr:$tile);
  let regions = (region AnyRegion:$score, AnyRegion:$mask);
  let assemblyFormat = [{
    $sym_name attr-dict-with-keyword (`score` $score^)? (`mask` $mask^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isDense() { return !getLowrank() && !getLsh(); }
    /// The declared per-head parameter called `name`, if any.
    HeadParamAttr lookupParam(::llvm::StringRef name);
  }];
}

def Attn_HeadParamOp : Attn_Op<"head_param", [Pure]> {
  let summary = "read a per-head parameter in a score region";
  let description = [{
    Reads element `head` of the per-head parameter `name`, which the enclosing
    `attn.variant` must declare in `params` (or the enclosing fused kernel op
    in `param_decls`; its position there is its row in the params tensor).

    ```mlir
    %slope = attn.head_param "slope"[%h] : f32
    ```
  }];
  let arguments = (ins StrAttr:$name, Index:$head);
  let results = (outs F32:$result);
  let assemblyFormat = "$name `[` $head `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator,
    ParentOneOf<["VariantOp", "FusedAttentionOp", "FusedAttentionGradOp", "FusedLshAttentionOp", "FusedLshAttentionGradOp"]>]> {
  let summary = "yield the value of a score or mask region";
  let description = [{
    Terminates a `score` region (one `f32`) or a `mask` region (one `i1`).

    ```mlir
    attn.yield %s : f32
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

//===----------------------------------------------------------------------===//
// attn.model and attn.layer
//===----------------------------------------------------------------------===//

def Attn_ModelOp : Attn_Op<"model", [Symbol, SingleBlock, NoTerminator]> {
  let summary = "a byte-level Transformer model built from attention variants";
  let description = [{
    A model's dimensions, compute dtype and training objective. Its body holds
    one `attn.layer`, the template repeated `layers` times. `d_ff` defaults to
    `4·d_model` in the front end; `heads` must divide `d_model`.

    `train`, when present, holds the model's recommended training settings
    (the spec's `train { ... }` block): `lr`, `weight_decay` and `clip` as
    f64, `warmup`, `batch`, `steps` and `eval_every` as i64, each optional and
    range-checked (dialect/TrainBlock.h). attnc train uses them where its
    flags say nothing; the runtime reads them from the artifact's manifest.

    ```mlir
    attn.model @reformer_tiny dtype fp32 objective causal_lm attributes {
        d_ff = 512 : i64, d_model = 256 : i64, heads = 4 : i64,
        layers = 2 : i64, seq = 1024 : i64, vocab = 256 : i64,
        train = {lr = 2.000000e-03 : f64, warmup = 30 : i64}} {
      attn.layer reversible @lsh_attn ffn(gelu, chunk = auto)
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       ConfinedAttr<I64Attr, [IntPositive]>:$vocab,
                       ConfinedAttr<I64Attr, [IntPositive]>:$seq,
                       ConfinedAttr<I64Attr, [IntPositive]>:$d_model,
                       ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$d_ff,
                       ConfinedAttr<I64Attr, [IntPositive]>:$layers,
                       Attn_DType:$dtype,
                       Attn_Objective:$objective,
                       OptionalAttr<F64Attr>:$dropout,
                       OptionalAttr<DictionaryAttr>:$train);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `dtype` $dtype `objective` $objective attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def Attn_LayerOp : Attn_Op<"layer", [HasParent<"ModelOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "one layer of a model: attention then feed-forward";
  let description = [{
    A pre-norm layer applying the attention variant `attention` and, when
    present, a feed-forward block with activation `ffn_act` evaluated over
    sequence chunks of `ffn_chunk` positions (`auto` leaves it to the tuner;
    0, which `attn-apply-tuning` writes when the tuner measured it fastest,
    is all rows at once).
    A `reversible` layer is a RevNet block (Reformer) and needs the ffn.

    ```mlir
    attn.layer reversible @lsh_attn ffn(gelu, chunk = 128)
    attn.layer @dense_attn ffn(relu, chunk = auto)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$attention,
                       UnitAttr:$reversible,
                       OptionalAttr<Attn_Activation>:$ffn_act,
                       OptionalAttr<I64Attr>:$ffn_chunk);
  let assemblyFormat = [{
    (`reversible` $reversible^)? $attention
    (`ffn` `(` $ffn_act^ `,` `chunk` `=` custom<Tunable>($ffn_chunk) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// attn.attention
//===----------------------------------------------------------------------===//

def Attn_AttentionOp : Attn_Op<"attention", [Pure, AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "apply an attention variant to [B, H, N, Dh] tensors";
  let description = [{
    Computes `out = softmax(scale·Q·Kᵀ + masks)·V` as the variant `variant`
    defines it, and the per-row log-sum-exp `lse` (`-inf` for fully masked
    rows, whose output is 0). Optional operands: `lengths` (`[B]` i32 key
    padding lengths), the low-rank projections `E` and `F` (`[k, Nmax]`, or
    `[H, k, Nmax]` with `share = none`; only `E` with `kv` or `layerwise`
    sharing; inputs shorter than `Nmax` use `E[:, :N]`), and the LSH
    rotations (`[rounds, Dh, buckets/2]`). A shared-QK variant takes the
    query as its key operand.

    ```mlir
    %o, %lse = attn.attention @dense(%q, %k, %v)
      : (tensor<2x4x128x64xf32>, tensor<2x4x128x64xf32>, tensor<2x4x128x64xf32>)
      -> (tensor<2x4x128x64xf32>, tensor<2x4x128xf32>)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variant,
                       AnyRankedTensor:$query,
                       AnyRankedTensor:$key,
                       AnyRankedTensor:$value,
                       Optional<AnyRankedTensor>:$lengths,
                       Optional<AnyRankedTensor>:$proj_e,
                       Optional<AnyRankedTensor>:$proj_f,
                       Optional<AnyRankedTensor>:$rotations,
                       Optional<AnyRankedTensor>:$params);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $variant `(` $query `,` $key `,` $value `)`
    (`lengths` `(` $lengths^ `)`)?
    (`E` `(` $proj_e^ `)`)?
    (`F` `(` $proj_f^ `)`)?
    (`rotations` `(` $rotations^ `)`)?
    (`params` `(` $params^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tensor-level attention (what attn.attention lowers to, before fusion)
//===----------------------------------------------------------------------===//

def Attn_SeqProjectOp : Attn_Op<"seq_project", [Pure]> {
  let summary = "project [B, H, N, D] along the sequence with a [k, Nmax] matrix";
  let description = [{
    Linformer's projection: `y[b, h] = P_n · x̃[b, h]` where `P_n = proj[:, :N]`
    (`proj` is `[k, Nmax]`, or `[H, k, Nmax]` when each head has its own) and
    `x̃` is `x` with rows at or past `lengths[b]` zeroed. The result is
    `[B, H, k, D]`; a head-less input `[B, N, C]` (the layer input, when the
    projection was moved before the linear map) gives `[B, k, C]`. `order` records whether the projection was applied after
    the K/V linear map (`after`, the only choice when the op sees K and V) or
    before it (`before`, `(E·X)·W`), as the low-rank pass decided by FLOPs.

    ```mlir
    %kp = attn.seq_project %e, %k : (tensor<256x4096xf32>, tensor<1x8x4096x64xf32>) -> tensor<1x8x256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$proj, AnyRankedTensor:$input,
                       Optional<AnyRankedTensor>:$lengths,
                       OptionalAttr<StrAttr>:$order);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $proj `,` $input (`lengths` `(` $lengths^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Attn_LinearOp : Attn_Op<"linear", [Pure]> {
  let summary = "per-head linear map X·W: [B, N, C] × [C, H·D] → [B, H, N, D]";
  let description = [{
    The Q/K/V projection of a layer, split into heads. The low-rank pass may
    move a sequence projection across it (`E·(X·W) = (E·X)·W`), in which case
    `x` is `[B, k, C]` and the result `[B, H, k, D]`.

    ```mlir
    %k = attn.linear %x, %wk : (tensor<1x4096x512xf32>, tensor<512x512xf32>) -> tensor<1x8x4096x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$weight);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_ScoresOp : Attn_Op<"scores", [Pure]> {
  let summary = "scaled dot-product scores scale·Q·Kᵀ in f32";
  let description = [{
    `s[b, h, i, j] = scale · Σ_d q[b, h, i, d] · k[b, h, j, d]`, accumulated and
    returned in f32: `[B, H, Nq, Nk]`.

    ```mlir
    %s = attn.scores %q, %k {scale = 0.125 : f64} : (tensor<1x2x7x64xf32>, tensor<1x2x7x64xf32>) -> tensor<1x2x7x7xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key, F64Attr:$scale);
  let results = (outs AnyRankedTensor:$scores);
  let assemblyFormat = "$query `,` $key attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_ScoreModOp : Attn_Op<"score_mod", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "apply a variant's score modifier elementwise";
  let description = [{
    Applies the `score` region of `variant` to every score, with the indices
    `(b, h, q, kv)` of the element and the per-head `params` (`[P, H]`).

    ```mlir
    %m = attn.score_mod @alibi %s params(%p) : (tensor<1x2x7x7xf32>, tensor<2x2xf32>) -> tensor<1x2x7x7xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variant, AnyRankedTensor:$scores,
                       Optional<AnyRankedTensor>:$params);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $variant $scores (`params` `(` $params^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Attn_MaskOp : Attn_Op<"mask", [Pure, AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "set excluded scores to -inf (causal, key padding, user mask)";
  let description = [{
    Keeps score `(b, h, i, j)` when the variant's masks allow it: `j ≤ i` if
    the variant is causal, `j < lengths[b]` when `lengths` is given (key
    padding; low-rank lowering passes none, since its keys are projections),
    and its `mask` region; every other score becomes `-inf`.

    ```mlir
    %m = attn.mask @causal %s : (tensor<1x2x7x7xf32>) -> tensor<1x2x7x7xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variant, AnyRankedTensor:$scores,
                       Optional<AnyRankedTensor>:$lengths,
                       Optional<AnyRankedTensor>:$params);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $variant $scores (`lengths` `(` $lengths^ `)`)? (`params` `(` $params^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def Attn_SoftmaxOp : Attn_Op<"softmax", [Pure]> {
  let summary = "row softmax of scores with its log-sum-exp";
  let description = [{
    `p = softmax(s)` over the last axis and `lse = log Σ exp(s)`; a row of only
    `-inf` gives `p = 0` and `lse = -inf`. With `dropout = P` (training),
    each probability is then dropped with probability P and the rest scaled
    by 1/(1 − P); `lse` is the undropped one.

    ```mlir
    %p, %lse = attn.softmax %s : (tensor<1x2x7x7xf32>) -> (tensor<1x2x7x7xf32>, tensor<1x2x7xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$scores, OptionalAttr<F64Attr>:$dropout);
  let results = (outs AnyRankedTensor:$probs, AnyRankedTensor:$lse);
  let assemblyFormat = "$scores attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_WeightedSumOp : Attn_Op<"weighted_sum", [Pure]> {
  let summary = "O = P·V";
  let description = [{
    `o[b, h, i, d] = Σ_j p[b, h, i, j] · v[b, h, j, d]` in the value's type.

    ```mlir
    %o = attn.weighted_sum %p, %v : (tensor<1x2x7x7xf32>, tensor<1x2x7x64xf32>) -> tensor<1x2x7x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$probs, AnyRankedTensor:$value);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = "$probs `,` $value attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kernel level
//===----------------------------------------------------------------------===//

def Attn_KvSource : I32EnumAttr<"KvSource", "where a fused kernel's keys and values come from", [
      I32EnumAttrCase<"direct", 0>, I32EnumAttrCase<"lowrank", 1>]> {
  let cppNamespace = "::attnc::attn";
}

class Attn_FusedOpBase<string mnemonic, list<Trait> traits = []>
    : Attn_Op<mnemonic, !listconcat(traits, [AttrSizedOperandSegments,
        DeclareOpInterfaceMethods<OpAsmOpInterface,
                                  ["getAsmBlockArgumentNames", "getAsmResultNames"]>])> {
  let regions = (region AnyRegion:$score, AnyRegion:$mask);
  code commonDecls = [{
    /// Elements of Q: f32, f16 or bf16.
    ::mlir::Type getElementType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getQuery().getType()).getElementType();
    }
    int64_t getHeadDim() {
      return ::llvm::cast<::mlir::RankedTensorType>(getQuery().getType()).getDimSize(3);
    }
  }];
}

def Attn_FusedAttentionOp : Attn_FusedOpBase<"fused_attention", [Pure]> {
  let summary = "one fused attention kernel (online softmax, tiled)";
  let description = [{
    The fused form of an `attn.attention` chain: scores, score modifier,
    masks, softmax and the weighted sum in one tiled kernel that never
    materialises the `Nq × Nk` scores. `kv_source = lowrank` means K and V
    are first projected by `E`/`F` (`share` says how they are shared; with
    `kv` or `layerwise` only `E` is given), which the runtime runs as GEMMs
    before the kernel. The `score` and `mask` regions are the variant's,
    cloned. `tile` is the kernel's tile config (filled by `attn-tile`);
    `kernel` names the generated entry points. `shared_qk` (the dense
    fallback of LSH attention) means the keys are the normalised queries
    (the key operand is the query) and `self_score` replaces the score of
    a query with its own position. `dropout` (the variant's) drops attention
    probabilities while training, with counter-based masks the backward
    redraws. `max_back` / `max_ahead` (set by `attn-key-band` from the mask
    region) promise that every key with
    `q - kv > max_back` / `kv - q > max_ahead` is masked, so the kernels skip
    whole key blocks outside the band; the mask still decides inside it.

    ```mlir
    %out, %lse = attn.fused_attention direct %q, %k, %v attributes {causal, scale = 0.125 : f64,
        tile = #attn.tile<block_q = 64, block_kv = 64, warps = 4, stages = 2>}
      : (tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>, tensor<2x4x100x64xf32>)
      -> (tensor<2x4x100x64xf32>, tensor<2x4x100xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key, AnyRankedTensor:$value,
                       Optional<AnyRankedTensor>:$lengths,
                       Optional<AnyRankedTensor>:$proj_e,
                       Optional<AnyRankedTensor>:$proj_f,
                       Optional<AnyRankedTensor>:$params,
                       Attn_KvSource:$kv_source,
                       OptionalAttr<Attn_ShareMode>:$share,
                       F64Attr:$scale,
                       UnitAttr:$causal,
                       UnitAttr:$key_padding,
                       UnitAttr:$shared_qk,
                       OptionalAttr<F64Attr>:$self_score,
                       OptionalAttr<I64Attr>:$max_back,
                       OptionalAttr<I64Attr>:$max_ahead,
                       Attn_TileAttr:$tile,
                       OptionalAttr<StrAttr>:$kernel,
                       OptionalAttr<TypedArrayAttrBase<Attn_HeadParamAttr,
                                    "per-head parameters">>:$param_decls,
                       OptionalAttr<F64Attr>:$dropout);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $kv_source (`(` $share^ `)`)? $query `,` $key `,` $value
    (`lengths` `(` $lengths^ `)`)?
    (`E` `(` $proj_e^ `)`)?
    (`F` `(` $proj_f^ `)`)?
    (`params` `(` $params^ `)`)?
    attr-dict-with-keyword `:` functional-type(operands, results)
    (`score` $score^)? (`mask` $mask^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = commonDecls;
}

def Attn_FusedAttentionGradOp : Attn_FusedOpBase<"fused_attention_grad",
    [Pure, AttrSizedResultSegments]> {
  let summary = "backward of a fused attention kernel (FlashAttention-2 style)";
  let description = [{
    Gradients of `attn.fused_attention` with respect to Q, K, V (and E, F for
    low-rank, and the per-head parameters), recomputing the probabilities
    from the saved `lse` instead of storing them. `deterministic` selects the
    schedule without floating-point atomics (separate dK/dV and dQ kernels).

    ```mlir
    %dq, %dk, %dv = attn.fused_attention_grad direct %q, %k, %v, %out, %lse, %dout attributes {deterministic, ...}
      : (...) -> (tensor<...>, tensor<...>, tensor<...>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key, AnyRankedTensor:$value,
                       AnyRankedTensor:$out, AnyRankedTensor:$lse, AnyRankedTensor:$dout,
                       Optional<AnyRankedTensor>:$lengths,
                       Optional<AnyRankedTensor>:$proj_e,
                       Optional<AnyRankedTensor>:$proj_f,
                       Optional<AnyRankedTensor>:$params,
                       Attn_KvSource:$kv_source,
                       OptionalAttr<Attn_ShareMode>:$share,
                       F64Attr:$scale,
                       UnitAttr:$causal,
                       UnitAttr:$key_padding,
                       UnitAttr:$shared_qk,
                       OptionalAttr<F64Attr>:$self_score,
                       UnitAttr:$deterministic,
                       OptionalAttr<I64Attr>:$max_back,
                       OptionalAttr<I64Attr>:$max_ahead,
                       Attn_TileAttr:$tile,
                       OptionalAttr<StrAttr>:$kernel,
                       OptionalAttr<TypedArrayAttrBase<Attn_HeadParamAttr,
                                    "per-head parameters">>:$param_decls,
                       OptionalAttr<F64Attr>:$dropout);
  let results = (outs AnyRankedTensor:$dquery, AnyRankedTensor:$dkey, AnyRankedTensor:$dvalue,
                      Optional<AnyRankedTensor>:$dproj_e,
                      Optional<AnyRankedTensor>:$dproj_f,
                      Optional<AnyRankedTensor>:$dparams);
  let assemblyFormat = [{
    $kv_source (`(` $share^ `)`)? $query `,` $key `,` $value `,` $out `,` $lse `,` $dout
    (`lengths` `(` $lengths^ `)`)?
    (`E` `(` $proj_e^ `)`)?
    (`F` `(` $proj_f^ `)`)?
    (`params` `(` $params^ `)`)?
    attr-dict-with-keyword `:` functional-type(operands, results)
    (`score` $score^)? (`mask` $mask^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = commonDecls;
}

include "dialect/AttnLshOps.td"
include "dialect/AttnGraphOps.td"

#endif // ATTNC_ATTN_OPS_TD
