//===- CompiledStep.cpp - Running a compiled whole-model step -------------===//
#include "runtime/train/CompiledStep.h"

#include "attnc/abi/cpu_step_env.h"
#include "runtime/KernelHeaders.h"
#include "runtime/train/Gemm.h"
#include "runtime/train/StepDevice.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace attnc::train {

namespace {

void gemmCallback(void *, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                  const float *B, float *C) {
  gemm(ta != 0, tb != 0, M, N, K, A, B, C);
}

st::Tensor tensorOf(const float *p, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return st::Tensor::f32(std::move(shape), std::vector<float>(p, p + n));
}

void copyOut(const st::Tensor &t, float *dst) { std::memcpy(dst, t.data.data(), t.data.size()); }

/// The CUDA step's translation unit under the emulator: the emulator, the
/// kernels, the host code, and the launch the runtime calls (the emulator's
/// state lives in this shared object, so its launches must too).
std::string cudaSimSource(const CompiledStepDesc &d) {
  return "// attnc train --engine cuda-sim: the CUDA step of " + d.symbol +
         " with its kernels on the SIMT emulator.\n#include \"attnc/simt_emulator.h\"\n\n" +
         d.cudaDeviceSource + "\n" + d.cudaHostSource +
         "\nextern \"C\" int attnc_simt_run(void (*kernel)(attnc_kargs), long long blocks, "
         "int threads, const attnc_kargs *args) {\n"
         "  const attnc_kargs a = *args;\n"
         "  return ::emu::launch(int(blocks), 1, threads, [&] { kernel(a); }) ? 0 : 1;\n}\n"
         "\n// The device AdamW's kernels (attnc/optimizer.cuh); 2: no such kernel.\n"
         "template <typename Args>\n"
         "static int attnc_simt_run_struct(void (*kernel)(Args), long long blocks, "
         "const void *args) {\n"
         "  const Args a = *static_cast<const Args *>(args);\n"
         "  return ::emu::launch(int(blocks), 1, attnc::opt::kThreads, [&] { kernel(a); }) ? 0 "
         ": 1;\n}\n"
         "extern \"C\" int attnc_simt_run_optimizer(const char *name, long long blocks, "
         "const void *args) {\n"
         "  if (!std::strcmp(name, \"attnc_opt_grad_sumsq\")) return "
         "attnc_simt_run_struct(attnc_opt_grad_sumsq, "
         "blocks, args);\n"
         "  if (!std::strcmp(name, \"attnc_opt_grad_finalize\")) return "
         "attnc_simt_run_struct(attnc_opt_grad_finalize, blocks, args);\n"
         "  if (!std::strcmp(name, \"attnc_opt_adamw\")) return "
         "attnc_simt_run_struct(attnc_opt_adamw, blocks, "
         "args);\n"
         "  if (!std::strcmp(name, \"attnc_opt_scale_into\")) return "
         "attnc_simt_run_struct(attnc_opt_scale_into, blocks, args);\n"
         "  if (!std::strcmp(name, \"attnc_opt_ordered_sum\")) return "
         "attnc_simt_run_struct(attnc_opt_ordered_sum, blocks, args);\n"
         "  return 2;\n}\n";
}

/// The program name of the CPU source (the step's, or the inference
/// function's when there is no step).
std::string cpuProgramName(const CompiledStepDesc &d) {
  return (d.symbol.empty() ? d.inferSymbol : d.symbol) + ".cpp";
}

} // namespace

Status CompiledStep::precompile(const CompiledStepDesc &desc, const HostCompiler &compiler) {
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
  if (!dirs)
    return dirs.takeError();
  HostCompileOptions options;
  options.includeDirs = *dirs;
  Expected<SharedObjectImage> image = compiler.compile(cpuProgramName(desc), desc.source, options);
  return image ? Status() : Status(image.takeError());
}

CompiledStep::CompiledStep(CompiledStepDesc desc, ParameterStore &model, AttentionFn attention,
                           SharedObject so, HostCompiler compiler)
    : desc_(std::move(desc)), model_(model), attention_(std::move(attention)), so_(std::move(so)),
      compiler_(compiler) {}

