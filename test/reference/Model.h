//===- Model.h - The whole-model reference: a hand-assembled step -*- C++ -*-===//
//
// The tests' reference for the compiled step (attnc-reference compare,
// test/train/compiled-step.test): the model of docs/training.md assembled
// by hand from Layers.h, fp32 on the CPU, around the same generated
// attention kernels and the same parameter store: embeddings, standard
// (pre-norm) or reversible layers whose attention is the spec's generated
// kernel, chunked feed-forward blocks, final layer norm and head, and the
// loss. Forward and backward; parameters and their gradients are named
// flat fp32 buffers (ParamRef) for the optimizer and checkpoints.
//
// Memory: a standard layer keeps its input for the backward (activation
// memory grows with depth); a reversible layer keeps nothing, its backward
// rebuilds the inputs from the outputs. Every layer's internals are
// recomputed in the backward (one layer's worth of scratch at a time).
// ActivationPlan() reports both, in bytes.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_REFERENCE_MODEL_H
#define ATTNC_TEST_REFERENCE_MODEL_H

#include "runtime/CpuAttention.h"
#include "runtime/train/Data.h"
#include "test/reference/Layers.h"
#include "runtime/train/ModelConfig.h"
#include "runtime/train/Parameters.h"
#include "runtime/train/Optimizer.h"

#include <functional>
#include <map>
#include <memory>

namespace attnc::train {

/// Loss and counts of one batch.
struct StepResult {
  CrossEntropy ce;
  double meanLoss() const { return ce.count ? ce.lossSum / double(ce.count) : 0.0; }
};

class Model {
public:
  /// The hand-assembled forward and backward over `store`'s parameters
  /// (which must outlive it), calling `attention` for each layer.
  Model(ParameterStore &store, AttentionFn attention);

  const ModelConfig &config() const { return cfg_; }
  ParameterStore &store() { return store_; }

  /// Forward (and, with `backward`, backward accumulating into the
  /// gradients) of one batch. Errors come from the attention kernel.
  Expected<StepResult> run(const Batch &batch, bool backward);
  /// Logits [B·S, vocab] of the last run (forward only).
  const std::vector<float> &logits() const { return logits_; }

  /// Dropout for the following run()s: the masks of training step `step`,
  /// or none (evaluation, generation; the default).
  void setDropout(bool on, int64_t step = 0) {
    training_ = on;
    dropoutOn_ = on && cfg_.dropout > 0;
    dropoutStep_ = step;
  }

  /// Bytes kept between the forward and backward passes for `batch` rows
  /// (layer inputs of standard layers, the final activations) and the peak
  /// scratch of one layer's recomputation.
  struct ActivationPlan {
    int64_t keptBytes = 0, scratchBytes = 0;
  };
  ActivationPlan activationPlan(int batch) const { return activationPlanOf(cfg_, batch); }
  /// The same from the configuration alone (no weights allocated).
  static ActivationPlan activationPlanOf(const ModelConfig &config, int batch);

  /// The peak memory of inference, run(batch, /*backward=*/false), in
  /// bytes, as Model::run allocates it (docs/benchmarks.md): the highest sum
  /// of the buffers live at the same time, over the phases of every layer
  /// (q/k/v projections, the attention call, the output projection, the FFN
  /// chunks) and the head. Steady state: the logits the model keeps from the
  /// previous call count from the start. Forward-only runs still keep every
  /// standard layer's input and midpoint until the run ends, so they count.
  /// `attentionWorkspaceBytes` is what the AttentionFn itself allocates
  /// beyond its outputs while it runs (e.g. an unfused kernel's B·H·N·N
  /// scores); the projected K'/V' of CpuAttention's low-rank path are
  /// counted here. Not counted: a generated kernel's per-thread tiles
  /// (tens of KiB), the runtime's code and thread stacks.
  struct InferencePlan {
    int64_t weightBytes = 0;     ///< parameters and their gradient buffers (both allocated)
    int64_t inputBytes = 0;      ///< the batch: token ids and targets
    int64_t activationBytes = 0; ///< live buffers at the peak, workspace included
    std::string peakAt;          ///< where the peak is, e.g. "layer 0 attention"
    int64_t totalBytes() const { return weightBytes + inputBytes + activationBytes; }
  };
  InferencePlan inferencePlan(int batch, int64_t attentionWorkspaceBytes = 0) const;

private:
  using Param = Parameter;
  struct LayerParams {
    Param *ln1g, *ln1b, *wq, *bq, *wk = nullptr, *bk = nullptr, *wv, *bv, *wo, *bo;
    Param *ln2g = nullptr, *ln2b = nullptr, *w1 = nullptr, *b1 = nullptr, *w2 = nullptr,
          *b2 = nullptr; ///< null for attention-only layers
    Param *E = nullptr, *F = nullptr, *headParams = nullptr;
    const st::Tensor *rotations = nullptr;
  };
  /// y += FFN(z) of layer l (through the dropout mask when on).
  void addFfn(int l, const float *z, float *y, int64_t R);
  /// v *= the dropout mask of (layer, branch 0 attention / 1 FFN) / (1 − p),
  /// when dropout is on; the same call on a gradient applies the same mask.
  void dropoutMask(int layer, int branch, float *v, int64_t n) const;
  /// The cotangent of a dropped branch output: `d` itself without dropout,
  /// else `d` through the same mask, in `buffer`.
  const float *maskedCotangent(int layer, int branch, const float *d, int64_t n,
                               std::vector<float> &buffer) const;

  // One attention block a = Attn(z) (+ its backward when dA is non-null:
  // dz written). Uses scratch of the model.
  Status attention(int l, const float *z, float *a, int B, const float *dA, float *dz);
  /// Standard layer: forward y = layer(x), saving x and h = x + Attn(LN1 x).
  Status standardForward(int l, const float *x, float *y, int B);
  /// Its backward from the saved x and h: dx written from dy.
  Status standardBackward(int l, const float *dy, float *dx, int B);
  Status reversibleForward(int l, float *x1, float *x2, int B);
  Status reversibleBackward(int l, float *y1, float *y2, float *dy1, float *dy2, int B);

  ModelConfig cfg_;
  ParameterStore &store_;
  AttentionFn attn_;
  std::vector<LayerParams> layers_;
  Param *tok_, *pos_, *lnfG_, *lnfB_, *wout_, *bout_;
  Param *sharedE_ = nullptr; ///< layerwise low-rank
  std::vector<float> logits_;
  bool dropoutOn_ = false, training_ = false;
  int64_t dropoutStep_ = 0;
  std::vector<std::vector<float>> savedX_, savedH_; ///< standard layers' inputs and midpoints
};

} // namespace attnc::train

#endif // ATTNC_TEST_REFERENCE_MODEL_H
