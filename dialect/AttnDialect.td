//===- AttnDialect.td - The attn dialect -------------------*- tablegen -*-===//
#ifndef ATTNC_ATTN_DIALECT_TD
#define ATTNC_ATTN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::attnc::attn";
  let summary = "Attention variants and the models built from them";
  let description = [{
    The `attn` dialect is what a `.attn` spec lowers to. It holds, at tensor
    level:

    - `attn.variant`: one attention definition (dense, low-rank Linformer or
      LSH-bucketed Reformer), with its masks, its score modifier and mask
      expressions as scalar regions, and its tunables (`auto` or fixed);
    - `attn.model`: a model's dimensions, dtype, objective and its layer
      template (`attn.layer`);
    - `attn.attention`: one application of a variant to `[B, H, N, Dh]`
      tensors, which the kernel passes fuse and tile.

    Integer tunables print as `auto` when the tuner or a heuristic decides
    them, for example `#attn.lowrank<k = auto, share = layerwise>`.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Adds the attributes (AttnAttrs.cpp, where their storage is defined).
    void registerAttributes();
  }];
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

#endif // ATTNC_ATTN_DIALECT_TD
