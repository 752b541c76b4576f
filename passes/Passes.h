//===- Passes.h - attnc passes ----------------------------------*- C++ -*-===//
#ifndef ATTNC_PASSES_PASSES_H
#define ATTNC_PASSES_PASSES_H

#include "dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace attnc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// What a CPU attention tile entry of the tuning database is keyed by: the
/// variant's IR without its tile, hashed, and the head dim (the kernels are
/// fp32). attnc tune records under it, attn-apply-tuning looks it up.
std::string cpuAttentionSignature(attn::VariantOp variant, int64_t headDim);

} // namespace attnc

#endif // ATTNC_PASSES_PASSES_H
