//===- Perf.cpp - attnc perf: kernels' time, predicted from their SASS ---===//
#include "driver/perf/Perf.h"

#include "driver/ArtifactBuilder.h"
#include "driver/Compile.h"
#include "driver/Report.h"
#include "driver/Spec.h"

#include "runtime/FileSystem.h"
#include "runtime/Manifest.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/perf/Disassembler.h"
#include "runtime/perf/PerfModel.h"
#include "runtime/perf/Sass.h"

#include "attnc/abi/LshTileModel.h"
#include "attnc/abi/ProjectionTileModel.h"
#include "attnc/abi/TileModel.h"

#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>

namespace attnc::driver {

namespace {

/// What an entry point of the dense kernels, or the LSH forward, does (its
/// name says: codegen/KernelEmitter.cpp), which sets its grid and loop trips.
enum class Kind {
  Forward,
  Preprocess,
  DkDv,
  Dq,
  LshForward,
  LshDq,
  LshDkDv,
  LshHash,       ///< fp32 SIMT: its innermost loop, trips from the hash's FMAs
  LshStreamed,   ///< sort, combines, backward preprocess: whole, DRAM floor
  LowRankGemm,   ///< a low-rank projection GEMM (device_support.cuh), per slice
  LowRankReduce, ///< the sum of a split GEMM's parts: whole, DRAM floor
  Other
};

Kind kindOf(const std::string &entry) {
  if (entry.rfind("attnc_lsh_hash_", 0) == 0)
    return Kind::LshHash;
  for (const char *prefix :
       {"attnc_lsh_sort_offsets_", "attnc_lsh_sort_scatter_", "attnc_lsh_combine_",
        "attnc_lsh_bwd_preprocess_", "attnc_lsh_bwd_combine_"})
    if (entry.rfind(prefix, 0) == 0)
      return Kind::LshStreamed;
  if (entry.rfind("attnc_lsh_fwd_", 0) == 0)
    return Kind::LshForward;
  if (entry.rfind("attnc_lsh_bwd_dq_", 0) == 0)
    return Kind::LshDq;
  if (entry.rfind("attnc_lsh_bwd_dkdv_", 0) == 0)
    return Kind::LshDkDv;
  if (entry.rfind("attnc_fwd_", 0) == 0)
    return Kind::Forward;
  if (entry.rfind("attnc_bwd_preprocess_", 0) == 0)
    return Kind::Preprocess;
  if (entry.rfind("attnc_bwd_dkdv_", 0) == 0)
    return Kind::DkDv;
  if (entry.rfind("attnc_bwd_dq_", 0) == 0)
    return Kind::Dq;
  return Kind::Other;
}

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::Forward:
    return "fwd";
  case Kind::Preprocess:
    return "bwd-preprocess";
  case Kind::DkDv:
    return "bwd-dkdv";
  case Kind::Dq:
    return "bwd-dq";
  case Kind::LshForward:
    return "lsh-fwd";
  case Kind::LshDq:
    return "lsh-bwd-dq";
  case Kind::LshDkDv:
    return "lsh-bwd-dkdv";
  case Kind::LshHash:
    return "lsh-hash";
  case Kind::LshStreamed:
    return "lsh-streamed";
  case Kind::LowRankGemm:
    return "lowrank-gemm";
  case Kind::LowRankReduce:
    return "lowrank-reduce";
  case Kind::Other:
    return "other";
  }
  return "?";
}

double elementBytes(const std::string &dtype) { return dtype == "f32" ? 4 : 2; }

/// One kernel's analysis on one arch.
struct KernelRow {
  std::string kernel, variant, dtype;
  int headDim = 0;
  Kind kind = Kind::Other;
  int registers = 0, sharedBytes = 0;
  bool hasLoop = false;
  perf::PipeCounts counts;
  /// The loop's counted FLOPs over the ones its tile must do in one
  /// iteration (0: not checked). Off 1, the loop holds inner loops the
  /// count runs once, and the row gets no prediction.
  double work = 0;
  bool predicted = false;
  perf::Prediction prediction;
};

/// The tile an entry point launches with: the op's, except the LSH
/// per-round kernels' on tensor cores (LshTileModel.h lshMmaFwdTile and
/// lshMmaBwdTile, as the emitter and runtime/CudaAttention.cpp pick them).
tile::LshTile launchTile(const ManifestKernel &k, Kind kind) {
  const tile::LshTile op{int(k.blockQ), int(k.blockKv), int(k.warps)};
  if (!k.lsh)
    return op;
  const int chunk = int(k.lsh->chunk), e = int(elementBytes(k.dtype));
  if (kind == Kind::LshForward)
    return tile::lshFwdLaunchTile(op, chunk, int(k.headDim), e);
  if (kind == Kind::LshDq || kind == Kind::LshDkDv)
    return tile::lshBwdLaunchTile(op, chunk, int(k.headDim), e);
  return op;
}

