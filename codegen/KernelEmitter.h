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

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc::codegen {

/// What the runtime needs to launch one fused op's kernels (the manifest's
/// "kernels" entries).
struct KernelInfo {
  std::string name; ///< the op's `kernel` attribute
  bool backward = false;
  std::string dtype; ///< f32, f16, bf16
  int64_t headDim = 0;
  int64_t blockQ = 0, blockKv = 0, warps = 0, stages = 0;
  bool causal = false, keyPadding = false, deterministic = false;
  int64_t numParams = 0;
  std::string kvSource; ///< direct, lowrank or lsh
  std::string share;    ///< lowrank sharing, or ""
  double scale = 1;
  int64_t smemBytes = 0; ///< dynamic shared memory per block (CUDA)
  std::vector<std::string> entryPoints;
  /// The function holding the op: a forward and its backward share it.
  std::string function;
  int64_t lowrankK = 0, maxSeq = 0; ///< E's rows and columns (low-rank)
  /// Shared-QK dense attention (LSH's dense fallback): keys are the
  /// normalised queries, and the self score replaces a query's own score.
  bool sharedQk = false;
  std::optional<double> selfScore;
  /// Attention dropout probability while training (0: none); every kernel
  /// family, both targets.
  double dropout = 0;
  struct Lsh {
    int64_t numBuckets = 0, rounds = 0, chunk = 0, before = 0, after = 0, seed = 0;
  };
  std::optional<Lsh> lsh; ///< set for LSH kernels (kvSource "lsh")
  struct Param {
    std::string name;
    bool alibi = false;
    double value = 0;
    bool learned = true;
  };
  std::vector<Param> params;
};

enum class Target { Cuda, Cpu };

/// Emits the kernels of every fused op in `module` for `target`, appending
/// their descriptions to `kernels`.
mlir::LogicalResult emitKernels(mlir::ModuleOp module, Target target, llvm::raw_ostream &os,
                                std::vector<KernelInfo> &kernels);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_KERNELEMITTER_H
