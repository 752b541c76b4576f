//===- TuneCuda.cpp - attnc tune --target cuda: forward tiles on the GPU --===//
//
// The forward kernel's tile (block sizes, warps, pipeline stages) on a GPU.
// Three filters before anything runs: the tile model drops configs over the
// arch's shared memory, registers, threads or pipelining rules (TuneSpace.h,
// each with its reason); every survivor is compiled with NVRTC, on --jobs
// threads, and ptxas's report drops those that spill, exceed 255 registers
// or the shared memory; only then are the rest timed on the device (CUDA
// events, median of --repeats, the interleaved final round against the
// heuristic). The backward keeps the heuristic tile (attn-derive-backward
// gives it `auto`).
//
// Compiling and checking runs anywhere (NVRTC needs no GPU); timing needs
// one. Without a driver the command lists what it would time and exits 2.
//
//===----------------------------------------------------------------------===//
#include "driver/bench/BenchCommon.h"
#include "driver/Report.h"
#include "driver/Compile.h"
#include "driver/Run.h"
#include "driver/perf/Perf.h"
#include "driver/tune/Tune.h"

#include "codegen/TuneSpace.h"
#include "passes/Passes.h"
#include "runtime/KernelHeaders.h"
#include "runtime/CudaAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/tune/TuningDb.h"

#include "mlir/IR/Builders.h"

#include <atomic>
#include <ostream>
#include <thread>

using namespace mlir;

