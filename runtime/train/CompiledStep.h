//===- CompiledStep.h - Running a compiled whole-model step ----*- C++ -*-===//
//
// The runtime half of whole-model compilation: loads the C++ the compiler
// emitted for a @train_<model> function (codegen/ModelEmitterCpu.cpp), gives
// it one arena of the planned size, the model's parameters (bound by name)
// and the GEMM and attention it calls back into, and runs a training step:
// the loss, with every parameter gradient written into the model's
// gradient buffers (the step's planned outputs, never in the arena). The
// same object runs the model's @infer_<model> function: the forward to the
// logits, which evaluation, generation and filling use.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_COMPILEDSTEP_H
#define ATTNC_RUNTIME_TRAIN_COMPILEDSTEP_H

#include "runtime/CpuAttention.h"
#include "runtime/Cublas.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelDevice.h"
#include "runtime/train/Parameters.h"
#include "runtime/train/Trainer.h"

#include <functional>
#include <memory>
#include <optional>

struct attnc_model_env; // attnc/abi/cpu_step_env.h
struct attnc_cuda_env;  // attnc/abi/model_step_env.h

namespace attnc::train {

class StepDevice; // runtime/train/StepDevice.h

/// What the compiler says about a step besides its source.
struct CompiledStepDesc {
  std::string source, symbol;
  int64_t arenaBytes = 0;
  int64_t keptBytes = 0; ///< of the arena, what the forward keeps for the backward
  int batch = 0;
  /// The function's arguments in order: "tokens", "targets", then
  /// parameter names (ParameterStore's) or constants
  /// ("layers.L.attn.lsh_rotations").
  std::vector<std::string> args;
  /// The argument numbers whose gradients the step returns, in order.
  std::vector<int> gradArgs;
  /// The same step for CUDA (codegen's CudaModelStep): kernels, host code
  /// and its entry point; empty when not emitted.
  std::string cudaDeviceSource, cudaHostSource, cudaSymbol;
  /// The inference function (@infer_<model>, in `source`): its entry point
  /// (empty when not emitted), arena, sequences per call, and arguments
  /// ("tokens", then the parameters and constants, named as in `args`).
  std::string inferSymbol;
  int64_t inferArenaBytes = 0;
  int inferBatch = 0;
  std::vector<std::string> inferArgs;
};

/// How a compiled step runs: its C++ on the CPU; its CUDA step (kernels
/// and host code) on a GPU; or the CUDA step with the kernels under the
/// SIMT emulator on the CPU, which checks the generated CUDA without a GPU.
enum class StepEngine { Cpu, Cuda, CudaSim };

/// The GPU step's arithmetic: GEMM inner products in f32, tf32, bf16 or
/// fp16 (cuBLAS compute types; storage and master weights stay fp32), and
/// dynamic loss scaling with fp16 (docs/mixed-precision.md).
struct StepPrecision {
  std::string gemm = "f32";
  float initialLossScale = 0; ///< fp16: the loss scale to start from (0: LossScaler's)
};

/// One attention call of a CUDA step on the step's own device buffers
/// (f32, [B, H, S, Dh]; E, F, rotations and per-head parameters as the
/// model keeps them). Forward: out, lse. Backward: dq, dk, dv, dE, dF,
/// dparams, from dout and the forward's kept out and lse.
struct DeviceAttentionCall {
  int64_t layer = 0;
  int B = 0, H = 0, S = 0, Dh = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr, *E = nullptr, *F = nullptr;
  const float *rotations = nullptr, *params = nullptr;
  float *out = nullptr, *lse = nullptr;                                      ///< forward
  const float *dout = nullptr, *forwardOut = nullptr, *forwardLse = nullptr; ///< backward
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dE = nullptr, *dF = nullptr,
        *dparams = nullptr;
  bool dropout = false;
  uint64_t dropoutSeed = 0;
  uint32_t dropoutOffset = 0;
};
/// Runs a DeviceAttentionCall in place: the attention kernels read and
/// write the step's buffers, nothing goes through the host.
using DeviceAttentionFn = std::function<Status(const DeviceAttentionCall &)>;

class CompiledStep final : public ResidentTraining {
public:
  /// Compiles the step and binds it to `model` (which must outlive it),
  /// against the engine's kernel headers (runtime/KernelHeaders.h).
  /// CudaSim and Cuda need the desc's CUDA sources, Cuda a GPU too. A desc
  /// with only the inference function (no `symbol`) makes an object that
  /// only infers.
  static Expected<std::unique_ptr<CompiledStep>>
  create(CompiledStepDesc desc, ParameterStore &model, AttentionFn attention,
         const HostCompiler &compiler, StepEngine engine = StepEngine::Cpu,
         const StepPrecision &precision = {});
  ~CompiledStep();
  /// Compiles the desc's CPU source into the compiler's cache without
  /// loading it, so a later create() finds it (benches that measure memory
  /// keep the compile out of the measurement).
  static Status precompile(const CompiledStepDesc &desc, const HostCompiler &compiler);

