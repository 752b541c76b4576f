//===- Run.h - attnc run: one attention op on safetensors inputs -*- C++ -*-===//
#ifndef ATTNC_DRIVER_RUN_H
#define ATTNC_DRIVER_RUN_H

#include "mlir/Support/LogicalResult.h"

#include "codegen/AttentionFunction.h"
#include "runtime/CpuAttention.h"
#include "runtime/Artifact.h"
#include "runtime/CudaAttention.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc::driver {

struct RunOptions {
  std::string spec;
  std::string op = "attention";
  std::string inputs, weights, grad, output;
  std::string target = "cpu";
  std::string arch;          ///< CUDA targets: "" = defaultCudaArch()
  std::string dtype = "f32"; ///< --target cuda: the kernels' element type
  uint64_t seed = 0;
};

/// `attnc run SPEC --op attention[:NAME] ...` (docs/design.md, Interfaces). Returns an exit
/// code; every error names the file, the tensor and the expected shape.
mlir::LogicalResult runAttention(const RunOptions &options);

/// `attnc inputs`: random attention inputs for `attnc run` / `attnc-rt run`.
struct InputsOptions {
  std::vector<int64_t> shape; ///< B, H, N, D
  std::string output;         ///< q, k, v [B, H, N, D] f32 (and lengths [B] i32)
  std::string grad;           ///< non-empty: also dout [B, H, N, D] f32 here
  bool lengths = false;       ///< key lengths, drawn in [1, N]
  uint64_t seed = 0;
};
/// Writes standard-normal q, k, v (Philox draws of `seed`: the same files
/// on every machine), and the key lengths and dout when asked.
mlir::LogicalResult writeRandomInputs(const InputsOptions &options);

/// Compiles one variant for the CPU at the given shape (building the
/// attention function, running the kernel pipeline, emitting and compiling
/// the C++). On failure prints the error and returns an exit code.
mlir::LogicalResult compileCpuAttention(mlir::ModuleOp module, attn::VariantOp variant,
                                        const codegen::AttentionShape &shape,
                                        std::optional<CpuAttention> &out);

/// A variant's emitted kernels (the MLIR half of compileCpuAttention), not
/// yet through the host compiler.
struct EmittedKernels {
  std::string source;
  KernelDesc fwd;
  std::optional<KernelDesc> bwd;
};
mlir::LogicalResult emitCpuAttention(mlir::ModuleOp module, attn::VariantOp variant,
                                     const codegen::AttentionShape &shape, EmittedKernels &out);

/// Host-compiles and loads every emitted set on up to `threads` threads
/// (the kernel cache is shared and locked; each compile is its own
/// process): out[i] holds the kernels, or the returned errors[i] says why
/// not. What attnc tune uses to compile its candidates in parallel.
std::vector<std::string> buildCpuAttentions(const std::vector<EmittedKernels> &emitted, int threads,
                                            std::vector<std::optional<CpuAttention>> &out);

/// The forward kernel of a variant for CUDA `arch`, emitted (no NVRTC yet):
/// the translation unit, the element type and the kernel's description.
mlir::LogicalResult emitCudaAttention(mlir::ModuleOp module, attn::VariantOp variant,
                                      const codegen::AttentionShape &shape, const std::string &arch,
                                      std::string &source, std::string &dtype, KernelDesc &fwd);

/// A variant's CUDA kernels as an in-memory artifact (manifest and source,
/// what attnc compile would write for it alone), tiled for `arch`.
mlir::LogicalResult emitCudaVariantArtifact(mlir::ModuleOp module, attn::VariantOp variant,
                                            const codegen::AttentionShape &shape,
                                            const std::string &arch, Artifact &out);

/// The same for the GPU: NVRTC to CUBIN for `arch` (cached), the kernels'
/// element type is shape.elementType. `emulate`: the same source on the
/// SIMT emulator (--target cuda-sim) at the tiles `arch` gets. `ordinal`:
/// the GPU (-1: the process's, cuda::processDevice).
mlir::LogicalResult compileCudaAttention(mlir::ModuleOp module, attn::VariantOp variant,
                                         const codegen::AttentionShape &shape,
                                         const std::string &arch, bool emulate,
                                         std::optional<CudaAttention> &out, int ordinal = -1);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_RUN_H