namespace attnc::driver {

namespace {

mlir::LogicalResult fail(const std::string &msg) { return commandError("tune", msg); }

/// One forward tile candidate through emission and NVRTC.
struct CudaCandidate {
  tile::TileConfig tile;
  std::string source, dtype, reason;
  KernelDesc fwd;
  bool passed = false;
};

/// LSH kernels take their tile from the chunk (LshTileModel.h), and the
/// chunk changes what the model computes, so nothing is timed or recorded
/// for them here. The performance model predicts each chunk's passes on
/// the arch instead (32, 64 and 128 at the spec's rounds and buckets, the
/// model's own sequence, --batch), with nothing but NVRTC and nvdisasm: the
/// time half of --max-error's trade, on a GPU that is not here.
mlir::LogicalResult reportLshChunks(ModuleOp module, attn::ModelOp model, attn::VariantOp variant,
                                    const TuneOptions &opt) {
  const std::string name = model.getSymName().str();
  const attn::LshAttr lsh = variant.getLshAttr();
  const long long H = model.getHeads(), N = model.getSeq();
  results() << name << ": LSH kernels take their tile from the chunk (LshTileModel.h); "
            << "predicted by attnc perf's model for " << opt.arch << " at B=" << opt.batch
            << " H=" << H << " N=" << N << ", " << lsh.getRounds() << " rounds:\n";
  for (int64_t chunk : {32, 64, 128}) {
    if (chunk > N)
      continue;
    // This model alone, its variant at this chunk.
    OwningOpRef<ModuleOp> one = module.clone();
    std::vector<attn::ModelOp> others;
    for (attn::ModelOp m : one->getOps<attn::ModelOp>())
      if (m.getSymName() != model.getSymName())
        others.push_back(m);
    for (attn::ModelOp m : others)
      m.erase();
    auto v = SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(
        *one, StringAttr::get(module.getContext(), variant.getSymName()));
    v.setLshAttr(attn::LshAttr::get(module.getContext(), lsh.getBuckets(), lsh.getRounds(), chunk,
                                    lsh.getBefore(), lsh.getAfter(), lsh.getSeed(),
                                    lsh.getDenseFallback()));
    Expected<std::vector<PredictedPass>> passes = predictPasses(*one, opt.arch, opt.batch, H, N);
    if (!passes)
      return passes.error().empty()
                 ? mlir::failure()
                 : fail(name + ", chunk " + std::to_string(chunk) + ": " + passes.error());
    double fwd = 0, bwd = 0;
    bool complete = !passes->empty();
    for (const PredictedPass &p : *passes) {
      (p.backward ? bwd : fwd) += p.seconds;
      complete = complete && p.complete;
    }
    results() << "  chunk " << chunk << ": ";
    if (complete)
      results() << "forward " << bench::fmt(fwd * 1e3, 3) << " ms, backward "
                << bench::fmt(bwd * 1e3, 3) << " ms, together " << bench::fmt((fwd + bwd) * 1e3, 3)
                << " ms";
    else
      results() << "no prediction (a kernel's loop is not one the model can time)";
    results() << (chunk == lsh.getChunk() ? "  (the spec's)" : "") << "\n";
  }
  results() << "  the chunk changes what LSH computes: choose rounds and chunk within an error "
               "budget with --max-error (docs/tuning.md)\n";
  return mlir::success();
}

} // namespace

CommandResult tuneCuda(ModuleOp module, const TuneOptions &opt, const std::string &dbPath) {
  Expected<GpuArch> gpu = parseGpuArch(opt.arch);
  if (!gpu || gpu->sm < 70)
    return fail("--arch must be sm_70 or newer, found '" + opt.arch + "'");
  if (Status ok = checkGpuArchSupported(opt.arch); !ok)
    return fail(ok.error());
  const int sm = gpu->sm;
  if (opt.smemLimit > tile::smemLimitBytes(sm))
    return fail("--smem-limit " + std::to_string(opt.smemLimit) + " is above " + opt.arch + "'s " +
                std::to_string(tile::smemLimitBytes(sm)) +
                " bytes per block; it can only lower the limit");
  const int threads =
      opt.jobs > 0 ? opt.jobs : std::max(1, int(std::thread::hardware_concurrency()));
  Status driver = cuda::Driver::available();
  int ready = 0;
  for (attn::ModelOp model : module.getOps<attn::ModelOp>()) {
    if (!opt.model.empty() && model.getSymName() != opt.model)
      continue;
    auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
    auto variant =
        SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
    const std::string name = model.getSymName().str();
    if (variant.getLsh()) {
      if (mlir::failed(reportLshChunks(module, model, variant, opt)))
        return mlir::failure();
      continue;
    }
    const int D = int(model.getDModel() / model.getHeads());
    const int bytes = model.getDtype() == attn::DType::fp32 ? 4 : 2;
    tune::CudaLimits lim;
    lim.sm = sm, lim.smemBytes = opt.smemLimit;
    lim.fp16 = model.getDtype() == attn::DType::fp16;
    const int smemLimit = opt.smemLimit > 0 ? opt.smemLimit : tile::smemLimitBytes(sm);
    tune::TileSpace space;
    for (bool backward : {false, true}) {
      tune::TileSpace s = tune::cudaTileSpace(bytes, D, backward, lim);
      const char *which = backward ? "backward" : "forward";
      std::string why = tune::summarizeRejections(s);
      if (s.candidates.empty())
        return fail(name + ": no " + which + " tile config fits " + opt.arch +
                    " (nothing compiled or launched):\n" + why.substr(0, why.size() - 1));
      results() << name << " " << which << " (" << stringifyDType(model.getDtype()).str() << ", d"
                << D << ", " << opt.arch << "): " << s.candidates.size() << " configs fit, "
                << s.rejected.size() << " dropped before compiling\n"
                << why;
      if (!backward)
        space = std::move(s);
    }

    // Emit every forward candidate (the MLIR half, in turn), then NVRTC on
    // `threads` threads, then ptxas's report.
    codegen::AttentionShape shape;
    shape.batch = opt.batch, shape.heads = model.getHeads(), shape.seq = model.getSeq();
    shape.headDim = D, shape.maxSeq = model.getSeq(), shape.withLengths = true;
    Builder b(module.getContext());
    shape.elementType = bytes == 4                              ? Type(b.getF32Type())
                        : model.getDtype() == attn::DType::bf16 ? Type(b.getBF16Type())
                                                                : Type(b.getF16Type());
    const attn::TileAttr original = variant.getTile();
    std::vector<CudaCandidate> cands;
    for (const tile::TileConfig &c : space.candidates) {
      CudaCandidate cand;
      cand.tile = c;
      variant.setTileAttr(
          attn::TileAttr::get(module.getContext(), c.blockQ, c.blockKv, c.warps, c.stages));
      if (mlir::failed(emitCudaAttention(module, variant, shape, opt.arch, cand.source, cand.dtype,
                                         cand.fwd)))
        cand.reason = "attn-tile rejected it (its error above)";
      cands.push_back(std::move(cand));
    }
    variant.setTileAttr(original);
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    NvrtcOptions options;
    options.arch = opt.arch;
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
    if (!dirs)
      return fail(dirs.error());
    options.includeDirs = *dirs;
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i = next++; i < cands.size(); i = next++) {
        CudaCandidate &c = cands[i];
        if (!c.reason.empty())
          continue;
        Expected<Cubin> cubin = nvrtc.compile("attnc_tune.cu", c.source, options);
        if (!cubin) {
          c.reason = "NVRTC failed";
          continue;
        }
        for (const std::string &entry : c.fwd.entryPoints) {
          const KernelResources *r = cubin->kernel(entry);
          if (!r) {
            c.reason = entry + " missing from the ptxas report";
            break;
          }
          const int smem = r->staticSmemBytes + c.fwd.smemBytes;
          if (r->spills())
            c.reason = std::to_string(r->spillStoreBytes + r->spillLoadBytes) + " bytes spilled";
          else if (r->registers > tile::kMaxRegsPerThread)
            c.reason = std::to_string(r->registers) + " registers";
          else if (smem > smemLimit)
            c.reason =
                std::to_string(smem) + " bytes of shared memory > " + std::to_string(smemLimit);
          if (!c.reason.empty())
            break;
        }
        c.passed = c.reason.empty();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back(worker);
    worker();
    for (std::thread &t : pool)
      t.join();
    tune::TileSpace ptxas;
    std::vector<CudaCandidate *> passed;
    for (CudaCandidate &c : cands)
      if (c.passed)
        passed.push_back(&c);
      else
        ptxas.rejected.push_back({c.tile, c.source.empty() ? "pipeline" : "ptxas", c.reason});
    results() << name << " forward: " << cands.size() << " compiled with NVRTC "
              << NvrtcCompiler::versionFor(sm) << " on " << threads << " thread(s), "
              << passed.size() << " pass ptxas's check\n"
              << tune::summarizeRejections(ptxas);
    if (passed.empty())
      return fail(name + ": every forward config failed ptxas's check (nothing launched)");
    ready += int(passed.size());
    if (!driver)
      continue;

    // Timing on the device: random inputs of the model's shape, the
    // forward kernels' CUDA-event time, the interleaved final round.
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return fail(dev.error());
    if (dev->arch() != opt.arch)
      return fail("the GPU is " + dev->arch() + " (" + dev->name + "), not --arch " + opt.arch);
    const int64_t B = opt.batch, H = model.getHeads(), S = model.getSeq();
    RandomAttentionInputs inputs(B, H, S, D, /*withDout=*/false, attentionExtras(variant));
    const AttentionInputs &in = inputs.in;
    std::vector<std::optional<CudaAttention>> kernels(passed.size());
    auto timeOne = [&](size_t i) -> double {
      if (!kernels[i]) {
        Expected<CudaAttention> a =
            CudaAttention::compile(passed[i]->source, opt.arch, passed[i]->dtype, passed[i]->fwd,
                                   std::nullopt, options.includeDirs, nvrtc, /*retile=*/false);
        if (!a)
          return -1;
        kernels[i].emplace(std::move(a).take());
      }
      std::vector<double> ms;
      for (int r = 0; r <= opt.repeats; ++r) { // the first is the warm-up
        if (!kernels[i]->run(in))
          return -1;
        if (r)
          ms.push_back(kernels[i]->forwardMs());
      }
      return bench::median(std::move(ms));
    };
    Expected<tune::TuningDb> db = tune::TuningDb::open(dbPath);
    if (!db)
      return fail(db.error());
    db->setAutosave(std::chrono::milliseconds(0));
    const tune::DeviceKey device = tune::cudaDevice(*dev);
    const std::string tc = tune::nvrtcToolchain();
    const tune::KernelKey key =
        tune::cudaAttentionKey(passed.front()->dtype, D, variant.getSymName().str(), S, H);
    std::vector<std::pair<double, size_t>> timed;
    for (size_t i = 0; i < passed.size(); ++i) {
      tune::Measurement m;
      m.config = tune::canonicalConfig(tune::configText(passed[i]->tile));
      m.repeats = opt.repeats;
      m.medianMs = timeOne(i);
      if (m.medianMs < 0)
        m.error = "did not run";
      else
        timed.push_back({m.medianMs, i});
      if (Status s = db->recordMeasurement(device, key, tc, m); !s)
        return fail(s.error());
    }
    if (timed.empty())
      return fail(name + ": no forward config ran on " + dev->name);
    std::sort(timed.begin(), timed.end());
    const tile::TileConfig heuristic = tile::defaultTile(bytes, D, sm, false);
    std::vector<size_t> finalists;
    for (size_t i = 0; i < passed.size(); ++i)
      if (passed[i]->tile.blockQ == heuristic.blockQ &&
          passed[i]->tile.blockKv == heuristic.blockKv &&
          passed[i]->tile.warps == heuristic.warps && passed[i]->tile.stages == heuristic.stages)
        finalists.push_back(i);
    if (finalists.empty())
      finalists.push_back(timed.front().second); // no heuristic among them: the best leads
    for (size_t t = 0; t < timed.size() && finalists.size() < 4; ++t)
      if (timed[t].second != finalists.front())
        finalists.push_back(timed[t].second);
    std::optional<Finalists> pick =
        chooseAmongFinalists(finalists.size(), [&](size_t i) { return timeOne(finalists[i]); });
    if (!pick)
      return fail(name + ": a finalist stopped running");
    const CudaCandidate &best = *passed[finalists[pick->best]];
    const std::string cfg = tune::canonicalConfig(tune::configText(best.tile));
    db->choose(device, key, tc, cfg, pick->med[pick->best], pick->spread[pick->best]);
    if (Status s = db->save(); !s)
      return fail(s.error());
    results() << name << " forward on " << dev->name << ": " << cfg << " "
              << bench::fmt(pick->med[pick->best], 4) << " ms (heuristic "
              << bench::fmt(pick->med[0], 4) << " ms, "
              << bench::fmt(pick->med[0] / pick->med[pick->best]) << "x)\n";
  }
  if (!driver) {
    diagnostics() << "attnc tune: no GPU to time on here (" << driver.error() << "); " << ready
                  << " forward config(s) compiled and passed ptxas's check, rerun on a GPU\n";
    return Outcome::Unavailable;
  }
  results() << "tuning database: " << dbPath << "\n";
  return Outcome::Done;
}

} // namespace attnc::driver
