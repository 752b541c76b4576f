//===- CudaOptimizerTest.cpp - The device optimizer kernels ---------------===//
//
// kernels/cuda/attnc/optimizer.cuh, no GPU needed:
//
// NVRTC builds. The header's four entry points, compiled by
// runtime/NvrtcCompiler for sm_70 (CUDA 12 NVRTC), sm_75, sm_80 and sm_90:
// ptxas must report no spills, no stack frame, and the static shared memory
// of the reductions.
//
// Numerics. The same header compiled by the host compiler runs on the SIMT
// block emulator (kernels/emulator/attnc/simt_emulator.h: real
// barriers and warp shuffles). Several AdamW steps with warm-up, cosine
// decay, decoupled weight decay on some parameters, gradient clipping on
// some steps and not others, and loss-scaled gradients are compared with
// runtime/train/Optimizer.cpp's AdamW on the same inputs: gradient norm,
// weights and both moments to 1e-6 relative (they agree bit for bit here,
// since both round every operation; the count is printed). A step with an
// Inf (or NaN) gradient must raise the flag and leave weights, moments and
// the 16-bit copy untouched, as the CPU AdamW refuses the step; training
// then goes on in step with the CPU. The reduction is checked for a fixed
// order (same bits twice) and for many partials.
//
//===----------------------------------------------------------------------===//
#include "runtime/NvrtcCompiler.h"
#include "runtime/Safetensors.h"
#include "runtime/train/DeviceOptimizer.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace attnc;
using namespace attnc::train;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

//===----------------------------------------------------------------------===//
// NVRTC builds
//===----------------------------------------------------------------------===//

const char *const kEntryPoints[] = {"attnc_opt_grad_sumsq", "attnc_opt_grad_finalize",
                                    "attnc_opt_adamw",      "attnc_opt_cast",
                                    "attnc_opt_scale_into", "attnc_opt_ordered_sum"};

class CudaOptimizerNvrtc : public testing::TestWithParam<const char *> {};

