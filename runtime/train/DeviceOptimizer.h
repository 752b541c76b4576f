//===- DeviceOptimizer.h - Host side of the device AdamW kernels -*- C++ -*-===//
//
// What the host computes for kernels/cuda/attnc/optimizer.cuh's
// kernels (argument structs in kernels/abi/attnc/abi/OptimizerArgs.h): the per-step
// constants of AdamW, computed exactly as AdamW::step (Optimizer.cpp) does,
// so the device update matches the CPU one, and the weight-decay ranges of
// a flat parameter buffer. Launching is the GPU training step's job.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_DEVICEOPTIMIZER_H
#define ATTNC_RUNTIME_TRAIN_DEVICEOPTIMIZER_H

#include "attnc/abi/OptimizerArgs.h"
#include "runtime/Error.h"
#include "runtime/train/Optimizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::train {

/// The scalar fields of OptAdamWArgs for step `step` (0-based: the number
/// of updates applied so far, AdamW::stepCount()): lr = learningRate(c,
/// step), bias corrections for t = step + 1, 1 − β and 1 − lr·wd rounded as
/// AdamW::step rounds them. Pointers, n, decay ranges and the copy are left
/// null / zero for the caller.
OptAdamWArgs adamWStepArgs(const AdamWConfig &c, int64_t step);

/// One parameter's place in the flat buffer.
struct FlatSegment {
  std::string name;
  int64_t offset = 0, size = 0;
  bool decay = true; ///< ParamRef::decay
};

/// OptAdamWArgs::decay_ranges for a buffer of `n` elements: the [begin,
/// end) ranges of the segments with decay, sorted, adjacent ones merged,
/// flattened as begin0, end0, begin1, ... Empty segments are ignored.
/// Errors name a segment outside [0, n) or two that overlap.
Expected<std::vector<long long>> decayRanges(const std::vector<FlatSegment> &segments, int64_t n);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_DEVICEOPTIMIZER_H
