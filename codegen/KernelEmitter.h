//===- KernelEmitter.h - CUDA and C++ translation units for kernels -*- C++ -*-===//
//
// Emits one translation unit per target holding, for every fused attention
// op (forward and gradient) of a module, its variant policy struct and the
// extern "C" entry points instantiating the kernel skeleton headers with the
// op's tile config (docs/kernels.md). The ops must have been through
// attn-tile (no `auto` left, kernels named).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_KERNELEMITTER_H
#define ATTNC_CODEGEN_KERNELEMITTER_H

#include "runtime/Manifest.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc::codegen {

using attnc::ManifestKernel;

enum class Target { Cuda, Cpu };

/// Emits the kernels of every fused op in `module` for `target`, appending
/// their descriptions (the artifact manifest's kernel entries) to `kernels`.
mlir::LogicalResult emitKernels(mlir::ModuleOp module, Target target, llvm::raw_ostream &os,
                                std::vector<ManifestKernel> &kernels);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_KERNELEMITTER_H
