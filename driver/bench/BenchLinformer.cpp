//===- BenchLinformer.cpp - attnc bench --linformer-table -----------------===//
//
// The Linformer paper's inference table (Wang et al. 2020, Table 3: time
// saved and memory saved of a Linformer model against a standard
// Transformer, N = 512 … 65536, k = 128 and 256, on a 16 GB V100) as a
// measurement on this machine. Whole models (the compiled inference
// function, fp32 CPU) with the spec's dims and seq = N:
//   - standard, unfused: softmax(scale·Q·Kᵀ)·V with every (b, h) score
//     matrix materialised at once (B·H·N·N floats), as the paper's 2020
//     baseline (a framework's bmm, softmax, bmm) does;
//   - standard, fused: the spec's variant without its lowrank clause,
//     compiled by attnc (online softmax, no N·N buffer);
//   - Linformer: the spec's variant with each k of --k.
// Time saved = time(standard) / time(Linformer); memory saved = the largest
// batch of the Linformer model / that of the standard one, each found by
// search over the planned inference peak (plannedBytes: the compiled
// function's arena and what surrounds it) within --memory-gib. The plan is checked
// against the peak RSS of two forwards at the timing batch
// (docs/benchmarks.md).
//
//===----------------------------------------------------------------------===//
#include "driver/bench/BenchLinformer.h"
#include "driver/Report.h"
#include "driver/bench/BenchCommon.h"
#include "driver/Compile.h"
#include "driver/ModelConfigOf.h"
#include "driver/Run.h"

#include "attnc/abi/KernelArgs.h"
#include "dialect/AttnDialect.h"
#include "passes/Passes.h"
#include "driver/ModelGraph.h"
#include "runtime/KernelCache.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/Parameters.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <fstream>
#include <map>
#include <ostream>
#include <malloc.h>
#include <thread>
#include <unistd.h>

using namespace mlir;

namespace attnc::driver {

using namespace bench;

namespace {

/// The paper's baseline: all B·H score matrices at once (B·H·Nq·Nk floats,
/// allocated per call like a framework's bmm output), then a row softmax
/// (key padding from lengths; no score modifier or mask), then P·V.
const char *kMaterialisedSource = R"(#include "attnc/bench/materialised.h"
)";
using MaterialisedFn = int(const AttnFwdArgs *, int);

/// The paper's Table 3 (16 GB V100): time saved and memory saved for k = 128
/// and 256.
struct PaperRow {
  int n;
  double time128, time256, mem128, mem256;
};
constexpr PaperRow kPaper[] = {
    {512, 1.5, 1.3, 1.7, 1.5}, {1024, 1.7, 1.6, 3.0, 2.9}, {2048, 2.6, 2.4, 6.1, 5.6},
    {4096, 3.4, 3.2, 14, 13},  {8192, 5.5, 5.0, 28, 26},   {16384, 8.6, 7.8, 56, 48},
    {32768, 13, 12, 56, 48},   {65536, 20, 18, 60, 52},
};

/// The paper's time (or memory) ratio at (n, k); NaN where it has none.
double paperRatio(int n, int k, bool memory) {
  for (const PaperRow &r : kPaper)
    if (r.n == n && (k == 128 || k == 256))
      return memory ? (k == 128 ? r.mem128 : r.mem256) : (k == 128 ? r.time128 : r.time256);
  return NAN;
}

/// A field of /proc/self/status (VmRSS, VmHWM) in bytes; -1 when unknown.
int64_t procStatusBytes(const std::string &field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, field.size() + 1, field + ":") == 0)
      return std::stoll(line.substr(field.size() + 1)) * 1024; // "  123456 kB"
  return -1;
}

/// MemAvailable of /proc/meminfo in bytes; -1 when unknown.
int64_t memAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:")
      return kb * 1024;
  return -1;
}

/// Resets the peak RSS (VmHWM) to the current RSS: "5" to
/// /proc/self/clear_refs (Linux). Free heap pages go back to the system
/// first, so the next model cannot reuse them unseen.
bool resetPeakRss(std::string &why) {
  malloc_trim(0);
  std::ofstream f("/proc/self/clear_refs");
  if (f << "5" << std::flush)
    return true;
  why = "cannot write /proc/self/clear_refs";
  return false;
}