  /// One step on `batch` (its B must be the compiled batch): returns the
  /// loss and writes the gradients into the model's gradient buffers. `step` keys the
  /// dropout masks (as Model::setDropout); `training` false turns them off.
  /// Not while the parameters are resident on the device.
  Expected<double> run(const Batch &batch, bool training, int64_t step);
  /// Called by the CPU engine's run() as each gradient buffer (a model
  /// parameter's ParamRef::grad) takes its final value, in the backward's
  /// order; data-parallel training starts exchanging finished buckets
  /// then (DataParallelStep). Empty: no calls.
  using GradReadyFn = std::function<void(const float *grad)>;
  void setGradReady(GradReadyFn fn) { gradReady_ = std::move(fn); }

  /// The inference function on `batch`'s inputs (its B must be the
  /// desc's inferBatch): the logits [B·S, vocab], valid until the next
  /// call. No dropout. It runs the CPU C++ on every engine, reading the
  /// host parameters (the CUDA engines compile it on first use), so on a
  /// device-resident step only after download().
  Expected<const float *> infer(const Batch &batch);
  /// Sequences per infer() call (0: no inference function).
  int inferBatch() const { return inferFn_ || !desc_.inferSymbol.empty() ? desc_.inferBatch : 0; }
  /// The inference function's planned arena, in bytes.
  int64_t inferArenaBytes() const { return desc_.inferArenaBytes; }

  /// The CUDA engines' device-resident training (ResidentTraining): from
  /// upload() on, the parameters, gradients and AdamW moments stay in
  /// device memory and the device AdamW (attnc/optimizer.cuh) updates
  /// them; nothing crosses to the host per step but the batch, the loss
  /// and the gradient norm. Errors on the CPU engine.
  Status upload(const AdamW &adam) override;
  Expected<Update> update(const Batch &batch, int64_t step, AdamW &adam) override;
  Status download(AdamW &adam) override;
  /// The CUDA engines' data parallelism (ResidentTraining): each rank's
  /// micro-batches (of the compiled batch each) run one after another,
  /// their gradients weighted on the device, exchanged through NCCL on a
  /// GPU (else MPI through host memory; device copies for one process)
  /// and summed in micro-batch order by a kernel; an fp16 overflow on any
  /// rank reruns the step on every rank. The same bits at any rank count
  /// that divides the micro-batches.
  Expected<std::string> setDataParallel(const DataParallelPlan &plan) override;
  /// Of the device exchange's bucket exchanges so far, those begun while a
  /// backward still ran (overlapped), and all of them.
  std::pair<int64_t, int64_t> bucketsSentDuringBackward() const;
  /// Whether upload() has made the device's parameters the current ones.
  bool resident() const;
  /// Whether the host parameters are the current ones (not resident, or
  /// downloaded since the last device update).
  bool hostParamsCurrent() const;
  /// For checkpoints (TrainOptions::stepState): the fp16 loss scaler's
  /// state as JSON text, empty when the step does not scale the loss; and
  /// its restore (ignored unless this step scales the loss too).
  std::string stepState() const;
  Status restoreStepState(const std::string &json);

  /// The CUDA engines: attention on the step's device buffers (set by
  /// whoever built the attention kernels on the step's device). Unset, each
  /// call's operands go to the host and back through `attention`.
  /// `traffic`: the copies and allocations of the device the attention
  /// kernels run on, when it is another object than the step's (counted
  /// in transfers()).
  void setDeviceAttention(DeviceAttentionFn fn, std::function<DeviceTraffic()> traffic = {}) {
    deviceAttention_ = std::move(fn), attentionTraffic_ = std::move(traffic);
  }
  bool hasDeviceAttention() const { return bool(deviceAttention_); }
  /// The CUDA engines: host<->device copies so far (uploads and downloads
  /// with their bytes), to show what a step moves.
  struct Transfers {
    long long uploads = 0, downloads = 0, uploadBytes = 0, downloadBytes = 0;
    long long allocations = 0; ///< device memory allocations
  };
  Transfers transfers() const;
  /// Those of the last device-resident update() (one training step).
  Transfers lastStepTransfers() const { return lastStepTransfers_; }
  /// Device memory allocations made during the device-resident update()s
  /// so far (0: every buffer was allocated before the first step).
  long long allocationsDuringSteps() const { return stepAllocations_; }

