//===- attnc-opt.cpp - Run attnc passes on attn IR ------------------------===//
//
// The `mlir-opt` of attnc: parses attn/arith/math/func IR, runs any attnc
// pass or named pipeline alone (plus the generic canonicalize/cse), prints
// the result.
//
//===----------------------------------------------------------------------===//
#include "dialect/AttnDialect.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  attnc::registerAttnPasses();
  attnc::registerAttnPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();

  mlir::DialectRegistry registry;
  registry.insert<attnc::attn::AttnDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attnc optimizer driver\n", registry));
}
