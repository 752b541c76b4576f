//===- Evaluate.cpp - The held-out side of a training run -----------------===//
//
// What a run trains and is measured on: the data sources (synthetic or a
// byte corpus with its held-out tail), the objective's metrics over the
// held-out batches, and the run record attnc eval reads back.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Trainer.h"

#include "runtime/FileSystem.h"

#include <algorithm>
#include <filesystem>

namespace attnc::train {

namespace {
/// The seed of the fixed synthetic evaluation stream (never a training step).
constexpr uint64_t kEvalSeed = 0x5EEDE7A1ull;
} // namespace

Expected<DataSource> DataSource::open(const std::string &spec, const ModelConfig &model,
                                      double heldOutFraction) {
  DataSource d;
  d.model_ = model;
  if (spec.rfind("synthetic:", 0) == 0) {
    if (spec != "synthetic:duplicate")
      return makeError("unknown synthetic data '" + spec + "'; expected synthetic:duplicate");
    if (model.objective != Objective::Duplicate)
      return makeError("synthetic:duplicate is the duplication task's data; this model's "
                       "objective needs text (--data FILE or DIR)");
    if (model.seq < 4 || model.seq % 2)
      return makeError("the duplication task needs an even sequence length >= 4, the model has " +
                       std::to_string(model.seq));
    d.duplicate_ = true;
    return d;
  }
  if (model.objective == Objective::Duplicate)
    return makeError("the duplication task trains on --data synthetic:duplicate, not '" + spec +
                     "'");
  if (model.vocab < 256)
    return makeError("text is read as bytes, so the model needs vocab >= 256; it has " +
                     std::to_string(model.vocab));
  Expected<ByteCorpus> corpus =
      ByteCorpus::load(fs::splitPathList(spec), heldOutFraction, model.seq);
  if (!corpus)
    return corpus.takeError();
  d.corpus_.emplace(std::move(corpus).take());
  return d;
}

Batch DataSource::train(uint64_t seed, int64_t step, int B) const {
  const int S = model_.seq, V = model_.vocab;
  if (duplicate_)
    return duplicateBatch(seed, step, B, S, V);
  if (model_.objective == Objective::Mlm)
    return corpus_->mlmBatch(seed, step, B, S, /*maskToken=*/V, V);
  return corpus_->causalBatch(seed, step, B, S);
}

Batch DataSource::eval(int64_t index, int B) const {
  const int S = model_.seq, V = model_.vocab;
  if (duplicate_)
    return duplicateBatch(kEvalSeed, index, B, S, V);
  if (model_.objective == Objective::Mlm)
    return corpus_->heldOutMlmBatch(index, B, S, kEvalSeed, /*maskToken=*/V, V);
  return corpus_->heldOutCausalBatch(index, B, S);
}

int64_t DataSource::evalBatchesAvailable(int B) const {
  return duplicate_ ? INT64_MAX : corpus_->heldOutBatches(B, model_.seq);
}

std::string DataSource::describe() const {
  if (duplicate_)
    return "synthetic duplication task (0 w 0 w)";
  return std::to_string(corpus_->trainBytes()) + " training bytes, " +
         std::to_string(corpus_->heldOutBytes()) + " held out";
}

std::string absoluteDataPaths(const std::string &data) {
  if (data.rfind("synthetic:", 0) == 0)
    return data;
  // Split as DataSource::open splits it.
  std::string out;
  for (const std::string &part : fs::splitPathList(data)) {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(part, ec);
    out += (out.empty() ? "" : ":") + (ec ? part : p.lexically_normal().string());
  }
  return out;
}

RecordedRun recordedRun(const nlohmann::json &state) {
  RecordedRun r;
  if (!state.is_object())
    return r;
  auto integer = [](const nlohmann::json &o, const char *key) -> std::optional<int> {
    if (o.is_object() && o.contains(key) && o[key].is_number_integer() && o[key].get<int>() > 0)
      return o[key].get<int>();
    return std::nullopt;
  };
  if (state.contains("config"))
    r.batch = integer(state["config"], "batch");
  if (state.contains("run")) {
    const nlohmann::json &run = state["run"];
    r.evalBatches = integer(run, "eval_batches");
    if (run.is_object() && run.contains("data") && run["data"].is_string())
      r.data = run["data"].get<std::string>();
  }
  return r;
}

Expected<EvalResult> evaluate(const Forward &forward, const ModelConfig &config,
                              const DataSource &data, int batches) {
  EvalResult r;
  if (forward.batch <= 0 || !forward.run)
    return makeError("evaluation: no forward function");
  double lossSum = 0;
  int64_t correct = 0;
  const int B = forward.batch;
  int64_t n = std::min<int64_t>(batches, data.evalBatchesAvailable(B));
  for (int64_t i = 0; i < n; ++i) {
    Batch b = data.eval(i, B);
    if (b.B == 0)
      continue;
    if (b.B < B) { // the held-out text's last, short batch: padded with
      // sequences that count nothing (sequences never see each other)
      b.inputs.resize(size_t(B) * size_t(b.S), 0);
      b.targets.resize(size_t(B) * size_t(b.S), -1);
      b.B = B;
    }
    Expected<const float *> logits = forward.run(b);
    if (!logits)
      return logits.takeError();
    CrossEntropy ce = softmaxCrossEntropy(*logits, b.targets.data(), nullptr, int64_t(b.B) * b.S,
                                          config.vocab, 0.0f);
    lossSum += ce.lossSum;
    r.positions += ce.count;
    correct += ce.correct;
  }
  if (r.positions) {
    r.loss = lossSum / double(r.positions);
    r.bitsPerByte = r.loss / std::log(2.0);
    r.accuracy = double(correct) / double(r.positions);
  }
  return r;
}

} // namespace attnc::train