double gib(double bytes) { return bytes / double(int64_t(1) << 30); }

/// A GiB amount as given (16, 0.5, 0.01).
std::string gibStr(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// The 1-minute load average, or "?" (timings are noisy on a shared machine).
std::string loadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  return in >> first ? first : "?";
}

/// The largest batch whose planned bytes fit `budget` (doubling, then
/// bisection); 0 when not even one sequence fits.
int64_t maxBatch(const std::function<int64_t(int)> &planned, int64_t budget) {
  constexpr int kCap = 1 << 24;
  if (planned(1) > budget)
    return 0;
  int lo = 1;
  while (lo < kCap && planned(2 * lo) <= budget)
    lo *= 2;
  int hi = 2 * lo; // does not fit (or the cap)
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    (planned(mid) <= budget ? lo : hi) = mid;
  }
  return lo;
}

/// One model of one table row, measured.
struct Cell {
  double ms = NAN;
  int64_t maxBatch = 0;
  double planCheck = NAN; ///< measured / planned peak bytes at the timing batch
  std::string skipped;    ///< why it was not timed
};

/// What every measurement shares.
struct Setup {
  const BenchOptions &opt;
  int64_t budget;
  bool peakResettable = true;
  std::string whyNoPeak;
};

/// The model of one table cell: the spec's model at sequence length
/// `config.seq`, `layers` deep, with `variant`'s attention (the standard
/// clone or a k clone), run as its compiled inference function.
struct CellModel {
  ModuleOp module;
  attn::ModelOp model;
  std::string variant;
  int layers = 1;
  train::ModelConfig config;
};

/// The inference function of `m` for `batch` sequences (with `emit`, its
/// C++ too).
bool inferenceGraph(const CellModel &m, int batch, bool emit, ModelGraph &g) {
  ModelGraphOptions o;
  o.batch = batch, o.inferBatch = batch, o.train = false, o.emitSource = emit;
  o.layers = m.layers, o.seq = m.config.seq, o.variant = m.variant;
  return compileModelGraph(m.module, m.model, o, g);
}

/// The bytes live at the peak of one CompiledStep::infer call at batch b:
/// the parameter store (values and gradient buffers) and its constants, the
/// batch (tokens, targets), the planned arena, the logits CompiledStep
/// copies out, and the attention call's own buffers: the copies of q, k, v
/// (and E, F, per-head parameters) it hands the kernel, the lengths, the
/// kernel's out and lse, a low-rank kernel's projected K' and V', and
/// `workspace(b)` (e.g. the unfused baseline's B·H·N·N scores). Not
/// counted: code, thread stacks, a kernel's per-thread tiles.
Expected<int64_t> plannedBytes(const CellModel &m, int b,
                               const std::function<int64_t(int)> &workspace) {
  ModelGraph g;
  if (!inferenceGraph(m, b, /*emit=*/false, g))
    return makeError("the inference plan of " + attn::ModelOp(m.model).getSymName().str() +
                     " at batch " + std::to_string(b) + " failed (see the diagnostics)");
  const train::ModelConfig &c = m.config;
  const int64_t B = b, S = c.seq, D = c.dModel, H = c.heads, Dh = D / H, R = B * S;
  int64_t eShape = 0;
  if (c.lowrank)
    eShape = (c.share == "none" ? H : 1) * c.lowrankK * S;
  const int64_t weights = 2 * train::parameterCount(c) + train::constantCount(c);
  const int64_t attention = 3 * R * D + B + (c.lowrank ? 2 * eShape : 0) +
                            int64_t(c.headParams.size()) * H + R * D + B * H * S +
                            (c.lowrank ? 2 * B * H * c.lowrankK * Dh : 0);
  return 4 * (weights + 2 * R + R * c.vocab + attention) + g.inferArenaBytes + workspace(b);
}