Expected<std::unique_ptr<CompiledStep>>
CompiledStep::create(CompiledStepDesc desc, ParameterStore &model, AttentionFn attention,
                     const HostCompiler &compiler, StepEngine engine,
                     const StepPrecision &precision) {
  if (desc.symbol.empty() && desc.inferSymbol.empty())
    return makeError("compiled step: the desc names neither a step nor an inference function");
  if (desc.symbol.empty()) // inference only: the CPU source
    engine = StepEngine::Cpu;
  const bool sim = engine == StepEngine::CudaSim, gpu = engine == StepEngine::Cuda;
  Expected<std::vector<std::string>> includeDirs =
      kernelIncludeDirs(sim   ? KernelFamily::CudaEmulator
                        : gpu ? KernelFamily::Cuda
                              : KernelFamily::Cpu);
  if (!includeDirs)
    return includeDirs.takeError();
  HostCompileOptions options;
  options.includeDirs = *includeDirs;
  if ((sim || gpu) && (desc.cudaDeviceSource.empty() || desc.cudaSymbol.empty()))
    return makeError("compiled step: no CUDA step was emitted for " + desc.symbol);
  // Emulated shared memory is one byte array, typed many ways. No FMA
  // contraction (-march=native has FMA): the device AdamW rounds each
  // operation (__fmul_rn, __fadd_rn on a GPU), as the CPU AdamW does.
  if (sim)
    options.flags = {"-fno-strict-aliasing", "-ffp-contract=off", "-w"};
  Expected<SharedObjectImage> image =
      sim   ? compiler.compile(desc.cudaSymbol + "_sim.cpp", cudaSimSource(desc), options)
      : gpu ? compiler.compile(desc.cudaSymbol + ".cpp", desc.cudaHostSource, options)
            : compiler.compile(cpuProgramName(desc), desc.source, options);
  if (!image)
    return image.takeError();
  Expected<SharedObject> so = SharedObject::load(image->image, image->programName);
  if (!so)
    return so.takeError();
  std::unique_ptr<CompiledStep> step(new CompiledStep(std::move(desc), model, std::move(attention),
                                                      std::move(so).take(), compiler));
  step->fromCache_ = image->fromCache;
  step->engine_ = engine;
  if (engine == StepEngine::Cpu && !step->desc_.inferSymbol.empty())
    if (Status s = step->loadInference(); !s)
      return s.takeError();
  if (step->desc_.symbol.empty())
    return step;
  if (gpu || sim) {
    Expected<CudaStepFn *> fn = step->so_.function<CudaStepFn>(step->desc_.cudaSymbol);
    if (!fn)
      return fn.takeError();
    step->cudaFn_ = *fn;
  } else {
    Expected<StepFn *> fn = step->so_.function<StepFn>(step->desc_.symbol);
    if (!fn)
      return fn.takeError();
    step->fn_ = *fn;
  }
  if (step->desc_.arenaBytes < 0)
    return makeError("compiled step: negative arena size");
  if (engine == StepEngine::Cpu) // the device engines' arena is device memory
    step->arena_.assign(size_t(step->desc_.arenaBytes + 3) / 4, 0.0f);

  // Bind the arguments by name to the model's parameters.
  std::map<std::string, ParamRef> byName;
  for (const ParamRef &p : model.params())
    byName[p.name] = p;
  step->args_.assign(step->desc_.args.size(), nullptr);
  for (size_t i = 2; i < step->desc_.args.size(); ++i) {
    // Parameters, or constants (LSH rotations), of the model.
    step->args_[i] = model.argument(step->desc_.args[i]);
    if (!step->args_[i])
      return makeError("compiled step: argument '" + step->desc_.args[i] +
                       "' is not a parameter of the model");
  }
  // Every trained parameter must get its gradient from the step: one left
  // out would silently stay at zero.
  std::set<std::string> withGrad;
  for (int a : step->desc_.gradArgs)
    if (a >= 0 && size_t(a) < step->desc_.args.size())
      withGrad.insert(step->desc_.args[size_t(a)]);
  for (const ParamRef &p : model.params())
    if (!withGrad.count(p.name))
      return makeError("compiled step: no gradient for the model's parameter '" + p.name + "'");
  for (int a : step->desc_.gradArgs) {
    if (a < 2 || size_t(a) >= step->desc_.args.size())
      return makeError("compiled step: gradient of argument #" + std::to_string(a) +
                       " is out of range");
    auto it = byName.find(step->desc_.args[size_t(a)]);
    if (it == byName.end())
      return makeError("compiled step: gradient of '" + step->desc_.args[size_t(a)] +
                       "', which the model does not train");
    step->grads_.push_back(it->second.grad);
  }
  if (gpu || sim) {
    Expected<cuda::GemmPrecision> gemm = cuda::parseGemmPrecision(precision.gemm);
    if (!gemm)
      return gemm.takeError();
    std::unique_ptr<StepDevice> device;
    if (sim) {
      device = createEmulatedStepDevice(step->so_, *gemm);
    } else {
      Expected<std::unique_ptr<StepDevice>> gpuDevice = createGpuStepDevice(
          step->desc_.cudaDeviceSource, step->desc_.cudaSymbol + ".cu", *includeDirs, *gemm);
      if (!gpuDevice)
        return gpuDevice.takeError();
      device = std::move(*gpuDevice);
    }
    if (Status s = step->initDevice(std::move(device), *gemm, precision.initialLossScale); !s)
      return s.takeError();
  }
  return step;
}

