//===- AttnAttrs.td - Attributes and enums of attn ---------*- tablegen -*-===//
#ifndef ATTNC_ATTN_ATTRS_TD
#define ATTNC_ATTN_ATTRS_TD

include "dialect/AttnDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums (printed as bare keywords in op formats)
//===----------------------------------------------------------------------===//

def Attn_ShareMode : I32EnumAttr<"ShareMode",
    "how Linformer projections are shared", [
      I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"headwise", 1>,
      I32EnumAttrCase<"kv", 2>, I32EnumAttrCase<"layerwise", 3>]> {
  let cppNamespace = "::attnc::attn";
}

def Attn_DType : I32EnumAttr<"DType", "model compute dtype", [
      I32EnumAttrCase<"fp32", 0>, I32EnumAttrCase<"fp16", 1>,
      I32EnumAttrCase<"bf16", 2>]> {
  let cppNamespace = "::attnc::attn";
}

def Attn_Objective : I32EnumAttr<"Objective", "training objective", [
      I32EnumAttrCase<"causal_lm", 0>, I32EnumAttrCase<"mlm", 1>,
      I32EnumAttrCase<"duplicate", 2>]> {
  let cppNamespace = "::attnc::attn";
}

def Attn_Activation : I32EnumAttr<"Activation", "feed-forward activation", [
      I32EnumAttrCase<"gelu", 0>, I32EnumAttrCase<"relu", 1>,
      I32EnumAttrCase<"silu", 2>]> {
  let cppNamespace = "::attnc::attn";
}

def Attn_ParamInit : I32EnumAttr<"ParamInit", "initial value of a per-head parameter", [
      I32EnumAttrCase<"constant", 0>, I32EnumAttrCase<"alibi", 1>]> {
  let cppNamespace = "::attnc::attn";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Attn_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Attn_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Attn_LowRankAttr : Attn_Attr<"LowRank", "lowrank"> {
  let summary = "Linformer low-rank projection of keys and values";
  let description = [{
    Keys and values are projected along the sequence axis to length `k`:
    `K' = E·K`, `V' = F·V` with learned `E, F ∈ R^{k×N}`. `share` is one of
    `none` (E, F per layer and head), `headwise` (per layer, shared by heads),
    `kv` (E = F per layer) or `layerwise` (one matrix for everything).
    `k = auto` leaves the length to the tuner.

    ```mlir
    #attn.lowrank<k = 256, share = layerwise>
    ```
  }];
  let parameters = (ins "int64_t":$k, "::attnc::attn::ShareMode":$share);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isAutoK() const { return getK() == ::attnc::attn::kAuto; }
  }];
}

def Attn_LshAttr : Attn_Attr<"Lsh", "lsh"> {
  let summary = "Reformer LSH bucketing";
  let description = [{
    Angular LSH with `buckets` buckets (even: the hash is the argmax over
    `[xR; -xR]`), `rounds` independent hash rounds, sorted chunks of `chunk`
    positions attending to `before` previous and `after` following chunks,
    rotations drawn from `seed`. With `dense_fallback = true` the compiler
    may use dense attention (with the same self, causal and padding masks)
    when every query's chunk window covers every chunk, which holds exactly
    when ceil(N / chunk) ≤ min(before, after) + 1. Every round then sees
    every key, so `out` and the gradients are the LSH ones; `lse` is one
    round's (the LSH `lse` minus log(rounds)).

    ```mlir
    #attn.lsh<buckets = 64, rounds = 4, chunk = 64, before = 1, after = 0,
              seed = 0, dense_fallback = true>
    ```
  }];
  let parameters = (ins "int64_t":$buckets, "int64_t":$rounds, "int64_t":$chunk,
                        "int64_t":$before, "int64_t":$after, "int64_t":$seed,
                        "bool":$dense_fallback);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Attn_TileAttr : Attn_Attr<"Tile", "tile"> {
  let summary = "kernel tile configuration";
  let description = [{
    Query and key block sizes, warps per block and pipeline stages of the
    fused attention kernel; each is a number or `auto` (the tile pass fills
    it from the tuning database or a heuristic).

    ```mlir
    #attn.tile<block_q = 64, block_kv = auto, warps = 4, stages = auto>
    ```
  }];
  let parameters = (ins "int64_t":$block_q, "int64_t":$block_kv,
                        "int64_t":$warps, "int64_t":$stages);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    static TileAttr getAuto(::mlir::MLIRContext *ctx) {
      return get(ctx, kAuto, kAuto, kAuto, kAuto);
    }
  }];
}

def Attn_HeadParamAttr : Attn_Attr<"HeadParam", "param"> {
  let summary = "a named per-head parameter of a score modifier";
  let description = [{
    A vector of `heads` floats that score expressions read as `name(h)`.
    It is initialised to a constant or to ALiBi slopes (2^(-8(h+1)/H)) and is
    either learned or fixed.

    ```mlir
    #attn.param<"slope" = alibi, fixed>
    #attn.param<"temp" = 1.000000e+00, learned>
    ```
  }];
  let parameters = (ins StringRefParameter<>:$name,
                        "::attnc::attn::ParamInit":$init,
                        APFloatParameter<"initial value">:$value,
                        "bool":$learned);
  let hasCustomAssemblyFormat = 1;
}

#endif // ATTNC_ATTN_ATTRS_TD
