//===- ModelGraph.cpp - Whole-model compilation in the driver -------------===//
#include "driver/ModelGraph.h"
#include "driver/Report.h"
#include "driver/ModelConfigOf.h"

#include "codegen/ModelEmitter.h"
#include "attnc/abi/TileModel.h"
#include "passes/Pipelines.h"
#include "runtime/KernelHeaders.h"
#include "runtime/CudaAttention.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"

#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <iomanip>
#include <ostream>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

bool compileModelGraph(ModuleOp resolved, attn::ModelOp model, const ModelGraphOptions &o,
                       ModelGraph &out) {
  OwningOpRef<ModuleOp> copy(resolved.clone());
  // Only this model (expand-model expands every model it finds), with the
  // options' overrides.
  for (attn::ModelOp m : llvm::make_early_inc_range(copy->getOps<attn::ModelOp>())) {
    if (m.getSymName() != model.getSymName()) {
      m.erase();
      continue;
    }
    Builder b(m);
    if (o.layers > 0)
      m.setLayersAttr(b.getI64IntegerAttr(o.layers));
    if (o.seq > 0)
      m.setSeqAttr(b.getI64IntegerAttr(o.seq));
    attn::LayerOp layer = *m.getBody().getOps<attn::LayerOp>().begin();
    if (!o.variant.empty())
      layer.setAttentionAttr(FlatSymbolRefAttr::get(m.getContext(), o.variant));
    // All rows: the larger function's row count (attn-expand-model runs a
    // chunk at least as large as the rows unchunked). No FFN: nothing to set.
    if (o.ffnChunk >= 0 && layer.getFfnChunk()) {
      const int64_t rows = int64_t(std::max(o.batch, o.inferBatch)) * m.getSeq();
      layer.setFfnChunkAttr(b.getI64IntegerAttr(o.ffnChunk > 0 ? o.ffnChunk : rows));
    }
  }
  PassManager pm(copy->getContext());
  ModelStepPipelineOptions step;
  step.batch = o.batch, step.recomputeLayers = o.recomputeLayers;
  step.fuseInChunks = o.fuseInChunks;
  step.train = o.train, step.infer = o.infer, step.inferBatch = o.inferBatch;
  populateModelStepPipeline(pm, step);
  if (failed(pm.run(*copy)))
    return false;
  auto trainFn = copy->lookupSymbol<func::FuncOp>(("train_" + model.getSymName()).str());
  auto inferFn = copy->lookupSymbol<func::FuncOp>(("infer_" + model.getSymName()).str());
  if ((o.train && !trainFn) || (o.infer && !inferFn))
    return false;
  auto i64 = [&](func::FuncOp f, StringRef name) {
    auto a = f ? f->getAttrOfType<IntegerAttr>(name) : IntegerAttr();
    return a ? a.getInt() : int64_t(0);
  };
  out.arenaBytes = i64(trainFn, "attn.arena_bytes");
  out.peakLiveBytes = i64(trainFn, "attn.peak_live_bytes");
  out.keptBytes = i64(trainFn, "attn.kept_bytes");
  out.inferArenaBytes = i64(inferFn, "attn.arena_bytes");
  auto where = [](func::FuncOp f) {
    auto a = f ? f->getAttrOfType<StringAttr>("attn.peak_where") : StringAttr();
    return a ? a.str() : std::string();
  };
  out.peakWhere = where(trainFn), out.inferPeakWhere = where(inferFn);
  if (trainFn)
    trainFn.walk([&](Operation *op) {
      out.fusedKernels += llvm::isa<attn::FusedRowsOp>(op);
      out.gemms += llvm::isa<attn::MatmulOp>(op);
      out.attentionCalls += llvm::isa<attn::AttentionOp, attn::AttentionGradOp>(op);
      out.rowChunks += llvm::isa<attn::RowChunksOp>(op);
    });
  if (!o.emitSource)
    return true;
  auto argNames = [](func::FuncOp f) {
    std::vector<std::string> names;
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<StringAttr>(i, "attn.param");
      if (!name)
        name = f.getArgAttrOfType<StringAttr>(i, "attn.input");
      names.push_back(name ? name.str() : "");
    }
    return names;
  };
  {
    llvm::raw_string_ostream os(out.ir);
    for (func::FuncOp f : {trainFn, inferFn})
      if (f) {
        f.print(os);
        os << "\n";
      }
  }
  // One C++ source holds both entry points (one host compile); their row
  // kernels are numbered across the module, so their names do not clash.
  if (trainFn) {
    FailureOr<std::string> src = codegen::emitModelStepCpp(trainFn);
    if (failed(src))
      return false;
    out.step.source = *src;
    out.step.symbol = codegen::modelStepSymbol(trainFn);
    // ATTNC_CUDA_ROW_SMEM_BYTES lowers the row kernels' shared memory so the
    // tests reach the scratch path on small models.
    int64_t rowSmem = 48 * 1024;
    if (const char *e = std::getenv("ATTNC_CUDA_ROW_SMEM_BYTES"); e && *e)
      rowSmem = std::max<int64_t>(256, std::atoll(e));
    FailureOr<codegen::CudaModelStep> cuda = codegen::emitModelStepCuda(trainFn, rowSmem);
    if (failed(cuda))
      return false;
    out.step.cudaDeviceSource = std::move(cuda->deviceSource);
    out.step.cudaHostSource = std::move(cuda->hostSource);
    out.step.cudaSymbol = std::move(cuda->symbol);
    out.step.arenaBytes = out.arenaBytes;
    out.step.keptBytes = out.keptBytes;
    out.step.batch = o.batch;
    out.step.args = argNames(trainFn);
    if (auto gradOf = trainFn->getAttrOfType<ArrayAttr>("attn.grad_of"))
      for (Attribute a : gradOf)
        out.step.gradArgs.push_back(int(llvm::cast<IntegerAttr>(a).getInt()));
  }
  if (inferFn) {
    FailureOr<std::string> src = codegen::emitModelStepCpp(inferFn);
    if (failed(src))
      return false;
    out.step.source += (out.step.source.empty() ? "" : "\n") + *src;
    out.step.inferSymbol = codegen::modelStepSymbol(inferFn);
    out.step.inferArenaBytes = out.inferArenaBytes;
    out.step.inferBatch = int(i64(inferFn, "attn.batch"));
    out.step.inferArgs = argNames(inferFn);
  }
  return true;
}