int CompiledStep::attend(int64_t layer, const float *const *in, const float *dout,
                         float *const *out, const float *forwardOut, const float *forwardLse) {
  const ModelConfig &c = model_.config();
  const int B = attendBatch_, S = c.seq, H = c.heads, Dh = c.dModel / c.heads;
  const std::vector<int64_t> bhsd = {B, H, S, Dh};
  // in: q, k, v, E, F, rotations, params
  st::Tensor q = tensorOf(in[0], bhsd), k = tensorOf(in[1], bhsd), v = tensorOf(in[2], bhsd);
  st::Tensor lengths = st::Tensor::i32({B}, std::vector<int32_t>(size_t(B), S));
  st::Tensor E, F, rot, params, dO;
  AttentionInputs ai;
  ai.q = &q, ai.k = c.sharedQk ? &q : &k, ai.v = &v, ai.lengths = &lengths;
  std::vector<int64_t> eShape = {c.lowrankK, S};
  if (c.share == "none")
    eShape.insert(eShape.begin(), H);
  if (in[3]) {
    E = tensorOf(in[3], eShape);
    ai.E = &E;
  }
  if (in[4]) {
    F = tensorOf(in[4], eShape);
    ai.F = &F;
  }
  if (in[5]) {
    rot = tensorOf(in[5], {c.lshRounds, Dh, c.lshBuckets / 2});
    ai.rotations = &rot;
  }
  if (in[6]) {
    params = tensorOf(in[6], {int64_t(c.headParams.size()), H});
    ai.params = &params;
  }
  st::Tensor fwdOut, fwdLse;
  if (dout) {
    dO = tensorOf(dout, bhsd);
    ai.dout = &dO;
    // The forward's out and lse, which the graph kept: a dense kernel then
    // runs only its backward.
    if (forwardOut && forwardLse) {
      fwdOut = tensorOf(forwardOut, bhsd);
      fwdLse = tensorOf(forwardLse, {B, H, S});
      ai.forwardOut = &fwdOut, ai.forwardLse = &fwdLse;
    }
  }
  ai.dropout = training_;
  ai.dropoutSeed = c.dropoutSeed;
  ai.dropoutOffset = uint32_t(step_) * 4096u + uint32_t(layer);
  Expected<AttentionOutputs> r = attention_(ai);
  if (!r) {
    error_ = "layer " + std::to_string(layer) + " attention: " + r.error();
    return 1;
  }
  if (!dout) { // out, lse
    copyOut(r->out, out[0]);
    copyOut(r->lse, out[1]);
    return 0;
  }
  // dq, dk, dv, dE, dF, dparams
  copyOut(*r->dq, out[0]);
  if (c.sharedQk) // the key path is folded into dq
    std::memset(out[1], 0, size_t(B) * H * S * Dh * sizeof(float));
  else
    copyOut(*r->dk, out[1]);
  copyOut(*r->dv, out[2]);
  // A kernel without a gradient for E, F or the per-head parameters (LSH
  // has none for the parameters) still writes zeros: the step's outputs
  // are always complete.
  auto paramGrad = [&](float *dst, const std::optional<st::Tensor> &g, const st::Tensor &like) {
    if (!dst)
      return;
    if (g)
      copyOut(*g, dst);
    else
      std::memset(dst, 0, like.data.size());
  };
  paramGrad(out[3], r->dE, E);
  paramGrad(out[4], r->dF, F);
  paramGrad(out[5], r->dparams, params);
  if (out[5]) // constant per-head parameters stay constant (as in Model)
    for (size_t p = 0; p < c.headParams.size(); ++p)
      if (!c.headParams[p].learned)
        std::memset(out[5] + p * size_t(H), 0, sizeof(float) * size_t(H));
  return 0;
}

