//===- Parameters.h - A model's named weights, gradients and constants -*- C++ -*-===//
//
// The parameter store of a ModelConfig (docs/training.md): every trained
// tensor with its runtime name ("layers.0.attn.wq"), shape, fp32 value and
// gradient buffer, in one fixed order; their initialisation from a seed;
// their checkpoint form (safetensors, shapes checked on load); and the
// model's constants (LSH rotations). Compiled steps and inference functions
// bind their arguments to it by name; the optimizer and checkpoints see it
// as ParamRefs. It computes nothing.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_PARAMETERS_H
#define ATTNC_RUNTIME_TRAIN_PARAMETERS_H

#include "runtime/Safetensors.h"
#include "runtime/train/ModelConfig.h"
#include "runtime/train/Optimizer.h"

#include <memory>
#include <string>
#include <vector>

namespace attnc::train {

/// A parameter's name, shape and whether AdamW decays it.
struct ParameterShape {
  std::string name;
  std::vector<int64_t> shape;
  bool decay = true;
};
/// The parameters of `config` in their fixed order, allocating nothing.
std::vector<ParameterShape> parameterShapes(const ModelConfig &config);
/// Their element count (ParameterStore::numParams without the store).
int64_t parameterCount(const ModelConfig &config);
/// The shape of one layer's LSH rotations ([rounds, head dim, buckets/2]);
/// empty when the variant does not hash.
std::vector<int64_t> lshRotationShape(const ModelConfig &config);
/// The element count of the model's constants (every layer's rotations).
int64_t constantCount(const ModelConfig &config);

/// One trained tensor and its gradient (same size).
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value, grad;
  bool decay = true; ///< AdamW's weight decay applies
};

class ParameterStore {
public:
  /// Every parameter of `config`, initialised from `seed` (Philox, stream
  /// = parameter index): linear maps N(0, 1/fan_in), the residual branches'
  /// output maps scaled by 1/sqrt(2·layers); token and position tables
  /// N(0, 0.02); low-rank E/F mean
  /// pooling over k segments plus N(0, 0.01); norm gains 1, biases 0,
  /// per-head parameters at their declared values (docs/training.md).
  ParameterStore(ModelConfig config, uint64_t seed);
  ParameterStore(const ParameterStore &) = delete;
  ParameterStore &operator=(const ParameterStore &) = delete;

  const ModelConfig &config() const { return cfg_; }

  /// Every parameter with its gradient, in the fixed order; the pointers
  /// stay valid for the store's lifetime (loadWeights copies into them).
  std::vector<ParamRef> params();
  /// The parameter named `name`, or null.
  Parameter *find(const std::string &name);
  void zeroGrads();
  int64_t numParams() const;
  /// Weights as tensors (checkpoints), and loading them back (shapes
  /// checked, errors name the tensor).
  void saveWeights(st::File &out) const;
  Status loadWeights(const st::File &in);
  /// Copies the tensors of `in` whose names and shapes (F32) match a
  /// parameter's; the other parameters keep their values. Returns the
  /// names loaded; `kept` gets the others.
  std::vector<std::string> loadMatchingWeights(const st::File &in, std::vector<std::string> &kept);
  /// A constant input of the model by name, as compiled functions'
  /// arguments name them: "layers.L.attn.lsh_rotations" is layer L's LSH
  /// rotations. Null when the model has no such constant.
  const st::Tensor *constant(const std::string &name) const;
  /// What a compiled function's argument `name` points at: the parameter's
  /// values or the constant's data; null when the model has neither.
  void *argument(const std::string &name);

private:
  void init(uint64_t seed);

  ModelConfig cfg_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<st::Tensor> rotations_; ///< per layer, when the variant hashes (LSH)
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_PARAMETERS_H
