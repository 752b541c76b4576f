//===- BenchEngines.cpp - attnc bench --engines ----------------------------===//
//
// One training step of a spec's model compiled the ways attnc train can run
// it (every activation kept; each standard layer recomputed in the
// backward; without fusion inside chunked FFN bodies), timed interleaved.
//
//===----------------------------------------------------------------------===//
#include "driver/bench/BenchEngines.h"
#include "driver/ModelConfigOf.h"
#include "driver/ModelSession.h"
#include "driver/Report.h"
#include "driver/bench/BenchCommon.h"

#include "runtime/Plot.h"
#include "runtime/train/CompiledStep.h"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <ostream>

namespace attnc::driver {

mlir::LogicalResult benchEngines(const TrainCliOptions &opt, int repeats,
                                 const std::string &csvPath, const std::string &svgPath) {
  PreparedModel p;
  if (mlir::failed(prepare("bench", opt, p, Pin::None)))
    return mlir::failure();
  train::ParameterStore store(p.config, opt.run.seed);
  // The compiled step keeping every activation, and (standard layers) with
  // each layer recomputed in the backward.
  struct Engine {
    std::string name;
    std::unique_ptr<train::CompiledStep> step;
    std::vector<double> ms;
    int64_t bytes = 0;
  };
  std::vector<Engine> engines;
  // The last: as attnc train runs it, without fusion inside chunked FFN
  // bodies (what that fusion gains; only when the FFN is chunked).
  const bool recomputeByDefault = !p.config.reversible;
  const bool chunked = p.config.ffnChunk > 0 && p.config.ffnChunk < opt.batch * p.config.seq;
  std::vector<std::pair<bool, bool>> variants = {{false, true}}; // {recompute, fuse in chunks}
  if (!p.config.reversible)
    variants.push_back({true, true});
  if (chunked)
    variants.push_back({recomputeByDefault, false});
  for (auto [recompute, fuseInChunks] : variants) {
    StepPlan sp;
    sp.batch = opt.batch, sp.recomputeLayers = recompute, sp.fuseInChunks = fuseInChunks;
    Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, store, sp);
    if (!step)
      return commandError("bench", step.error());
    Engine e;
    e.name = recompute ? "compiled (layers recomputed)" : "compiled";
    if (!fuseInChunks)
      e.name += ", FFN chunks unfused";
    e.bytes = (*step)->arenaBytes();
    e.step = std::move(*step);
    engines.push_back(std::move(e));
  }
  train::Batch batch = syntheticBatch(p.config, opt.batch);
  auto run = [&](Engine &e) -> Status {
    store.zeroGrads();
    Expected<double> r = e.step->run(batch, true, 0);
    return r ? Status() : Status(r.takeError());
  };
  // One warm-up each, then the engines interleaved, so all see the same
  // machine load; medians of the repeats.
  for (int i = -1; i < repeats; ++i)
    for (Engine &e : engines) {
      auto t0 = std::chrono::steady_clock::now();
      if (Status st = run(e); !st)
        return commandError("bench", st.error());
      if (i >= 0)
        e.ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
    }
  const double tokens = double(opt.batch) * p.config.seq;
  results() << "training step of " << p.name << " (batch " << opt.batch << ", seq " << p.config.seq
            << ", " << p.config.layers << (p.config.reversible ? " reversible" : "")
            << " layer(s)), median of " << repeats << ", interleaved:\n";
  std::ofstream csv(csvPath, std::ios::app);
  if (csv.tellp() == 0)
    csv << "model,batch,seq,layers,engine,ms,activation_bytes\n";
  std::vector<std::string> names;
  std::vector<double> ms;
  const double base = bench::median(engines[0].ms);
  for (Engine &e : engines) {
    double m = bench::median(e.ms);
    results() << "  " << std::left << std::setw(50) << e.name << std::right << std::fixed
              << std::setprecision(2) << std::setw(9) << m << " ms/step  " << std::setprecision(0)
              << std::setw(7) << tokens / m * 1e3 << " tokens/s  " << std::setprecision(2)
              << "time vs the first " << base / m << "x  activations "
              << double(e.bytes) / (1 << 20) << " MiB ("
              << double(e.bytes) / double(std::max<int64_t>(1, engines[0].bytes)) << "x)\n";
    csv << p.name << "," << opt.batch << "," << p.config.seq << "," << p.config.layers << ","
        << e.name << "," << m << "," << e.bytes << "\n";
    names.push_back(e.name);
    ms.push_back(m);
  }
  results() << "  (activations: the planned arena)\n";
  if (!svgPath.empty())
    if (Status s = plot::writeBarChart(svgPath, {"training step of " + p.name + " (ms, median)",
                                                 "ms per step",
                                                 names,
                                                 {{"ms/step", ms, plot::paletteColor(1)}}});
        !s) {
      diagnostics() << "attnc bench: error: " << s.error() << "\n";
      return mlir::failure();
    }
  results() << "wrote " << csvPath << (svgPath.empty() ? "" : " and " + svgPath) << "\n";
  return mlir::success();
}

} // namespace attnc::driver