int CompiledStep::attentionCallback(void *ctx, int64_t layer, const float *const *in, float *out,
                                    float *lse) {
  float *outs[2] = {out, lse};
  return static_cast<CompiledStep *>(ctx)->attend(layer, in, nullptr, outs, nullptr, nullptr);
}

int CompiledStep::attentionGradCallback(void *ctx, int64_t layer, const float *const *in,
                                        float *const *out) {
  // in: q, k, v, out, lse, dout, E, F, rotations, params
  const float *fwdIn[7] = {in[0], in[1], in[2], in[6], in[7], in[8], in[9]};
  return static_cast<CompiledStep *>(ctx)->attend(layer, fwdIn, in[5], out, in[3], in[4]);
}

int CompiledStep::nonfiniteCallback(void *ctx, const char *what, int64_t index, int64_t width,
                                    float value) {
  // The runtime engine's wording: the tensor, NaN or infinite, where.
  static_cast<CompiledStep *>(ctx)->error_ =
      std::string(what) + " is " + (std::isnan(value) ? "NaN" : "infinite") + " at row " +
      std::to_string(index / std::max<int64_t>(1, width)) + ", column " +
      std::to_string(index % std::max<int64_t>(1, width));
  return 2;
}

void CompiledStep::gradReadyCallback(void *ctx, int64_t index) {
  auto *self = static_cast<CompiledStep *>(ctx);
  if (self->gradReady_ && index >= 0 && size_t(index) < self->grads_.size())
    self->gradReady_(self->grads_[size_t(index)]);
}

attnc_model_env CompiledStep::cpuEnv(bool dropoutOn, int64_t step) {
  attnc_model_env env{};
  env.ctx = this;
  env.gemm = gemmCallback;
  env.attention = attentionCallback;
  env.attention_grad = attentionGradCallback;
  env.nonfinite = nonfiniteCallback;
  env.grad_ready = gradReady_ ? gradReadyCallback : nullptr;
  env.dropout_seed = model_.config().dropoutSeed;
  env.step = uint32_t(step);
  env.dropout_on = dropoutOn;
  return env;
}

Status CompiledStep::checkBatch(const Batch &batch, int B) const {
  const ModelConfig &c = model_.config();
  if (batch.B != B || batch.S != c.seq || batch.inputs.size() != size_t(B) * size_t(c.seq) ||
      batch.targets.size() != batch.inputs.size())
    return makeError("compiled step: batch [" + std::to_string(batch.B) + ", " +
                     std::to_string(batch.S) + "] does not match the compiled [" +
                     std::to_string(B) + ", " + std::to_string(c.seq) + "]");
  const int vocabRows = c.vocab + (c.objective == Objective::Mlm ? 1 : 0);
  for (int32_t t : batch.inputs)
    if (t < 0 || t >= vocabRows)
      return makeError("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                       std::to_string(vocabRows) + ")");
  for (int32_t t : batch.targets)
    if (t >= c.vocab)
      return makeError("target id " + std::to_string(t) + " is outside the vocabulary [0, " +
                       std::to_string(c.vocab) + ")");
  return {};
}

Status CompiledStep::setBatch(const Batch &batch, bool training, int64_t step) {
  if (Status s = checkBatch(batch, desc_.batch); !s)
    return s;
  training_ = training;
  step_ = step;
  attendBatch_ = desc_.batch;
  args_[0] = const_cast<int32_t *>(batch.inputs.data());
  args_[1] = const_cast<int32_t *>(batch.targets.data());
  return {};
}

