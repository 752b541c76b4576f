//===- attnc-translate.cpp - attn IR to kernel source text ----------------===//
//
// The `mlir-translate` of attnc: turns tiled fused-attention IR into the
// CUDA or C++ translation unit (and the manifest) the runtime compiles, so
// the emitters can be tested alone with FileCheck.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"

using namespace mlir;

static void registerDialects(DialectRegistry &registry) {
  registry.insert<attnc::attn::AttnDialect, arith::ArithDialect, math::MathDialect,
                  func::FuncDialect>();
}

static LogicalResult emit(Operation *op, raw_ostream &os, attnc::codegen::Target target) {
  auto module = llvm::dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitError("expected a module");
  std::vector<attnc::ManifestKernel> kernels;
  return attnc::codegen::emitKernels(module, target, os, kernels);
}

int main(int argc, char **argv) {
  TranslateFromMLIRRegistration cuda(
      "emit-cuda-kernels", "fused attention ops to a CUDA translation unit (NVRTC)",
      [](Operation *op, raw_ostream &os) { return emit(op, os, attnc::codegen::Target::Cuda); },
      registerDialects);
  TranslateFromMLIRRegistration cpp(
      "emit-cpp-kernels", "fused attention ops to a C++ translation unit (CPU)",
      [](Operation *op, raw_ostream &os) { return emit(op, os, attnc::codegen::Target::Cpu); },
      registerDialects);
  TranslateFromMLIRRegistration manifest(
      "emit-kernel-manifest", "fused attention ops to the manifest's kernel list",
      [](Operation *op, raw_ostream &os) -> LogicalResult {
        auto module = llvm::dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("expected a module");
        attnc::Manifest info;
        info.target = "cuda", info.arch = "sm_80", info.source = "kernels.cu";
        std::string ignored;
        llvm::raw_string_ostream sink(ignored);
        if (failed(attnc::codegen::emitKernels(module, attnc::codegen::Target::Cuda, sink,
                                               info.kernels)))
          return failure();
        os << attnc::writeManifest(info);
        return success();
      },
      registerDialects);
  return failed(mlirTranslateMain(argc, argv, "attnc kernel translator"));
}