/// Key tiles an LSH forward or dQ block visits, averaged over the chunks
/// of N positions (chunks at the ends have shorter windows); a dK/dV block
/// visits as many query tiles on average (its window is the mirror image).
double lshKeyTrips(const ManifestKernel &k, const tile::LshTile &t, long long n) {
  const long long chunk = k.lsh->chunk, C = (n + chunk - 1) / chunk;
  double chunks = 0;
  for (long long c = 0; c < C; ++c)
    chunks += double(std::min(C - 1, c + k.lsh->after) - std::max(0LL, c - k.lsh->before) + 1);
  return chunks / double(C) * double(chunk) / double(t.blockKv);
}

/// FLOPs one CTA must do per iteration of its loop: the forward's two
/// matrix products, the dK/dV kernel's four (S, dP, dV, dK), dQ's three
/// (the LSH kernels' likewise).
double tileFlops(const ManifestKernel &k, Kind kind) {
  const tile::LshTile t = launchTile(k, kind);
  const double mnk = 2.0 * double(t.blockQ) * double(t.blockKv) * double(k.headDim);
  switch (kind) {
  case Kind::Forward:
  case Kind::LshForward:
    return 2 * mnk;
  case Kind::DkDv:
  case Kind::LshDkDv:
    return 4 * mnk;
  case Kind::Dq:
  case Kind::LshDq:
    return 3 * mnk;
  default:
    return 0;
  }
}

/// The launch of a dense kernel at the shape: the grid and loop trips of
/// runtime/CudaAttention.cpp's launches (kernels/abi TileModel.h's
/// queryTileBlocks / keyTileBlocks), and the DRAM traffic floor.
perf::LaunchShape launchOf(const ManifestKernel &k, const std::string &entry, Kind kind,
                           int registers, int sharedBytes, const PerfOptions &o) {
  perf::LaunchShape l;
  const long long bh = o.batch * o.heads, n = o.seqLen;
  // Low-rank attention attends over its kProj projected keys.
  const long long nk = k.kvSource == "lowrank" ? k.lowrankK : n;
  const int qTiles = tile::gridTiles(n, int(k.blockQ)),
            kvTiles = tile::gridTiles(nk, int(k.blockKv));
  // A causal block of queries visits the key blocks up to its own: half on
  // average.
  auto trips = [&](int tiles) { return k.causal ? (tiles + 1) / 2.0 : double(tiles); };
  const double e = elementBytes(k.dtype), bhnd = double(bh) * n * k.headDim, bhn = double(bh) * n;
  const double keys = double(bh) * nk * k.headDim; // k's or v's elements
  l.warpsPerBlock = int(k.warps), l.registers = registers, l.sharedBytes = sharedBytes;
  switch (kind) {
  case Kind::Forward: // reads q, k, v; writes out and lse
    l.blocks = tile::queryTileBlocks(n, int(k.blockQ), bh), l.loopTrips = trips(kvTiles);
    l.dramBytes = (2 * bhnd + 2 * keys) * e + 4 * bhn;
    break;
  case Kind::Preprocess: // delta = rowsum(dO * O): counted whole, once per block
    l.blocks = tile::queryTileBlocks(n, int(k.blockQ), bh), l.loopTrips = 0;
    l.dramBytes = 2 * bhnd * e + 4 * bhn;
    break;
  case Kind::DkDv: // reads q, k, v, dO, lse, delta; writes dK, dV
    l.blocks = tile::keyTileBlocks(nk, int(k.blockKv), bh), l.loopTrips = trips(qTiles);
    l.dramBytes = (2 * bhnd + 4 * keys) * e + 8 * bhn;
    break;
  case Kind::Dq: // reads q, k, v, dO, lse, delta; writes dQ
    l.blocks = tile::queryTileBlocks(n, int(k.blockQ), bh), l.loopTrips = trips(kvTiles);
    l.dramBytes = (3 * bhnd + 2 * keys) * e + 8 * bhn;
    break;
  case Kind::LshForward: { // per round: reads q, v; writes round_out (fp32), round_lse
    const tile::LshTile t = launchTile(k, kind);
    const int rounds = int(k.lsh->rounds);
    l.warpsPerBlock = t.warps;
    l.blocks = tile::lshFwdGrid(t, int(n), int(k.lsh->chunk), int(bh), rounds).x;
    l.loopTrips = lshKeyTrips(k, t, n);
    l.dramBytes = rounds * (2 * bhnd * e + 4 * bhnd + 8 * bhn);
    break;
  }
  case Kind::LshDq:     // per round: reads q, dO, v, stats; writes round_dq (fp32)
  case Kind::LshDkDv: { // ... writes round_dk and round_dv (fp32)
    const tile::LshTile t = launchTile(k, kind);
    const int rounds = int(k.lsh->rounds);
    l.warpsPerBlock = t.warps;
    l.blocks =
        (kind == Kind::LshDq ? tile::lshBwdDqGrid(t, int(n), int(k.lsh->chunk), int(bh), rounds)
                             : tile::lshBwdDkdvGrid(t, int(n), int(k.lsh->chunk), int(bh), rounds))
            .x;
    l.loopTrips = lshKeyTrips(k, t, n);
    l.dramBytes = rounds * (3 * bhnd * e + (kind == Kind::LshDq ? 4 : 8) * bhnd + 12 * bhn);
    break;
  }
  case Kind::LshHash: { // a tile of positions per block; reads q, writes buckets
    const int rounds = int(k.lsh->rounds), threads = int(k.warps) * 32;
    l.blocks = tile::lshHashTileGrid(int(n), threads, int(bh), rounds).x;
    // loopTrips: set by the caller from the loop's counted FMAs.
    l.dramBytes = rounds * (bhnd * e + 4 * bhn) + 4 * bhnd;
    break;
  }
  case Kind::LshStreamed: { // counted whole, once per block; the DRAM floor
    const double rounds = double(k.lsh->rounds), threads = double(k.warps) * 32;
    const double counts = double(
        tile::lshSortCounts(int(n), int(threads), int(k.lsh->numBuckets), int(bh), int(rounds)));
    if (entry.rfind("attnc_lsh_sort_offsets_", 0) == 0) { // counts in and out
      l.blocks = tile::lshHashGrid(int(bh), int(rounds)).x;
      l.dramBytes = 8 * counts;
    } else if (entry.rfind("attnc_lsh_sort_scatter_", 0) == 0) { // buckets, offsets; perm
      l.blocks = tile::lshHashTileGrid(int(n), int(threads), int(bh), int(rounds)).x;
      l.dramBytes = 8 * rounds * bhn + 4 * counts;
    } else {
      l.blocks = tile::lshRowGrid(int(n), int(bh)).x;
      if (entry.rfind("attnc_lsh_combine_", 0) == 0) // rounds' out, lse; out, lse
        l.dramBytes = rounds * (4 * bhnd + 4 * bhn) + bhnd * e + 4 * bhn;
      else if (entry.rfind("attnc_lsh_bwd_preprocess_", 0) == 0) // out, dO; delta
        l.dramBytes = 2 * bhnd * e + 4 * bhn;
      else // rounds' dq, dk, dv; q, keys; dq, dv
        l.dramBytes = rounds * 12 * bhnd + bhnd * e + 4 * bhnd + 2 * bhnd * e;
    }
    break;
  }
  case Kind::LowRankGemm: // set by lowRankRows
  case Kind::LowRankReduce:
  case Kind::Other:
    break;
  }
  return l;
}

