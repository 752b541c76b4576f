//===- TuneAccuracy.cpp - attnc tune --max-error: k and LSH rounds --------===//
//
// The projection length k (Linformer) and the LSH rounds and chunk
// (Reformer) change what the model computes, so they are not picked by time
// alone: each candidate's forward output is compared with exact attention on
// calibration inputs (relative Frobenius error), and the fastest candidate
// within --max-error wins. Exact attention is timed too: when it is as fast
// as the best approximation at this length, the tuner says to use it (the
// automatic variant choice, with its reason). docs/tuning.md has the
// calibration recipe and why it is what it is.
//
//===----------------------------------------------------------------------===//
#include "driver/tune/Tune.h"
#include "driver/Report.h"
#include "driver/bench/BenchCommon.h"
#include "driver/Compile.h"
#include "driver/Run.h"
#include "driver/Train.h"

#include "passes/Passes.h"
#include "runtime/PhiloxDraws.h"
#include "runtime/tune/TuningDb.h"

#include "mlir/IR/Builders.h"

#include <cmath>
#include <ostream>

using namespace mlir;

namespace attnc::driver {

namespace {

/// Queries and keys around N/32 cluster centres per head, so that exact
/// attention is concentrated on a query's own cluster (the regime both
/// approximations are built for): the same-cluster logit is about 8 above
/// the others, for plain scores (|c|² = 8·√D) and for LSH's shared-QK
/// scores against normalised keys (|c| = 8·√D). Values are N(0, 1). LSH
/// draws a cluster per position (hashing does not care where a key is);
/// low-rank gives runs of 32 consecutive positions one cluster (a
/// projection along the sequence can only exploit structure along it).
struct Calibration {
  st::Tensor q, k, v, lengths;
  std::optional<st::Tensor> params; ///< a checkpoint's per-head parameters
};

Calibration calibrationInputs(int B, int H, int N, int D, bool sharedQk, bool runs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int clusters = std::max(2, N / 32);
  const double norm = sharedQk ? 8.0 * std::sqrt(double(D)) : std::sqrt(8.0 * std::sqrt(double(D)));
  const double noise = 0.1 * norm / std::sqrt(double(D));
  std::vector<float> q(size_t(B) * H * N * D), k(q.size()), v(q.size());
  std::uniform_int_distribution<int> pick(0, clusters - 1);
  for (int h = 0; h < H; ++h) {
    std::vector<float> centres(size_t(clusters) * D);
    for (int c = 0; c < clusters; ++c) {
      double n2 = 0;
      for (int d = 0; d < D; ++d)
        n2 += std::pow(centres[size_t(c) * D + d] = normal(rng), 2);
      for (int d = 0; d < D; ++d)
        centres[size_t(c) * D + d] *= float(norm / std::sqrt(n2));
    }
    for (int b = 0; b < B; ++b)
      for (int t = 0, run = 0; t < N; ++t) {
        const size_t row = ((size_t(b) * H + h) * N + t) * D;
        if (t % 32 == 0)
          run = pick(rng);
        const int cq0 = runs ? run : pick(rng), ck0 = runs ? run : pick(rng);
        const float *cq = &centres[size_t(cq0) * D], *ck = &centres[size_t(ck0) * D];
        for (int d = 0; d < D; ++d) {
          q[row + d] = cq[d] + float(noise) * normal(rng);
          k[row + d] = ck[d] + float(noise) * normal(rng);
          v[row + d] = normal(rng);
        }
      }
  }
  Calibration c;
  c.q = st::Tensor::f32({B, H, N, D}, q), c.k = st::Tensor::f32({B, H, N, D}, k);
  c.v = st::Tensor::f32({B, H, N, D}, v);
  c.lengths = st::Tensor::i32({B}, std::vector<int32_t>(size_t(B), N));
  return c;
}

double relativeError(const st::Tensor &got, const std::vector<float> &exact) {
  std::vector<float> g = got.asF32();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size() && i < exact.size(); ++i) {
    num += std::pow(double(g[i]) - exact[i], 2);
    den += double(exact[i]) * exact[i];
  }
  return g.size() == exact.size() && den > 0 ? std::sqrt(num / den) : INFINITY;
}

struct Candidate {
  std::string config; ///< "k=128" or "chunk=64,rounds=4" (canonical)
  Attribute attr;     ///< the variant's lowrank or lsh attribute for it
  double relError = INFINITY, ms = INFINITY;
  std::string failure;
};

} // namespace

