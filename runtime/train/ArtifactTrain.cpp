//===- ArtifactTrain.cpp - Training a compiled model from an artifact -----===//
#include "runtime/train/ArtifactTrain.h"
#include "runtime/train/Checkpoint.h"

#include "attnc/abi/model_step_env.h"

#include "runtime/Artifact.h"
#include "runtime/CpuAttention.h"
#include "runtime/CudaAttention.h"
#include "runtime/KernelHeaders.h"
#include "runtime/CudaDriver.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/FileSystem.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/ModelConfigJson.h"
#include "runtime/train/Trainer.h"

#include <cmath>
#include <memory>
#include <optional>
#include <sys/resource.h>
#include <thread>
#include <tuple>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace attnc::train {

namespace {

/// An attention function calling `kernels`, which it keeps alive.
template <class Kernels> AttentionFn callInto(Kernels kernels) {
  auto shared = std::make_shared<Kernels>(std::move(kernels));
  return [shared](const AttentionInputs &in) { return shared->run(in); };
}

/// Attention on the step's device buffers through `kernels` (any dtype and
/// kind attendF32OnDevice runs, on the step's device): what a CUDA step
/// calls instead of the host round trip. Everything it needs on the device
/// is allocated here, for the step's batch.
Expected<DeviceAttentionFn> onDevice(std::shared_ptr<CudaAttention> kernels, const ModelConfig &c,
                                     int batch) {
  if (Status s = kernels->reserveF32OnDevice(batch, c.heads, c.seq); !s)
    return s.takeError();
  std::vector<bool> learned;
  for (const auto &p : c.headParams)
    learned.push_back(p.learned);
  return DeviceAttentionFn([kernels, learned](const DeviceAttentionCall &call) -> Status {
    CudaAttention &k = *kernels;
    KernelDevice &dev = k.kernelDevice();
    const int64_t B = call.B, H = call.H, S = call.S, Dh = call.Dh;
    const std::vector<int64_t> s4{B, H, S, Dh}, s3{B, H, S};
    auto view = [](const char *name, const float *p, std::vector<int64_t> shape) {
      return DeviceTensor{name, const_cast<float *>(p), std::move(shape), {}, "f32"};
    };
    DeviceAttentionArgs x;
    x.q = view("q", call.q, s4), x.k = view("k", call.k, s4), x.v = view("v", call.v, s4);
    x.E = call.E, x.F = call.F, x.eColumns = S; // E is [(H,) k, seq]
    x.params = call.params, x.rotations = call.rotations;
    x.dropout = call.dropout, x.dropoutSeed = call.dropoutSeed;
    x.dropoutOffset = call.dropoutOffset;
    const bool lsh = k.forwardKernel().lsh.has_value();
    if (!call.dout) {
      x.out = view("out", call.out, s4), x.lse = view("lse", call.lse, s3);
      return k.attendF32OnDevice(x, false);
    }
    x.dout = view("dout", call.dout, s4), x.dq = view("dq", call.dq, s4);
    x.dv = view("dv", call.dv, s4);
    if (call.dk)
      x.dk = view("dk", call.dk, s4);
    x.dE = call.dE, x.dF = call.dF;
    if (!lsh) // LSH recomputes out and lse in its workspace
      x.out = view("out", call.forwardOut, s4), x.lse = view("lse", call.forwardLse, s3);
    const int P = k.backwardKernel() ? k.backwardKernel()->numParams : 0;
    if (!lsh && P && call.dparams) { // the kernels accumulate into it
      if (Status s = dev.zero(call.dparams, sizeof(float) * size_t(P * H)); !s)
        return s;
      x.dparams = call.dparams;
    }
    if (Status s = k.attendF32OnDevice(x, true); !s)
      return s;
    // No gradient for constant per-head parameters (and none at all from
    // LSH kernels), as on the host path.
    for (size_t p = 0; call.dparams && p < learned.size(); ++p)
      if (lsh || !learned[p])
        if (Status s = dev.zero(call.dparams + p * size_t(H), sizeof(float) * size_t(H)); !s)
          return s;
    return {};
  });
}

/// The forward and backward kernels of `function` among `kernels`.
Expected<std::pair<const ManifestKernel *, const ManifestKernel *>>
attentionKernels(const std::vector<ManifestKernel> &kernels, const std::string &function,
                 const std::string &where) {
  const ManifestKernel *fwd = nullptr, *bwd = nullptr;
  for (const ManifestKernel &k : kernels)
    if (k.function == function)
      (k.backward ? bwd : fwd) = &k;
  if (!fwd || !bwd)
    return makeError(where + ": no forward and backward kernels of " + function);
  return std::make_pair(fwd, bwd);
}

/// The artifact's model that `opt` names (or its only one), whose planned
/// batch the run's batch must be.
Expected<const ManifestModel *> chooseModel(const Manifest &manifest,
                                            const ArtifactTrainOptions &opt, const std::string &dir,
                                            const std::string &manifestPath) {
  const ManifestModel *mm = nullptr;
  std::string names;
  for (const ManifestModel &m : manifest.models) {
    names += (names.empty() ? "" : ", ") + m.name;
    if (m.name == opt.model || (opt.model.empty() && !mm))
      mm = &m;
  }
  if (manifest.models.empty())
    return makeError(manifestPath + " has no compiled model (the spec has none, or the "
                                    "artifact predates whole-model compilation)");
  if (!mm || (opt.model.empty() && manifest.models.size() > 1))
    return makeError(
        opt.model.empty()
            ? manifestPath + " has several models (" + names + "); name one with --model"
            : "no model '" + opt.model + "' in " + manifestPath + " (it has: " + names + ")");
  // The step runs one micro-batch of the planned batch; a step's global
  // batch is that times the micro-batches (one per rank by default).
  const int micro = microBatchesOf(opt);
  if (opt.flags.batch && *opt.flags.batch != int64_t(mm->batch) * micro)
    return makeError("--batch " + std::to_string(*opt.flags.batch) + ": " + dir +
                     " planned the step of " + mm->name + " for batch " +
                     std::to_string(mm->batch) +
                     (micro > 1 ? " per micro-batch, so " + std::to_string(micro) +
                                      " micro-batches make a global batch of " +
                                      std::to_string(int64_t(mm->batch) * micro)
                                : std::string()) +
                     " (attnc compile --plan-batch " +
                     (*opt.flags.batch % micro == 0 ? std::to_string(*opt.flags.batch / micro)
                                                    : std::string("N")) +
                     " plans another)");
  return mm;
}

/// The attention a model's step calls: on the host (the CPU kernels, or
/// the GPU's through host buffers), and on the step's own device buffers
/// (the GPU's kernels, or the CUDA kernels on the emulator under cuda-sim)
/// unless --host-attention.
struct BoundAttention {
  AttentionFn host;
  DeviceAttentionFn device;
  std::function<DeviceTraffic()> traffic;
};

Expected<BoundAttention>
bindAttention(const Artifact &artifact, const ManifestModel &mm, const ModelConfig &config,
              const ArtifactTrainOptions &opt,
              std::pair<const ManifestKernel *, const ManifestKernel *> kernelPair,
              const std::string &kernelSource, HostCompiler &compiler,
              const std::string &manifestPath, std::ostream &progress) {
  const Manifest &manifest = artifact.manifest;
  const bool gpu = manifest.target == "cuda", sim = opt.engine == "cuda-sim";
  const std::string &tool = opt.tool;
  auto [fwd, bwd] = kernelPair;
  BoundAttention out;
  auto cudaPair =
      attentionKernels(manifest.kernels, mm.attentionFunction, manifestPath + ": model " + mm.name);
  if (sim && !opt.hostAttention && cudaPair) {
    // The CUDA attention kernels on the emulator, on the step's buffers.
    auto [cf, cb] = *cudaPair;
    Expected<std::string> cudaSource = artifact.file(manifest.source);
    if (!cudaSource)
      return cudaSource.takeError();
    {
      Expected<CudaAttention> k = CudaAttention::compileEmulated(
          *cudaSource, manifest.arch, manifest.arch, cf->dtype, cf->desc(), cb->desc(), compiler);
      if (!k)
        return k.takeError();
      {
        auto shared = std::make_shared<CudaAttention>(std::move(*k));
        Expected<DeviceAttentionFn> fn = onDevice(shared, config, mm.batch);
        if (!fn)
          return fn.takeError();
        out.device = std::move(*fn);
        out.traffic = [shared] { return shared->kernelDevice().traffic(); };
        progress << tool << ": cuda-sim: attention runs the CUDA kernels (" << cf->dtype
                 << ") on the step's buffers\n";
      }
    }
  }
  if (gpu && !sim) {
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return dev.takeError();
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
    if (!dirs)
      return dirs.takeError();
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    Expected<CudaAttention> k = CudaAttention::compile(kernelSource, manifest.arch, fwd->dtype,
                                                       fwd->desc(), bwd->desc(), *dirs, nvrtc);
    if (!k)
      return k.takeError();
    for (const std::string &line : k->retiled())
      progress << tool << ": re-tiled for " << k->device() << ": " << line << "\n";
    auto shared = std::make_shared<CudaAttention>(std::move(*k));
    out.host = [shared](const AttentionInputs &in) { return shared->run(in); };
    // The kernels read and write the step's buffers in place.
    if (!opt.hostAttention) {
      Expected<DeviceAttentionFn> fn = onDevice(shared, config, mm.batch);
      if (!fn)
        return fn.takeError();
      out.device = std::move(*fn);
      out.traffic = [shared] { return shared->kernelDevice().traffic(); };
    }
    progress << tool << ": on " << dev->describe() << "\n";
  } else {
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
    if (!dirs)
      return dirs.takeError();
    Expected<CpuAttention> k =
        CpuAttention::compile(kernelSource, fwd->desc(), bwd->desc(), *dirs, compiler);
    if (!k)
      return k.takeError();
    out.host = callInto(std::move(*k));
  }

  return out;
}

/// What the model's compiled step is made of: its inference function's
/// C++, and for a CUDA artifact the step's host code and kernels, with the
/// arena sizes and arguments the manifest records.
Expected<CompiledStepDesc> stepDescOf(const Artifact &artifact, const ManifestModel &mm,
                                      const std::string &manifestPath) {
  const bool gpu = artifact.manifest.target == "cuda";
  if (mm.inferSymbol.empty())
    return makeError(manifestPath + ": " + mm.name +
                     " has no inference function for the evaluations (recompile with this attnc)");
  CompiledStepDesc desc;
  if (gpu) {
    Expected<std::string> host = artifact.file(mm.stepSource);
    Expected<std::string> device = artifact.file(mm.stepKernels);
    if (mm.stepKernels.empty())
      return makeError(manifestPath + ": " + mm.name +
                       " has no step_kernels (recompile with this attnc)");
    if (!host || !device)
      return (!host ? host : device).takeError();
    desc.cudaHostSource = std::move(*host);
    desc.cudaDeviceSource = std::move(*device);
    desc.cudaSymbol = mm.stepSymbol;
  }
  Expected<std::string> cpuSource = artifact.file(mm.inferSource);
  if (!cpuSource)
    return cpuSource.takeError();
  desc.source = std::move(*cpuSource);
  desc.inferSymbol = mm.inferSymbol;
  desc.inferArenaBytes = mm.inferArenaBytes;
  desc.inferBatch = mm.inferBatch;
  desc.inferArgs = mm.inferArgs;
  desc.symbol = mm.stepSymbol;
  desc.arenaBytes = mm.arenaBytes;
  desc.keptBytes = mm.keptBytes;
  desc.batch = mm.batch;
  desc.args = mm.args;
  desc.gradArgs = mm.gradArgs;
  return desc;
}

} // namespace