/// The hash's innermost loop with the most fp32 FMA work (the dot products
/// with the rotations), or null.
const perf::SassLoop *hashLoop(const perf::SassFunction &fn,
                               const std::vector<perf::SassLoop> &loops) {
  const perf::SassLoop *best = nullptr;
  double bestFlops = 0;
  for (const perf::SassLoop &loop : loops) {
    const double flops = perf::countRange(fn, loop.first, loop.last).simtFlops;
    if (loop.innermost && flops > bestFlops)
      best = &loop, bestFlops = flops;
  }
  return best;
}

/// One low-rank GEMM of a pass (ProjectionTileModel.h), run twice: for K
/// (with E) and for V (with F).
struct LowRankGemm {
  const char *name;
  StridedGemmArgs args;
  double dramBytes; ///< one run's floor: each operand read once, C written
};

/// The low-rank GEMMs of k's pass at the shape: the forward's K' = E·K;
/// the backward's dK = Eᵀ·dK' and dE += Σ dK'·Kᵀ.
std::vector<LowRankGemm> lowRankGemms(const ManifestKernel &k, const PerfOptions &o) {
  const tile::LowRankShape s{o.batch,          o.heads,    o.seqLen,
                             k.headDim,        k.lowrankK, std::max<long long>(o.seqLen, k.maxSeq),
                             k.share == "none"};
  const double e = 4.0 * (s.perHead ? s.H : 1) * s.kProj * s.N; // E's read columns, fp32
  const double x = 4.0 * s.B * s.H * s.N * s.D, xp = 4.0 * s.B * s.H * s.kProj * s.D;
  if (!k.backward)
    return {{"project", tile::lowRankProject(s), e + x + xp}};
  return {{"project-back", tile::lowRankProjectBack(s), e + xp + x},
          {"weight-grad", tile::lowRankWeightGrad(s), xp + x + 2 * e}};
}

