//===- Compile.h - Spec to kernels and artifacts ----------------*- C++ -*-===//
#ifndef ATTNC_DRIVER_COMPILE_H
#define ATTNC_DRIVER_COMPILE_H

#include "codegen/AttentionFunction.h"
#include "codegen/KernelEmitter.h"
#include "driver/Spec.h"

#include "runtime/NvrtcCompiler.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace attnc::driver {

struct CompiledKernels {
  std::string source;                  ///< the CUDA or C++ translation unit
  std::vector<ManifestKernel> kernels; ///< the manifest's entries
};

/// Runs the kernel pipeline on `module` (which holds attention functions) and
/// emits the kernels. Returns an exit code; diagnostics are already printed.
mlir::LogicalResult compileFunctions(mlir::ModuleOp module, const std::string &target,
                                     const std::string &arch, CompiledKernels &out);

/// Says on `os` how kernels of the dtypes in `kernels` run on `arch` where
/// that differs from the newer GPUs: bf16 before sm_80 (no bf16 tensor
/// cores: bf16 storage, fp32 compute), fp16 on Volta (mma.m8n8k4).
void notePrecisionOnArch(const std::vector<ManifestKernel> &kernels, const std::string &arch,
                         std::ostream &os);

/// The CUDA source compiled by NVRTC for `arch`, with the kernel header
/// tree on its include path (cached: runtime/NvrtcCompiler.h).
Expected<Cubin> compileCudaKernels(const CompiledKernels &compiled, const std::string &arch);

/// The kernels around the attention kernels that the runtime compiles
/// (attnc/device_support.cuh: the low-rank GEMMs, the dtype conversions),
/// for `arch`, cached likewise.
Expected<Cubin> compileDeviceSupport(const std::string &arch);

/// The shared memory entry point `entry` of `k` launches with: its static
/// shared memory (`r`, ptxas's report) plus the tile's dynamic memory for
/// the attention loops (not the preprocess, dparams and shared-QK row
/// kernels).
int launchSharedBytes(const ManifestKernel &k, const std::string &entry, const KernelResources &r);

/// Compiles the CUDA source with NVRTC for `arch` and checks every entry
/// point: it compiles, spills no registers, and its static plus dynamic
/// shared memory fits the arch. Prints a resource table to `os`.
mlir::LogicalResult checkWithNvrtc(const CompiledKernels &compiled, const std::string &arch,
                                   std::ostream &os);

/// `attnc compile`: what its flags ask for.
struct CompileCommandOptions {
  std::string spec;
  /// cpu, cuda or cuda-sim (the same CUDA code, for the emulator); empty:
  /// cpu, or cuda for --check-nvrtc. --emit cuda/cpp/model-cuda imply theirs.
  std::string target;
  std::string arch;   ///< empty: defaultCudaArch()
  std::string emit;   ///< one stage to print instead of an artifact
  std::string output; ///< with emit: the file (default stdout); else the artifact directory
  bool checkNvrtc = false;
  bool memoryPlan = false; ///< print the models' memory plans (always with an artifact)
  int planBatch = 1;
};

/// `attnc compile`: checks the spec, then prints the stage --emit names, or
/// checks the kernels with NVRTC, or writes the artifact. An exit code.
mlir::LogicalResult runCompile(const CompileCommandOptions &options);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_COMPILE_H
