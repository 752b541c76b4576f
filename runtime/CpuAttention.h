//===- CpuAttention.h - Run one compiled attention op on the CPU -*- C++ -*-===//
//
// Compiles the C++ translation unit the CPU emitter wrote for one fused
// attention op (forward and, when present, backward) into a cached shared
// object, and runs it on host tensors. Needs no MLIR: what it knows of the op
// comes from KernelDesc, the manifest's description of each kernel.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CPUATTENTION_H
#define ATTNC_RUNTIME_CPUATTENTION_H

#include "runtime/Error.h"
#include "runtime/HostCompiler.h"
#include "runtime/Manifest.h"
#include "runtime/Safetensors.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

/// Host tensors of one attention call; all f32 except lengths (i32).
struct AttentionInputs {
  const st::Tensor *q = nullptr, *k = nullptr, *v = nullptr;
  const st::Tensor *lengths = nullptr;   ///< [B]
  const st::Tensor *E = nullptr;         ///< [k, Nmax] or [H, k, Nmax]
  const st::Tensor *F = nullptr;         ///< like E, or null when F = E
  const st::Tensor *params = nullptr;    ///< [P, H]
  const st::Tensor *rotations = nullptr; ///< LSH: [rounds, Dh, buckets/2]
  const st::Tensor *dout = nullptr;      ///< cotangent of out: run the backward too
  /// With dout: this call's forward results, already computed (a compiled
  /// step keeps them), so a dense kernel runs the backward only. Low-rank
  /// and LSH kernels recompute the forward (their backward also needs the
  /// projected K/V or the per-round lse, which are not kept).
  const st::Tensor *forwardOut = nullptr, *forwardLse = nullptr;
  /// Training: apply the kernels' attention dropout with these Philox seed
  /// and offset (the same for the forward and its backward).
  bool dropout = false;
  uint64_t dropoutSeed = 0;
  uint32_t dropoutOffset = 0;
};

struct AttentionOutputs {
  st::Tensor out, lse;
  std::optional<st::Tensor> dq, dk, dv, dE, dF, dparams;
};

namespace train {
/// Runs one attention op: out, lse and, when inputs.dout is set, gradients
/// (a compiled CpuAttention or CudaAttention, or a test double). What a
/// compiled model step calls for each layer's attention.
using AttentionFn = std::function<Expected<AttentionOutputs>(const AttentionInputs &)>;
} // namespace train

class CpuAttention {
public:
  /// Compiles `source` (cached) and resolves the entry points of `forward`
  /// and, if given, `backward`. `includeDirs`: the CPU family's
  /// (kernelIncludeDirs(KernelFamily::Cpu), runtime/KernelHeaders.h).
  static Expected<CpuAttention> compile(const std::string &source, const KernelDesc &forward,
                                        std::optional<KernelDesc> backward,
                                        const std::vector<std::string> &includeDirs,
                                        const HostCompiler &compiler);

  /// Runs the forward (and the backward when inputs.dout is set). Shapes were
  /// validated by the caller; sizes are re-checked here against the kernels.
  Expected<AttentionOutputs> run(const AttentionInputs &inputs) const;

  /// Whether the shared object came from the kernel cache.
  bool fromCache() const { return fromCache_; }
  double compileSeconds() const { return compileSeconds_; }

private:
  CpuAttention(SharedObject so) : so_(std::move(so)) {}
  Expected<AttentionOutputs> runLsh(const AttentionInputs &inputs, AttentionOutputs out) const;
  SharedObject so_;
  KernelDesc fwd_;
  std::optional<KernelDesc> bwd_;
  void *fwdFn_ = nullptr, *bwdFn_ = nullptr;
  bool fromCache_ = false;
  double compileSeconds_ = 0;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_CPUATTENTION_H