/// The rows of k's low-rank GEMMs (kernel names "entry:variant:gemm x2")
/// from the device support module's machine code on the arch: the GEMM
/// timed by its slice loop, a split's reduction counted whole with its
/// DRAM floor.
Status addLowRankRows(const ManifestKernel &k, const Cubin &support,
                      const std::map<std::string, const perf::SassFunction *> &byName,
                      const perf::ArchRates &rates, const PerfOptions &o,
                      std::vector<KernelRow> &rows) {
  const bool simt = k.dtype == "f32"; // the fp32 GEMM; else tensor cores in the dtype
  const int warps = simt ? kStridedGemmThreads / 32 : tile::kProjWarps;
  const double tileFlops = simt ? 2.0 * kStridedGemmTile * kStridedGemmTile * kStridedGemmDepth
                                : 2.0 * tile::kProjTileM * tile::kProjTileN * tile::kProjDepth;
  const std::string reduceEntry = "attnc_strided_gemm_reduce";
  for (const LowRankGemm &lg : lowRankGemms(k, o)) {
    const StridedGemmArgs &g = lg.args;
    // The entry the runtime launches for this GEMM (CudaAttention::projectOnDevice).
    const std::string entry = simt
                                  ? "attnc_strided_gemm"
                                  : "attnc_strided_gemm_mma_" + k.dtype + "_" + tile::projLayout(g);
    for (const std::string &name : {entry, reduceEntry})
      if (!byName.count(name) || !support.kernel(name))
        return makeError(name + " is missing from the device support module's disassembly");
    const perf::SassFunction &gemm = *byName.at(entry), &reduce = *byName.at(reduceEntry);
    const KernelResources &gr = *support.kernel(entry), &rr = *support.kernel(reduceEntry);
    const std::vector<perf::SassLoop> loops = perf::findLoops(gemm);
    const perf::SassLoop *hot = perf::hotLoop(gemm, loops);
    KernelRow row;
    row.kernel = entry + ":" + k.name + ":" + lg.name + " x2";
    row.variant = k.name, row.dtype = k.dtype, row.headDim = int(k.headDim);
    row.kind = Kind::LowRankGemm, row.registers = gr.registers,
    row.sharedBytes = gr.staticSmemBytes;
    row.hasLoop = hot != nullptr;
    row.counts = hot ? perf::countRange(gemm, hot->first, hot->last)
                     : perf::countRange(gemm, 0, gemm.code.size() - 1);
    if (hot)
      row.work = warps * (row.counts.tensorFlops + row.counts.simtFlops) / tileFlops;
    const long long range =
        tile::projCeil(g.k, simt ? kStridedGemmDepth : tile::kProjDepth) * g.terms;
    const int splits = simt ? 1 : std::max(g.splits, 1);
    perf::LaunchShape l;
    l.blocks = simt ? tile::simtGemmGrid(g) : tile::projGrid(g);
    l.warpsPerBlock = warps, l.registers = gr.registers, l.sharedBytes = gr.staticSmemBytes;
    l.loopTrips = double(tile::projCeil(range, splits));
    l.dramBytes = lg.dramBytes + 4.0 * double(tile::projPartialFloats(g));
    if (hot && row.work >= 0.9 && row.work <= 1.3) {
      row.prediction = perf::predict(rates, row.counts, l);
      row.prediction.seconds *= 2; // K and V
      row.predicted = true;
    }
    rows.push_back(row);
    if (splits <= 1)
      continue;
    KernelRow sum;
    sum.kernel = reduceEntry + ":" + k.name + ":" + lg.name + " x2";
    sum.variant = k.name, sum.dtype = k.dtype, sum.headDim = int(k.headDim);
    sum.kind = Kind::LowRankReduce, sum.registers = rr.registers;
    sum.counts = perf::countRange(reduce, 0, reduce.code.size() - 1);
    perf::LaunchShape r;
    r.blocks = tile::projReduceGrid(g), r.warpsPerBlock = tile::kProjReduceThreads / 32;
    r.registers = rr.registers, r.loopTrips = 0;
    r.dramBytes = 4.0 * double(tile::projPartialFloats(g) + 2 * g.batches * g.m * g.n);
    sum.prediction = perf::predict(rates, sum.counts, r);
    sum.prediction.seconds *= 2;
    sum.predicted = true;
    rows.push_back(sum);
  }
  return {};
}

