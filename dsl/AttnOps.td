//===- AttnOps.td - Operations of the attn dialect ---------*- tablegen -*-===//
#ifndef ATTNC_ATTN_OPS_TD
#define ATTNC_ATTN_OPS_TD

include "dsl/AttnDialect.td"
include "dsl/AttnAttrs.td"
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
    `attn.variant` must declare in `params`.

    ```mlir
    %slope = attn.head_param "slope"[%h] : f32
    ```
  }];
  let arguments = (ins StrAttr:$name, Index:$head);
  let results = (outs F32:$result);
  let assemblyFormat = "$name `[` $head `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator, HasParent<"VariantOp">]> {
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

    ```mlir
    attn.model @reformer_tiny dtype fp32 objective causal_lm attributes {
        d_ff = 512 : i64, d_model = 256 : i64, heads = 4 : i64,
        layers = 2 : i64, seq = 1024 : i64, vocab = 256 : i64} {
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
                       OptionalAttr<F64Attr>:$dropout);
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
    sequence chunks of `ffn_chunk` positions (`auto` leaves it to the tuner).
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
                       Optional<AnyRankedTensor>:$rotations);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $variant `(` $query `,` $key `,` $value `)`
    (`lengths` `(` $lengths^ `)`)?
    (`E` `(` $proj_e^ `)`)?
    (`F` `(` $proj_f^ `)`)?
    (`rotations` `(` $rotations^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // ATTNC_ATTN_OPS_TD
