//===- TuneFfn.cpp - attnc tune: the feed-forward row chunk ---------------===//
//
// The FFN of a layer runs over the rows in chunks (`ffn(chunk = C)`): the
// result is the same for every chunk, the speed is not (small chunks pack
// the weights more often, large ones spill the chunk x d_ff intermediate
// out of the cache). When the spec leaves the chunk `auto`, attnc tune
// times one layer's compiled training step (forward + backward, as attnc
// train runs it) per candidate and keeps the heuristic unless one beats it
// beyond the noise; attnc train then uses the entry.
//
//===----------------------------------------------------------------------===//
#include "driver/bench/BenchCommon.h"
#include "driver/Report.h"
#include "driver/Compile.h"
#include "driver/ModelConfigOf.h"
#include "driver/Run.h"
#include "driver/ModelGraph.h"
#include "driver/tune/Tune.h"

#include "runtime/KernelCache.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/tune/TuningDb.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <ostream>
#include <unistd.h>

using namespace mlir;

namespace attnc::driver {

/// What the chunk's speed depends on: the FFN's dims and activation and the
/// layer kind; the bucket is the sequence length (the batch is attnc
/// train's, unknown to the database key).
tune::KernelKey ffnKey(const train::ModelConfig &c) {
  return tune::ffnKey(c.dModel, c.dff, act::kindName(c.act), c.reversible, c.seq);
}

FfnBench::FfnBench(attn::ModelOp model, int batch, int repeats)
    : batch_(batch), repeats_(repeats), model_(model) {
  auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
  variant_ = SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
  cfg_ = modelConfigOf(model, layer, variant_);
  cfg_.layers = 1; // every layer's FFN is the same; one layer is the unit
}

mlir::LogicalResult FfnBench::compile(ModuleOp module) {
  codegen::AttentionShape shape;
  shape.batch = batch_, shape.heads = cfg_.heads, shape.seq = cfg_.seq;
  shape.headDim = cfg_.dModel / cfg_.heads, shape.maxSeq = cfg_.seq;
  shape.elementType = FloatType::getF32(module.getContext());
  shape.withLengths = true, shape.differentiate = true;
  if (mlir::failed(compileCpuAttention(module, variant_, shape, attention_)))
    return mlir::failure();
  module_ = module;
  data_ = syntheticBatch(cfg_, batch_);
  return mlir::success();
}

double FfnBench::time(int chunk) {
  ModelGraphOptions o;
  o.batch = batch_, o.layers = 1, o.emitSource = true, o.infer = false;
  o.recomputeLayers = !cfg_.reversible, o.ffnChunk = chunk;
  ModelGraph g;
  if (!compileModelGraph(module_, model_, o, g))
    return -1.0;
  train::ModelConfig c = cfg_;
  c.ffnChunk = chunk;
  train::ParameterStore store(c, 0);
  Expected<std::unique_ptr<train::CompiledStep>> step = train::CompiledStep::create(
      std::move(g.step), store, [&](const AttentionInputs &in) { return attention_->run(in); },
      HostCompiler(&KernelCache::processDefault()));
  if (!step)
    return -1.0;
  bool ok = true;
  double ms = bench::medianMs(repeats_, [&] { ok = ok && bool((*step)->run(data_, true, 0)); });
  return ok ? ms : -1.0;
}

mlir::LogicalResult tuneFfnChunk(ModuleOp module, attn::ModelOp model, const TuneOptions &opt,
                                 const std::string &dbPath, const std::string &toolchain,
                                 double &budgetLeft) {
  const std::string name = model.getSymName().str();
  FfnBench ffn(model, opt.batch, opt.repeats);
  if (mlir::failed(ffn.compile(module)))
    return mlir::failure();
  const train::ModelConfig &cfg = ffn.config();
  const int B = opt.batch, heuristic = cfg.ffnChunk;
  const int64_t rows = int64_t(B) * cfg.seq;
  auto timeChunk = [&](int chunk) { return ffn.time(chunk); };

  std::vector<int> candidates;
  for (int chunk : {16, 32, 64, 128, 256, 512, 1024, 2048})
    if (chunk < rows)
      candidates.push_back(chunk);
  candidates.push_back(0); // all rows at once
  Expected<tune::TuningDb> db = tune::TuningDb::open(dbPath);
  if (!db) {
    diagnostics() << "attnc tune: error: " << db.error() << "\n";
    return mlir::failure();
  }
  db->setAutosave(std::chrono::milliseconds(0));
  const tune::DeviceKey device = tune::cpuDevice();
  const tune::KernelKey key = ffnKey(cfg);
  const auto t0 = bench::Clock::now();
  auto spent = [&] { return std::chrono::duration<double>(bench::Clock::now() - t0).count(); };
  std::vector<std::pair<double, int>> timed;
  size_t done = 0;
  const bool tty = isatty(STDERR_FILENO);
  for (int chunk : candidates) {
    const std::string config = tune::ffnChunkConfig(chunk);
    if (const tune::Measurement *m = db->measured(device, key, toolchain, config)) {
      if (!m->failed())
        timed.push_back({m->medianMs, chunk});
      ++done;
      continue;
    }
    if (spent() > budgetLeft)
      break;
    tune::Measurement m;
    m.config = config, m.repeats = opt.repeats;
    m.medianMs = timeChunk(chunk);
    if (m.medianMs < 0)
      m.error = "the training step failed";
    else
      timed.push_back({m.medianMs, chunk});
    if (Status s = db->recordMeasurement(device, key, toolchain, m); !s) {
      diagnostics() << "attnc tune: error: " << s.error() << "\n";
      return mlir::failure();
    }
    ++done;
    if (tty) { // the live line: done/total, best so far, ETA
      double best = timed.empty() ? 0 : std::min_element(timed.begin(), timed.end())->first;
      diagnostics() << "\r  " << name << " ffn: " << done << "/" << candidates.size()
                    << " chunks, best " << bench::fmt(best, 3) << " ms, ETA "
                    << bench::fmt(spent() / double(done) * double(candidates.size() - done), 0)
                    << " s      " << std::flush;
    }
  }
  if (tty)
    diagnostics() << "\r" << std::string(70, ' ') << "\r";
  if (done < candidates.size() || timed.empty()) {
    budgetLeft -= spent();
    results() << name << " ffn: " << done << " of " << candidates.size()
              << " chunks measured when the --budget ran out; rerun to continue\n";
    return mlir::success();
  }
  std::sort(timed.begin(), timed.end());
  std::vector<int> finalists = {heuristic};
  for (size_t i = 0; i < timed.size() && finalists.size() < 4; ++i)
    if (timed[i].second != heuristic)
      finalists.push_back(timed[i].second);
  std::optional<Finalists> pick =
      chooseAmongFinalists(finalists.size(), [&](size_t i) { return timeChunk(finalists[i]); });
  budgetLeft -= spent();
  if (!pick) {
    diagnostics() << "attnc tune: error: " << name << ": the training step failed\n";
    return mlir::failure();
  }
  const size_t best = pick->best;
  db->choose(device, key, toolchain, tune::ffnChunkConfig(finalists[best]), pick->med[best],
             pick->spread[best]);
  if (Status s = db->save(); !s) {
    diagnostics() << "attnc tune: error: " << s.error() << "\n";
    return mlir::failure();
  }
  results() << name << " ffn (" << key.shapeBucket << ", " << rows
            << " rows): " << tune::ffnChunkConfig(finalists[best]) << " "
            << bench::fmt(pick->med[best], 3) << " ms per layer step (spread "
            << bench::fmt(100 * pick->spread[best], 1) << " %); heuristic "
            << tune::ffnChunkConfig(heuristic) << " " << bench::fmt(pick->med[0], 3) << " ms ("
            << bench::fmt(pick->med[0] / pick->med[best]) << "x)"
            << (best == 0 ? ", kept: no chunk beat it beyond the noise" : "") << "\n";
  return mlir::success();
}

} // namespace attnc::driver
