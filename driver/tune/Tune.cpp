//===- Tune.cpp - attnc tune: measured tile configs per machine -----------===//
//
// CPU first: every (block_q, block_kv) of codegen/TuneSpace.h's CPU space
// is compiled (host compiler, kernel cache) and timed forward+backward at
// the model's shape (median of --repeats after a warm-up); the three
// fastest and the heuristic tile are re-timed interleaved, three rounds, and
// the heuristic is kept unless one beats it beyond the measured spread. Every measurement goes into
// the database as it is made, so a run stopped by --budget (or killed) continues where it was.
// Keys: this CPU (TuningDb's cpuDevice), the host compiler's identity, the
// variant (its IR with the tile left out, hashed) and head dim, and the
// bucket of the sequence length and heads (not the batch: `attnc compile`
// does not know it).
//
//===----------------------------------------------------------------------===//
#include "driver/tune/Tune.h"
#include "driver/Report.h"
#include "driver/bench/BenchCommon.h"
#include "driver/Compile.h"
#include "driver/ModelConfigOf.h"
#include "driver/Run.h"

#include "codegen/TuneSpace.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "passes/Passes.h"
#include "runtime/HostCompiler.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/PhiloxDraws.h"
#include "runtime/tune/TuningDb.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <algorithm>
#include <set>
#include <thread>
#include <cmath>
#include <fstream>
#include <ostream>
#include <unistd.h>

using namespace mlir;

