//===- ModelConfig.cpp - A spec model as the training runtime's config ----===//
#include "driver/ModelConfig.h"

#include <iomanip>
#include <random>
#include <sstream>

namespace attnc::driver {

train::ModelConfig modelConfigOf(attn::ModelOp model, attn::LayerOp layer,
                                 attn::VariantOp variant) {
  train::ModelConfig c;
  c.vocab = int(model.getVocab()), c.seq = int(model.getSeq()), c.dModel = int(model.getDModel());
  c.heads = int(model.getHeads()), c.dff = int(model.getDFf()), c.layers = int(model.getLayers());
  c.reversible = layer.getReversible();
  c.ffn = layer.getFfnAct().has_value(); // no ffn clause: attention-only layers
  if (auto act = layer.getFfnAct())
    c.act = *act == attn::Activation::relu   ? train::Activation::Relu
            : *act == attn::Activation::silu ? train::Activation::Silu
                                             : train::Activation::Gelu;
  if (auto chunk = layer.getFfnChunk())
    c.ffnChunk = int(*chunk);
  c.objective = model.getObjective() == attn::Objective::mlm         ? train::Objective::Mlm
                : model.getObjective() == attn::Objective::duplicate ? train::Objective::Duplicate
                                                                     : train::Objective::CausalLm;
  if (auto p = model.getDropout())
    c.dropout = float(p->convertToDouble());
  if (auto p = variant.getDropout())
    c.attentionDropout = float(p->convertToDouble());
  c.sharedQk = variant.getSharedQk();
  if (auto lsh = variant.getLshAttr()) {
    c.lshRounds = int(lsh.getRounds()), c.lshBuckets = int(lsh.getBuckets());
    c.lshSeed = uint64_t(lsh.getSeed());
  }
  if (auto lr = variant.getLowrankAttr()) {
    c.lowrank = true;
    c.share = stringifyShareMode(lr.getShare()).str();
    c.lowrankK = int(lr.getK());
  }
  if (auto decls = variant.getParams())
    for (mlir::Attribute a : *decls) {
      auto hp = llvm::cast<attn::HeadParamAttr>(a);
      c.headParams.push_back({hp.getName().str(), hp.getInit() == attn::ParamInit::alibi,
                              float(hp.getValue().convertToDouble()), hp.getLearned()});
    }
  return c;
}

std::set<std::string> modelsWithAutoFfnChunk(mlir::ModuleOp module) {
  std::set<std::string> names;
  for (attn::ModelOp model : module.getOps<attn::ModelOp>())
    for (attn::LayerOp layer : model.getBody().getOps<attn::LayerOp>())
      if (auto chunk = layer.getFfnChunk(); chunk && int64_t(*chunk) == attn::kAuto)
        names.insert(model.getSymName().str());
  return names;
}

void reportMemoryPlans(mlir::ModuleOp module, int batch, std::ostream &os) {
  auto mib = [](int64_t bytes) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << double(bytes) / double(1 << 20) << " MiB";
    return s.str();
  };
  for (attn::ModelOp model : module.getOps<attn::ModelOp>()) {
    auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
    auto variant = mlir::SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(
        model, layer.getAttentionAttr());
    train::ModelConfig c = modelConfigOf(model, layer, variant);
    if (c.heads <= 0 || c.dModel % c.heads)
      continue;
    // Weights are allocated to count them (and the head's packed copies);
    // the attention is never called.
    train::Model m(c, train::AttentionFn(), 0);
    const train::Model::ActivationPlan t = m.activationPlan(batch);
    const train::Model::InferencePlan inf = m.inferencePlan(batch);
    os << "memory plan of " << model.getSymName().str() << " (batch " << batch << ", seq " << c.seq
       << ", fp32 CPU runtime): training " << mib(t.keptBytes) << " kept for the backward + "
       << mib(t.scratchBytes) << " one layer's recomputation + " << mib(inf.weightBytes)
       << " weights and gradients; inference peak " << mib(inf.totalBytes()) << " (at "
       << inf.peakAt << ")\n";
    os << "  activations kept by depth (" << (c.reversible ? "reversible" : "standard")
       << " layers):";
    for (int layers : {2, 6, 12}) {
      train::ModelConfig d = c;
      d.layers = layers;
      os << " " << layers << ": " << mib(train::Model::activationPlanOf(d, batch).keptBytes);
    }
    os << "\n";
  }
}

train::Batch syntheticBatch(const train::ModelConfig &c, int B) {
  train::Batch b;
  b.B = B, b.S = c.seq;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> byte(0, c.vocab - 1);
  b.inputs.resize(size_t(B) * c.seq);
  for (int32_t &t : b.inputs)
    t = byte(rng);
  b.targets = b.inputs;
  if (c.objective == train::Objective::Mlm)
    train::maskTokens(b, 7, 0, c.vocab, c.vocab);
  return b;
}

} // namespace attnc::driver
