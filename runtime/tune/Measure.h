//===- Measure.h - The tuner's measuring half --------------------*- C++ -*-===//
//
// What attnc tune and attnc bench measure with, below the compiler: medians
// of repeated timings, the interleaved final round that decides between a
// heuristic and measured finalists, and random attention inputs of a
// model's shape. No MLIR: the IR half (which candidates, applying the
// choice) is the driver's and attn-apply-tuning's.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TUNE_MEASURE_H
#define ATTNC_RUNTIME_TUNE_MEASURE_H

#include "runtime/CpuAttention.h"
#include "runtime/Safetensors.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace attnc::tune {

/// The median of `v` (the upper one of an even count); `v` is not empty.
double median(std::vector<double> v);

/// Median wall time of `repeats` calls after one warm-up, in milliseconds.
template <typename Fn> double medianMs(int repeats, Fn &&fn) {
  using Clock = std::chrono::steady_clock;
  fn(); // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
  }
  return median(std::move(t));
}

/// The interleaved final round every measured choice ends with: the
/// finalists (index 0: the heuristic) are re-timed round-robin, three
/// rounds, and the heuristic stays unless another beats it by more than the
/// measured spread (and at least 2 %), so a choice is never slower than the
/// default beyond noise and repeat runs agree where configs are equal.
/// `time(i)` returns milliseconds, or a negative number on failure (then
/// nullopt).
struct Finalists {
  size_t best = 0;
  std::vector<double> med, spread; ///< median ms and (max - min) / median
};
std::optional<Finalists> chooseAmongFinalists(size_t n, const std::function<double(size_t)> &time);

/// A tensor of normal(0, scale) floats from `rng`.
st::Tensor randomTensor(std::vector<int64_t> shape, std::mt19937 &rng, float scale);

/// What a variant's attention takes besides q, k, v: low-rank E (and F
/// unless shared layerwise or kv), per-head parameters.
struct AttentionExtras {
  int64_t lowrankK = 0;  ///< > 0: low-rank
  std::string share;     ///< none, headwise, kv, layerwise
  int64_t numParams = 0; ///< per-head parameters
  /// > 0: LSH, rotations [rounds, D, buckets / 2].
  int64_t lshRounds = 0, lshBuckets = 0;
};

/// Random inputs of an attention at [B, H, S, D] (dout when `withDout`):
/// what the tuners time. Owns the tensors `in` points to (not copyable).
class RandomAttentionInputs {
public:
  RandomAttentionInputs(int64_t B, int64_t H, int64_t S, int64_t D, bool withDout,
                        const AttentionExtras &extras = {});
  RandomAttentionInputs(const RandomAttentionInputs &) = delete;
  RandomAttentionInputs &operator=(const RandomAttentionInputs &) = delete;
  AttentionInputs in;

private:
  st::Tensor q_, k_, v_, dout_, lengths_, E_, F_, P_, rotations_;
};

} // namespace attnc::tune

#endif // ATTNC_RUNTIME_TUNE_MEASURE_H