/// A CUBIN's functions, disassembled and parsed, by name.
struct Disassembly {
  std::vector<perf::SassFunction> functions;
  std::map<std::string, const perf::SassFunction *> byName;
};
Expected<std::unique_ptr<Disassembly>> disassembleCubin(const Cubin &cubin,
                                                        const std::string &arch) {
  Expected<std::string> sass = perf::disassemble(cubin.image);
  if (!sass)
    return makeError(arch + ": " + sass.error());
  Expected<std::vector<perf::SassFunction>> functions = perf::parseSass(*sass);
  if (!functions)
    return makeError(arch + ": " + functions.error());
  auto d = std::make_unique<Disassembly>();
  d->functions = std::move(*functions);
  for (const perf::SassFunction &f : d->functions)
    d->byName[f.name] = &f;
  return d;
}

/// Every kernel of `compiled` on `arch`, analysed.
Expected<std::vector<KernelRow>> analyse(const CompiledKernels &compiled, const std::string &arch,
                                         const perf::ArchRates &rates, const PerfOptions &o) {
  Expected<Cubin> cubin = compileCudaKernels(compiled, arch);
  if (!cubin)
    return cubin.takeError();
  Expected<std::unique_ptr<Disassembly>> kernels = disassembleCubin(*cubin, arch);
  if (!kernels)
    return kernels.takeError();
  const std::map<std::string, const perf::SassFunction *> &byName = (*kernels)->byName;

  std::vector<KernelRow> rows;
  for (const ManifestKernel &k : compiled.kernels)
    for (const std::string &entry : k.entryPoints) {
      auto f = byName.find(entry);
      const KernelResources *r = cubin->kernel(entry);
      if (f == byName.end() || !r)
        return makeError(arch + ": " + entry + " is missing from the " +
                         (r ? "disassembly" : "ptxas report"));
      KernelRow row;
      row.kernel = entry, row.variant = k.name, row.dtype = k.dtype;
      row.headDim = int(k.headDim), row.kind = kindOf(entry);
      row.registers = r->registers;
      row.sharedBytes = launchSharedBytes(k, entry, *r);
      const perf::SassFunction &fn = *f->second;
      // The preprocess and the LSH kernels that stream memory are short:
      // counted whole, once per block.
      const bool whole = row.kind == Kind::Preprocess || row.kind == Kind::LshStreamed;
      const std::vector<perf::SassLoop> loops =
          whole ? std::vector<perf::SassLoop>() : perf::findLoops(fn);
      const perf::SassLoop *hot =
          row.kind == Kind::LshHash ? hashLoop(fn, loops) : perf::hotLoop(fn, loops);
      row.hasLoop = hot != nullptr;
      row.counts = hot ? perf::countRange(fn, hot->first, hot->last)
                       : perf::countRange(fn, 0, fn.code.size() - 1);
      if (double need = tileFlops(k, row.kind); need > 0 && hot)
        row.work = double(launchTile(k, row.kind).warps) *
                   (row.counts.tensorFlops + row.counts.simtFlops) / need;
      // A loop whose arithmetic falls short of its tile's holds inner loops
      // (the fp32 SIMT kernels do), which the count sees once.
      const bool counted = whole || (row.work >= 0.9 && row.work <= 1.3) ||
                           (row.kind == Kind::LshHash && hot && row.counts.simtFlops > 0);
      if (row.kind != Kind::Other && counted) {
        perf::LaunchShape launch = launchOf(k, entry, row.kind, row.registers, row.sharedBytes, o);
        if (row.kind == Kind::LshHash) // each lane's position: D * buckets/2 FMAs
          launch.loopTrips =
              32 * double(k.headDim) * double(k.lsh->numBuckets / 2) * 2 / row.counts.simtFlops;
        row.prediction = perf::predict(rates, row.counts, launch);
        row.predicted = true;
      }
      rows.push_back(std::move(row));
    }
  // Low-rank variants: the projection GEMMs the runtime runs around them.
  const bool lowRank = std::any_of(compiled.kernels.begin(), compiled.kernels.end(),
                                   [](const ManifestKernel &k) { return k.kvSource == "lowrank"; });
  if (!lowRank)
    return rows;
  Expected<Cubin> support = compileDeviceSupport(arch);
  if (!support)
    return makeError(arch + ": the device support kernels: " + support.error());
  Expected<std::unique_ptr<Disassembly>> supportSass = disassembleCubin(*support, arch);
  if (!supportSass)
    return supportSass.takeError();
  for (const ManifestKernel &k : compiled.kernels)
    if (k.kvSource == "lowrank")
      if (Status s = addLowRankRows(k, *support, (*supportSass)->byName, rates, o, rows); !s)
        return makeError(arch + ": " + s.error());
  return rows;
}