Expected<ArtifactModel> loadArtifactModel(const Artifact &artifact,
                                          const ArtifactTrainOptions &opt) {
  // Messages name the directory, or say the artifact was built in memory.
  const std::string dir = artifact.dir.empty() ? "the compiled spec" : artifact.dir;
  const std::string manifestPath =
      artifact.dir.empty() ? "the compiled spec's manifest" : artifact.dir + "/manifest.json";
  const Manifest &manifest = artifact.manifest;
  const std::string &tool = opt.tool;
  std::ostream &progress = streamOrNull(opt.log);
  const bool gpu = manifest.target == "cuda";
  const bool sim = opt.engine == "cuda-sim";
  if (opt.engine != "compiled" && !sim)
    return makeError("engine '" + opt.engine + "': the engines are compiled and cuda-sim");
  if (manifest.target != "cpu" && !gpu)
    return makeError(dir + " was compiled for " + manifest.target +
                     "; training runs compiled steps for cpu and cuda");
  if (!opt.target.empty() && opt.target != manifest.target)
    return makeError(dir + " was compiled for target " + manifest.target + ", not " + opt.target +
                     (gpu ? "; train it with --target cuda (on a GPU) or --target cuda-sim (the "
                            "CUDA step on the CPU's SIMT emulator)"
                          : "; recompile with attnc compile --target " + opt.target));
  if (sim && !gpu)
    return makeError("--engine cuda-sim runs a CUDA artifact's step on the SIMT emulator; " + dir +
                     " was compiled for the CPU (attnc compile --target cuda plans one)");
  for (const ManifestModel &m : manifest.models)
    if (gpu && m.stepAbi != ATTNC_CUDA_STEP_ABI)
      return makeError(manifestPath + ": the CUDA step of " + m.name +
                       " was compiled for step "
                       "ABI " +
                       std::to_string(m.stepAbi) + ", this runtime runs ABI " +
                       std::to_string(ATTNC_CUDA_STEP_ABI) +
                       "; recompile it with this attnc (attnc compile --target cuda)");
  if (gpu && !sim)
    if (Status driver = cuda::Driver::available(); !driver)
      return makeError(dir + " was compiled for cuda: " + driver.error() +
                       " (--engine cuda-sim runs its step on the SIMT emulator)");
  if (!gpu && opt.precision != "f32" && opt.precision != "auto")
    return makeError("--precision " + opt.precision + ": " + dir +
                     " was compiled for the CPU, which trains in fp32");
  Expected<const ManifestModel *> chosen = chooseModel(manifest, opt, dir, manifestPath);
  if (!chosen)
    return chosen.takeError();
  const ManifestModel *mm = *chosen;
  ArtifactModel out;
  out.manifest = *mm;
  Expected<TrainSettings> recommended =
      trainSettingsFromJson(mm->trainJson, manifestPath + ": " + mm->name + ".train");
  if (!recommended)
    return recommended.takeError();
  out.recommended = std::move(*recommended);
  Expected<ModelConfig> config =
      modelConfigFromJson(mm->configJson, manifestPath + ": " + mm->name + ".config");
  if (!config)
    return config.takeError();
  out.config = std::move(*config);
  out.config.dropoutSeed = opt.seed;

  // Its attention: the forward and backward kernels of its function; under
  // cuda-sim the host kernels of the same function.
  const std::vector<ManifestKernel> &kernels = sim ? manifest.hostKernels : manifest.kernels;
  if (sim && kernels.empty())
    return makeError(manifestPath + " has no host_kernels for --engine cuda-sim (recompile with "
                                    "this attnc)");
  auto pair =
      attentionKernels(kernels, mm->attentionFunction, manifestPath + ": model " + mm->name);
  if (!pair)
    return pair.takeError();
  // auto: the GEMMs compute in the CUDA attention kernels' dtype (the
  // model's); the CPU in f32.
  out.precision = opt.precision != "auto" ? opt.precision : "f32";
  if (gpu && opt.precision == "auto") {
    auto cuda = attentionKernels(manifest.kernels, mm->attentionFunction,
                                 manifestPath + ": model " + mm->name);
    if (!cuda)
      return cuda.takeError();
    const std::string &dtype = cuda->first->dtype;
    out.precision = dtype == "f16" ? "fp16" : dtype == "bf16" ? "bf16" : "f32";
  }
  Expected<std::string> kernelSource = artifact.file(sim ? manifest.hostSource : manifest.source);
  if (!kernelSource)
    return kernelSource.takeError();
  HostCompiler compiler(&KernelCache::processDefault());
  Expected<BoundAttention> bound = bindAttention(artifact, *mm, out.config, opt, *pair,
                                                 *kernelSource, compiler, manifestPath, progress);
  if (!bound)
    return bound.takeError();
  Expected<CompiledStepDesc> stepDesc = stepDescOf(artifact, *mm, manifestPath);
  if (!stepDesc)
    return stepDesc.takeError();
  CompiledStepDesc desc = std::move(*stepDesc);
  out.engine = !gpu ? StepEngine::Cpu : sim ? StepEngine::CudaSim : StepEngine::Cuda;
  if (out.engine == StepEngine::Cuda)
    progress << tool << ": the CUDA step (" << mm->stepSymbol << ") on the GPU, GEMMs in "
             << out.precision << "\n";
  else if (out.engine == StepEngine::CudaSim)
    progress << tool << ": cuda-sim: the CUDA step's kernels (" << mm->stepSymbol
             << ") run on the SIMT emulator, GEMM inputs rounded as " << out.precision << "\n";
  out.store = std::make_unique<ParameterStore>(out.config, opt.seed);
  StepPrecision precision;
  precision.gemm = out.precision, precision.initialLossScale = opt.lossScale;
  Expected<std::unique_ptr<CompiledStep>> step = CompiledStep::create(
      std::move(desc), *out.store, bound->host, compiler, out.engine, precision);
  if (!step)
    return step.takeError();
  out.step = std::move(*step);
  if (bound->device)
    out.step->setDeviceAttention(std::move(bound->device), std::move(bound->traffic));
  return out;
}

