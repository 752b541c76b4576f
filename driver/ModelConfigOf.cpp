//===- ModelConfigOf.cpp - A spec model as the training runtime's config --===//
#include "driver/ModelConfigOf.h"

#include <iomanip>
#include <random>
#include <sstream>

namespace attnc::driver {

// The dialect's activation attribute carries the kernels' encoding.
static_assert(int(attn::Activation::gelu) == int(act::Kind::Gelu) &&
                  int(attn::Activation::relu) == int(act::Kind::Relu) &&
                  int(attn::Activation::silu) == int(act::Kind::Silu),
              "Attn_Activation and attnc::act::Kind disagree");

train::ModelConfig modelConfigOf(attn::ModelOp model, attn::LayerOp layer,
                                 attn::VariantOp variant) {
  train::ModelConfig c;
  c.vocab = int(model.getVocab()), c.seq = int(model.getSeq()), c.dModel = int(model.getDModel());
  c.heads = int(model.getHeads()), c.dff = int(model.getDFf()), c.layers = int(model.getLayers());
  c.reversible = layer.getReversible();
  c.ffn = layer.getFfnAct().has_value(); // no ffn clause: attention-only layers
  if (auto act = layer.getFfnAct())
    c.act = ::attnc::act::Kind(int(*act));
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

train::TrainSettings trainSettingsOf(attn::ModelOp model) {
  train::TrainSettings s;
  mlir::DictionaryAttr dict = model.getTrainAttr();
  if (!dict)
    return s;
  auto f64 = [&](const char *key, std::optional<double> &out) {
    if (auto a = dict.getAs<mlir::FloatAttr>(key))
      out = a.getValueAsDouble();
  };
  auto i64 = [&](const char *key, std::optional<int64_t> &out) {
    if (auto a = dict.getAs<mlir::IntegerAttr>(key))
      out = a.getInt();
  };
  f64("lr", s.lr), f64("weight_decay", s.weightDecay), f64("clip", s.clip);
  i64("warmup", s.warmup), i64("batch", s.batch), i64("steps", s.steps);
  i64("eval_every", s.evalEvery);
  return s;
}

std::set<std::string> modelsWithAutoFfnChunk(mlir::ModuleOp module) {
  std::set<std::string> names;
  for (attn::ModelOp model : module.getOps<attn::ModelOp>())
    for (attn::LayerOp layer : model.getBody().getOps<attn::LayerOp>())
      if (auto chunk = layer.getFfnChunk(); chunk && int64_t(*chunk) == attn::kAuto)
        names.insert(model.getSymName().str());
  return names;
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