/// Compiles the cell's model, searches its max batch over the plan, checks
/// the plan against the peak RSS of two forwards at the timing batch, then
/// times `repeats` forwards. `workspace(b)`: the bytes the attention
/// allocates itself at batch b.
Expected<Cell> measure(Setup &s, const CellModel &m, train::AttentionFn fn,
                       const std::function<int64_t(int)> &workspace) {
  Cell cell;
  std::map<int, int64_t> plans;
  std::string planError;
  auto planned = [&](int b) -> int64_t {
    if (auto it = plans.find(b); it != plans.end())
      return it->second;
    Expected<int64_t> bytes = plannedBytes(m, b, workspace);
    if (!bytes) {
      planError = bytes.error();
      return INT64_MAX;
    }
    return plans[b] = *bytes;
  };
  cell.maxBatch = maxBatch(planned, s.budget);
  const int B = s.opt.batch;
  int64_t need = planned(B), avail = memAvailableBytes();
  if (!planError.empty())
    return makeError(planError);
  if (avail > 0 && double(need) > 0.8 * double(avail)) {
    cell.skipped = "needs " + fmt(gib(double(need))) + " GiB at batch " + std::to_string(B) + ", " +
                   fmt(gib(double(avail))) + " GiB available";
    return cell;
  }
  ModelGraph g;
  if (!inferenceGraph(m, B, /*emit=*/true, g))
    return makeError("compiling the inference function of " +
                     attn::ModelOp(m.model).getSymName().str() + " failed (see the diagnostics)");
  HostCompiler compiler(&KernelCache::processDefault());
  // Compiled (or found in the cache) before the measurement: the compiler
  // runs in another process, but its output passes through this one.
  if (Status warm = train::CompiledStep::precompile(g.step, compiler); !warm)
    return warm.takeError();
  // For the check, every buffer of 128 KiB or more is its own mapping,
  // returned to the system when freed, so the RSS follows the live buffers
  // (with heap allocation, repeated forwards fragment the heap and the RSS
  // overshoots the live set: up to 3x measured). Timing: glibc's usual
  // behaviour once warm (threshold at its dynamic maximum, 32 MiB).
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  bool peakOk = s.peakResettable && resetPeakRss(s.whyNoPeak);
  s.peakResettable = peakOk;
  int64_t before = procStatusBytes("VmRSS");
  train::ParameterStore store(m.config, /*seed=*/0);
  Expected<std::unique_ptr<train::CompiledStep>> step =
      train::CompiledStep::create(std::move(g.step), store, std::move(fn), compiler);
  if (!step) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    return step.takeError();
  }
  train::Batch batch = syntheticBatch(m.config, B);
  for (int i = 0; i < 2; ++i)
    if (Expected<const float *> r = (*step)->infer(batch); !r) {
      mallopt(M_MMAP_THRESHOLD, 32 << 20);
      return r.takeError();
    }
  int64_t peak = procStatusBytes("VmHWM");
  if (peakOk && before >= 0 && peak >= 0)
    cell.planCheck = double(peak - before) / double(need);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  cell.ms = medianMs(s.opt.repeats, [&] { (void)(*step)->infer(batch); });
  return cell;
}

struct TableRow {
  int n, k;
  Cell unfused, fused, linformer; ///< linformer.skipped = "k > N": no cell
};

std::string ratio(double num, double den) {
  return std::isnan(num) || std::isnan(den) || den <= 0 ? "-" : fmt(num / den);
}

std::string batchRatio(const TableRow &r, const Cell &standard) {
  if (standard.maxBatch == 0)
    return r.linformer.maxBatch > 0 ? "inf" : "-";
  return fmt(double(r.linformer.maxBatch) / double(standard.maxBatch));
}

std::string paperCell(int n, int k, bool memory) {
  double v = paperRatio(n, k, memory);
  return std::isnan(v) ? "-" : fmt(v, v < 10 ? 1 : 0);
}

} // namespace