  int64_t arenaBytes() const { return desc_.arenaBytes; }
  /// CUDA engines with fp16: the current loss scale, and the steps rerun
  /// at a lower one after their gradients overflowed (1 and 0 otherwise).
  float lossScale() const;
  int64_t overflowReruns() const { return overflowReruns_; }
  int64_t keptBytes() const { return desc_.keptBytes; }
  bool fromCache() const { return fromCache_; }

private:
  CompiledStep(CompiledStepDesc desc, ParameterStore &model, AttentionFn attention, SharedObject so,
               HostCompiler compiler);
  static int attentionCallback(void *ctx, int64_t layer, const float *const *in, float *out,
                               float *lse);
  static int attentionGradCallback(void *ctx, int64_t layer, const float *const *in,
                                   float *const *out);
  static int nonfiniteCallback(void *ctx, const char *what, int64_t index, int64_t width,
                               float value);
  static void gradReadyCallback(void *ctx, int64_t index);
  // The CUDA step on a StepDevice (CompiledStepCuda.cpp).
  struct CudaState;
  Status initDevice(std::unique_ptr<StepDevice> device, cuda::GemmPrecision gemm,
                    float initialLossScale);
  /// The device step (with fp16's reruns). While resident, it ends with
  /// the gradient norm on the device, clipped at `clipNorm` (AdamW's).
  Expected<double> runDevice(float clipNorm = 0);
  /// Checks a batch against the compiled shape and the vocabulary and
  /// makes it the step's input.
  Status setBatch(const Batch &batch, bool training, int64_t step);
  /// What a generated CPU function is lent: GEMM, attention and NaN/Inf
  /// reports through this object; dropout on or off at `step`'s masks.
  attnc_model_env cpuEnv(bool dropoutOn, int64_t step);
  /// Checks the batch's shape against `B` sequences and its ids against
  /// the vocabulary.
  Status checkBatch(const Batch &batch, int B) const;
  /// Resolves the inference function (compiling the CPU source first on
  /// the CUDA engines) and binds its arguments.
  Status loadInference();
  /// The gradient norm of the device step just run (its gradients
  /// multiplied by `invScale` first) and the clip factor for `clipNorm`,
  /// left in device memory for AdamW.
  Status deviceGradNorm(float invScale, float clipNorm);
  Expected<double> runDeviceOnce(float lossScale);
  /// The batch's inputs (and the parameters unless resident) to the device.
  Status uploadStepInputs();
  /// runDevice for setDataParallel: this rank's micro-batches of `global`,
  /// the exchange, the norm (clipped at `clipNorm`); the global mean loss.
  Expected<double> runDeviceParallel(const Batch &global, int64_t step, float clipNorm);
  /// The data-parallel exchange of the buckets not sent yet this step, in
  /// their fixed order (the last first): those whose gradients are all in,
  /// or (`all`) every one.
  Status sendBuckets(bool all, const std::string &what);
  /// While set, the CUDA step reports each finished gradient slot here
  /// (attnc_cuda_env::grad_ready).
  std::function<Status(long long slot)> deviceGradReady_;
  /// The step's NaN/Inf checks so far: resetChecks empties their slots;
  /// readChecks reads them and, when one found a NaN/Inf, records the first
  /// (in program order) as the error and returns true.
  Status resetChecks();
  Expected<bool> readChecks();
  int attendOnDevice(int64_t layer, const float *const *in, const float *dout, float *const *out,
                     const float *forwardOut, const float *forwardLse);
  std::shared_ptr<CudaState> cuda_; ///< shared_ptr: CudaState is complete in one file only
  int attend(int64_t layer, const float *const *in, const float *dout, float *const *out,
             const float *forwardOut, const float *forwardLse);

  using StepFn = int(const attnc_model_env *env, char *arena, void *const *args,
                     float *const *grads, float *loss);
  CompiledStepDesc desc_;
  StepEngine engine_ = StepEngine::Cpu;
  int64_t overflowReruns_ = 0;
  bool scaledOverflow_ = false; ///< the last device step stopped at a scaled NaN/Inf
  ParameterStore &model_;
  AttentionFn attention_;
  DeviceAttentionFn deviceAttention_;
  std::function<DeviceTraffic()> attentionTraffic_;
  Transfers lastStepTransfers_;
  long long stepAllocations_ = 0;
  SharedObject so_;
  HostCompiler compiler_;
  StepFn *fn_ = nullptr;
  using InferFn = int(const attnc_model_env *env, char *arena, void *const *args, float *logits);
  InferFn *inferFn_ = nullptr;
  std::optional<SharedObject> inferSo_; ///< the CUDA engines' CPU source, for inference
  std::vector<float> inferArena_, logits_;
  std::vector<void *> inferArgs_; ///< tokens set per call
  int attendBatch_ = 0;           ///< B of the attention calls of the running function
  using CudaStepFn = int(const attnc_cuda_env *env, char *arena, void *const *args,
                         float *const *grads, float *loss);
  CudaStepFn *cudaFn_ = nullptr;
  bool fromCache_ = false;
  std::vector<float> arena_; ///< the planned arena (floats, so it is aligned)
  std::vector<void *> args_; ///< parameter pointers; tokens/targets set per run
  std::vector<float *> grads_;
  GradReadyFn gradReady_;
  bool training_ = false;
  int64_t step_ = 0;
  std::string error_; ///< the attention error behind a non-zero return
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_COMPILEDSTEP_H