TEST_P(CudaOptimizerNvrtc, CompilesWithoutSpills) {
  NvrtcCompiler nvrtc; // no cache: always a real compile
  NvrtcOptions o;
  o.arch = GetParam();
  o.includeDirs = {std::string(ATTNC_SOURCE_DIR) + "/kernels/abi",
                   std::string(ATTNC_SOURCE_DIR) + "/kernels/common",
                   std::string(ATTNC_SOURCE_DIR) + "/kernels/cuda"};
  Expected<Cubin> c = nvrtc.compile("attnc_optimizer.cu", "#include \"attnc/optimizer.cuh\"\n", o);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_FALSE(contains(c->log, "warning")) << c->log;
  for (const char *name : kEntryPoints) {
    SCOPED_TRACE(name);
    const KernelResources *k = c->kernel(name);
    ASSERT_NE(k, nullptr) << c->log;
    std::printf("%s %-24s %3d regs  %d spill st  %d spill ld  %d stack  smem %d\n", GetParam(),
                name, k->registers, k->spillStoreBytes, k->spillLoadBytes, k->stackFrameBytes,
                k->staticSmemBytes);
    EXPECT_GT(k->registers, 0);
    EXPECT_LE(k->registers, 255);
    EXPECT_FALSE(k->spills());
    EXPECT_EQ(k->stackFrameBytes, 0);
    const bool reduces = std::string(name).find("grad") != std::string::npos;
    EXPECT_EQ(k->staticSmemBytes, reduces ? int(sizeof(double)) * attnc::opt::kThreads / 32 : 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaOptimizerNvrtc,
                         testing::Values("sm_70", "sm_75", "sm_80", "sm_90"),
                         [](const testing::TestParamInfo<const char *> &i) {
                           return std::string(i.param);
                         });

//===----------------------------------------------------------------------===//
// Host-side helpers
//===----------------------------------------------------------------------===//

TEST(CudaOptimizerHost, DecayRangesMergeSortAndCheck) {
  Expected<std::vector<long long>> r = decayRanges({{"c", 30, 10, true},
                                                    {"a", 0, 10, true},
                                                    {"b", 10, 5, true},
                                                    {"e", 15, 0, false},
                                                    {"d", 15, 15, false},
                                                    {"f", 40, 2, true}},
                                                   42);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, (std::vector<long long>{0, 15, 30, 42}));
  Expected<std::vector<long long>> none = decayRanges({{"a", 0, 10, false}}, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  Expected<std::vector<long long>> overlap =
      decayRanges({{"a", 0, 10, true}, {"b", 9, 2, false}}, 20);
  ASSERT_FALSE(overlap.ok());
  EXPECT_TRUE(contains(overlap.error(), "'a' and 'b' overlap")) << overlap.error();
  Expected<std::vector<long long>> outside = decayRanges({{"w", 5, 10, true}}, 12);
  ASSERT_FALSE(outside.ok());
  EXPECT_TRUE(contains(outside.error(), "parameter 'w' at elements [5, 15)")) << outside.error();
}

TEST(CudaOptimizerHost, LaunchShapes) {
  using namespace attnc::opt;
  static_assert(reduceBlocks(0) == 1 && reduceBlocks(1) == 1);
  static_assert(reduceBlocks(kThreads * kItemsPerThread) == 1);
  static_assert(reduceBlocks(kThreads * kItemsPerThread + 1) == 2);
  static_assert(reduceBlocks(1LL << 40) == kMaxPartials);
  static_assert(elementwiseBlocks(257) == 2 &&
                elementwiseBlocks(1LL << 40) == kMaxElementwiseBlocks);
  static_assert(sizeof(OptStepState) == 24);
}

TEST(CudaOptimizerHost, StepArgsMatchOptimizerConstants) {
  AdamWConfig c;
  c.lr = 3e-3f;
  c.warmupSteps = 4;
  c.totalSteps = 10;
  c.weightDecay = 0.05f;
  const OptAdamWArgs a = adamWStepArgs(c, 2);
  EXPECT_EQ(a.lr, learningRate(c, 2));
  EXPECT_EQ(a.inv_bias_correction1, float(1.0 / (1.0 - std::pow(0.9f, 3.0))));
  EXPECT_EQ(a.one_minus_beta2, 1.0f - 0.999f);
  EXPECT_EQ(a.decay_factor, float(1.0 - double(learningRate(c, 2)) * double(0.05f)));
  EXPECT_EQ(a.copy_type, attnc::opt::kCopyNone);
  EXPECT_EQ(a.weights, nullptr);
}

} // namespace

//===----------------------------------------------------------------------===//
// The kernels on the block emulator
//===----------------------------------------------------------------------===//

#include "attnc/simt_emulator.h"

#include "attnc/optimizer.cuh"

namespace {

using attnc::OptAdamWArgs;
using attnc::OptCastArgs;
using attnc::OptGradNormArgs;
using attnc::OptStepState;
namespace opt = attnc::opt;

template <class Args> void runKernel(void (*kernel)(Args), int grid, const Args &a) {
  ASSERT_TRUE(emu::launch(grid, 1, opt::kThreads, [&] { kernel(a); })) << "deadlock";
}

uint32_t bits32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

uint16_t bits16(__half h) {
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
uint16_t bits16(__nv_bfloat16 h) {
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

struct Param {
  std::string name;
  int64_t size;
  bool decay;
};
// Offsets 0, 1000, 1037, 1057, 1107, 3607; n = 3907. Uneven sizes so that
// decayed and undecayed ranges cross block and warp boundaries, and ranges
// shorter than a grid-stride step (q, b2) so a thread skips several at once.
const Param kParams[] = {{"w1", 1000, true}, {"b1", 37, false},  {"q", 20, true},
                         {"b2", 50, false},  {"w2", 2500, true}, {"ln", 300, false}};

/// The device side: a flat buffer of every parameter, as the GPU step keeps it.
struct Device {
  int64_t n = 0;
  std::vector<float> w, m, v, g;
  std::vector<double> partials;
  std::vector<long long> ranges;
  OptStepState state{};
  std::vector<__half> copy16;
  std::vector<__nv_bfloat16> copyBf16;

  /// Stage 1 and 2 with inv_scale; returns the state.
  const OptStepState &reduce(float invScale, float clipNorm) {
    OptGradNormArgs a{};
    a.grads = g.data();
    a.n = n;
    a.num_partials = opt::reduceBlocks(n);
    partials.assign(size_t(a.num_partials), std::nan(""));
    a.partials = partials.data();
    a.state = &state;
    a.inv_scale = invScale;
    a.clip_norm = clipNorm;
    runKernel(attnc_opt_grad_sumsq, a.num_partials, a);
    runKernel(attnc_opt_grad_finalize, 1, a);
    return state;
  }

  void adamw(const AdamWConfig &c, int64_t step, int grid, int copyType) {
    OptAdamWArgs a = adamWStepArgs(c, step);
    a.weights = w.data();
    a.m = m.data();
    a.v = v.data();
    a.grads = g.data();
    a.state = &state;
    a.decay_ranges = ranges.data();
    a.num_decay_ranges = int(ranges.size() / 2);
    a.n = n;
    a.copy_type = copyType;
    a.copy = copyType == opt::kCopyFp16   ? static_cast<void *>(copy16.data())
             : copyType == opt::kCopyBf16 ? static_cast<void *>(copyBf16.data())
                                          : nullptr;
    runKernel(attnc_opt_adamw, grid, a);
  }
};

/// The CPU optimizer on the same parameters, one buffer each.
struct Cpu {
  std::vector<std::vector<float>> w, g;
  AdamW adam;
  explicit Cpu(const AdamWConfig &c) : adam(c) {}
  std::vector<ParamRef> refs() {
    std::vector<ParamRef> r;
    for (size_t p = 0; p < std::size(kParams); ++p)
      r.push_back({kParams[p].name, w[p].data(), g[p].data(), kParams[p].size, kParams[p].decay});
    return r;
  }
  /// m or v of the flat buffer, from the optimizer's saved state (zeros
  /// before the first step).
  std::vector<float> moment(const char *which, int64_t n) {
    st::File f;
    adam.saveState(f);
    std::vector<float> out;
    for (const Param &p : kParams) {
      auto it = f.tensors.find(std::string("adam.") + which + "." + p.name);
      std::vector<float> t =
          it == f.tensors.end() ? std::vector<float>(size_t(p.size), 0.0f) : it->second.asF32();
      out.insert(out.end(), t.begin(), t.end());
    }
    EXPECT_EQ(int64_t(out.size()), n);
    return out;
  }
  std::vector<float> flatWeights() const {
    std::vector<float> out;
    for (const auto &x : w)
      out.insert(out.end(), x.begin(), x.end());
    return out;
  }
};

/// |a - b| <= 1e-6·|b| (+ a tiny absolute slack for values near 0);
/// counts elements that agree bit for bit.
void expectClose(const std::vector<float> &got, const std::vector<float> &want, const char *what,
                 int64_t &identical) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "]";
    ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6 * std::fabs(want[i]) + 1e-30)
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    identical += std::memcmp(&got[i], &want[i], 4) == 0;
  }
}

struct Fixture {
  AdamWConfig config;
  Device dev;
  Cpu cpu;
  std::mt19937 rng{2024};

  static AdamWConfig makeConfig() {
    AdamWConfig c;
    c.lr = 1e-2f;
    c.warmupSteps = 2;
    c.totalSteps = 8;
    c.minLrRatio = 0.1f;
    c.weightDecay = 0.1f;
    c.clipNorm = 1.0f;
    return c;
  }

  Fixture() : config(makeConfig()), cpu(config) {
    std::vector<FlatSegment> segs;
    int64_t off = 0;
    std::normal_distribution<float> nd(0.0f, 0.5f);
    for (const Param &p : kParams) {
      segs.push_back({p.name, off, p.size, p.decay});
      std::vector<float> w(size_t(p.size));
      for (float &x : w)
        x = nd(rng);
      cpu.w.push_back(w);
      cpu.g.push_back(std::vector<float>(size_t(p.size)));
      dev.w.insert(dev.w.end(), w.begin(), w.end());
      off += p.size;
    }
    dev.n = off;
    dev.m.assign(size_t(off), 0.0f);
    dev.v.assign(size_t(off), 0.0f);
    dev.g.assign(size_t(off), 0.0f);
    dev.copy16.assign(size_t(off), __float2half_rn(0.0f));
    dev.copyBf16.assign(size_t(off), __float2bfloat16_rn(0.0f));
    Expected<std::vector<long long>> r = decayRanges(segs, off);
    EXPECT_TRUE(r.ok()) << r.error();
    dev.ranges = *r;
    EXPECT_EQ(dev.ranges, (std::vector<long long>{0, 1000, 1037, 1057, 1107, 3607}));
  }

  /// Draws gradients of standard deviation `magnitude` into both sides:
  /// the CPU gets them as they are, the device multiplied by `scale` (a
  /// loss-scaled backward). Returns the unscaled flat gradients.
  std::vector<float> drawGradients(float magnitude, float scale) {
    std::normal_distribution<float> nd(0.0f, magnitude);
    std::vector<float> flat;
    size_t at = 0;
    for (auto &g : cpu.g)
      for (float &x : g) {
        x = nd(rng);
        flat.push_back(x);
        dev.g[at++] = x * scale;
      }
    return flat;
  }
};

TEST(CudaOptimizerEmu, AdamWWithClippingMatchesCpuOverSeveralSteps) {
  Fixture f;
  LossScaler scaler(LossScalerConfig::forPrecision(attnc::cuda::GemmPrecision::Fp16));
  // Per step: gradient magnitude (norm ~ magnitude·sqrt(3907) ≈ 62·mag,
  // clipped at 1 when above), loss scale, AdamW grid, 16-bit copy.
  struct StepCase {
    float magnitude, scale;
    int grid, copy;
  };
  const StepCase steps[] = {
      {1.0f, 65536.0f, opt::elementwiseBlocks(3907), opt::kCopyFp16},  // clipped
      {1e-3f, 1024.0f, 3, opt::kCopyBf16},                             // not clipped
      {0.02f, 1.0f, 1, opt::kCopyNone},                                // norm ~1.2: clipped
      {1e-4f, 32768.0f, opt::elementwiseBlocks(3907), opt::kCopyFp16}, // not clipped
      {4.0f, 2.0f, 7, opt::kCopyBf16},                                 // clipped
      {2e-3f, 65536.0f, opt::elementwiseBlocks(3907), opt::kCopyNone}, // past warm-up, cosine
  };
  int64_t identical = 0, compared = 0, step = 0;
  for (const StepCase &s : steps) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> unscaled = f.drawGradients(s.magnitude, s.scale);
    const OptStepState st = f.dev.reduce(1.0f / s.scale, f.config.clipNorm);
    // The device unscaled its gradients in place, exactly.
    ASSERT_EQ(0, std::memcmp(f.dev.g.data(), unscaled.data(), unscaled.size() * 4));
    Expected<double> norm = f.cpu.adam.step(f.cpu.refs());
    ASSERT_TRUE(norm.ok()) << norm.error();
    EXPECT_EQ(st.nonfinite, 0);
    EXPECT_NEAR(st.sumsq, *norm * *norm, 1e-12 * *norm * *norm);
    EXPECT_NEAR(st.norm, *norm, 1e-6 * *norm);
    const bool clipped = *norm > f.config.clipNorm;
    std::printf("step %lld: norm %.6g, clip factor %.6g%s\n", (long long)step, *norm,
                st.clip_factor, clipped ? " (clipped)" : "");
    if (clipped)
      EXPECT_NEAR(st.clip_factor, f.config.clipNorm / *norm, 1e-6 / *norm);
    else
      EXPECT_EQ(st.clip_factor, 1.0f);
    EXPECT_TRUE(scaler.update(st.nonfinite != 0));
    f.dev.adamw(f.config, step, s.grid, s.copy);
    ++step;
    ASSERT_EQ(f.cpu.adam.stepCount(), step);
    expectClose(f.dev.w, f.cpu.flatWeights(), "weights", identical);
    expectClose(f.dev.m, f.cpu.moment("m", f.dev.n), "m", identical);
    expectClose(f.dev.v, f.cpu.moment("v", f.dev.n), "v", identical);
    compared += 3 * f.dev.n;
    for (int64_t i = 0; i < f.dev.n; ++i) {
      if (s.copy == opt::kCopyFp16) {
        ASSERT_EQ(bits16(f.dev.copy16[size_t(i)]), bits16(__float2half_rn(f.dev.w[size_t(i)])));
      } else if (s.copy == opt::kCopyBf16) {
        ASSERT_EQ(bits16(f.dev.copyBf16[size_t(i)]),
                  bits16(__float2bfloat16_rn(f.dev.w[size_t(i)])));
      }
    }
  }
  std::printf("%lld of %lld values bit-identical to the CPU AdamW\n", (long long)identical,
              (long long)compared);
  // Weight decay really applied to w1/w2 only: a parameter without decay
  // and zero gradient would not move; checked through the CPU reference
  // above, which applies decay per ParamRef::decay.
}

