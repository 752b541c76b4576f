//===- attnc-reference.cpp - The compiled step against the reference ----===//
//
// A test tool, not installed: runs a spec's model through the hand-assembled
// whole-model reference (test/reference/Model.h) and through the step attnc
// compiles, on one batch, and compares them.
//
//   attnc-reference compare SPEC [--model M] --data D --batch B [--seed S]
//       [--no-recompute] [--engine compiled|cuda-sim]
//     the loss and every parameter gradient of the reference and of the
//     compiled step (the CPU's, or the CUDA step on the SIMT emulator);
//     exit 0 when the gradients agree within 1e-3 of each tensor's largest.
//   attnc-reference check-reversible SPEC [--model M] --data D --batch B
//     the reference's reversible backward (inputs rebuilt from outputs)
//     against one from stored inputs, and the activations it keeps at 2, 6
//     and 12 layers.
//
//===----------------------------------------------------------------------===//
#include "driver/ModelSession.h"
#include "driver/Spec.h"
#include "test/reference/Model.h"
#include "tools/ExitCodes.h"

#include "runtime/train/Trainer.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>

using namespace attnc;
using namespace attnc::driver;

namespace {

/// --check-reversible: the backward from rebuilt inputs against the one from
/// stored inputs, and the activation plans for 2, 6 and 12 layers.
mlir::LogicalResult checkReversible(PreparedModel &p, const train::DataSource &data,
                                    const TrainCliOptions &opt) {
  if (!p.config.reversible)
    return commandError("train", "--check-reversible needs a model with reversible layers");
  train::ModelConfig stored = p.config;
  stored.storeReversibleInputs = true;
  train::ParameterStore sa(p.config, opt.run.seed), sb(stored, opt.run.seed);
  train::Model a(sa, attentionOf(p)), b(sb, attentionOf(p));
  train::Batch batch = data.train(opt.run.seed, 0, opt.batch);
  sa.zeroGrads();
  sb.zeroGrads();
  a.setDropout(true, 0), b.setDropout(true, 0); // the rebuild must replay the masks
  Expected<train::StepResult> ra = a.run(batch, true), rb = b.run(batch, true);
  if (!ra || !rb)
    return commandError("train", !ra ? ra.error() : rb.error());
  std::vector<train::ParamRef> pa = sa.params(), pb = sb.params();
  double worst = 0;
  std::string where;
  for (size_t i = 0; i < pa.size(); ++i)
    for (int64_t j = 0; j < pa[i].size; ++j) {
      double d = std::abs(double(pa[i].grad[j]) - double(pb[i].grad[j]));
      if (d > worst)
        worst = d, where = pa[i].name;
    }
  bool ok = worst <= 1e-4;
  std::cout << "reversible backward (rebuilt inputs) vs stored inputs: max |difference| of the "
               "gradients "
            << worst << " (" << where << ")" << (ok ? "" : " > 1e-4: FAILED") << "\n";
  std::cout << "activation memory kept for the backward (batch " << opt.batch << "):\n";
  for (int layers : {2, 6, 12}) {
    train::ModelConfig c = p.config;
    c.layers = layers;
    train::ModelConfig s = c;
    s.storeReversibleInputs = true; // what storing every layer's inputs would keep
    std::cout << "  " << layers << " layers: reversible "
              << train::Model::activationPlanOf(c, opt.batch).keptBytes << " bytes, storing inputs "
              << train::Model::activationPlanOf(s, opt.batch).keptBytes << " bytes\n";
  }
  return mlir::success(ok);
}

/// --compare-engines: the runtime's and the compiled step on one batch.
mlir::LogicalResult compareEngines(PreparedModel &p, const train::DataSource &data,
                                   const TrainCliOptions &opt) {
  train::ParameterStore store(p.config, opt.run.seed);
  train::Model model(store, attentionOf(p));
  StepPlan plan;
  plan.batch = opt.batch, plan.recomputeLayers = opt.recomputeLayers, plan.engine = opt.run.engine;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, store, plan);
  if (!step)
    return commandError("train", step.error());
  train::Batch batch = data.train(opt.run.seed, 0, opt.batch);
  store.zeroGrads();
  model.setDropout(true, 0);
  Expected<train::StepResult> r = model.run(batch, true);
  if (!r)
    return commandError("train", r.error());
  std::vector<train::ParamRef> params = store.params();
  std::vector<std::vector<float>> runtimeGrads;
  for (const train::ParamRef &pr : params)
    runtimeGrads.emplace_back(pr.grad, pr.grad + pr.size);
  store.zeroGrads();
  Expected<double> loss = (*step)->run(batch, true, 0);
  if (!loss)
    return commandError("train", loss.error());
  // Per tensor: max |difference| relative to the tensor's largest gradient,
  // or to 1e-4 of the largest of all when the tensor's is tiny (the key
  // bias's gradient is zero in exact arithmetic: softmax ignores a shift).
  double global = 0;
  for (const std::vector<float> &g : runtimeGrads)
    for (float x : g)
      global = std::max(global, std::abs(double(x)));
  double worst = 0;
  std::string where;
  for (size_t i = 0; i < params.size(); ++i) {
    double diff = 0, scale = std::max(1e-4 * global, 1e-30);
    for (int64_t j = 0; j < params[i].size; ++j) {
      diff = std::max(diff, std::abs(double(params[i].grad[j]) - runtimeGrads[i][size_t(j)]));
      scale = std::max(scale, std::abs(double(runtimeGrads[i][size_t(j)])));
    }
    if (diff / scale > worst)
      worst = diff / scale, where = params[i].name;
  }
  double lossDiff = std::abs(*loss - r->meanLoss());
  bool ok = worst <= 1e-3 && lossDiff <= 1e-4 * std::max(1.0, std::abs(r->meanLoss()));
  std::cout << "loss: runtime " << r->meanLoss() << ", "
            << (opt.run.engine == "cuda-sim" ? "cuda-sim " : "compiled ") << *loss << "\n"
            << "gradients: worst max|difference|/max|gradient| " << worst << " (" << where
            << ") over " << params.size() << " tensors" << (ok ? "" : "  > 1e-3: FAILED") << "\n";
  return mlir::success(ok);
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"attnc-reference: the compiled step against the hand-assembled reference model"};
  app.require_subcommand(1);
  TrainCliOptions opt;
  CLI::App *compare = app.add_subcommand(
      "compare", "one batch through the reference and the compiled step: loss and gradients");
  CLI::App *reversible = app.add_subcommand(
      "check-reversible", "the reversible backward from rebuilt inputs against stored inputs");
  for (CLI::App *sub : {compare, reversible}) {
    sub->add_option("spec", opt.spec, "the .attn spec file")->required();
    sub->add_option("--model", opt.run.model, "which model of the spec (default: the only one)");
    sub->add_option("--data", opt.run.data, "synthetic:duplicate or text files")->required();
    sub->add_option("--batch", opt.batch, "sequences in the batch")->capture_default_str();
    sub->add_option("--seed", opt.run.seed, "initialisation and data seed")->capture_default_str();
  }
  compare->add_flag("!--no-recompute", opt.recomputeLayers,
                    "compile the step keeping every standard layer's activations");
  compare->add_option("--engine", opt.run.engine, "compiled (the CPU step) or cuda-sim")
      ->check(CLI::IsMember({"compiled", "cuda-sim"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  PreparedModel p;
  if (mlir::failed(prepare("train", opt, p, Pin::None)))
    return tools::kExitInput;
  Expected<train::DataSource> data = train::DataSource::open(opt.run.data, p.config, 0.05);
  if (!data)
    return tools::exitCode(commandError("train", data.error()));
  return tools::exitCode(compare->parsed() ? compareEngines(p, *data, opt)
                                           : checkReversible(p, *data, opt));
}