/// FLOPs of a pass at the shape, as FlashAttention counts them: 4·B·H·N²·D
/// for the forward, 2.5 times that for the backward; half when causal. LSH
/// attention: the products it computes, 4·B·H·rounds·Npad·(window keys)·D.
double passFlops(const ManifestKernel &k, bool backward, const PerfOptions &o) {
  if (k.lsh) {
    const tile::LshTile t = launchTile(k, backward ? Kind::LshDq : Kind::LshForward);
    const double keys = lshKeyTrips(k, t, o.seqLen) * t.blockKv;
    const double npad = double(tile::lshPaddedLength(int(o.seqLen), int(k.lsh->chunk)));
    return 4.0 * o.batch * o.heads * double(k.lsh->rounds) * npad * keys * double(k.headDim) *
           (backward ? 2.5 : 1);
  }
  if (k.kvSource == "lowrank") { // attention over kProj keys, and the GEMMs
    const double bhnkd =
        double(o.batch) * o.heads * double(o.seqLen) * double(k.lowrankK) * double(k.headDim);
    return 4 * bhnkd * (backward ? 2.5 : 1) + (backward ? 8 : 4) * bhnkd;
  }
  double f = 4.0 * o.batch * o.heads * double(o.seqLen) * double(o.seqLen) * double(k.headDim);
  return f * (backward ? 2.5 : 1) * (k.causal ? 0.5 : 1);
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

/// A pass of one fused op: its kernels' predicted times summed.
struct PassRow {
  std::string variant, dtype;
  int headDim = 0;
  bool backward = false;
  double seconds = 0, flops = 0;
  bool complete = true; ///< every kernel of the pass has a prediction
  bool lsh = false;     ///< LSH: hash and sort, per-round kernels, combine
};

std::vector<PassRow> passesOf(const CompiledKernels &compiled, const std::vector<KernelRow> &rows,
                              const PerfOptions &o) {
  std::vector<PassRow> passes;
  for (const ManifestKernel &k : compiled.kernels) {
    PassRow p{k.name, k.dtype,          int(k.headDim), k.backward, 0, passFlops(k, k.backward, o),
              true,   k.lsh.has_value()};
    bool any = false;
    for (const KernelRow &r : rows)
      if (r.variant == k.name && r.kind != Kind::Other) {
        any = true;
        p.complete = p.complete && r.predicted;
        p.seconds += r.prediction.seconds;
      }
    if (any)
      passes.push_back(p);
  }
  return passes;
}

const char *kCsvHeader =
    "arch,kernel,kind,dtype,head_dim,registers,shared_bytes,blocks_per_sm,occupancy_limit,"
    "loop_instructions,tensor,shared,global,mufu,fma,alu,uniform,shuffle,barrier,control,"
    "shared_bytes_per_iteration,tensor_flops_per_iteration,stall_cycles,limiter,"
    "tensor_utilisation,predicted_us,tflops,work";

void writeCsvRows(std::ostream &os, const std::string &arch, const std::vector<KernelRow> &rows,
                  const std::vector<PassRow> &passes) {
  using perf::Pipe;
  for (const KernelRow &r : rows) {
    const perf::PipeCounts &c = r.counts;
    os << arch << "," << r.kernel << "," << kindName(r.kind) << "," << r.dtype << "," << r.headDim
       << "," << r.registers << "," << r.sharedBytes << ","
       << (r.predicted ? std::to_string(r.prediction.occupancy.blocks) : "") << ","
       << (r.predicted ? r.prediction.occupancy.limit : "") << "," << c.total << ","
       << c.of(Pipe::Tensor) << "," << c.of(Pipe::Shared) << "," << c.of(Pipe::Global) << ","
       << c.of(Pipe::Mufu) << "," << c.of(Pipe::Fma) << "," << c.of(Pipe::Alu) << ","
       << c.of(Pipe::Uniform) << "," << c.of(Pipe::Shuffle) << "," << c.of(Pipe::Barrier) << ","
       << c.of(Pipe::Control) << "," << c.sharedBytes << "," << c.tensorFlops << ","
       << c.stallCycles << "," << (r.predicted ? r.prediction.limiter : "") << ","
       << (r.predicted ? fixed(r.prediction.tensorUtilisation, 3) : "") << ","
       << (r.predicted ? fixed(r.prediction.seconds * 1e6, 2) : "") << ",,"
       << (r.work > 0 ? fixed(r.work, 2) : "") << "\n";
  }
  for (const PassRow &p : passes) {
    if (!p.complete)
      continue;
    os << arch << "," << p.variant << "," << (p.backward ? "pass-bwd" : "pass-fwd") << ","
       << p.dtype << "," << p.headDim << ",,,,,,,,,,,,,,,,,,,,," << fixed(p.seconds * 1e6, 2) << ","
       << fixed(p.flops / p.seconds / 1e12, 1) << ",\n";
  }
}

void printTable(std::ostream &os, const std::string &arch, const perf::ArchRates &rates,
                const std::vector<KernelRow> &rows, const std::vector<PassRow> &passes,
                const PerfOptions &o) {
  using perf::Pipe;
  const double peak = rates.tensorFlopsClk * rates.sms * rates.clockGhz * 1e9;
  os << arch << ", modelled as " << rates.gpu << " (" << rates.sms << " SMs, " << rates.clockGhz
     << " GHz, mma.sync fp16 peak " << fixed(peak / 1e12, 0) << " TFLOP/s): B=" << o.batch
     << " H=" << o.heads << " N=" << o.seqLen << "\n";
  os << "  per warp and loop iteration:\n";
  os << "  " << std::left << std::setw(44) << "kernel" << std::right << std::setw(5) << "regs"
     << std::setw(8) << "smem KB" << std::setw(6) << "CTAs" << std::setw(7) << "instr"
     << std::setw(6) << "mma" << std::setw(8) << "smem B" << std::setw(6) << "mufu" << std::setw(6)
     << "fma" << std::setw(6) << "alu" << std::setw(7) << "stall" << std::setw(6) << "work"
     << "  " << std::left << std::setw(9) << "limiter" << std::right << std::setw(8) << "tensor"
     << std::setw(11) << "time us"
     << "\n";
  for (const KernelRow &r : rows) {
    const perf::PipeCounts &c = r.counts;
    os << "  " << std::left << std::setw(44) << (r.kernel + (r.hasLoop ? "" : " (whole kernel)"))
       << std::right << std::setw(5) << r.registers << std::setw(8)
       << fixed(r.sharedBytes / 1024.0, 1) << std::setw(6)
       << (r.predicted ? std::to_string(r.prediction.occupancy.blocks) : "-") << std::setw(7)
       << c.total << std::setw(6) << c.of(Pipe::Tensor) << std::setw(8) << c.sharedBytes
       << std::setw(6) << c.of(Pipe::Mufu) << std::setw(6) << c.of(Pipe::Fma) << std::setw(6)
       << c.of(Pipe::Alu) << std::setw(7)
       << (c.stallCycles < 0 ? std::string("-") : fixed(c.stallCycles, 0)) << std::setw(6)
       << (r.work > 0 ? fixed(r.work, 2) : std::string("-")) << "  " << std::left << std::setw(9)
       << (r.predicted ? r.prediction.limiter : "-") << std::right << std::setw(8)
       << (r.predicted ? fixed(100 * r.prediction.tensorUtilisation, 0) + " %" : "-")
       << std::setw(11) << (r.predicted ? fixed(r.prediction.seconds * 1e6, 1) : "-") << "\n";
  }
  os << "  work: the loop's FLOPs over its tile's; where it is off 1 the loop holds inner loops "
        "counted once, and the kernel gets no prediction\n";
  for (const PassRow &p : passes) {
    if (!p.complete)
      continue;
    double tflops = p.flops / p.seconds / 1e12;
    os << "  " << (p.backward ? "backward " : "forward  ") << p.variant << " " << p.dtype << " d"
       << p.headDim << ": " << fixed(p.seconds * 1e3, 3) << " ms, " << fixed(tflops, 1)
       << " TFLOP/s (" << fixed(100 * tflops * 1e12 / peak, 0) << " % of the mma.sync peak)"
       << (p.lsh ? "; LSH: hash, sort, the rounds' attention and the combine" : "") << "\n";
  }
}

/// The columns of kCsvHeader, in order.
std::vector<std::string> csvColumns() {
  std::vector<std::string> names;
  std::stringstream ss(kCsvHeader);
  std::string name;
  while (std::getline(ss, name, ','))
    names.push_back(name);
  return names;
}

/// --compare: an earlier --csv's predicted times beside these, as ratios.
mlir::LogicalResult printComparison(std::ostream &os, const std::string &path,
                                    const std::string &current) {
  Expected<std::string> old = fs::readFile(path);
  if (!old)
    return commandError("perf", "--compare " + path + ": " + old.error());
  const std::vector<std::string> columns = csvColumns();
  auto column = [&](const char *name) {
    return size_t(std::find(columns.begin(), columns.end(), name) - columns.begin());
  };
  const size_t timeAt = column("predicted_us"), loopAt = column("loop_instructions");
  auto parse = [&](const std::string &text) {
    std::map<std::string, std::vector<std::string>> rows; // "arch kernel kind" → fields
    std::istringstream in(text);
    std::string line;
    std::getline(in, line); // the header
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      std::string field;
      while (std::getline(ss, field, ','))
        f.push_back(field);
      f.resize(columns.size()); // trailing empty fields

      rows[f[0] + " " + f[1] + " " + f[2]] = f;
    }
    return rows;
  };
  if (old->rfind(kCsvHeader, 0) != 0)
    return commandError("perf", "--compare " + path + " is not a CSV of attnc perf --csv");
  auto before = parse(*old), after = parse(current);
  os << "compared with " << path << " (ratio: earlier / now; above 1 is faster now):\n";
  int matched = 0;
  for (const auto &[key, now] : after) {
    auto was = before.find(key);
    if (was == before.end() || now[timeAt].empty() || was->second[timeAt].empty())
      continue;
    ++matched;
    double tNow = std::stod(now[timeAt]), tWas = std::stod(was->second[timeAt]);
    os << "  " << std::left << std::setw(56) << key << std::right << " time " << std::setw(10)
       << was->second[timeAt] << " -> " << std::setw(10) << now[timeAt] << " us  x"
       << fixed(tNow > 0 ? tWas / tNow : 0, 2);
    if (!now[loopAt].empty() && !was->second[loopAt].empty())
      os << "   loop instructions " << was->second[loopAt] << " -> " << now[loopAt];
    os << "\n";
  }
  if (matched == 0)
    os << "  no kernel of " << path << " is in this run (other spec, archs or names)\n";
  return mlir::success();
}

} // namespace