Expected<double> CompiledStep::run(const Batch &batch, bool training, int64_t step) {
  if (desc_.symbol.empty())
    return makeError("compiled step: this object holds only the inference function");
  if (resident())
    return makeError("compiled step: the parameters live on the device while it trains; "
                     "run() would read stale host copies");
  if (Status st = setBatch(batch, training, step); !st)
    return st.takeError();
  if (engine_ != StepEngine::Cpu)
    return runDevice();
  const attnc_model_env env = cpuEnv(training && model_.config().dropout > 0, step);
  float loss = 0;
  error_.clear();
  int rc = fn_(&env, reinterpret_cast<char *>(arena_.data()), args_.data(), grads_.data(), &loss);
  if (rc != 0)
    return makeError(error_.empty() ? "compiled step failed with code " + std::to_string(rc)
                                    : error_);
  return double(loss);
}

Status CompiledStep::loadInference() {
  if (inferFn_)
    return {};
  if (desc_.inferSymbol.empty())
    return makeError("compiled step: no inference function was compiled for " +
                     (desc_.symbol.empty() ? std::string("this model") : desc_.symbol) +
                     " (recompile the artifact with this attnc)");
  if (desc_.inferBatch <= 0 || desc_.inferArenaBytes < 0)
    return makeError("compiled step: inference batch " + std::to_string(desc_.inferBatch) +
                     " and arena " + std::to_string(desc_.inferArenaBytes) +
                     " bytes are not a plan");
  SharedObject *so = &so_;
  if (engine_ != StepEngine::Cpu) {
    // The CUDA engines compiled the CUDA step; inference is the CPU C++.
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
    if (!dirs)
      return dirs.takeError();
    HostCompileOptions options;
    options.includeDirs = *dirs;
    Expected<SharedObject> cpu =
        compiler_.compileAndLoad(cpuProgramName(desc_), desc_.source, options);
    if (!cpu)
      return cpu.takeError();
    inferSo_.emplace(std::move(cpu).take());
    so = &*inferSo_;
  }
  Expected<InferFn *> fn = so->function<InferFn>(desc_.inferSymbol);
  if (!fn)
    return fn.takeError();
  // Bind by name, as the step's arguments: the tokens per call.
  inferArgs_.assign(desc_.inferArgs.size(), nullptr);
  for (size_t i = 1; i < desc_.inferArgs.size(); ++i) {
    inferArgs_[i] = model_.argument(desc_.inferArgs[i]);
    if (!inferArgs_[i])
      return makeError("compiled inference: argument '" + desc_.inferArgs[i] +
                       "' is not a parameter of the model");
  }
  if (desc_.inferArgs.empty() || desc_.inferArgs[0] != "tokens")
    return makeError("compiled inference: the first argument must be the tokens");
  inferArena_.assign(size_t(desc_.inferArenaBytes + 3) / 4, 0.0f);
  inferFn_ = *fn;
  return {};
}

Expected<const float *> CompiledStep::infer(const Batch &batch) {
  if (!hostParamsCurrent())
    return makeError("compiled inference: the parameters live on the device while it trains; "
                     "download them first");
  if (Status s = loadInference(); !s)
    return s.takeError();
  if (Status s = checkBatch(batch, desc_.inferBatch); !s)
    return s.takeError();
  const ModelConfig &c = model_.config();
  training_ = false;
  step_ = 0;
  attendBatch_ = desc_.inferBatch;
  inferArgs_[0] = const_cast<int32_t *>(batch.inputs.data());
  logits_.resize(size_t(desc_.inferBatch) * size_t(c.seq) * size_t(c.vocab));
  const attnc_model_env env = cpuEnv(/*dropoutOn=*/false, 0);
  error_.clear();
  int rc = inferFn_(&env, reinterpret_cast<char *>(inferArena_.data()), inferArgs_.data(),
                    logits_.data());
  if (rc != 0)
    return makeError(error_.empty() ? "compiled inference failed with code " + std::to_string(rc)
                                    : error_);
  return static_cast<const float *>(logits_.data());
}

} // namespace attnc::train
