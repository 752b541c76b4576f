//===- ModelGraph.cpp - Whole-model compilation in the driver -------------===//
#include "tools/attnc/ModelGraph.h"

#include "codegen/ModelEmitter.h"
#include "passes/Passes.h"

#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <iomanip>

using namespace mlir;

namespace attnc::driver {

bool compileModelGraph(ModuleOp resolved, attn::ModelOp model, int batch, int layers,
                       bool emitSource, ModelGraph &out, bool recomputeLayers) {
  OwningOpRef<ModuleOp> copy(resolved.clone());
  // Only this model (expand-model expands every model it finds).
  for (attn::ModelOp m : llvm::make_early_inc_range(copy->getOps<attn::ModelOp>())) {
    if (m.getSymName() != model.getSymName())
      m.erase();
    else if (layers > 0)
      m.setLayersAttr(Builder(m).getI64IntegerAttr(layers));
  }
  PassManager pm(copy->getContext());
  ExpandModelOptions expand;
  expand.batch = batch;
  pm.addPass(createExpandModel(expand));
  DeriveModelBackwardOptions derive;
  derive.recomputeLayers = recomputeLayers;
  pm.addPass(createDeriveModelBackward(derive));
  pm.addPass(createFuseRows());
  pm.addPass(createPlanMemory());
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
        os << "compiled training step of " << model.getSymName().str()
           << ": failed (see above)\n";
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
        os << " " << layers << ": " << mib(d.keptBytes) << " (arena " << mib(d.arenaBytes)
           << ")" << (layers == 12 ? "" : ",");
      }
      os << "\n";
    }
  }
}

} // namespace attnc::driver