namespace attnc::driver {

namespace {

mlir::LogicalResult fail(const std::string &msg) { return commandError("tune", msg); }

std::string dbPath(const std::string &given) {
  return given.empty() ? tune::TuningDb::defaultPath() : given;
}

bool tileIsAuto(attn::TileAttr t) {
  return t.getBlockQ() == attn::kAuto && t.getBlockKv() == attn::kAuto;
}

/// A tuning entry's tile config as the tile model's TileConfig.
bool parseConfig(const std::string &cfg, tile::TileConfig &c) {
  std::optional<tune::TileChoice> t = tune::parseTileConfig(cfg);
  if (!t)
    return false;
  c = {t->blockQ, t->blockKv, t->warps, t->stages};
  return true;
}

/// The spec's module with its tunables resolved; `autoFfn` receives the
/// models whose FFN chunk the spec left to the tuner (known only before
/// resolving). Null on failure (errors printed).
OwningOpRef<ModuleOp> loadResolvedSpec(const std::string &spec, const std::string &specText,
                                       const char *cmd, MLIRContext &context,
                                       std::set<std::string> &autoFfn) {
  OwningOpRef<ModuleOp> module = loadSpecModule(spec, cmd, context, nullptr, specText);
  if (!module)
    return nullptr;
  autoFfn = modelsWithAutoFfnChunk(*module);
  ResolveFor heuristics; // what is measured starts from the heuristics
  heuristics.useTuningDb = false;
  if (!resolveAuto(*module, heuristics))
    return nullptr;
  return module;
}

/// Why each family of configs was dropped, one line each.
std::string rejections(const tune::TileSpace &space) {
  std::string text = tune::summarizeRejections(space);
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

} // namespace

tune::AttentionExtras attentionExtras(attn::VariantOp variant) {
  tune::AttentionExtras x;
  if (auto lr = variant.getLowrankAttr()) {
    x.lowrankK = lr.getK();
    x.share = attn::stringifyShareMode(lr.getShare()).str();
  }
  if (auto decls = variant.getParams())
    x.numParams = int64_t(decls->size());
  return x;
}

namespace {

/// A model's attention at its shape (batch B), ready to compile and time
/// any CPU tile: random inputs (E/F for low-rank, per-head parameters),
/// forward + backward per timing, compiled tiles cached.
class TileBench {
public:
  TileBench(ModuleOp module, attn::ModelOp model, attn::VariantOp variant, int B, int repeats)
      : module_(module), variant_(variant), repeats_(repeats),
        inputs_(B, model.getHeads(), model.getSeq(), model.getDModel() / model.getHeads(),
                /*withDout=*/true, attentionExtras(variant)) {
    const int64_t H = model.getHeads(), D = model.getDModel() / H, S = model.getSeq();
    shape_.batch = B, shape_.heads = H, shape_.seq = S, shape_.headDim = D, shape_.maxSeq = S;
    shape_.elementType = FloatType::getF32(module.getContext());
    shape_.withLengths = true, shape_.differentiate = true;
  }
  const AttentionInputs &inputs() const { return inputs_.in; }
  bool compiled(const tile::TileConfig &c) const {
    std::string key = tune::canonicalConfig(tune::configText(c));
    return kernels_.count(key) || errors_.count(key);
  }
  /// Compiles the tiles not compiled yet: the MLIR half in turn, the host
  /// compiler on `threads` threads. A tile that fails keeps its error.
  void precompile(const std::vector<tile::TileConfig> &configs, int threads) {
    std::vector<EmittedKernels> emitted;
    std::vector<std::string> keys;
    for (const tile::TileConfig &c : configs) {
      std::string key = tune::canonicalConfig(tune::configText(c));
      if (kernels_.count(key) || errors_.count(key))
        continue;
      variant_.setTileAttr(attn::TileAttr::get(module_.getContext(), c.blockQ, c.blockKv, 1, 1));
      EmittedKernels e;
      if (mlir::failed(emitCpuAttention(module_, variant_, shape_, e))) {
        errors_[key] = "the pipeline rejected the tile";
        continue;
      }
      emitted.push_back(std::move(e)), keys.push_back(key);
    }
    std::vector<std::optional<CpuAttention>> built;
    std::vector<std::string> errors = buildCpuAttentions(emitted, threads, built);
    for (size_t i = 0; i < keys.size(); ++i)
      if (built[i])
        kernels_[keys[i]] = std::move(built[i]);
      else
        errors_[keys[i]] = errors[i];
  }
  /// Why tile `c` did not compile ("" when it did or was not tried).
  std::string error(const tile::TileConfig &c) const {
    auto it = errors_.find(tune::canonicalConfig(tune::configText(c)));
    return it == errors_.end() ? "" : it->second;
  }
  /// The kernels with tile `c` (null when they do not compile; the error is
  /// printed or kept by precompile).
  CpuAttention *compile(const tile::TileConfig &c) {
    const std::string key = tune::canonicalConfig(tune::configText(c));
    if (errors_.count(key))
      return nullptr;
    auto &slot = kernels_[key];
    if (!slot) {
      variant_.setTileAttr(attn::TileAttr::get(module_.getContext(), c.blockQ, c.blockKv, 1, 1));
      if (mlir::failed(compileCpuAttention(module_, variant_, shape_, slot)))
        return nullptr;
    }
    return &*slot;
  }
  /// Median forward + backward time in ms.
  double time(CpuAttention &a) {
    return bench::medianMs(repeats_, [&] { (void)a.run(inputs_.in); });
  }

private:
  ModuleOp module_;
  attn::VariantOp variant_;
  int repeats_;
  RandomAttentionInputs inputs_;
  codegen::AttentionShape shape_;
  std::map<std::string, std::optional<CpuAttention>> kernels_;
  std::map<std::string, std::string> errors_;
};

/// The first layer's attention variant of a model.
attn::VariantOp variantOf(attn::ModelOp model) {
  auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
  return SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
}

} // namespace

CommandResult runTune(const TuneOptions &given) {
  TuneOptions opt = given;
  if (opt.arch.empty())
    opt.arch = defaultCudaArch();
  if (opt.target == "cuda-sim")
    return fail("--target cuda-sim: tuning measures speed, which the emulator does not have; "
                "--target cuda compiles and checks the configs without a GPU and times them "
                "on one");
  const std::string path = dbPath(opt.db);
  if (opt.show) {
    Expected<tune::TuningDb> db = tune::TuningDb::open(path);
    if (!db)
      return fail(db.error());
    results() << db->show();
    return Outcome::Done;
  }
  MLIRContext context;
  std::set<std::string> autoFfn;
  OwningOpRef<ModuleOp> module = loadResolvedSpec(opt.spec, opt.specText, "tune", context, autoFfn);
  if (!module)
    return mlir::failure();
  if (opt.target == "cuda")
    return tuneCuda(*module, opt, path);
  if (opt.target != "cpu")
    return fail("--target must be cpu, cuda or cuda-sim, found '" + opt.target + "'");
  if (opt.maxError > 0) { // k / LSH rounds against the error budget
    double budgetLeft = opt.budget;
    for (attn::ModelOp model : module->getOps<attn::ModelOp>())
      if (opt.model.empty() || model.getSymName() == opt.model)
        if (mlir::failed(tuneAccuracy(*module, model, variantOf(model), opt, path,
                                      tune::hostToolchain(), budgetLeft)))
          return mlir::failure();
    results() << "tuning database: " << path << "\n";
    return Outcome::Done;
  }
  Expected<tune::TuningDb> db = tune::TuningDb::open(path);
  if (!db)
    return fail(db.error());
  db->setAutosave(std::chrono::milliseconds(0)); // every measurement survives a kill
  const tune::DeviceKey device = tune::cpuDevice();
  const std::string tc = tune::hostToolchain();
  const bool tty = isatty(STDERR_FILENO);
  const auto t0 = bench::Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(bench::Clock::now() - t0).count(); };
  bool outOfBudget = false;
  int tuned = 0;
  for (attn::ModelOp model : module->getOps<attn::ModelOp>()) {
    if (!opt.model.empty() && model.getSymName() != opt.model)
      continue;
    attn::VariantOp variant = variantOf(model);
    const std::string name = model.getSymName().str();
    if (variant.getLsh()) {
      results() << name << ": LSH attention runs one chunk per task on the CPU; no tile to tune\n";
      continue;
    }
    const int64_t H = model.getHeads(), D = model.getDModel() / H, S = model.getSeq();
    const int B = opt.batch;
    tune::KernelKey key{cpuAttentionSignature(variant, D), tune::shapeBucket(S, H)};
    // Configs whose workspace cannot fit are dropped before compiling.
    tune::TileSpace space = tune::cpuTileSpace(int(D), {opt.maxWorkspaceKib * 1024});
    if (space.candidates.empty())
      return fail(name + ": no tile config fits (nothing compiled or run):\n" + rejections(space));
    // The promising ones first: a --budget run measures those.
    tune::orderByCpuCost(space, int(S), int(D), variant.getCausal());
    results() << name << ": cost-model order:";
    for (const tile::TileConfig &c : space.candidates)
      results() << " " << c.blockQ << "x" << c.blockKv;
    results() << "\n";
    TileBench tileBench(*module, model, variant, B, opt.repeats);
    const int threads =
        opt.jobs > 0 ? opt.jobs : std::max(1, int(std::thread::hardware_concurrency()));
    auto compileTile = [&](const tile::TileConfig &c) { return tileBench.compile(c); };
    auto timeTile = [&](CpuAttention &a) { return tileBench.time(a); };
    // 1. Every candidate once (or what an earlier run measured).
    size_t done = 0;
    std::vector<std::pair<double, tile::TileConfig>> timed;
    int measuredNow = 0;
    for (const tile::TileConfig &c : space.candidates) {
      std::string cfg = tune::canonicalConfig(tune::configText(c));
      if (const tune::Measurement *m = db->measured(device, key, tc, cfg)) {
        if (!m->failed())
          timed.push_back({m->medianMs, c});
        ++done;
        continue;
      }
      // The budget stops further measurements; the most promising
      // candidate (cost-model order) is always measured.
      if (measuredNow > 0 && elapsed() > opt.budget) {
        outOfBudget = true;
        break;
      }
      ++measuredNow;
      tune::Measurement m;
      m.config = cfg;
      m.repeats = opt.repeats;
      if (!tileBench.compiled(c)) {
        // The next `threads` unmeasured candidates, compiled together: the
        // host compiler runs in parallel while the budget still applies.
        std::vector<tile::TileConfig> batch;
        for (size_t j = &c - space.candidates.data();
             j < space.candidates.size() && int(batch.size()) < threads; ++j)
          if (!db->measured(device, key, tc,
                            tune::canonicalConfig(tune::configText(space.candidates[j]))))
            batch.push_back(space.candidates[j]);
        tileBench.precompile(batch, threads);
      }
      CpuAttention *a = compileTile(c);
      Expected<AttentionOutputs> check =
          a ? a->run(tileBench.inputs())
            : Expected<AttentionOutputs>(
                  makeError(tileBench.error(c).empty() ? "did not compile" : tileBench.error(c)));
      if (!check) {
        m.error = check.error();
      } else {
        m.medianMs = timeTile(*a);
        timed.push_back({m.medianMs, c});
      }
      if (Status s = db->recordMeasurement(device, key, tc, m); !s)
        return fail(s.error());
      ++done;
      if (tty) {
        double best =
            timed.empty() ? 0 : std::min_element(timed.begin(), timed.end(), [](auto &x, auto &y) {
                                  return x.first < y.first;
                                })->first;
        diagnostics() << "\r  " << name << ": " << done << "/" << space.candidates.size()
                      << " candidates, best " << bench::fmt(best, 3) << " ms, ETA "
                      << bench::fmt(
                             elapsed() / double(done) * double(space.candidates.size() - done), 0)
                      << " s      " << std::flush;
      }
    }
    if (tty)
      diagnostics() << "\r" << std::string(70, ' ') << "\r";
    if (outOfBudget || timed.empty()) {
      results() << name << ": " << done << " of " << space.candidates.size()
                << " candidates measured when the --budget ran out; rerun to continue\n";
      break;
    }
    // 2. The three fastest and the heuristic tile, re-timed interleaved
    // (three rounds): timing noise on a shared machine must not decide
    // between near-equal configs. The heuristic stays unless a candidate
    // beats it by more than the measured spread (and at least 2 %), so the
    // choice is never slower than the default beyond noise and repeat runs
    // agree where the configs are equal.
    std::sort(timed.begin(), timed.end(), [](auto &x, auto &y) { return x.first < y.first; });
    timed.resize(std::min<size_t>(3, timed.size()));
    const tile::TileConfig heuristic{64, 64, 1, 1};
    std::vector<tile::TileConfig> finalists = {heuristic};
    for (auto &t : timed)
      if (!(t.second.blockQ == heuristic.blockQ && t.second.blockKv == heuristic.blockKv))
        finalists.push_back(t.second);
    std::optional<Finalists> pick = chooseAmongFinalists(finalists.size(), [&](size_t i) {
      CpuAttention *a = compileTile(finalists[i]);
      return a ? timeTile(*a) : -1.0;
    });
    if (!pick)
      return mlir::failure();
    const size_t best = pick->best;
    const std::vector<double> &med = pick->med, &spread = pick->spread;
    std::string cfg = tune::canonicalConfig(tune::configText(finalists[best]));
    db->choose(device, key, tc, cfg, med[best], spread[best]);
    if (Status s = db->save(); !s)
      return fail(s.error());
    results() << name << " (" << key.shapeBucket << ", batch " << B << "): " << cfg << " "
              << bench::fmt(med[best], 3) << " ms fwd+bwd (spread "
              << bench::fmt(100 * spread[best], 1) << " %); heuristic bq=64,bkv=64 "
              << bench::fmt(med[0], 3) << " ms (" << bench::fmt(med[0] / med[best]) << "x)"
              << (best == 0 ? ", kept: no candidate beat it beyond the noise" : "") << "\n";
    ++tuned;
  }
  double budgetLeft = opt.budget - elapsed();
  for (attn::ModelOp model : module->getOps<attn::ModelOp>())
    if ((opt.model.empty() || model.getSymName() == opt.model) &&
        autoFfn.count(model.getSymName().str()) && !outOfBudget) {
      if (mlir::failed(tuneFfnChunk(*module, model, opt, path, tune::hostToolchain(), budgetLeft)))
        return mlir::failure();
      ++tuned;
    }
  results() << "tuning database: " << path << " (" << tuned << " kernel(s) chosen, "
            << bench::fmt(elapsed(), 1) << " s)\n";
  return Outcome::Done;
}

mlir::LogicalResult compareTuned(const TuneOptions &opt, const std::string &csvPath,
                                 const std::string &svgPath) {
  MLIRContext context;
  std::set<std::string> autoFfn;
  OwningOpRef<ModuleOp> module =
      loadResolvedSpec(opt.spec, opt.specText, "bench", context, autoFfn);
  if (!module)
    return mlir::failure();
  const std::string path = dbPath(opt.db);
  Expected<tune::TuningDb> db = tune::TuningDb::open(path);
  if (!db)
    return fail(db.error());
  struct Row {
    std::string model, kernel, heuristic, tuned, note;
    double heuristicMs = NAN, tunedMs = NAN, spread = NAN;
  };
  std::vector<Row> rows;
  const tune::DeviceKey device = tune::cpuDevice();
  const std::string tc = tune::hostToolchain();
  // Heuristic and tuned config re-timed interleaved (three rounds).
  auto measure = [&](Row &row, const std::function<double(size_t)> &time) {
    std::optional<Finalists> f = chooseAmongFinalists(2, time);
    if (!f)
      return false;
    row.heuristicMs = f->med[0], row.tunedMs = f->med[1];
    row.spread = std::max(f->spread[0], f->spread[1]);
    return true;
  };
  for (attn::ModelOp model : module->getOps<attn::ModelOp>()) {
    if (!opt.model.empty() && model.getSymName() != opt.model)
      continue;
    const std::string name = model.getSymName().str();
    attn::VariantOp variant = variantOf(model);
    const int64_t H = model.getHeads(), D = model.getDModel() / H, S = model.getSeq();
    if (!variant.getLsh() && tileIsAuto(variant.getTile())) {
      Row row{name, "attention fwd+bwd", "bq=64,bkv=64", "-", ""};
      tune::KernelKey key{cpuAttentionSignature(variant, D), tune::shapeBucket(S, H)};
      const tune::Entry *e = db->find(device, key, tc);
      tile::TileConfig tuned;
      if (!e || !parseConfig(e->config, tuned)) {
        row.note = "no entry (attnc tune measures one)";
      } else {
        row.tuned = "bq=" + std::to_string(tuned.blockQ) + ",bkv=" + std::to_string(tuned.blockKv);
        TileBench tb(*module, model, variant, opt.batch, opt.repeats);
        const tile::TileConfig configs[2] = {{64, 64, 1, 1}, tuned};
        if (!measure(row, [&](size_t i) {
              CpuAttention *a = tb.compile(configs[i]);
              return a ? tb.time(*a) : -1.0;
            }))
          return mlir::failure();
      }
      rows.push_back(row);
    }
    if (autoFfn.count(name)) {
      FfnBench ffn(model, opt.batch, opt.repeats);
      Row row{name, "ffn layer step", tune::ffnChunkConfig(ffn.config().ffnChunk), "-", ""};
      const tune::Entry *e = db->find(device, ffnKey(ffn.config()), tc);
      if (!e || !tune::parseFfnChunkConfig(e->config)) {
        row.note = "no entry (attnc tune measures one)";
      } else {
        row.tuned = e->config;
        const int chunks[2] = {ffn.config().ffnChunk, *tune::parseFfnChunkConfig(e->config)};
        if (mlir::failed(ffn.compile(*module)))
          return mlir::failure();
        if (!measure(row, [&](size_t i) { return ffn.time(chunks[i]); }))
          return fail(name + ": the training step failed");
      }
      rows.push_back(row);
    }
  }
  if (rows.empty()) {
    results() << "no tunable kernel in " << opt.spec
              << " (a model whose attention leaves its tile auto, or an FFN chunk left auto)\n";
    return mlir::success();
  }
  results() << "tuned vs heuristic configs from " << path << " (batch " << opt.batch
            << ", median of " << opt.repeats << ", heuristic and tuned re-timed interleaved)\n";
  results() << "  model                kernel              heuristic        ms   tuned"
               "            ms   speedup  spread\n";
  std::ofstream csv(csvPath);
  csv << "model,kernel,heuristic,heuristic_ms,tuned,tuned_ms,speedup,spread\n";
  std::vector<std::string> categories;
  plot::BarSeries heur{"heuristic", {}, plot::paletteColor(1)},
      tuned{"tuned", {}, plot::paletteColor(2)};
  for (const Row &r : rows) {
    auto pad = [](const std::string &t, size_t w) {
      return t + std::string(t.size() < w ? w - t.size() : 1, ' ');
    };
    results() << "  " << pad(r.model, 21) << pad(r.kernel, 20) << pad(r.heuristic, 13)
              << pad(bench::fmt(r.heuristicMs, 3), 8) << pad(r.tuned, 13)
              << pad(bench::fmt(r.tunedMs, 3), 8) << pad(bench::fmt(r.heuristicMs / r.tunedMs), 9)
              << (std::isnan(r.spread) ? "-" : bench::fmt(100 * r.spread, 1) + " %")
              << (r.note.empty() ? "" : "  " + r.note) << "\n";
    csv << r.model << "," << r.kernel << "," << r.heuristic << "," << r.heuristicMs << ","
        << r.tuned << "," << r.tunedMs << "," << r.heuristicMs / r.tunedMs << "," << r.spread
        << "\n";
    if (!std::isnan(r.tunedMs)) {
      categories.push_back(r.model + ": " + r.kernel);
      heur.values.push_back(r.heuristicMs), tuned.values.push_back(r.tunedMs);
    }
  }
  if (!csv)
    return fail("cannot write " + csvPath);
  if (Status s = plot::writeBarChart(
          svgPath, {"tuned vs heuristic (ms, lower is better)", "ms", categories, {heur, tuned}});
      !s)
    return fail(s.error());
  results() << "wrote " << csvPath << " and " << svgPath << "\n";
  return mlir::success();
}

} // namespace attnc::driver