TEST(CudaOptimizerEmu, NonFiniteGradientSkipsTheStepEntirely) {
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE("bad gradient " + std::to_string(bad));
    Fixture f;
    LossScaler scaler(LossScalerConfig::forPrecision(attnc::cuda::GemmPrecision::Fp16));
    int64_t step = 0, identical = 0;
    // Two good steps first, so the moments are not zero.
    for (int k = 0; k < 2; ++k) {
      f.drawGradients(1.0f, scaler.scale());
      f.dev.reduce(scaler.invScale(), f.config.clipNorm);
      ASSERT_TRUE(f.cpu.adam.step(f.cpu.refs()).ok());
      ASSERT_TRUE(scaler.update(f.dev.state.nonfinite != 0));
      f.dev.adamw(f.config, step, opt::elementwiseBlocks(f.dev.n), opt::kCopyFp16);
      ++step;
    }
    // An overflowed backward: one gradient (in the undecayed b1) is bad.
    f.drawGradients(1.0f, scaler.scale());
    f.dev.g[1010] = bad;
    f.cpu.g[1][10] = bad;
    const std::vector<float> w0 = f.dev.w, m0 = f.dev.m, v0 = f.dev.v;
    const std::vector<__half> c0 = f.dev.copy16;
    const OptStepState st = f.dev.reduce(scaler.invScale(), f.config.clipNorm);
    EXPECT_EQ(st.nonfinite, 1);
    EXPECT_FALSE(std::isfinite(st.sumsq));
    // The host would not know yet: it launches the update with its
    // current step count, and the kernel does nothing.
    f.dev.adamw(f.config, step, opt::elementwiseBlocks(f.dev.n), opt::kCopyFp16);
    EXPECT_EQ(0, std::memcmp(w0.data(), f.dev.w.data(), w0.size() * 4));
    EXPECT_EQ(0, std::memcmp(m0.data(), f.dev.m.data(), m0.size() * 4));
    EXPECT_EQ(0, std::memcmp(v0.data(), f.dev.v.data(), v0.size() * 4));
    EXPECT_EQ(0, std::memcmp(c0.data(), f.dev.copy16.data(), c0.size() * 2));
    // The CPU AdamW refuses the same step; the scaler backs off and skips.
    Expected<double> cpuStep = f.cpu.adam.step(f.cpu.refs());
    ASSERT_FALSE(cpuStep.ok());
    EXPECT_TRUE(contains(cpuStep.error(), "non-finite gradient in parameter 'b1'"))
        << cpuStep.error();
    EXPECT_FALSE(scaler.update(st.nonfinite != 0));
    EXPECT_EQ(scaler.scale(), 32768.0f);
    // Training goes on in step with the CPU (same step count: no advance).
    ASSERT_EQ(f.cpu.adam.stepCount(), step);
    f.drawGradients(0.01f, scaler.scale());
    ASSERT_EQ(f.dev.reduce(scaler.invScale(), f.config.clipNorm).nonfinite, 0);
    ASSERT_TRUE(f.cpu.adam.step(f.cpu.refs()).ok());
    f.dev.adamw(f.config, step, opt::elementwiseBlocks(f.dev.n), opt::kCopyNone);
    expectClose(f.dev.w, f.cpu.flatWeights(), "weights", identical);
    expectClose(f.dev.m, f.cpu.moment("m", f.dev.n), "m", identical);
    expectClose(f.dev.v, f.cpu.moment("v", f.dev.n), "v", identical);
  }
}

