//===- Parameters.cpp - A model's named weights, gradients and constants --===//
#include "runtime/train/Parameters.h"

#include "runtime/PhiloxDraws.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace attnc::train {

std::vector<ParameterShape> parameterShapes(const ModelConfig &cfg) {
  const int64_t D = cfg.dModel, F = cfg.dff, V = cfg.vocab, S = cfg.seq, H = cfg.heads;
  std::vector<ParameterShape> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    out.push_back({std::move(name), std::move(shape), decay});
  };
  // The order is the checkpoints' and the compiled functions' argument
  // order (attn-expand-model). MLM adds the mask token as one more
  // embedding row (docs/training.md).
  add("tok_emb", {V + (cfg.objective == Objective::Mlm ? 1 : 0), D}, true);
  add("pos_emb", {S, D}, false);
  if (cfg.lowrank && cfg.share == "layerwise")
    add("lowrank.E", {cfg.lowrankK, S}, true);
  for (int l = 0; l < cfg.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    add(p + "ln1.gamma", {D}, false);
    add(p + "ln1.beta", {D}, false);
    add(p + "attn.wq", {D, D}, true);
    add(p + "attn.bq", {D}, false);
    if (!cfg.sharedQk) {
      add(p + "attn.wk", {D, D}, true);
      add(p + "attn.bk", {D}, false);
    }
    add(p + "attn.wv", {D, D}, true);
    add(p + "attn.bv", {D}, false);
    add(p + "attn.wo", {D, D}, true);
    add(p + "attn.bo", {D}, false);
    if (cfg.ffn || cfg.reversible) {
      add(p + "ln2.gamma", {D}, false);
      add(p + "ln2.beta", {D}, false);
      add(p + "ffn.w1", {D, F}, true);
      add(p + "ffn.b1", {F}, false);
      add(p + "ffn.w2", {F, D}, true);
      add(p + "ffn.b2", {D}, false);
    }
    if (cfg.lowrank && cfg.share != "layerwise") {
      std::vector<int64_t> shape = {cfg.lowrankK, S};
      if (cfg.share == "none")
        shape.insert(shape.begin(), H);
      add(p + "attn.E", shape, true);
      if (cfg.share == "none" || cfg.share == "headwise")
        add(p + "attn.F", shape, true);
    }
    if (!cfg.headParams.empty())
      add(p + "attn.head_params", {int64_t(cfg.headParams.size()), H}, false);
  }
  const int64_t width = cfg.reversible ? 2 * D : D;
  add("final_ln.gamma", {width}, false);
  add("final_ln.beta", {width}, false);
  add("head.w", {width, V}, true);
  add("head.b", {V}, false);
  return out;
}

int64_t parameterCount(const ModelConfig &config) {
  int64_t n = 0;
  for (const ParameterShape &p : parameterShapes(config)) {
    int64_t e = 1;
    for (int64_t d : p.shape)
      e *= d;
    n += e;
  }
  return n;
}

std::vector<int64_t> lshRotationShape(const ModelConfig &c) {
  if (c.lshRounds <= 0)
    return {};
  return {c.lshRounds, c.dModel / c.heads, c.lshBuckets / 2};
}

int64_t constantCount(const ModelConfig &config) {
  const std::vector<int64_t> shape = lshRotationShape(config);
  if (shape.empty())
    return 0;
  return int64_t(config.layers) * shape[0] * shape[1] * shape[2];
}

ParameterStore::ParameterStore(ModelConfig config, uint64_t seed) : cfg_(std::move(config)) {
  for (ParameterShape &shape : parameterShapes(cfg_)) {
    auto p = std::make_unique<Parameter>();
    p->name = std::move(shape.name);
    p->shape = std::move(shape.shape);
    int64_t n = 1;
    for (int64_t d : p->shape)
      n *= d;
    p->value.assign(size_t(n), 0.0f);
    p->grad.assign(size_t(n), 0.0f);
    p->decay = shape.decay;
    params_.push_back(std::move(p));
  }
  const std::vector<int64_t> rotation = lshRotationShape(cfg_);
  for (int l = 0; l < cfg_.layers && !rotation.empty(); ++l) {
    std::vector<float> r(size_t(rotation[0] * rotation[1] * rotation[2]));
    philox::lshRotations(cfg_.lshSeed, uint32_t(l), r);
    rotations_.push_back(st::Tensor::f32(rotation, r));
  }
  init(seed);
}

namespace {
/// The embedding tables' standard deviation (GPT-2's, BERT's).
constexpr float kEmbeddingStd = 0.02f;
/// The noise on the low-rank projections' pooling start (a pooled row's
/// in-segment weights are k/S).
constexpr float kPoolingNoise = 0.01f;
} // namespace

