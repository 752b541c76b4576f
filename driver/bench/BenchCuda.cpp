//===- BenchCuda.cpp - attnc bench --target cuda: the GPU kernels ---------===//
//
// The bench's variants (dense, causal dense, low-rank at each --k, LSH at
// each --lsh-rounds x --lsh-chunks) emitted for the GPU present, each as an
// in-memory CUDA artifact, timed by the runtime's GPU benchmark
// (runtime/tune/AttentionBench.h: CUDA events, TFLOP/s against the
// datasheet peak, device memory). --target cuda-sim runs the same program on
// the SIMT emulator: the mechanics, at a CPU's speed.
//
//===----------------------------------------------------------------------===//
#include "driver/bench/Bench.h"
#include "driver/Report.h"
#include "driver/Run.h"
#include "driver/Spec.h"

#include "dialect/AttnDialect.h"
#include "runtime/CudaDriver.h"
#include "runtime/tune/AttentionBench.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <ostream>

using namespace mlir;

namespace attnc::driver {

mlir::LogicalResult runCudaBench(const BenchOptions &opt) {
  const bool emulate = opt.target == "cuda-sim";
  std::string arch = "sm_80";
  if (!emulate) {
    if (Status d = cuda::Driver::available(); !d) {
      diagnostics() << "attnc bench: error: --target cuda: " << d.error()
                    << " (--target cuda-sim runs the same kernels on the CPU's SIMT emulator)\n";
      return mlir::failure();
    }
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev) {
      diagnostics() << "attnc bench: error: " << dev.error() << "\n";
      return mlir::failure();
    }
    arch = dev->arch();
  }
  if (opt.dtype != "f32" && opt.dtype != "f16" && opt.dtype != "bf16") {
    diagnostics() << "attnc bench: error: --dtype: expected f32, f16 or bf16, found '" << opt.dtype
                  << "'\n";
    return mlir::failure();
  }
  MLIRContext context;
  prepareContext(context, /*errorsOnly=*/true);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  OpBuilder b(module->getBody(), module->getBody()->end());
  auto autoTile = attn::TileAttr::getAuto(&context);
  std::vector<attn::VariantOp> variants;
  for (bool causal : {false, true})
    variants.push_back(b.create<attn::VariantOp>(
        b.getUnknownLoc(), causal ? "dense_causal" : "dense", nullptr, nullptr,
        /*shared_qk=*/false, causal, /*key_padding=*/false, nullptr, nullptr, nullptr, autoTile));
  for (int k : opt.ranks)
    variants.push_back(b.create<attn::VariantOp>(
        b.getUnknownLoc(), "lowrank_k" + std::to_string(k),
        attn::LowRankAttr::get(&context, k, attn::ShareMode::headwise), nullptr, false, false,
        false, nullptr, nullptr, nullptr, autoTile));
  for (int r : opt.lshRounds)
    for (int c : opt.lshChunks)
      variants.push_back(b.create<attn::VariantOp>(
          b.getUnknownLoc(), "lsh_r" + std::to_string(r) + "_c" + std::to_string(c), nullptr,
          attn::LshAttr::get(&context, opt.lshBuckets, r, c, /*before=*/1, /*after=*/0,
                             /*seed=*/1, /*dense_fallback=*/false),
          /*shared_qk=*/true, false, false, nullptr, nullptr, nullptr, autoTile));
  Builder bld(&context);
  codegen::AttentionShape shape;
  shape.batch = opt.batch, shape.heads = opt.heads, shape.headDim = opt.headDim;
  shape.seq = *std::max_element(opt.lengths.begin(), opt.lengths.end());
  shape.maxSeq = shape.seq;
  shape.elementType = opt.dtype == "f16"    ? Type(bld.getF16Type())
                      : opt.dtype == "bf16" ? Type(bld.getBF16Type())
                                            : Type(bld.getF32Type());
  shape.withLengths = false;
  shape.differentiate = opt.backward;
  tune::AttentionBenchOptions bo;
  bo.target = opt.target, bo.repeats = opt.repeats, bo.backward = opt.backward;
  bo.shapes.clear();
  for (int n : opt.lengths)
    bo.shapes.push_back({opt.batch, opt.heads, n});
  std::vector<tune::AttentionBenchRow> rows;
  for (attn::VariantOp v : variants) {
    Artifact artifact;
    if (mlir::failed(emitCudaVariantArtifact(*module, v, shape, arch, artifact)))
      return mlir::failure();
    diagnostics() << "attnc bench: " << v.getSymName().str() << "...\n";
    auto r = tune::benchArtifactAttention(artifact, bo);
    if (!r) {
      diagnostics() << "attnc bench: error: " << v.getSymName().str() << ": " << r.error() << "\n";
      return mlir::failure();
    }
    for (tune::AttentionBenchRow &row : *r)
      row.kernel = v.getSymName().str(); // the variant, not the emitted kernel name
    rows.insert(rows.end(), r->begin(), r->end());
  }
  tune::printBenchTable(results(), rows);
  if (Status s = tune::writeBenchCsv(opt.csv, rows); !s) {
    diagnostics() << "attnc bench: error: " << s.error() << "\n";
    return mlir::failure();
  }
  diagnostics() << "attnc bench: wrote " << opt.csv << "\n";
  return mlir::success();
}

} // namespace attnc::driver