TEST(CudaOptimizerEmu, ReductionIsDeterministicAndExact) {
  // Many blocks (12 partials) and gradients spanning magnitudes.
  Device d;
  d.n = 12 * opt::kThreads * opt::kItemsPerThread - 5;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  d.g.resize(size_t(d.n));
  double ref = 0;
  for (float &x : d.g) {
    x = nd(rng) * std::exp2(float(int(rng() % 20)) - 10.0f);
    ref += double(x) * double(x);
  }
  const std::vector<float> g0 = d.g;
  ASSERT_EQ(opt::reduceBlocks(d.n), 12);
  const OptStepState a = d.reduce(1.0f, 0.0f); // no clipping, no unscale
  EXPECT_EQ(0, std::memcmp(g0.data(), d.g.data(), g0.size() * 4));
  EXPECT_NEAR(a.sumsq, ref, 1e-13 * ref);
  EXPECT_EQ(a.clip_factor, 1.0f); // clip_norm 0: off
  const double first = a.sumsq;
  const OptStepState b = d.reduce(1.0f, 0.0f);
  EXPECT_EQ(0, std::memcmp(&first, &b.sumsq, sizeof first)); // same bits

  // Stage 2 alone over many partials (more than one per thread).
  std::vector<double> partials(700);
  double sum = 0;
  std::uniform_real_distribution<double> ud(0.0, 3.0);
  for (double &p : partials) {
    p = ud(rng);
    sum += p;
  }
  OptStepState st{};
  OptGradNormArgs args{};
  args.partials = partials.data();
  args.num_partials = int(partials.size());
  args.state = &st;
  args.clip_norm = 10.0f;
  runKernel(attnc_opt_grad_finalize, 1, args);
  EXPECT_NEAR(st.sumsq, sum, 1e-13 * sum);
  EXPECT_EQ(st.nonfinite, 0);
  EXPECT_NEAR(st.norm, std::sqrt(sum), 1e-6 * std::sqrt(sum));
  EXPECT_EQ(st.clip_factor, float(10.0 / std::sqrt(st.sumsq)));
  args.clip_norm = 100.0f; // norm ~ 32: below the threshold
  runKernel(attnc_opt_grad_finalize, 1, args);
  EXPECT_EQ(st.clip_factor, 1.0f);
  partials[699] = std::numeric_limits<double>::infinity();
  runKernel(attnc_opt_grad_finalize, 1, args);
  EXPECT_EQ(st.nonfinite, 1);
  EXPECT_EQ(st.clip_factor, 1.0f);
}