namespace {

/// One arch's analysis of the CUDA kernels `module` compiles to.
struct ArchAnalysis {
  perf::ArchRates rates;
  std::vector<KernelRow> rows;
  std::vector<PassRow> passes;
};

/// The kernels `attnc compile --target cuda --arch ARCH` builds from
/// `module`, with the same tiles (the tuning database's for the arch, then
/// the heuristics), analysed at o's shape. Errors the front end reports
/// itself come back as failure with an empty message.
Expected<ArchAnalysis> analyseArch(mlir::ModuleOp module, const std::string &arch,
                                   const PerfOptions &o) {
  std::string err;
  if (!checkArch(arch, err))
    return makeError(err);
  Expected<perf::ArchRates> rates = perf::archRates(arch);
  if (!rates)
    return rates.takeError();
  // Before compiling: the nvdisasm PyPI ships (CUDA 13's) reads no Volta.
  if (rates->sm < 75 && !std::getenv("ATTNC_NVDISASM"))
    return makeError(arch + ": CUDA 13's nvdisasm, which scripts/bootstrap.sh "
                            "installs, reads no sm_70 code; set $ATTNC_NVDISASM to "
                            "a CUDA 12 toolkit's nvdisasm to model Volta");
  mlir::OwningOpRef<mlir::ModuleOp> resolved = module.clone();
  ResolveFor resolve;
  resolve.target = "cuda", resolve.arch = arch;
  if (!resolveAuto(*resolved, resolve))
    return makeError("");
  ArtifactOptions ao;
  ao.target = "cuda", ao.arch = arch;
  CompiledKernels compiled;
  if (mlir::failed(compileModelKernels(*resolved, ao, "cuda", compiled)))
    return makeError("");
  Expected<std::vector<KernelRow>> rows = analyse(compiled, arch, *rates, o);
  if (!rows)
    return rows.takeError();
  ArchAnalysis a{*rates, std::move(*rows), {}};
  a.passes = passesOf(compiled, a.rows, o);
  return a;
}

} // namespace