namespace {

/// Ranks on one machine share its cores: unless OMP_NUM_THREADS says
/// otherwise, each rank's OpenMP regions (the step's GEMMs and kernels) get
/// cores / ranks-on-this-machine threads instead of all the cores each
/// (2 ranks x 2 threads on 2 cores ran at 0.3x the speed of 2 x 1).
void shareCoresBetweenRanks(dist::Communicator &comm, const std::string &tool, std::ostream &log) {
#ifdef _OPENMP
  if (comm.size() == 1 || std::getenv("OMP_NUM_THREADS"))
    return;
  int local = comm.size();
  if (const char *l = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); l && std::atoi(l) > 0)
    local = std::atoi(l);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::max(1, cores / local);
  omp_set_num_threads(threads);
  if (comm.rank() == 0)
    log << tool << ": " << local << " ranks on this machine's " << cores << " cores: " << threads
        << " OpenMP thread(s) each (OMP_NUM_THREADS overrides)\n";
#else
  (void)comm, (void)tool, (void)log;
#endif
}

} // namespace

int microBatchesOf(const ArtifactTrainOptions &opt) {
  return opt.parallel.microBatches > 0 ? opt.parallel.microBatches : dist::world().size();
}

namespace {

/// --init-from: the weights of another run's newest intact checkpoint, for
/// the parameters whose names and shapes match, into a fresh run.
Status initFromRun(ParameterStore &store, const std::string &model, const ArtifactTrainOptions &opt,
                   std::ostream &progress) {
  if (opt.resume && hasCheckpoint(opt.out))
    return makeError("--init-from starts a fresh run, and " + opt.out +
                     " already has a checkpoint to resume (--no-resume starts it over, or give "
                     "another --out)");
  Expected<Checkpoint> ck = loadNewestIntactCheckpoint(opt.initFrom, "");
  if (!ck)
    return makeError("--init-from: " + ck.error());
  std::vector<std::string> kept;
  const std::vector<std::string> loaded = store.loadMatchingWeights(ck->tensors, kept);
  if (loaded.empty())
    return makeError("--init-from " + opt.initFrom + ": no parameter of " + model +
                     " has a tensor of the same name and shape in its checkpoint (step " +
                     std::to_string(ck->step) + ")");
  progress << opt.tool << ": initialised " << loaded.size() << " of " << loaded.size() + kept.size()
           << " parameter tensors from " << opt.initFrom << " (step " << ck->step << ")";
  if (!kept.empty()) {
    progress << "; kept their initialisation:";
    for (size_t i = 0; i < kept.size() && i < 8; ++i)
      progress << " " << kept[i];
    if (kept.size() > 8)
      progress << " and " << kept.size() - 8 << " more";
  }
  progress << "\n";
  return {};
}

} // namespace

