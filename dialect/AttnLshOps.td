//===- AttnLshOps.td - Reformer LSH attention ops ----------*- tablegen -*-===//
//
// What an LSH attn.attention expands to (attn-expand-lsh) and the kernel ops
// it is fused into (attn-fuse-lsh). Semantics: docs/kernels.md "LSH kernels".
// Included from AttnOps.td.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ATTN_LSH_OPS_TD
#define ATTNC_ATTN_LSH_OPS_TD

//===----------------------------------------------------------------------===//
// Tensor level
//===----------------------------------------------------------------------===//

def Attn_LshNormalizeOp : Attn_Op<"lsh_normalize", [Pure]> {
  let summary = "shared-QK keys: k_j = q_j / max(|q_j|, 1e-6)";
  let description = [{
    The keys of shared-QK attention, in the query's type (computed in f32).

    ```mlir
    %k = attn.lsh_normalize %q : (tensor<1x2x100x64xf32>) -> tensor<1x2x100x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query);
  let results = (outs AnyRankedTensor:$keys);
  let assemblyFormat = "$query attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_LshHashOp : Attn_Op<"lsh_hash", [Pure]> {
  let summary = "angular LSH bucket of every position, per round";
  let description = [{
    `bucket[b, h, r, j] = argmax([q_j·R_r ; −q_j·R_r])` (first index on ties)
    with `R_r = rotations[r]` (`[Dh, num_buckets/2]`). Result `[B, H, R, N]` i32.

    ```mlir
    %bk = attn.lsh_hash %q, %rot {num_buckets = 8 : i64}
      : (tensor<1x2x100x64xf32>, tensor<4x64x4xf32>) -> tensor<1x2x4x100xi32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$rotations,
                       I64Attr:$num_buckets);
  let results = (outs AnyRankedTensor:$buckets);
  let assemblyFormat = "$query `,` $rotations attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_LshSortOp : Attn_Op<"lsh_sort", [Pure]> {
  let summary = "stable counting sort of positions by bucket, padded to whole chunks";
  let description = [{
    Per (b, h, r): the positions `0…N−1` stably sorted by bucket (ascending
    position within a bucket), followed by `−1` pad slots up to
    `Npad = ceil(N/chunk)·chunk`. Result `[B, H, R, Npad]` i32.

    ```mlir
    %perm = attn.lsh_sort %bk {chunk = 32 : i64, num_buckets = 8 : i64}
      : (tensor<1x2x4x100xi32>) -> tensor<1x2x4x128xi32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$buckets, I64Attr:$num_buckets, I64Attr:$chunk);
  let results = (outs AnyRankedTensor:$perm);
  let assemblyFormat = "$buckets attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_LshChunkAttentionOp : Attn_Op<"lsh_chunk_attention", [Pure, AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "attention within sorted chunks and their neighbours, per round";
  let description = [{
    For every round and sorted slot `t` (chunk `c = t/chunk`) holding query
    position `i = perm[t]`: attention over the key slots of chunks
    `c−before … c+after` (no wrap-around) with the variant's score modifier
    and masks on the *original* positions, the self score `−1e5` and pad
    slots excluded. Results in sorted order: `[B, H, R, Npad, Dh]` and the
    log-sum-exp `[B, H, R, Npad]` (pad slots hold 0 and −inf).

    ```mlir
    %o, %l = attn.lsh_chunk_attention @lsh %q, %k, %v, %perm {after = 0 : i64, before = 1 : i64, chunk = 32 : i64, scale = 1.0 : f64}
      : (...) -> (tensor<1x2x4x128x64xf32>, tensor<1x2x4x128xf32>)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variant, AnyRankedTensor:$query,
                       AnyRankedTensor:$keys, AnyRankedTensor:$value, AnyRankedTensor:$perm,
                       Optional<AnyRankedTensor>:$lengths, Optional<AnyRankedTensor>:$params,
                       I64Attr:$chunk, I64Attr:$before, I64Attr:$after, F64Attr:$scale);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $variant $query `,` $keys `,` $value `,` $perm
    (`lengths` `(` $lengths^ `)`)? (`params` `(` $params^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Attn_LshUnsortOp : Attn_Op<"lsh_unsort", [Pure]> {
  let summary = "scatter each round's sorted results back to the original positions";
  let description = [{
    `out[b, h, r, perm[t]] = sorted[b, h, r, t]` for the non-pad slots `t`;
    `[B, H, R, Npad, Dh]` → `[B, H, R, N, Dh]` and `[B, H, R, Npad]` → `[B, H, R, N]`.

    ```mlir
    %o2, %l2 = attn.lsh_unsort %o, %l, %perm : (...) -> (tensor<1x2x4x100x64xf32>, tensor<1x2x4x100xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$sorted_out, AnyRankedTensor:$sorted_lse,
                       AnyRankedTensor:$perm);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $sorted_out `,` $sorted_lse `,` $perm attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Attn_LshCombineOp : Attn_Op<"lsh_combine", [Pure]> {
  let summary = "combine hash rounds by their log-sum-exp";
  let description = [{
    `lse_i = logsumexp_r lse_ir`, `out_i = Σ_r exp(lse_ir − lse_i)·o_ir`
    (0 and −inf when every round is empty). No duplicate correction.

    ```mlir
    %out, %lse = attn.lsh_combine %o2, %l2 : (...) -> (tensor<1x2x100x64xf32>, tensor<1x2x100xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$round_out, AnyRankedTensor:$round_lse);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = "$round_out `,` $round_lse attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_SelfScoreOp : Attn_Op<"self_score", [Pure]> {
  let summary = "replace the scores of a query with its own key by a constant";
  let description = [{
    `s[b, h, i, i] = value`: shared-QK attention attends to its own position
    only when nothing else is allowed (Reformer uses `−1e5`). Used by the
    dense fallback of LSH attention.

    ```mlir
    %s2 = attn.self_score %s {value = -1.0e+05 : f64} : (tensor<1x2x7x7xf32>) -> tensor<1x2x7x7xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$scores, F64Attr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$scores attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Kernel level
//===----------------------------------------------------------------------===//

def Attn_FusedLshAttentionOp : Attn_FusedOpBase<"fused_lsh_attention", [Pure]> {
  let summary = "LSH attention as three fused kernels: hash+sort, chunk attention, combine";
  let description = [{
    The fused form of the LSH expansion. Kernel 1 hashes every position and
    counting-sorts it into its bucket per (b, h, round) (histogram, prefix
    sum, stable scatter) and writes the normalised keys; kernel 2 gathers the
    sorted Q/K/V rows of a chunk and its neighbours in its prologue and runs
    the tiled online softmax with the self score, causal mask and padding in
    its score function, writing each round's result at the original
    positions (the unsort); kernel 3 combines the rounds. `tile` is the
    chunk kernel's config (`block_q`, `block_kv` divide `chunk`); `seed` is
    the variant's, from which the runtime draws the rotations when the user
    gives none. `dropout` (the variant's) drops attention probabilities
    while training: entry (query i, key j) of round r of head row bh with
    the Philox mask of (bh·rounds + r, i, j), which the backward redraws.

    ```mlir
    %out, %lse = attn.fused_lsh_attention %q, %v, %rot attributes {after = 0 : i64,
        before = 1 : i64, causal, chunk = 32 : i64, num_buckets = 8 : i64, rounds = 4 : i64,
        scale = 1.0 : f64, tile = #attn.tile<block_q = 32, block_kv = 32, warps = 4, stages = 1>}
      : (tensor<1x2x100x64xf32>, tensor<1x2x100x64xf32>, tensor<4x64x4xf32>)
      -> (tensor<1x2x100x64xf32>, tensor<1x2x100xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$value,
                       AnyRankedTensor:$rotations,
                       Optional<AnyRankedTensor>:$lengths,
                       Optional<AnyRankedTensor>:$params,
                       I64Attr:$num_buckets, I64Attr:$rounds, I64Attr:$chunk,
                       I64Attr:$before, I64Attr:$after,
                       F64Attr:$scale,
                       UnitAttr:$causal,
                       UnitAttr:$key_padding,
                       Attn_TileAttr:$tile,
                       OptionalAttr<StrAttr>:$kernel,
                       OptionalAttr<TypedArrayAttrBase<Attn_HeadParamAttr,
                                    "per-head parameters">>:$param_decls,
                       OptionalAttr<I64Attr>:$seed,
                       OptionalAttr<F64Attr>:$dropout);
  let results = (outs AnyRankedTensor:$out, AnyRankedTensor:$lse);
  let assemblyFormat = [{
    $query `,` $value `,` $rotations
    (`lengths` `(` $lengths^ `)`)?
    (`params` `(` $params^ `)`)?
    attr-dict-with-keyword `:` functional-type(operands, results)
    (`score` $score^)? (`mask` $mask^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = commonDecls;
}

def Attn_FusedLshAttentionGradOp : Attn_FusedOpBase<"fused_lsh_attention_grad", [Pure]> {
  let summary = "backward of fused LSH attention, recomputing the hashes";
  let description = [{
    Gradients of `attn.fused_lsh_attention` with respect to the shared Q/K
    (through the key normalisation) and V. Hashes and the sort are recomputed
    from the same rotations; the probabilities are recomputed from the
    combined `lse` (one softmax over the union of the rounds' pairs).
    `deterministic` selects per-round partial gradients summed in round
    order instead of atomics.

    ```mlir
    %dq, %dv = attn.fused_lsh_attention_grad %q, %v, %rot, %out, %lse, %dout attributes {...}
      : (...) -> (tensor<1x2x100x64xf32>, tensor<1x2x100x64xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$value,
                       AnyRankedTensor:$rotations,
                       AnyRankedTensor:$out, AnyRankedTensor:$lse, AnyRankedTensor:$dout,
                       Optional<AnyRankedTensor>:$lengths,
                       Optional<AnyRankedTensor>:$params,
                       I64Attr:$num_buckets, I64Attr:$rounds, I64Attr:$chunk,
                       I64Attr:$before, I64Attr:$after,
                       F64Attr:$scale,
                       UnitAttr:$causal,
                       UnitAttr:$key_padding,
                       UnitAttr:$deterministic,
                       Attn_TileAttr:$tile,
                       OptionalAttr<StrAttr>:$kernel,
                       OptionalAttr<TypedArrayAttrBase<Attn_HeadParamAttr,
                                    "per-head parameters">>:$param_decls,
                       OptionalAttr<F64Attr>:$dropout);
  let results = (outs AnyRankedTensor:$dquery, AnyRankedTensor:$dvalue);
  let assemblyFormat = [{
    $query `,` $value `,` $rotations `,` $out `,` $lse `,` $dout
    (`lengths` `(` $lengths^ `)`)?
    (`params` `(` $params^ `)`)?
    attr-dict-with-keyword `:` functional-type(operands, results)
    (`score` $score^)? (`mask` $mask^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = commonDecls;
}

#endif // ATTNC_ATTN_LSH_OPS_TD