mlir::LogicalResult checkModelStepsWithNvrtc(ModuleOp resolved, const std::string &arch, int batch,
                                             std::ostream &os) {
  Expected<GpuArch> gpu = parseGpuArch(arch);
  if (!gpu) {
    diagnostics() << "attnc: error: " << gpu.error() << "\n";
    return mlir::failure();
  }
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  NvrtcOptions options;
  options.arch = arch;
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
  if (!dirs) {
    diagnostics() << "attnc: error: " << dirs.error() << "\n";
    return mlir::failure();
  }
  options.includeDirs = *dirs;
  // The step's kernels use static __shared__ storage only: 48 KiB on every arch.
  const int limit = std::min(attnc::tile::smemLimitBytes(gpu->sm), 48 * 1024);
  int failures = 0;
  for (attn::ModelOp model : resolved.getOps<attn::ModelOp>()) {
    ModelGraph g;
    ModelGraphOptions o;
    o.batch = batch, o.emitSource = true, o.recomputeLayers = true, o.infer = false;
    if (!compileModelGraph(resolved, model, o, g))
      return mlir::failure();
    Expected<Cubin> cubin =
        nvrtc.compile(g.step.cudaSymbol + ".cu", g.step.cudaDeviceSource, options);
    if (!cubin) {
      diagnostics() << "attnc: error: the CUDA step of " << model.getSymName().str() << ": "
                    << cubin.error() << "\n";
      return mlir::failure();
    }
    os << "CUDA training step of " << model.getSymName().str() << " (batch " << batch << ", "
       << arch << "): " << cubin->kernels.size() << " kernels\n";
    // Every kernel of the module: the generated row kernels and the fixed ones.
    for (const KernelResources &r : cubin->kernels) {
      bool ok = !r.spills() && r.registers <= attnc::tile::kMaxRegsPerThread &&
                r.staticSmemBytes <= limit;
      os << "  " << (ok ? "ok  " : "FAIL") << " " << r.name << ": " << r.registers << " registers, "
         << r.spillStoreBytes << "+" << r.spillLoadBytes << " bytes spilled, " << r.staticSmemBytes
         << " of " << limit << " bytes shared memory\n";
      failures += !ok;
    }
  }
  if (failures) {
    diagnostics() << "attnc: error: " << failures << " training-step kernel(s) failed the " << arch
                  << " resource check\n";
    return mlir::failure();
  }
  return mlir::success();
}

