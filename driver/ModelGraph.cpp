//===- ModelGraph.cpp - Whole-model compilation in the driver -------------===//
#include "driver/ModelGraph.h"

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
#include <iostream>

using namespace mlir;

namespace attnc::driver {

bool compileModelGraph(ModuleOp resolved, attn::ModelOp model, int batch, int layers,
                       bool emitSource, ModelGraph &out, bool recomputeLayers, bool fuseInChunks) {
  OwningOpRef<ModuleOp> copy(resolved.clone());
  // Only this model (expand-model expands every model it finds).
  for (attn::ModelOp m : llvm::make_early_inc_range(copy->getOps<attn::ModelOp>())) {
    if (m.getSymName() != model.getSymName())
      m.erase();
    else if (layers > 0)
      m.setLayersAttr(Builder(m).getI64IntegerAttr(layers));
  }
  PassManager pm(copy->getContext());
  ModelStepPipelineOptions step;
  step.batch = batch, step.recomputeLayers = recomputeLayers, step.fuseInChunks = fuseInChunks;
  populateModelStepPipeline(pm, step);
  if (failed(pm.run(*copy)))
    return false;
  auto func = copy->lookupSymbol<func::FuncOp>(("train_" + model.getSymName()).str());
  if (!func)
    return false;
  auto i64 = [&](StringRef name) {
    auto a = func->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : int64_t(0);
  };
  out.arenaBytes = i64("attn.arena_bytes");
  out.peakLiveBytes = i64("attn.peak_live_bytes");
  out.keptBytes = i64("attn.kept_bytes");
  func.walk([&](Operation *op) {
    out.fusedKernels += llvm::isa<attn::FusedRowsOp>(op);
    out.gemms += llvm::isa<attn::MatmulOp>(op);
    out.attentionCalls += llvm::isa<attn::AttentionOp, attn::AttentionGradOp>(op);
    out.rowChunks += llvm::isa<attn::RowChunksOp>(op);
  });
  if (!emitSource)
    return true;
  {
    llvm::raw_string_ostream os(out.ir);
    func.print(os);
  }
  FailureOr<std::string> src = codegen::emitModelStepCpp(func);
  if (failed(src))
    return false;
  out.step.source = *src;
  out.step.symbol = codegen::modelStepSymbol(func);
  // ATTNC_CUDA_ROW_SMEM_BYTES lowers the row kernels' shared memory so the
  // tests reach the scratch path on small models.
  int64_t rowSmem = 48 * 1024;
  if (const char *e = std::getenv("ATTNC_CUDA_ROW_SMEM_BYTES"); e && *e)
    rowSmem = std::max<int64_t>(256, std::atoll(e));
  FailureOr<codegen::CudaModelStep> cuda = codegen::emitModelStepCuda(func, rowSmem);
  if (failed(cuda))
    return false;
  out.step.cudaDeviceSource = std::move(cuda->deviceSource);
  out.step.cudaHostSource = std::move(cuda->hostSource);
  out.step.cudaSymbol = std::move(cuda->symbol);
  out.step.arenaBytes = out.arenaBytes;
  out.step.keptBytes = out.keptBytes;
  out.step.batch = batch;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, "attn.param");
    if (!name)
      name = func.getArgAttrOfType<StringAttr>(i, "attn.input");
    out.step.args.push_back(name ? name.str() : "");
  }
  if (auto gradOf = func->getAttrOfType<ArrayAttr>("attn.grad_of"))
    for (Attribute a : gradOf)
      out.step.gradArgs.push_back(int(llvm::cast<IntegerAttr>(a).getInt()));
  return true;
}

int checkModelStepsWithNvrtc(ModuleOp resolved, const std::string &arch, int batch,
                             std::ostream &os) {
  Expected<GpuArch> gpu = parseGpuArch(arch);
  if (!gpu) {
    std::cerr << "attnc: error: " << gpu.error() << "\n";
    return 1;
  }
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  NvrtcOptions options;
  options.arch = arch;
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
  if (!dirs) {
    std::cerr << "attnc: error: " << dirs.error() << "\n";
    return 1;
  }
  options.includeDirs = *dirs;
  // The step's kernels use static __shared__ storage only: 48 KiB on every arch.
  const int limit = std::min(attnc::tile::smemLimitBytes(gpu->sm), 48 * 1024);
  int failures = 0;
  for (attn::ModelOp model : resolved.getOps<attn::ModelOp>()) {
    ModelGraph g;
    if (!compileModelGraph(resolved, model, batch, 0, /*emitSource=*/true, g,
                           /*recomputeLayers=*/true))
      return 1;
    Expected<Cubin> cubin =
        nvrtc.compile(g.step.cudaSymbol + ".cu", g.step.cudaDeviceSource, options);
    if (!cubin) {
      std::cerr << "attnc: error: the CUDA step of " << model.getSymName().str() << ": "
                << cubin.error() << "\n";
      return 1;
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
    std::cerr << "attnc: error: " << failures << " training-step kernel(s) failed the " << arch
              << " resource check\n";
    return 1;
  }
  return 0;
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
      if (!compileModelGraph(resolved, model, batch, 0, false, g, recompute)) {
        os << "compiled training step of " << model.getSymName().str() << ": failed (see above)\n";
        break;
      }
      os << "compiled training step of " << model.getSymName().str() << " (batch " << batch
         << (recompute ? ", each layer recomputed in the backward" : "") << "): arena "
         << mib(g.arenaBytes) << " (peak live " << mib(g.peakLiveBytes)
         << "), kept for the backward " << mib(g.keptBytes) << "; " << g.fusedKernels
         << " fused row kernels, " << g.gemms << " GEMMs, " << g.attentionCalls
         << " attention calls\n";
      os << "  kept for the backward by depth:";
      for (int layers : {2, 6, 12}) {
        ModelGraph d;
        if (!compileModelGraph(resolved, model, batch, layers, false, d, recompute))
          break;
        os << " " << layers << ": " << mib(d.keptBytes) << " (arena " << mib(d.arenaBytes) << ")"
           << (layers == 12 ? "" : ",");
      }
      os << "\n";
    }
  }
}

} // namespace attnc::driver