Expected<ArtifactTrainResult> trainArtifact(const ArtifactTrainOptions &opt) {
  Expected<Artifact> artifact = openArtifact(opt.dir);
  if (!artifact)
    return artifact.takeError();
  return trainArtifact(*artifact, opt);
}

Expected<ArtifactTrainResult> trainArtifact(const Artifact &artifact,
                                            const ArtifactTrainOptions &opt) {
  Expected<ArtifactModel> loaded = loadArtifactModel(artifact, opt);
  if (!loaded)
    return loaded.takeError();
  ArtifactModel &am = *loaded;
  const ManifestModel &mm = am.manifest;
  std::ostream &progress = streamOrNull(opt.log);
  std::optional<DataSource> own;
  if (!opt.opened) {
    Expected<DataSource> opened = DataSource::open(opt.data, am.config, 0.05);
    if (!opened)
      return opened.takeError();
    own = std::move(*opened);
  }
  const DataSource *data = opt.opened ? opt.opened : &*own;
  // Flags, else the model's recommended settings, else attnc's defaults.
  const TrainSettings s = opt.flags.orElse(am.recommended).orElse(defaultTrainSettings());
  progress << opt.tool << ": " << describeTrainSettings(opt.flags, am.recommended, mm.batch)
           << "\n";
  TrainOptions to;
  dist::Communicator &comm = dist::world();
  comm.timeoutSeconds = opt.parallel.rankTimeout;
  shareCoresBetweenRanks(comm, opt.tool, progress);
  to.comm = &comm;
  to.microBatches = microBatchesOf(opt);
  to.bucketBytes = int64_t(opt.parallel.bucketKiB) * 1024;
  to.overlapExchange = opt.parallel.overlap;
  to.outDir = opt.out, to.data = opt.data, to.steps = *s.steps,
  to.batch = mm.batch * to.microBatches;
  // What else every rank must share: the binary and how it runs the step.
  to.rankSettings = {{"attnc binary (SHA-256)", dist::executableDigest()},
                     {"engine", opt.engine},
                     {"precision", am.precision},
                     {"host attention", opt.hostAttention ? "yes" : "no"},
                     {"host optimizer", opt.hostOptimizer ? "yes" : "no"}};
  to.seed = opt.seed, to.evalEvery = *s.evalEvery, to.evalBatches = opt.evalBatches;
  to.checkpointEvery = opt.checkpointEvery, to.specHash = artifact.manifest.specHash;
  to.resume = opt.resume, to.stopAfter = opt.stopAfter, to.stop = opt.stop;
  to.adam.lr = float(*s.lr), to.adam.weightDecay = float(*s.weightDecay);
  to.adam.clipNorm = float(*s.clip), to.adam.warmupSteps = *s.warmup;
  const ModelConfig &c = am.config;
  to.title = mm.name + ": " +
             (c.lowrank    ? "low-rank attention (k = " + std::to_string(c.lowrankK) + ")"
              : c.sharedQk ? "LSH attention (" + std::to_string(c.lshRounds) + " rounds)"
                           : std::string("dense attention")) +
             ", " + std::to_string(c.layers) + (c.reversible ? " reversible" : "") + " layer" +
             (c.layers == 1 ? "" : "s") + ", on " + opt.data;
  CompiledStep *compiled = am.step.get();
  const bool gpu = am.engine != StepEngine::Cpu;
  if (gpu && !opt.hostOptimizer)
    to.resident = compiled;
  else {
    to.stepFn = [compiled](const Batch &b, int64_t s) { return compiled->run(b, true, s); };
    if (!gpu) // the CPU step reports each gradient as the backward finishes it
      to.gradReady = [compiled](std::function<void(const float *)> fn) {
        compiled->setGradReady(std::move(fn));
      };
  }
  to.forward.batch = compiled->inferBatch();
  to.forward.run = [compiled](const Batch &b) { return compiled->infer(b); };
  to.stepState = [compiled] { return compiled->stepState(); };
  to.restoreStepState = [compiled](const std::string &s) { return compiled->restoreStepState(s); };
  progress << opt.tool << ": " << mm.name
           << (artifact.dir.empty() ? std::string() : " from " + artifact.dir) << " ("
           << am.store->numParams() << " parameters; compiled " << (gpu ? "CUDA " : "")
           << "step, arena " << mm.arenaBytes / 1024 << " KiB) on " << data->describe() << "\n";
  if (!opt.initFrom.empty())
    if (Status s = initFromRun(*am.store, mm.name, opt, progress); !s)
      return s.takeError();
  Expected<TrainSummary> summary = train(*am.store, *data, to, progress);
  if (!summary)
    return summary.takeError();
  ArtifactTrainResult r;
  r.model = mm.name;
  r.numParams = am.store->numParams();
  r.summary = std::move(*summary);
  r.arenaBytes = compiled->arenaBytes(), r.keptBytes = compiled->keptBytes();
  r.inferArenaBytes = compiled->inferArenaBytes();
  r.precision = am.precision;
  r.gpu = gpu;
  r.lossScale = compiled->lossScale(), r.overflowReruns = compiled->overflowReruns();
  r.stepTransfers = compiled->lastStepTransfers();
  r.deviceAttention = compiled->hasDeviceAttention();
  r.stepAllocations = compiled->allocationsDuringSteps();
  std::tie(r.bucketsOverlapped, r.bucketsSent) = compiled->bucketsSentDuringBackward();
  return r;
}