void reportCompiledPlans(ModuleOp resolved, int batch, std::ostream &os) {
  auto mib = [](int64_t bytes) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << double(bytes) / (1 << 20) << " MiB";
    return s.str();
  };
  for (attn::ModelOp model : resolved.getOps<attn::ModelOp>()) {
    const bool reversible = (*model.getBody().getOps<attn::LayerOp>().begin()).getReversible();
    // Reversible layers rebuild their inputs anyway: recomputation changes
    // nothing for them.
    for (bool recompute : reversible ? std::vector<bool>{false} : std::vector<bool>{false, true}) {
      ModelGraph g;
      ModelGraphOptions o;
      o.batch = batch, o.recomputeLayers = recompute, o.infer = false;
      if (!compileModelGraph(resolved, model, o, g)) {
        os << "compiled training step of " << model.getSymName().str() << ": failed (see above)\n";
        break;
      }
      // Which of the plans attnc train runs: recomputation unless told not.
      const char *which = reversible  ? "; what attnc train runs"
                          : recompute ? ", each layer recomputed in the backward; what attnc "
                                        "train runs"
                                      : "; attnc train --no-recompute";
      os << "compiled training step of " << model.getSymName().str() << " (batch " << batch << which
         << "): arena " << mib(g.arenaBytes) << " (peak live " << mib(g.peakLiveBytes)
         << "), kept for the backward " << mib(g.keptBytes) << "; " << g.fusedKernels
         << " fused row kernels, " << g.gemms << " GEMMs, " << g.attentionCalls
         << " attention calls\n";
      os << "  kept for the backward by depth:";
      for (int layers : {2, 6, 12}) {
        ModelGraph d;
        o.layers = layers;
        if (!compileModelGraph(resolved, model, o, d))
          break;
        os << " " << layers << ": " << mib(d.keptBytes) << " (arena " << mib(d.arenaBytes) << ")"
           << (layers == 12 ? "" : ",");
      }
      os << "\n";
    }
  }
}

void reportMemoryPlans(ModuleOp resolved, int batch, std::ostream &os) {
  auto mib = [](int64_t bytes) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << double(bytes) / double(1 << 20) << " MiB";
    return s.str();
  };
  for (attn::ModelOp model : resolved.getOps<attn::ModelOp>()) {
    auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
    auto variant =
        SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
    train::ModelConfig c = modelConfigOf(model, layer, variant);
    if (c.heads <= 0 || c.dModel % c.heads)
      continue;
    ModelGraph g;
    ModelGraphOptions o;
    o.batch = batch, o.recomputeLayers = !layer.getReversible();
    if (!compileModelGraph(resolved, model, o, g)) {
      os << "memory plan of " << model.getSymName().str() << ": failed (see above)\n";
      continue;
    }
    // Weights are counted from the parameter store the runtime allocates
    // (values and gradient buffers) and its constants (LSH rotations).
    const int64_t weights = 4 * (2 * train::parameterCount(c) + train::constantCount(c));
    const int64_t inputs = 4 * 2 * int64_t(batch) * c.seq; // tokens and targets
    os << "memory plan of " << model.getSymName().str() << " (batch " << batch << ", seq " << c.seq
       << ", fp32 CPU runtime): training " << mib(g.keptBytes) << " kept for the backward + "
       << mib(g.arenaBytes - g.keptBytes) << " one layer's recomputation + " << mib(weights)
       << " weights and gradients; inference peak " << mib(g.inferArenaBytes + weights + inputs)
       << " (at " << g.inferPeakWhere << ")\n";
    os << "  activations kept by depth (" << (c.reversible ? "reversible" : "standard")
       << " layers):";
    for (int layers : {2, 6, 12}) {
      ModelGraph d;
      ModelGraphOptions od = o;
      od.layers = layers, od.infer = false;
      if (!compileModelGraph(resolved, model, od, d))
        break;
      os << " " << layers << ": " << mib(d.keptBytes);
    }
    os << "\n";
  }
}

} // namespace attnc::driver
