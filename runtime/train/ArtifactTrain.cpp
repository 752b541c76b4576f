//===- ArtifactTrain.cpp - Training a compiled model from an artifact -----===//
#include "runtime/train/ArtifactTrain.h"

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

#include <iostream>
#include <memory>

namespace attnc::train {

Expected<std::string> Artifact::file(const std::string &name) const {
  if (auto it = files.find(name); it != files.end())
    return it->second;
  return fs::readFile(dir + "/" + name);
}

Expected<Artifact> openArtifact(const std::string &dir) {
  Expected<Manifest> manifest = loadManifest(dir);
  if (!manifest)
    return manifest.takeError();
  Artifact a;
  a.dir = dir;
  a.manifest = std::move(*manifest);
  return a;
}

Status trainArtifact(const ArtifactTrainOptions &opt, std::ostream &os) {
  Expected<Artifact> artifact = openArtifact(opt.dir);
  if (!artifact)
    return artifact.takeError();
  return trainArtifact(*artifact, opt, os);
}

Status trainArtifact(const Artifact &artifact, const ArtifactTrainOptions &opt, std::ostream &os) {
  const std::string &dir = artifact.dir;
  const std::string manifestPath = dir + "/manifest.json";
  const Manifest *manifest = &artifact.manifest;
  const bool gpu = manifest->target == "cuda";
  if (manifest->target != "cpu" && !gpu)
    return makeError(dir + " was compiled for " + manifest->target +
                     "; training runs compiled steps for cpu and cuda");
  for (const ManifestModel &m : manifest->models)
    if (gpu && m.stepAbi != ATTNC_CUDA_STEP_ABI)
      return makeError(manifestPath + ": the CUDA step of " + m.name +
                       " was compiled for step "
                       "ABI " +
                       std::to_string(m.stepAbi) + ", this runtime runs ABI " +
                       std::to_string(ATTNC_CUDA_STEP_ABI) +
                       "; recompile it with this attnc (attnc compile --target cuda)");
  if (gpu)
    if (Status driver = cuda::Driver::available(); !driver)
      return makeError(dir + " was compiled for cuda: " + driver.error());
  if (!gpu && opt.precision != "f32" && opt.precision != "auto")
    return makeError("--precision " + opt.precision + ": " + dir +
                     " was compiled for the CPU, which trains in fp32");
  // The model.
  const ManifestModel *mm = nullptr;
  std::string names;
  for (const ManifestModel &m : manifest->models) {
    names += (names.empty() ? "" : ", ") + m.name;
    if (m.name == opt.model || (opt.model.empty() && !mm))
      mm = &m;
  }
  if (manifest->models.empty())
    return makeError(manifestPath + " has no compiled model (the spec has none, or the "
                                    "artifact predates whole-model compilation)");
  if (!mm || (opt.model.empty() && manifest->models.size() > 1))
    return makeError(
        opt.model.empty()
            ? manifestPath + " has several models (" + names + "); name one with --model"
            : "no model '" + opt.model + "' in " + manifestPath + " (it has: " + names + ")");
  if (opt.batch && opt.batch != mm->batch)
    return makeError("--batch " + std::to_string(opt.batch) + ": " + dir + " planned the step of " +
                     mm->name + " for batch " + std::to_string(mm->batch) +
                     " (attnc compile --plan-batch " + std::to_string(opt.batch) +
                     " plans another)");
  Expected<ModelConfig> config =
      modelConfigFromJson(mm->configJson, manifestPath + ": " + mm->name + ".config");
  if (!config)
    return config.takeError();
  config->dropoutSeed = opt.seed;

  // Its attention: the forward and backward kernels of its function.
  const ManifestKernel *fwd = nullptr, *bwd = nullptr;
  for (const ManifestKernel &k : manifest->kernels)
    if (k.function == mm->attentionFunction)
      (k.backward ? bwd : fwd) = &k;
  if (!fwd || !bwd)
    return makeError(manifestPath + ": no forward and backward kernels of " +
                     mm->attentionFunction + " for model " + mm->name);
  // auto: the GEMMs compute in the attention kernels' dtype (the model's).
  const std::string precision = opt.precision != "auto" ? opt.precision
                                : fwd->dtype == "f16"   ? "fp16"
                                : fwd->dtype == "bf16"  ? "bf16"
                                                        : "f32";
  Expected<std::string> kernelSource = artifact.file(manifest->source);
  if (!kernelSource)
    return kernelSource.takeError();
  Expected<std::string> stepSource = artifact.file(mm->stepSource);
  if (!stepSource)
    return stepSource.takeError();
  if (gpu && mm->stepKernels.empty())
    return makeError(manifestPath + ": " + mm->name +
                     " has no step_kernels (recompile with this attnc)");
  Expected<std::string> stepKernels =
      gpu ? artifact.file(mm->stepKernels) : Expected<std::string>(std::string());
  if (!stepKernels)
    return stepKernels.takeError();
  HostCompiler compiler(&KernelCache::processDefault());
  AttentionFn attentionFn;
  if (gpu) {
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return dev.takeError();
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
    if (!dirs)
      return dirs.takeError();
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    Expected<CudaAttention> kernels = CudaAttention::compile(
        *kernelSource, dev->arch(), fwd->dtype, fwd->desc(), bwd->desc(), *dirs, nvrtc);
    if (!kernels)
      return kernels.takeError();
    auto attention = std::make_shared<CudaAttention>(std::move(*kernels));
    attentionFn = [attention](const AttentionInputs &in) { return attention->run(in); };
    std::cerr << "attnc-rt train: on " << dev->describe() << ", GEMMs in " << precision << "\n";
  } else {
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
    if (!dirs)
      return dirs.takeError();
    Expected<CpuAttention> kernels =
        CpuAttention::compile(*kernelSource, fwd->desc(), bwd->desc(), *dirs, compiler);
    if (!kernels)
      return kernels.takeError();
    auto attention = std::make_shared<CpuAttention>(std::move(*kernels));
    attentionFn = [attention](const AttentionInputs &in) { return attention->run(in); };
  }

  if (mm->inferSymbol.empty())
    return makeError(manifestPath + ": " + mm->name +
                     " has no inference function for the evaluations (recompile with this attnc)");
  ParameterStore model(*config, opt.seed);
  CompiledStepDesc desc;
  if (gpu) {
    desc.cudaHostSource = std::move(*stepSource);
    desc.cudaDeviceSource = std::move(*stepKernels);
    desc.cudaSymbol = mm->stepSymbol;
    Expected<std::string> inferSource = artifact.file(mm->inferSource);
    if (!inferSource)
      return inferSource.takeError();
    desc.source = std::move(*inferSource);
  } else {
    desc.source = std::move(*stepSource);
  }
  desc.inferSymbol = mm->inferSymbol;
  desc.inferArenaBytes = mm->inferArenaBytes;
  desc.inferBatch = mm->inferBatch;
  desc.inferArgs = mm->inferArgs;
  desc.symbol = mm->stepSymbol;
  desc.arenaBytes = mm->arenaBytes;
  desc.keptBytes = mm->keptBytes;
  desc.batch = mm->batch;
  desc.args = mm->args;
  desc.gradArgs = mm->gradArgs;
  StepPrecision stepPrecision;
  stepPrecision.gemm = precision, stepPrecision.initialLossScale = opt.lossScale;
  Expected<std::unique_ptr<CompiledStep>> step =
      CompiledStep::create(std::move(desc), model, attentionFn, compiler,
                           gpu ? StepEngine::Cuda : StepEngine::Cpu, stepPrecision);
  if (!step)
    return step.takeError();

  Expected<DataSource> data = DataSource::open(opt.data, *config, 0.05);
  if (!data)
    return data.takeError();
  TrainOptions to;
  to.outDir = opt.out, to.data = opt.data, to.steps = opt.steps, to.batch = mm->batch;
  to.seed = opt.seed, to.evalEvery = opt.evalEvery, to.evalBatches = opt.evalBatches;
  to.checkpointEvery = opt.checkpointEvery, to.specHash = manifest->specHash;
  to.resume = opt.resume;
  to.adam.lr = opt.lr, to.adam.weightDecay = opt.weightDecay, to.adam.clipNorm = opt.clip;
  to.adam.warmupSteps = opt.warmup;
  CompiledStep *compiled = step->get();
  if (gpu && !opt.hostOptimizer)
    to.resident = compiled;
  else
    to.stepFn = [compiled](const Batch &b, int64_t s) { return compiled->run(b, true, s); };
  to.forward.batch = compiled->inferBatch();
  to.forward.run = [compiled](const Batch &b) { return compiled->infer(b); };
  to.stepState = [compiled] { return compiled->stepState(); };
  to.restoreStepState = [compiled](const std::string &s) { return compiled->restoreStepState(s); };
  std::cerr << "attnc-rt train: " << mm->name << " from " << dir << " (" << model.numParams()
            << " parameters; compiled " << (gpu ? "CUDA " : "") << "step, arena "
            << mm->arenaBytes / 1024 << " KiB) on " << data->describe() << "\n";
  Expected<TrainSummary> s = train(model, *data, to, std::cerr);
  if (!s)
    return s.takeError();
  os << "trained " << mm->name << " for steps " << s->firstStep << ".." << s->lastStep << " in "
     << s->seconds << " s (" << int64_t(s->tokensPerSecond) << " tokens/s)\n"
     << "final training loss " << s->finalLoss << "; held-out loss " << s->eval.loss << " ("
     << s->eval.bitsPerByte << " bits/byte), accuracy " << s->eval.accuracy << "\n"
     << (gpu && precision == "fp16"
             ? "fp16 loss scale " + std::to_string(compiled->lossScale()) + ", " +
                   std::to_string(compiled->overflowReruns()) + " step(s) rerun after an overflow\n"
             : std::string())
     << "wrote " << opt.out << "/{latest.json,train.csv,loss.svg}\n";
  return {};
}

} // namespace attnc::train