mlir::LogicalResult tuneAccuracy(ModuleOp module, attn::ModelOp model, attn::VariantOp variant,
                                 const TuneOptions &opt, const std::string &dbPath,
                                 const std::string &toolchain, double &elapsedBudget) {
  MLIRContext *ctx = module.getContext();
  const std::string name = model.getSymName().str();
  auto lr = variant.getLowrankAttr();
  auto lsh = variant.getLshAttr();
  if (!lr && !lsh) {
    results() << name << ": exact attention; no accuracy-for-time trade to tune\n";
    return mlir::success();
  }
  const int H = int(model.getHeads()), D = int(model.getDModel() / model.getHeads());
  const int N = int(model.getSeq()), B = opt.batch;
  const bool sharedQk = variant.getSharedQk() || bool(lsh);
  Calibration cal;
  std::string source = "calibration inputs (docs/tuning.md)";
  if (!opt.checkpoint.empty()) {
    // A trained run's own activations: the attention inputs its layer 0
    // sees on an evaluation batch. A checkpoint fixes k (its E and F are
    // k x N), so only LSH's rounds and chunk can be calibrated this way.
    if (lr) {
      diagnostics() << "attnc tune: error: --checkpoint calibrates LSH rounds and chunk; a "
                       "low-rank checkpoint's E and F fix k (calibrate k without --checkpoint)\n";
      return mlir::failure();
    }
    if (opt.data.empty()) {
      diagnostics() << "attnc tune: error: --checkpoint needs --data (what the run trained on)\n";
      return mlir::failure();
    }
    TrainCliOptions t;
    t.spec = opt.spec, t.specText = opt.specText, t.run.model = model.getSymName().str(),
    t.run.data = opt.data;
    t.run.out = opt.checkpoint, t.batch = B;
    CapturedAttention got;
    if (mlir::failed(captureAttentionInputs("tune", t, got)))
      return mlir::failure();
    cal.q = got.q, cal.k = got.k, cal.v = got.v;
    if (got.hasParams)
      cal.params = got.params;
    cal.lengths =
        got.hasLengths ? got.lengths : st::Tensor::i32({B}, std::vector<int32_t>(size_t(B), N));
    source = "layer 0's inputs of " + opt.checkpoint + " (step " + std::to_string(got.step) +
             ") on " + opt.data;
  } else {
    cal = calibrationInputs(B, H, N, D, sharedQk, bool(lr), 11);
  }
  std::mt19937 rng(5);
  codegen::AttentionShape shape;
  shape.batch = B, shape.heads = H, shape.seq = N, shape.headDim = D, shape.maxSeq = N;
  shape.elementType = FloatType::getF32(ctx);
  shape.withLengths = true;
  st::Tensor params;
  AttentionInputs in;
  in.q = &cal.q, in.k = sharedQk ? &cal.q : &cal.k, in.v = &cal.v, in.lengths = &cal.lengths;
  if (auto decls = variant.getParams()) {
    params = cal.params ? *cal.params : bench::randomTensor({int64_t(decls->size()), H}, rng, 0.1f);
    in.params = &params;
  }
  auto timeIt = [&](CpuAttention &a) {
    return bench::medianMs(opt.repeats, [&] { (void)a.run(in); });
  };
  const Attribute original = lr ? Attribute(lr) : Attribute(lsh);
  auto setAttr = [&](Attribute a) {
    if (!lr)
      variant.setLshAttr(llvm::cast<attn::LshAttr>(a));
    else if (a)
      variant.setLowrankAttr(llvm::cast<attn::LowRankAttr>(a));
    else
      variant.removeLowrankAttr();
  };

  // Exact attention: the variant without the projection, or LSH with one
  // chunk covering the sequence (its dense fallback: every key, same masks
  // and self score).
  std::optional<CpuAttention> exactKernel;
  if (lr)
    setAttr(Attribute());
  else
    setAttr(attn::LshAttr::get(ctx, lsh.getBuckets(), 1, N, lsh.getBefore(), lsh.getAfter(),
                               lsh.getSeed(), true));
  LogicalResult compiled = compileCpuAttention(module, variant, shape, exactKernel);
  setAttr(original);
  if (failed(compiled))
    return failure();
  Expected<AttentionOutputs> exactOut = exactKernel->run(in);
  if (!exactOut) {
    diagnostics() << "attnc tune: error: exact attention: " << exactOut.error() << "\n";
    return mlir::failure();
  }
  const std::vector<float> exact = exactOut->out.asF32();
  const double exactMs = timeIt(*exactKernel);

  std::vector<Candidate> cands;
  if (lr) {
    for (int64_t k : {16, 32, 64, 128, 256, 512, 1024})
      if (k < N)
        cands.push_back({"k=" + std::to_string(k), attn::LowRankAttr::get(ctx, k, lr.getShare())});
  } else {
    for (int64_t chunk : {lsh.getChunk() / 2, lsh.getChunk(), lsh.getChunk() * 2})
      for (int64_t rounds : {1, 2, 4, 8})
        if (chunk >= 8 && chunk < N)
          cands.push_back({tune::canonicalConfig("rounds=" + std::to_string(rounds) +
                                                 ",chunk=" + std::to_string(chunk)),
                           attn::LshAttr::get(ctx, lsh.getBuckets(), rounds, chunk, lsh.getBefore(),
                                              lsh.getAfter(), lsh.getSeed(), false)});
  }
  // A candidate's own inputs. Low-rank: E = F = mean pooling over k equal
  // segments of the sequence (one of the projections the Linformer paper
  // names; untrained random ones do not approximate attention at all, and a
  // checkpoint's learned ones fix k; see docs/tuning.md). LSH: the spec's
  // seed draws the rotations, as attnc run does.
  auto candidateInputs = [&](Attribute attr, AttentionInputs &in, st::Tensor &E, st::Tensor &F,
                             st::Tensor &rotations) {
    if (auto cl = llvm::dyn_cast<attn::LowRankAttr>(attr)) {
      const int64_t k = cl.getK();
      const bool perHead = cl.getShare() == attn::ShareMode::none;
      std::vector<float> pool(size_t(perHead ? H : 1) * k * N, 0.f);
      for (int64_t r = 0; r < k * (perHead ? H : 1); ++r) {
        const int64_t row = r % k, begin = row * N / k, end = (row + 1) * N / k;
        for (int64_t t = begin; t < end; ++t)
          pool[size_t(r) * N + t] = 1.f / float(std::max<int64_t>(1, end - begin));
      }
      std::vector<int64_t> eShape = {k, N};
      if (perHead)
        eShape.insert(eShape.begin(), H);
      E = st::Tensor::f32(eShape, pool), F = st::Tensor::f32(eShape, pool);
      in.E = &E;
      in.F = cl.getShare() == attn::ShareMode::none || cl.getShare() == attn::ShareMode::headwise
                 ? &F
                 : nullptr;
    }
    if (auto cl = llvm::dyn_cast<attn::LshAttr>(attr)) {
      std::vector<float> r(size_t(cl.getRounds()) * D * (cl.getBuckets() / 2));
      philox::lshRotations(uint64_t(cl.getSeed()), /*stream=*/0, r);
      rotations = st::Tensor::f32({cl.getRounds(), D, cl.getBuckets() / 2}, r);
      in.rotations = &rotations;
    }
  };
  Expected<tune::TuningDb> db = tune::TuningDb::open(dbPath);
  if (!db) {
    diagnostics() << "attnc tune: error: " << db.error() << "\n";
    return mlir::failure();
  }
  // The key says what was traded and for which budget: another budget is
  // another choice.
  std::string signature = tune::accuracySignaturePrefix(bool(lr), variant.getSymName().str(), D) +
                          bench::fmt(opt.maxError, 4);
  tune::KernelKey key{signature, tune::shapeBucket(N, H)};
  const tune::DeviceKey device = tune::cpuDevice();
  const auto t0 = bench::Clock::now();
  size_t done = 0;
  for (Candidate &c : cands) {
    if (std::chrono::duration<double>(bench::Clock::now() - t0).count() > elapsedBudget) {
      results() << name << ": --budget ran out after " << done << " of " << cands.size()
                << " candidates\n";
      break;
    }
    st::Tensor E, F, rotations;
    candidateInputs(c.attr, in, E, F, rotations);
    std::optional<CpuAttention> kernel;
    setAttr(c.attr);
    (void)compileCpuAttention(module, variant, shape, kernel); // a failure leaves it empty
    setAttr(original);
    Expected<AttentionOutputs> out =
        kernel ? kernel->run(in) : Expected<AttentionOutputs>(makeError("did not compile"));
    tune::Measurement m;
    m.config = c.config;
    m.repeats = opt.repeats;
    if (!out) {
      c.failure = m.error = out.error();
    } else {
      c.relError = m.relError = relativeError(out->out, exact);
      c.ms = m.medianMs = timeIt(*kernel);
    }
    if (Status s = db->recordMeasurement(device, key, toolchain, m); !s) {
      diagnostics() << "attnc tune: error: " << s.error() << "\n";
      return mlir::failure();
    }
    ++done;
    diagnostics() << "  " << name << ": " << done << "/" << cands.size() << " " << c.config
                  << (c.failure.empty() ? "" : " failed") << "\n";
  }
  elapsedBudget -= std::chrono::duration<double>(bench::Clock::now() - t0).count();

  // The frontier: a candidate is on it when no other is both faster and
  // more accurate.
  const Candidate *best = nullptr;
  results() << name << " (" << (lr ? "low-rank" : "LSH") << ", N " << N << ", B " << B << ", H "
            << H << ", D " << D << "): error-time frontier against exact attention ("
            << bench::fmt(exactMs, 3) << " ms) on " << source << "\n";
  results() << "  config               rel. error    ms      frontier  within "
            << bench::fmt(opt.maxError, 4) << "\n";
  for (const Candidate &c : cands) {
    if (!c.failure.empty()) {
      results() << "  " << c.config << ": failed: " << c.failure << "\n";
      continue;
    }
    bool dominated = false;
    for (const Candidate &o : cands)
      if (&o != &c && o.failure.empty() && o.ms < c.ms && o.relError < c.relError)
        dominated = true;
    const bool within = c.relError <= opt.maxError;
    if (within && std::isfinite(c.ms) && (!best || c.ms < best->ms))
      best = &c;
    results() << "  " << c.config
              << std::string(c.config.size() < 20 ? 20 - c.config.size() : 1, ' ')
              << bench::fmt(c.relError, 4) << "      " << bench::fmt(c.ms, 3) << "  "
              << (dominated ? "  " : " *") << "        " << (within ? "yes" : "no") << "\n";
  }
  if (!best) {
    results() << name << ": no candidate is within --max-error " << bench::fmt(opt.maxError, 4)
              << "; use exact attention (" << bench::fmt(exactMs, 3)
              << " ms) or allow a larger error\n";
    db->choose(device, key, toolchain, "exact", exactMs, 0);
  } else if (exactMs <= best->ms) {
    results() << name << ": exact attention (" << bench::fmt(exactMs, 3)
              << " ms) is as fast as the best candidate within the budget (" << best->config << ", "
              << bench::fmt(best->ms, 3) << " ms) at N " << N << ": use exact attention here\n";
    db->choose(device, key, toolchain, "exact", exactMs, 0);
  } else {
    results() << name << ": chose " << best->config << " (error " << bench::fmt(best->relError, 4)
              << ", " << bench::fmt(best->ms, 3) << " ms, " << bench::fmt(exactMs / best->ms)
              << "x faster than exact attention)\n";
    db->choose(device, key, toolchain, best->config, best->ms, 0);
  }
  // The automatic variant choice by length: exact attention against the
  // choice at N = 256, 512, ... up to the model's length (same batch; the
  // kernels take any N up to it): from which length on the approximation
  // pays, the threshold users otherwise set by hand.
  if (best) {
    std::optional<CpuAttention> chosen;
    setAttr(best->attr);
    compiled = compileCpuAttention(module, variant, shape, chosen);
    setAttr(original);
    if (failed(compiled))
      return failure();
    std::vector<int> lengths;
    for (int n = 256; n < N; n *= 2)
      lengths.push_back(n);
    lengths.push_back(N);
    int threshold = -1; // the shortest N from which the choice stays faster
    results() << name << ": exact attention vs " << best->config << " by length (B " << B
              << ")\n    N   exact ms  chosen ms  exact/chosen\n";
    for (int n : lengths) {
      Calibration c = calibrationInputs(B, H, n, D, sharedQk, bool(lr), 11);
      AttentionInputs at;
      at.q = &c.q, at.k = sharedQk ? &c.q : &c.k, at.v = &c.v, at.lengths = &c.lengths;
      at.params = in.params;
      const double e = bench::medianMs(opt.repeats, [&] { (void)exactKernel->run(at); });
      st::Tensor E, F, rotations;
      candidateInputs(best->attr, at, E, F, rotations);
      const double a = bench::medianMs(opt.repeats, [&] { (void)chosen->run(at); });
      if (a < e && threshold < 0)
        threshold = n;
      else if (a >= e)
        threshold = -1;
      results() << "  " << std::string(n < 10000 ? 5 - std::to_string(n).size() : 0, ' ') << n
                << "   " << bench::fmt(e, 3) << "      " << bench::fmt(a, 3) << "      "
                << bench::fmt(e / a) << "\n";
    }
    const tune::KernelKey crossKey{signature + " crossover", key.shapeBucket};
    const std::string cfg =
        threshold < 0 ? "exact_below=none" : "exact_below=" + std::to_string(threshold);
    db->choose(device, crossKey, toolchain, cfg, best->ms, 0);
    results() << name << ": "
              << (threshold < 0 ? "exact attention is as fast at every length measured"
                                : best->config + " is faster from N = " +
                                      std::to_string(threshold) + " on; below it, exact attention")
              << " (" << cfg << ")\n";
  }
  if (Status s = db->save(); !s) {
    diagnostics() << "attnc tune: error: " << s.error() << "\n";
    return mlir::failure();
  }
  return mlir::success();
}

} // namespace attnc::driver