Expected<std::vector<PredictedPass>> predictPasses(mlir::ModuleOp module, const std::string &arch,
                                                   long long batch, long long heads,
                                                   long long seqLen) {
  PerfOptions o;
  o.batch = batch, o.heads = heads, o.seqLen = seqLen;
  Expected<ArchAnalysis> a = analyseArch(module, arch, o);
  if (!a)
    return a.takeError();
  std::vector<PredictedPass> out;
  for (const PassRow &p : a->passes)
    out.push_back({p.variant, p.backward, p.seconds, p.complete});
  return out;
}

mlir::LogicalResult runPerf(const PerfOptions &o) {
  if (o.batch < 1 || o.heads < 1 || o.seqLen < 1)
    return commandError("perf", "--shape needs B, H and N of at least 1");
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = loadSpecModule(o.spec, "perf", context);
  if (!module)
    return mlir::failure();
  std::ostringstream csv;
  csv << kCsvHeader << "\n";
  for (const std::string &arch : o.archs) {
    Expected<ArchAnalysis> a = analyseArch(*module, arch, o);
    if (!a)
      return a.error().empty() ? mlir::failure() : commandError("perf", a.error());
    printTable(results(), arch, a->rates, a->rows, a->passes, o);
    writeCsvRows(csv, arch, a->rows, a->passes);
  }
  if (!o.csv.empty()) {
    if (Status s = fs::writeFileAtomic(o.csv, csv.str()); !s)
      return commandError("perf", "--csv " + o.csv + ": " + s.error());
    results() << "wrote " << o.csv << "\n";
  }
  if (!o.compare.empty())
    return printComparison(results(), o.compare, csv.str());
  return mlir::success();
}

} // namespace attnc::driver
