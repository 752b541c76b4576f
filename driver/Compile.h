//===- Compile.h - Spec to kernels and artifacts ----------------*- C++ -*-===//
#ifndef ATTNC_TOOLS_ATTNC_COMPILE_H
#define ATTNC_TOOLS_ATTNC_COMPILE_H

#include "codegen/AttentionFunction.h"
#include "codegen/KernelEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace attnc::driver {

constexpr int kExitOk = 0;
constexpr int kExitInput = 1;
constexpr int kExitNotImplemented = 2;

struct CompiledKernels {
  std::string source; ///< the CUDA or C++ translation unit
  std::vector<codegen::KernelInfo> kernels;
};

/// Runs the kernel pipeline on `module` (which holds attention functions) and
/// emits the kernels. Returns an exit code; diagnostics are already printed.
int compileFunctions(mlir::ModuleOp module, const std::string &target, const std::string &arch,
                     CompiledKernels &out);

/// Resolves tunables, builds one differentiable attention function per model
/// (batch and sequence dynamic), then compileFunctions().
int compileModels(mlir::ModuleOp module, const std::string &target, const std::string &arch,
                  CompiledKernels &out);

/// Writes DIR/manifest.json, DIR/kernels.{cu,cpp} and DIR/attn.mlir, each
/// atomically (a reader never sees a partial file); for the CPU target also
/// each model's compiled training step for `batch` (DIR/model_NAME.cpp,
/// described in the manifest's "models").
int writeArtifact(const std::string &dir, const std::string &specText, mlir::ModuleOp module,
                  const std::string &target, const std::string &arch,
                  const CompiledKernels &compiled, int batch);

/// Compiles the CUDA source with NVRTC for `arch` and checks every entry
/// point: it compiles, spills no registers, and its static plus dynamic
/// shared memory fits the arch. Prints a resource table to `os`.
int checkWithNvrtc(const CompiledKernels &compiled, const std::string &arch, std::ostream &os);

/// Reads the spec at `path`, checks it (located errors on stderr) and builds
/// its attn module in `context` (registering the dialects). Returns null on
/// failure, after printing `attnc CMD: error: cannot open ...` for an
/// unreadable file. `text`, when given, receives the file's bytes.
mlir::OwningOpRef<mlir::ModuleOp> loadSpecModule(const std::string &path, const char *cmd,
                                                 mlir::MLIRContext &context,
                                                 std::string *text = nullptr);

/// SHA-256 of `text` in hex.
std::string sha256Hex(const std::string &text);

} // namespace attnc::driver

#endif // ATTNC_TOOLS_ATTNC_COMPILE_H
