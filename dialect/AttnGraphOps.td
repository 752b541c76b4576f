//===- AttnGraphOps.td - Whole-model graph operations ------*- tablegen -*-===//
//
// The ops `attn-expand-model` writes a model's training step with, and
// `attn-derive-model-backward` differentiates. Token rows are flattened:
// an activation is `[R, C]` with R = batch · seq rows (row r is position
// r mod seq of sequence r / seq). Every op here is f32 (the CPU runtime's
// compute type); tokens and targets are i32.
//
// Row-local ops (each output row depends only on the same row of the row
// operands, plus whole parameters) can be grouped by `attn-fuse-rows` into
// one `attn.fused_rows` kernel; the others (GEMMs, attention, reductions
// over rows) stay separate kernels.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ATTN_GRAPH_OPS_TD
#define ATTNC_ATTN_GRAPH_OPS_TD

class Attn_GraphOp<string mnemonic, list<Trait> traits = []>
    : Attn_Op<mnemonic, !listconcat(traits, [Pure])>;

def Attn_EmbedOp : Attn_GraphOp<"embed"> {
  let summary = "token plus position embedding of flattened rows";
  let description = [{
    `y[r] = table[tokens[r]] + positions[r mod S]` with `S` the positions'
    row count. Tokens outside the table are the runtime's error to report
    (it checks them before the step).

    ```mlir
    %x = attn.embed %tok, %emb, %pos : (tensor<256xi32>, tensor<256x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$table,
                       AnyRankedTensor:$positions);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$tokens `,` $table `,` $positions attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_EmbedGradOp : Attn_GraphOp<"embed_grad"> {
  let summary = "gradients of the embedding tables (scatter-add, rows in order)";
  let description = [{
    `dtable[t] = Σ_{r: tokens[r] = t} dy[r]` and `dpositions[s] = Σ_{r mod S = s} dy[r]`,
    summed in row order (deterministic, no atomics).

    ```mlir
    %dt, %dp = attn.embed_grad %tok, %dy : (tensor<256xi32>, tensor<256x64xf32>) -> (tensor<256x64xf32>, tensor<128x64xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$dy);
  let results = (outs AnyRankedTensor:$dtable, AnyRankedTensor:$dpositions);
  let assemblyFormat = "$tokens `,` $dy attr-dict `:` functional-type(operands, results)";
}

def Attn_LayerNormOp : Attn_GraphOp<"layer_norm"> {
  let summary = "row layer norm, with the row mean and reciprocal deviation";
  let description = [{
    `y = (x − mean)·rstd·gamma + beta` per row, `rstd = 1/sqrt(var + eps)`
    (population variance). `mean` and `rstd` (`[R]`) are what the backward
    needs besides `x`.

    ```mlir
    %y, %mean, %rstd = attn.layer_norm %x, %g, %b {eps = 1.0e-05 : f64}
      : (tensor<256x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<256x64xf32>, tensor<256xf32>, tensor<256xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$gamma, AnyRankedTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$mean, AnyRankedTensor:$rstd);
  let assemblyFormat = "$input `,` $gamma `,` $beta attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_LayerNormGradOp : Attn_GraphOp<"layer_norm_grad"> {
  let summary = "input gradient of a row layer norm";
  let description = [{
    `dx = rstd·(g − mean_c(g) − x̂·mean_c(g·x̂))` with `g = dy·gamma` and
    `x̂ = (x − mean)·rstd`, per row.

    ```mlir
    %dx = attn.layer_norm_grad %dy, %x, %g, %mean, %rstd
      : (tensor<256x64xf32>, tensor<256x64xf32>, tensor<64xf32>, tensor<256xf32>, tensor<256xf32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$dy, AnyRankedTensor:$input, AnyRankedTensor:$gamma,
                       AnyRankedTensor:$mean, AnyRankedTensor:$rstd);
  let results = (outs AnyRankedTensor:$dx);
  let assemblyFormat = "$dy `,` $input `,` $gamma `,` $mean `,` $rstd attr-dict `:` functional-type(operands, results)";
}

def Attn_LayerNormParamGradOp : Attn_GraphOp<"layer_norm_param_grad"> {
  let summary = "gain and bias gradients of a row layer norm (sums over rows)";
  let description = [{
    `dgamma = Σ_r dy·x̂`, `dbeta = Σ_r dy`, summed in row order.

    ```mlir
    %dg, %db = attn.layer_norm_param_grad %dy, %x, %mean, %rstd
      : (tensor<256x64xf32>, tensor<256x64xf32>, tensor<256xf32>, tensor<256xf32>) -> (tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$dy, AnyRankedTensor:$input, AnyRankedTensor:$mean,
                       AnyRankedTensor:$rstd);
  let results = (outs AnyRankedTensor:$dgamma, AnyRankedTensor:$dbeta);
  let assemblyFormat = "$dy `,` $input `,` $mean `,` $rstd attr-dict `:` functional-type(operands, results)";
}

def Attn_MatmulOp : Attn_GraphOp<"matmul"> {
  let summary = "a plain GEMM, op(A)·op(B) (CBLAS on CPU, cuBLAS on GPU)";
  let description = [{
    `C = op(A)·op(B)` with `op` the transpose when `transpose_a` /
    `transpose_b` is set; 2-D f32 tensors.

    ```mlir
    %c = attn.matmul %x, %w : (tensor<256x64xf32>, tensor<64x256xf32>) -> tensor<256x256xf32>
    %dw = attn.matmul %x, %dy {transpose_a} : (tensor<256x64xf32>, tensor<256x256xf32>) -> tensor<64x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs, UnitAttr:$transpose_a,
                       UnitAttr:$transpose_b);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_BiasAddOp : Attn_GraphOp<"bias_add"> {
  let summary = "add a [C] bias to every row of [R, C]";
  let description = [{
    ```mlir
    %y = attn.bias_add %x, %b : (tensor<256x64xf32>, tensor<64xf32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$bias);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` functional-type(operands, results)";
}

def Attn_AddOp : Attn_GraphOp<"add", [AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "elementwise sum (residuals, gradient accumulation)";
  let description = [{
    ```mlir
    %y = attn.add %a, %b : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Attn_SubOp : Attn_GraphOp<"sub", [AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "elementwise difference (a reversible layer's rebuilt input)";
  let description = [{
    ```mlir
    %x2 = attn.sub %y2, %f : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Attn_ActivationOp : Attn_GraphOp<"activation", [AllTypesMatch<["input", "result"]>]> {
  let summary = "elementwise feed-forward activation (gelu: tanh form)";
  let description = [{
    ```mlir
    %y = attn.activation gelu %x : tensor<256x256xf32>
    ```
  }];
  let arguments = (ins Attn_Activation:$kind, AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$kind $input attr-dict `:` type($result)";
}

def Attn_ActivationGradOp : Attn_GraphOp<"activation_grad", [AllTypesMatch<["input", "dy", "result"]>]> {
  let summary = "dx = act'(x)·dy, elementwise";
  let description = [{
    ```mlir
    %dx = attn.activation_grad gelu %x, %dy : tensor<256x256xf32>
    ```
  }];
  let arguments = (ins Attn_Activation:$kind, AnyRankedTensor:$input, AnyRankedTensor:$dy);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$kind $input `,` $dy attr-dict `:` type($result)";
}

def Attn_DropoutOp : Attn_GraphOp<"dropout", [AllTypesMatch<["input", "result"]>]> {
  let summary = "counter-based dropout of a residual branch";
  let description = [{
    Element `i` (row-major) is zeroed when `philox(seed, stream, step, i) < rate`
    and scaled by `1/(1 − rate)` otherwise; `seed` and `step` come from the
    runtime, so recomputation and the backward (the same op on the
    cotangent) replay the forward's mask.

    ```mlir
    %d = attn.dropout %a {rate = 1.0e-01 : f64, stream = 65536 : i64} : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, F64Attr:$rate, I64Attr:$stream);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Attn_ColumnSumOp : Attn_GraphOp<"column_sum"> {
  let summary = "sum over rows: [R, C] → [C] (bias gradients), in row order";
  let description = [{
    ```mlir
    %db = attn.column_sum %dy : (tensor<256x64xf32>) -> tensor<64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def Attn_SplitHeadsOp : Attn_GraphOp<"split_heads"> {
  let summary = "[B·S, H·Dh] rows → [B, H, S, Dh]";
  let description = [{
    ```mlir
    %q = attn.split_heads %x : (tensor<256x64xf32>) -> tensor<2x4x128x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_MergeHeadsOp : Attn_GraphOp<"merge_heads"> {
  let summary = "[B, H, S, Dh] → [B·S, H·Dh] rows";
  let description = [{
    ```mlir
    %x = attn.merge_heads %o : (tensor<2x4x128x16xf32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Attn_ConcatColsOp : Attn_GraphOp<"concat_cols"> {
  let summary = "[R, A] ‖ [R, B] → [R, A + B] (a reversible model's two streams)";
  let description = [{
    ```mlir
    %y = attn.concat_cols %y1, %y2 : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Attn_SliceColsOp : Attn_GraphOp<"slice_cols"> {
  let summary = "columns [offset, offset + width) of [R, C]";
  let description = [{
    ```mlir
    %a = attn.slice_cols %y {offset = 64 : i64} : (tensor<256x128xf32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$offset);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def Attn_CrossEntropyOp : Attn_GraphOp<"cross_entropy"> {
  let summary = "mean softmax cross-entropy over rows with a target";
  let description = [{
    `loss = Σ_{r: targets[r] ≥ 0} (logsumexp(logits[r]) − logits[r, targets[r]]) / count`
    (natural log; `count` rows have a target, −1 marks none; 0 when no row
    has one). `count` is returned as f32 for the backward.

    ```mlir
    %loss, %count = attn.cross_entropy %logits, %targets
      : (tensor<256x256xf32>, tensor<256xi32>) -> (tensor<f32>, tensor<f32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$targets);
  let results = (outs AnyRankedTensor:$loss, AnyRankedTensor:$count);
  let assemblyFormat = "$logits `,` $targets attr-dict `:` functional-type(operands, results)";
}

def Attn_CrossEntropyGradOp : Attn_GraphOp<"cross_entropy_grad"> {
  let summary = "logit gradients of the mean cross-entropy (one fused softmax pass per row)";
  let description = [{
    `dlogits[r] = dloss·(softmax(logits[r]) − onehot(targets[r]))/count` for
    rows with a target, 0 for the rest.

    ```mlir
    %dl = attn.cross_entropy_grad %logits, %targets, %count, %dloss
      : (tensor<256x256xf32>, tensor<256xi32>, tensor<f32>, tensor<f32>) -> tensor<256x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$targets,
                       AnyRankedTensor:$count, AnyRankedTensor:$dloss);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$logits `,` $targets `,` $count `,` $dloss attr-dict `:` functional-type(operands, results)";
}

def Attn_ConstantOp : Attn_GraphOp<"constant", [ConstantLike]> {
  let summary = "an f32 scalar tensor constant (the loss seed of the backward)";
  let description = [{
    ```mlir
    %one = attn.constant 1.0 : tensor<f32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
}

def Attn_AttentionGradOp : Attn_GraphOp<"attention_grad", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "backward of one attn.attention application";
  let description = [{
    Given the forward's inputs, `out`, `lse` and the cotangent `dout`,
    returns `dq`, `dk`, `dv` and the gradients of `E`, `F` and `params`
    (in that order, for those present). A shared-QK variant folds the key
    path into `dq` and its `dk` is zero. LSH rotations get no gradient.
    `layer` keys the variant's attention dropout (the runtime's Philox
    offset), so the backward redraws the forward's masks.

    ```mlir
    %dq, %dk, %dv = attn.attention_grad @dense(%q, %k, %v, %o, %lse, %do) {layer = 0 : i64}
      : (...) -> (tensor<2x4x128x16xf32>, tensor<2x4x128x16xf32>, tensor<2x4x128x16xf32>)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variant,
                       AnyRankedTensor:$query, AnyRankedTensor:$key, AnyRankedTensor:$value,
                       AnyRankedTensor:$out, AnyRankedTensor:$lse, AnyRankedTensor:$dout,
                       Optional<AnyRankedTensor>:$proj_e,
                       Optional<AnyRankedTensor>:$proj_f,
                       Optional<AnyRankedTensor>:$rotations,
                       Optional<AnyRankedTensor>:$params,
                       I64Attr:$layer);
  let results = (outs AnyRankedTensor:$dquery, AnyRankedTensor:$dkey, AnyRankedTensor:$dvalue,
                      Variadic<AnyRankedTensor>:$param_grads);
  let assemblyFormat = [{
    $variant `(` $query `,` $key `,` $value `,` $out `,` $lse `,` $dout `)`
    (`E` `(` $proj_e^ `)`)?
    (`F` `(` $proj_f^ `)`)?
    (`rotations` `(` $rotations^ `)`)?
    (`params` `(` $params^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// attn.fused_rows
//===----------------------------------------------------------------------===//

def Attn_FusedRowsOp : Attn_Op<"fused_rows", [Pure, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"RowsYieldOp">]> {
  let summary = "one generated kernel for a chain of row-local graph ops";
  let description = [{
    Made by `attn-fuse-rows`: the body (graph ops on the block arguments,
    which stand for `inputs`) is evaluated one row at a time, so the
    intermediates of the chain live in a row's registers and scratch, never
    in memory. Each input is read by row (`[R, C]`, `[R]`) or whole
    (parameters, embedding tables). `rows` is R; `kernel` names the
    generated function.

    ```mlir
    %y, %m, %r = attn.fused_rows rows 256 (%x, %a, %g, %b) kernel "rows3" {
    ^bb0(%x0: tensor<256x64xf32>, %a0: tensor<256x64xf32>, %g0: tensor<64xf32>, %b0: tensor<64xf32>):
      %h = attn.add %x0, %a0 : tensor<256x64xf32>
      %z, %mean, %rstd = attn.layer_norm %h, %g0, %b0 : ...
      attn.rows_yield %h, %z, %mean, %rstd : ...
    } : (...) -> (...)
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, I64Attr:$rows, StrAttr:$kernel);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `rows` $rows `(` $inputs `)` `kernel` $kernel attr-dict-with-keyword $body `:` functional-type($inputs, $results)
  }];
  let hasVerifier = 1;
}

def Attn_RowsYieldOp : Attn_Op<"rows_yield", [Pure, Terminator, HasParent<"FusedRowsOp">]> {
  let summary = "the values an attn.fused_rows kernel writes out";
  let description = [{
    ```mlir
    attn.rows_yield %h, %z : tensor<256x64xf32>, tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
}

//===----------------------------------------------------------------------===//
// attn.row_chunks
//===----------------------------------------------------------------------===//

def Attn_RowChunksOp : Attn_Op<"row_chunks", [Pure, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"ChunksYieldOp">]> {
  let summary = "evaluate a body over chunks of rows (the chunked feed-forward)";
  let description = [{
    Splits the inputs marked in `split` into consecutive chunks of `chunk`
    rows (the last may be shorter), passes the others whole, and runs the
    body once per chunk, so the body's intermediates are `chunk` rows tall
    (Reformer's chunked feed-forward: `chunk × d_ff`, not `R × d_ff`).
    Results marked in `sums` are summed over the chunks in order (parameter
    gradients); the others are the chunks' rows concatenated. The body's
    block argument types are the per-chunk types.

    ```mlir
    %f = attn.row_chunks chunk 64 (%z, %w1, %b1, %w2, %b2) split [true, false, false, false, false] sums [false] {
    ^bb0(%zc: tensor<64x64xf32>, %w1a: tensor<64x256xf32>, ...):
      ...
      attn.chunks_yield %fc : tensor<64x64xf32>
    } : (...) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, I64Attr:$chunk,
                       DenseBoolArrayAttr:$split, DenseBoolArrayAttr:$sums);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `chunk` $chunk `(` $inputs `)` `split` $split `sums` $sums attr-dict-with-keyword $body
    `:` functional-type($inputs, $results)
  }];
  let hasVerifier = 1;
}

def Attn_ChunksYieldOp : Attn_Op<"chunks_yield", [Pure, Terminator, HasParent<"RowChunksOp">]> {
  let summary = "the per-chunk values of an attn.row_chunks body";
  let description = [{
    ```mlir
    attn.chunks_yield %fc : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
}

#endif // ATTNC_ATTN_GRAPH_OPS_TD