void writeTrainReport(const ArtifactTrainResult &r, const std::string &outDir, std::ostream &os) {
  const TrainSummary &s = r.summary;
  const EvalResult &e = s.eval;
  if (s.lastStep == s.firstStep) {
    os << r.model << ": " << outDir << " is already at step " << s.lastStep
       << "; nothing to train (held-out loss " << e.loss << ", accuracy " << e.accuracy << ")\n";
    return;
  }
  if (s.interrupted) {
    os << "interrupted: " << r.model << " stopped after step " << s.lastStep
       << " with a checkpoint in " << outDir << "; run the same command to resume\n";
    return;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  os << "trained " << r.model << " for steps " << s.firstStep << ".." << s.lastStep << " in "
     << s.seconds << " s (" << int64_t(s.tokensPerSecond) << " tokens/s)\n"
     << "final training loss " << s.finalLoss << "; held-out loss " << e.loss << " ("
     << e.bitsPerByte << " bits/byte), accuracy " << e.accuracy << " over " << e.positions
     << " positions\n"
     << "best held-out loss " << s.bestEval.loss << " (" << s.bestEval.loss / std::log(2.0)
     << " bits/byte) at step " << s.bestEval.step << " of " << s.evals.size() << " evaluation(s)\n"
     << "compiled step: arena " << r.arenaBytes / 1024 << " KiB, of which " << r.keptBytes / 1024
     << " KiB kept for the backward; peak resident memory " << usage.ru_maxrss / 1024
     << " MiB; inference arena " << r.inferArenaBytes / 1024 << " KiB\n";
  if (r.gpu && r.precision == "fp16")
    os << "fp16 loss scale " << r.lossScale << ", " << r.overflowReruns
       << " step(s) rerun after an overflow\n";
  const CompiledStep::Transfers &t = r.stepTransfers;
  if (r.gpu && t.uploads + t.downloads > 0)
    os << "host<->device copies in the last step: " << t.uploads << " upload(s), " << t.uploadBytes
       << " B; " << t.downloads << " download(s), " << t.downloadBytes << " B; attention "
       << (r.deviceAttention ? "on the step's buffers" : "through the host") << "; "
       << r.stepAllocations << " device allocation(s) during the steps\n";
  if (r.bucketsSent > 0)
    os << "gradient exchange on the device: " << r.bucketsOverlapped << " of " << r.bucketsSent
       << " bucket exchanges begun during the backward\n";
  os << "wrote " << outDir << "/{latest.json,train.csv,loss.svg} and eval.csv; checkpoint ckpt-"
     << s.lastStep << ".json with its tensors\n";
}

} // namespace attnc::train