TEST(CudaOptimizerEmu, CastWritesRoundedCopies) {
  std::vector<float> src = {0.0f,     -0.0f,    1.0f,  1.0f / 3.0f, -2.5e-8f,
                            65504.0f, 65520.0f, 1e20f, -3.3e38f,    6.1e-5f};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  for (int i = 0; i < 600; ++i)
    src.push_back(nd(rng));
  std::vector<__half> h(src.size());
  std::vector<__nv_bfloat16> b(src.size());
  OptCastArgs a{};
  a.src = src.data();
  a.n = (long long)src.size();
  a.dst = h.data();
  a.dst_type = opt::kCopyFp16;
  runKernel(attnc_opt_cast, 2, a); // grid-stride: 512 threads, 610 values
  a.dst = b.data();
  a.dst_type = opt::kCopyBf16;
  runKernel(attnc_opt_cast, opt::elementwiseBlocks(a.n), a);
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(bits16(h[i]), bits16(__float2half_rn(src[i]))) << i;
    ASSERT_EQ(bits16(b[i]), bits16(__float2bfloat16_rn(src[i]))) << i;
  }
}

// The data-parallel exchange's two kernels (CompiledStep::setDataParallel):
// the weighting is one rounded multiply, and the sum adds the parts in
// their order from 0, as DataParallelStep does on the host, so the device
// and host exchanges give the same bits.
TEST(CudaOptimizerEmu, ScaleIntoAndOrderedSumDoTheHostArithmetic) {
  const int parts = 3;
  const long long n = 700, stride = 705; // grid-stride over 2 blocks; a gap between parts
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> grads(static_cast<size_t>(n)), weighted(size_t(parts) * size_t(stride), -1.0f);
  const float weights[parts] = {0.3f, 1.0f / 3.0f, 0.125f};
  for (int m = 0; m < parts; ++m) {
    for (float &g : grads)
      g = nd(rng);
    OptScaleArgs a{};
    a.src = grads.data(), a.dst = weighted.data() + size_t(m) * size_t(stride);
    a.n = n, a.factor = weights[m] * (1.0f / 1024.0f); // weight and 1 / loss scale
    runKernel(attnc_opt_scale_into, 2, a);
    for (long long i = 0; i < n; ++i)
      ASSERT_EQ(bits32(a.dst[i]), bits32(a.factor * grads[size_t(i)])) << m << " " << i;
    EXPECT_EQ(a.dst[n], -1.0f); // nothing past n
  }
  std::vector<float> sum(size_t(n) + 1, -7.0f);
  OptOrderedSumArgs s{};
  s.parts = weighted.data(), s.out = sum.data();
  s.n = n, s.part_stride = stride, s.num_parts = parts;
  runKernel(attnc_opt_ordered_sum, 2, s);
  for (long long i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int m = 0; m < parts; ++m)
      want += weighted[size_t(m) * size_t(stride) + size_t(i)];
    ASSERT_EQ(bits32(sum[size_t(i)]), bits32(want)) << i;
  }
  EXPECT_EQ(sum[size_t(n)], -7.0f);
}

} // namespace