void ParameterStore::init(uint64_t seed) {
  // Random draws from Philox (stream = parameter index). The recipe and the
  // measurements behind each choice: docs/training.md, "The recipe".
  const float outScale = 1.0f / std::sqrt(2.0f * float(std::max(1, cfg_.layers)));
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter &p = *params_[i];
    const std::string &n = p.name;
    auto endsWith = [&](const char *suf) {
      size_t m = std::strlen(suf);
      return n.size() >= m && n.compare(n.size() - m, m, suf) == 0;
    };
    auto normal = [&](float stddev) {
      for (size_t k = 0; k < p.value.size(); ++k)
        p.value[k] = stddev * philox::normal(seed, uint32_t(1000 + i), k);
    };
    if (endsWith(".gamma")) {
      std::fill(p.value.begin(), p.value.end(), 1.0f);
      continue;
    }
    if (endsWith("head_params")) {
      const int H = cfg_.heads;
      for (size_t k = 0; k < cfg_.headParams.size(); ++k)
        for (int h = 0; h < H; ++h)
          p.value[k * H + h] = cfg_.headParams[k].alibi
                                   ? float(std::exp2(-8.0 * double(h + 1) / double(H)))
                                   : cfg_.headParams[k].value;
      continue;
    }
    bool bias = endsWith(".beta") || endsWith(".bq") || endsWith(".bk") || endsWith(".bv") ||
                endsWith(".bo") || endsWith(".b1") || endsWith(".b2") || endsWith("head.b");
    if (bias)
      continue;
    if (endsWith("_emb")) {
      // Token and position tables (BERT's, GPT-2's scale). Not sinusoids:
      // they helped the masked LMs but kept the LSH duplication model at
      // chance (docs/training.md, "The recipe").
      normal(kEmbeddingStd);
    } else if (endsWith(".E") || endsWith(".F")) {
      // Mean pooling over k segments of the sequence, plus a little noise to
      // tell heads and rows apart: the pooling projection the Linformer
      // paper lists beside the learned one, as the learned one's start.
      const int64_t K = cfg_.lowrankK, S = cfg_.seq;
      for (size_t k = 0; k < p.value.size(); ++k) {
        const int64_t col = int64_t(k) % S, row = (int64_t(k) / S) % K;
        p.value[k] = (col * K / S == row ? float(K) / float(S) : 0.0f) +
                     kPoolingNoise * philox::normal(seed, uint32_t(1000 + i), k);
      }
    } else {
      // Linear maps [in, out]: variance preserving, N(0, 1/in) (LeCun);
      // the residual branches' output maps scaled by 1/sqrt(2·layers) (GPT-2).
      float stddev = 1.0f / std::sqrt(float(p.shape[0]));
      if (endsWith("attn.wo") || endsWith("ffn.w2"))
        stddev *= outScale;
      normal(stddev);
    }
  }
}

void ParameterStore::zeroGrads() {
  for (auto &p : params_)
    std::fill(p->grad.begin(), p->grad.end(), 0.0f);
}

std::vector<ParamRef> ParameterStore::params() {
  std::vector<ParamRef> out;
  for (auto &p : params_)
    out.push_back({p->name, p->value.data(), p->grad.data(), int64_t(p->value.size()), p->decay});
  return out;
}

Parameter *ParameterStore::find(const std::string &name) {
  for (auto &p : params_)
    if (p->name == name)
      return p.get();
  return nullptr;
}

const st::Tensor *ParameterStore::constant(const std::string &name) const {
  for (size_t l = 0; l < rotations_.size(); ++l)
    if (name == "layers." + std::to_string(l) + ".attn.lsh_rotations")
      return &rotations_[l];
  return nullptr;
}

void *ParameterStore::argument(const std::string &name) {
  if (Parameter *p = find(name))
    return p->value.data();
  if (const st::Tensor *c = constant(name))
    return const_cast<void *>(static_cast<const void *>(c->data.data()));
  return nullptr;
}

int64_t ParameterStore::numParams() const {
  int64_t n = 0;
  for (auto &p : params_)
    n += int64_t(p->value.size());
  return n;
}

void ParameterStore::saveWeights(st::File &out) const {
  for (auto &p : params_)
    out.tensors[p->name] = st::Tensor::f32(p->shape, p->value);
}

Status ParameterStore::loadWeights(const st::File &in) {
  for (auto &p : params_) {
    auto it = in.tensors.find(p->name);
    if (it == in.tensors.end())
      return makeError("weights: missing tensor '" + p->name + "'");
    if (it->second.dtype != st::DType::F32 || it->second.shape != p->shape)
      return makeError("weights: tensor '" + p->name + "' is " + st::dtypeName(it->second.dtype) +
                       " " + it->second.shapeStr() + "; the model needs F32 " +
                       st::Tensor::f32(p->shape, {}).shapeStr());
    // Copy into the existing storage: ParamRefs handed out earlier point at it.
    std::vector<float> v = it->second.asF32();
    std::copy(v.begin(), v.end(), p->value.begin());
  }
  return {};
}

std::vector<std::string> ParameterStore::loadMatchingWeights(const st::File &in,
                                                             std::vector<std::string> &kept) {
  std::vector<std::string> loaded;
  for (auto &p : params_) {
    auto it = in.tensors.find(p->name);
    if (it == in.tensors.end() || it->second.dtype != st::DType::F32 ||
        it->second.shape != p->shape) {
      kept.push_back(p->name);
      continue;
    }
    std::vector<float> v = it->second.asF32();
    std::copy(v.begin(), v.end(), p->value.begin());
    loaded.push_back(p->name);
  }
  return loaded;
}

} // namespace attnc::train