mlir::LogicalResult runLinformerTable(const BenchOptions &opt) {
  const std::string &specPath = opt.linformerTable;
  auto fail = [](const std::string &msg) {
    diagnostics() << "attnc bench: error: " << msg << "\n";
    return mlir::failure();
  };
  MLIRContext context;
  OwningOpRef<ModuleOp> module = loadSpecModule(specPath, "bench", context);
  if (!module)
    return mlir::failure();
  if (!resolveAuto(*module, ResolveFor()))
    return mlir::failure();
  // The first model whose attention is low-rank.
  attn::ModelOp model;
  attn::LayerOp layer;
  attn::VariantOp variant;
  std::string names;
  for (attn::ModelOp m : module->getOps<attn::ModelOp>()) {
    auto l = *m.getBody().getOps<attn::LayerOp>().begin();
    auto v = SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(m, l.getAttentionAttr());
    names += (names.empty() ? "" : ", ") + m.getSymName().str();
    if (!model && v && v.getLowrankAttr())
      model = m, layer = l, variant = v;
  }
  if (names.empty())
    return fail("'" + specPath +
                "' has no model; --linformer-table needs a model whose "
                "attention is low-rank (kv lowrank(...))");
  if (!model)
    return fail("no model of '" + specPath +
                "' has low-rank attention (kv lowrank(...)); its "
                "models: " +
                names);
  const int H = int(model.getHeads()), D = int(model.getDModel());
  if (D % H)
    return fail("d_model " + std::to_string(D) + " is not a multiple of heads " +
                std::to_string(H));
  const int Dh = D / H;
  const std::string share = stringifyShareMode(variant.getLowrankAttr().getShare()).str();
  const float scale = variant.getScaleAttr() ? float(variant.getScaleAttr().getValueAsDouble())
                                             : float(1 / std::sqrt(double(Dh)));
  std::vector<int> lengths = opt.lengths, ranks = opt.ranks;
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const int maxN = lengths.back();

  // Kernels: generic in B, H and N (specialised on the head dim), so each
  // is compiled once, for the longest sequence. The standard fused variant
  // is the spec's without the lowrank clause.
  OpBuilder b(module->getBody(), module->getBody()->end());
  auto dense = llvm::cast<attn::VariantOp>(b.clone(*variant));
  dense.setSymName(variant.getSymName().str() + "_standard");
  dense.removeLowrankAttr();
  codegen::AttentionShape shape;
  shape.heads = H, shape.headDim = Dh, shape.maxSeq = maxN;
  shape.elementType = b.getF32Type();
  shape.withLengths = true; // the model passes key-padding lengths
  std::optional<CpuAttention> fused;
  if (mlir::failed(compileCpuAttention(*module, dense, shape, fused)))
    return mlir::failure();
  std::vector<std::optional<CpuAttention>> lowrank(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto v = llvm::cast<attn::VariantOp>(b.clone(*variant));
    v.setSymName(variant.getSymName().str() + "_k" + std::to_string(ranks[i]));
    v.setLowrankAttr(
        attn::LowRankAttr::get(&context, ranks[i], variant.getLowrankAttr().getShare()));
    if (mlir::failed(compileCpuAttention(*module, v, shape, lowrank[i])))
      return mlir::failure();
  }
  Expected<SharedObject> baseline =
      compileBenchSource("attnc_bench_materialised.cpp", kMaterialisedSource);
  if (!baseline)
    return fail(baseline.error());
  Expected<MaterialisedFn *> materialised =
      baseline->function<MaterialisedFn>("bench_materialised_fwd");
  if (!materialised)
    return fail(materialised.error());

  train::AttentionFn unfusedFn = [fn = *materialised,
                                  scale](const AttentionInputs &in) -> Expected<AttentionOutputs> {
    if (in.dout)
      return makeError("the unfused baseline runs the forward only");
    const std::vector<int64_t> &s = in.q->shape;
    auto zeros = [](std::vector<int64_t> dims) {
      st::Tensor t = st::Tensor::f32(std::move(dims), {});
      t.data.assign(size_t(t.numel()) * sizeof(float), 0);
      return t;
    };
    AttentionOutputs o;
    o.out = zeros(s);
    o.lse = zeros({s[0], s[1], s[2]});
    AttnFwdArgs a{};
    a.q = in.q->data.data(), a.k = in.k->data.data(), a.v = in.v->data.data();
    a.out = o.out.data.data(), a.lse = reinterpret_cast<float *>(o.lse.data.data());
    a.lengths = in.lengths ? reinterpret_cast<const int *>(in.lengths->data.data()) : nullptr;
    a.B = int(s[0]), a.H = int(s[1]), a.Nq = int(s[2]), a.Nk = int(in.k->shape[2]);
    a.scale = scale;
    if (int rc = fn(&a, int(s[3])))
      return makeError("the unfused baseline failed with code " + std::to_string(rc));
    return o;
  };
  auto kernelFn = [](std::optional<CpuAttention> &k) -> train::AttentionFn {
    return [&k](const AttentionInputs &in) { return k->run(in); };
  };
  auto noWorkspace = [](int) { return int64_t(0); };

  // The standard model: the spec's, without the projection.
  train::ModelConfig base = modelConfigOf(model, layer, variant);
  base.lowrank = false;
  base.layers = opt.layers;
  bool tty = isatty(STDERR_FILENO);
  Setup setup{opt, int64_t(opt.memoryGiB * double(int64_t(1) << 30)), true, ""};
  auto progress = [&](const std::string &what) {
    if (tty)
      diagnostics() << "\r  " << what << std::string(30, ' ') << std::flush;
  };

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const bool busy = std::atof(loadAverage().c_str()) > double(cores) - 0.5;
  results() << "attnc bench --linformer-table (cpu, fp32): model " << model.getSymName().str()
            << " of " << specPath << "\n  d_model " << D << ", heads " << H << " (head dim " << Dh
            << "), d_ff " << base.dff << ", ffn chunk "
            << (base.ffnChunk ? std::to_string(base.ffnChunk) : "none") << ", objective "
            << stringifyObjective(model.getObjective()).str() << ", low-rank share = " << share
            << "\n  " << opt.layers << " layer" << (opt.layers == 1 ? "" : "s")
            << " per model (the spec has " << model.getLayers()
            << "): time and memory ratios are per layer and carry over to deeper models\n"
            << "  timing: batch " << opt.batch << ", median of " << opt.repeats
            << " forwards after a warm-up; max batch: the largest batch whose planned inference "
               "peak fits "
            << gibStr(opt.memoryGiB) << " GiB (the paper: a 16 GB V100)\n"
            << "  machine: " << cores << " cores, load average " << loadAverage()
            << " at the start (other work on the machine makes timings noisy)\n"
            << (busy ? "  warning: the machine is busy; OpenMP's default spin-waiting can stall "
                       "parallel regions for seconds on a shared machine (OMP_WAIT_POLICY=passive "
                       "avoids it)\n"
                     : "")
            << "  std-unf: softmax(scale*Q*K^T)*V with all B*H*N*N scores materialised (the "
               "paper's baseline)\n  std-fus: the spec's variant without its lowrank clause "
               "(attnc's fused kernel, no N*N buffer)\n  lin: the spec's variant with k below\n";

  // The cells' models: the standard one (the variant without its lowrank
  // clause) and one per k, each at the row's N.
  auto cellModel = [&](int N, int k) {
    CellModel m{*module, model, dense.getSymName().str(), opt.layers, base};
    m.config.seq = N;
    if (k > 0) {
      m.variant = variant.getSymName().str() + "_k" + std::to_string(k);
      m.config.lowrank = true, m.config.lowrankK = k;
    }
    return m;
  };
  // Warm-up, not measured: thread pools, first-touch costs (short
  // sequences: the unfused model at a long one may not fit).
  {
    const int N = std::min(lengths.front(), 512);
    std::vector<std::pair<int, train::AttentionFn>> models = {{0, unfusedFn}, {0, kernelFn(fused)}};
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] <= N)
        models.push_back({ranks[i], kernelFn(lowrank[i])});
    for (auto &[k, fn] : models) {
      progress("warm-up");
      CellModel m = cellModel(N, k);
      ModelGraph g;
      if (!inferenceGraph(m, 1, /*emit=*/true, g))
        return fail("compiling the inference function failed (see the diagnostics)");
      train::ParameterStore store(m.config, 0);
      Expected<std::unique_ptr<train::CompiledStep>> step = train::CompiledStep::create(
          std::move(g.step), store, fn, HostCompiler(&KernelCache::processDefault()));
      if (!step)
        return fail(step.error());
      if (Expected<const float *> r = (*step)->infer(syntheticBatch(m.config, 1)); !r)
        return fail(r.error());
    }
  }

  std::vector<TableRow> rows;
  std::vector<std::string> notes;
  for (int N : lengths) {
    auto run = [&](const std::string &what, int k, train::AttentionFn fn,
                   const std::function<int64_t(int)> &ws) -> Expected<Cell> {
      progress("N=" + std::to_string(N) + ": " + what);
      Expected<Cell> cell = measure(setup, cellModel(N, k), std::move(fn), ws);
      if (cell && !cell->skipped.empty())
        notes.push_back("N=" + std::to_string(N) + " " + what + " not timed: " + cell->skipped);
      return cell;
    };
    Expected<Cell> unf = run("standard unfused", 0, unfusedFn, [&](int B) {
      return int64_t(4) * (int64_t(B) * H * N * N + int64_t(Dh) * N);
    });
    if (!unf)
      return fail(unf.error());
    Expected<Cell> fus = run("standard fused", 0, kernelFn(fused), noWorkspace);
    if (!fus)
      return fail(fus.error());
    for (size_t i = 0; i < ranks.size(); ++i) {
      TableRow row{N, ranks[i], *unf, *fus, {}};
      if (ranks[i] > N) {
        row.linformer.skipped = "k > N";
      } else {
        Expected<Cell> lin = run("linformer k=" + std::to_string(ranks[i]), ranks[i],
                                 kernelFn(lowrank[i]), noWorkspace);
        if (!lin)
          return fail(lin.error());
        row.linformer = *lin;
      }
      rows.push_back(row);
    }
  }
  if (tty)
    diagnostics() << "\r" << std::string(70, ' ') << "\r";

  // The table.
  auto w = [](int width, const std::string &s) {
    std::ostringstream os;
    os << std::setw(width) << s;
    return os.str();
  };
  auto ms = [](double v) { return fmt(v, v < 100 ? 2 : 1); };
  auto mb = [](const Cell &c) { return std::to_string(c.maxBatch); };
  auto check = [](const Cell &c) { return fmt(c.planCheck); };
  results() << "\n"
            << w(13, "") << w(27, "forward ms") << w(24, "time saved (std/lin)")
            << w(28, "max batch in " + gibStr(opt.memoryGiB) + " GiB")
            << w(24, "memory saved (lin/std)") << w(20, "plan check") << "\n"
            << w(7, "N") << w(6, "k") << w(9, "std-unf") << w(9, "std-fus") << w(9, "lin")
            << w(8, "vs-unf") << w(8, "vs-fus") << w(8, "paper") << w(10, "std-unf")
            << w(9, "std-fus") << w(9, "lin") << w(8, "vs-unf") << w(8, "vs-fus") << w(8, "paper")
            << w(7, "unf") << w(7, "fus") << w(7, "lin") << "\n";
  for (const TableRow &r : rows) {
    bool lin = r.linformer.skipped != "k > N";
    auto l = [&](const std::string &s) { return lin ? s : std::string("-"); };
    results() << w(7, std::to_string(r.n)) << w(6, std::to_string(r.k)) << w(9, ms(r.unfused.ms))
              << w(9, ms(r.fused.ms)) << w(9, l(ms(r.linformer.ms)))
              << w(8, l(ratio(r.unfused.ms, r.linformer.ms)))
              << w(8, l(ratio(r.fused.ms, r.linformer.ms))) << w(8, paperCell(r.n, r.k, false))
              << w(10, mb(r.unfused)) << w(9, mb(r.fused)) << w(9, l(mb(r.linformer)))
              << w(8, l(batchRatio(r, r.unfused))) << w(8, l(batchRatio(r, r.fused)))
              << w(8, paperCell(r.n, r.k, true)) << w(7, check(r.unfused)) << w(7, check(r.fused))
              << w(7, l(check(r.linformer))) << "\n";
  }
  results() << "\npaper: Wang et al. 2020, Table 3 (16 GB V100, standard Transformer vs "
               "Linformer); a V100 there, this CPU here: compare the trends, not the values.\n"
               "max batch 0: not even one sequence fits; memory saved 'inf': the standard model "
               "does not fit batch 1 in "
            << gibStr(opt.memoryGiB) << " GiB while the Linformer one does.\n"
            << "plan check: growth of the peak RSS (VmHWM) over two forwards at the timing "
               "batch / the planned peak at that batch (the compiled inference function's arena, "
               "weights, batch, logits and attention buffers; 1.00 = the plan is exact).\n";
  results() << "load average at the end: " << loadAverage() << "\n";
  if (!setup.peakResettable)
    results() << "plan check skipped: " << setup.whyNoPeak << "\n";
  for (const std::string &n : notes)
    results() << n << "\n";

  std::string csvPath = opt.csvGiven ? opt.csv : "attnc-linformer-table.csv";
  std::string svgPath = opt.svgGiven ? opt.svg : "attnc-linformer-table.svg";
  std::ofstream csv(csvPath);
  csv << "n,k,ms_std_unfused,ms_std_fused,ms_linformer,time_ratio_vs_unfused,"
         "time_ratio_vs_fused,paper_time_ratio,maxbatch_std_unfused,maxbatch_std_fused,"
         "maxbatch_linformer,memory_ratio_vs_unfused,memory_ratio_vs_fused,paper_memory_ratio,"
         "plan_check_unfused,plan_check_fused,plan_check_linformer\n";
  for (const TableRow &r : rows) {
    bool lin = r.linformer.skipped != "k > N";
    auto l = [&](const std::string &s) { return lin ? s : std::string("-"); };
    csv << r.n << "," << r.k << "," << fmt(r.unfused.ms, 3) << "," << fmt(r.fused.ms, 3) << ","
        << l(fmt(r.linformer.ms, 3)) << "," << l(ratio(r.unfused.ms, r.linformer.ms)) << ","
        << l(ratio(r.fused.ms, r.linformer.ms)) << "," << paperCell(r.n, r.k, false) << ","
        << r.unfused.maxBatch << "," << r.fused.maxBatch << "," << l(mb(r.linformer)) << ","
        << l(batchRatio(r, r.unfused)) << "," << l(batchRatio(r, r.fused)) << ","
        << paperCell(r.n, r.k, true) << "," << check(r.unfused) << "," << check(r.fused) << ","
        << l(check(r.linformer)) << "\n";
  }
  if (!csv)
    return fail("cannot write '" + csvPath + "'");

  // Time saved against N: measured (vs unfused solid, vs fused dotted) and
  // the paper's (dashed), one colour per k.
  plot::LinePlot plot = sequenceLengthPlot(
      "Linformer time saved: standard / Linformer forward time vs N", "time saved (x)", lengths);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string k = "k=" + std::to_string(ranks[i]), color = plot::paletteColor(int(i));
    plot::Series unf{k + " vs std-unfused", {}, {}, color, 2.0},
        fus{k + " vs std-fused", {}, {}, color, 2.0, 1.0, false, "2,3"},
        paper{k + " paper (V100)", {}, {}, color, 2.0, 1.0, false, "8,4"};
    for (const TableRow &r : rows) {
      if (r.k != ranks[i] || r.linformer.skipped == "k > N")
        continue;
      for (plot::Series *s : {&unf, &fus, &paper})
        s->x.push_back(r.n);
      unf.y.push_back(r.unfused.ms / r.linformer.ms);
      fus.y.push_back(r.fused.ms / r.linformer.ms);
      paper.y.push_back(paperRatio(r.n, r.k, false));
    }
    plot.series.insert(plot.series.end(), {unf, fus, paper});
  }
  if (Status s = plot::writeLinePlot(svgPath, plot); !s)
    return fail(s.error());
  results() << "\nwrote " << csvPath << " and " << svgPath << "\n";
  return mlir::success();
}

} // namespace attnc::driver
