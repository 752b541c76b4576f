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

/// One attention call on caller-owned, contiguous f32 host buffers (what
/// the C ABI and the PyTorch op hand over, copying nothing): q [B, H, Nq,
/// D], k and v [B, H, N, D], lengths [B] (i32), E and F [k, Nmax] or [H, k,
/// Nmax] (F null: E serves both), params [P, H], rotations [rounds, D,
/// buckets/2].
/// - Forward (dout null): writes out [B, H, Nq, D] and lse [B, H, Nq].
/// - Backward (dout set): writes dq, dk (not for shared-QK variants), dv,
///   dE, dF (low-rank), dparams [P, H] (when P > 0; null: not wanted). A
///   dense backward reads the forward from savedOut/savedLse when given;
///   otherwise, and always for low-rank and LSH (whose backward needs what
///   the forward does not keep), it reruns the forward first, into out and
///   lse when those are set, else into scratch of its own.
struct AttentionCall {
  int B = 0, H = 0, Nq = 0, N = 0, D = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const int32_t *lengths = nullptr;
  const float *E = nullptr, *F = nullptr;
  int kRows = 0, nmax = 0; ///< low-rank: E's rows and columns
  const float *params = nullptr, *rotations = nullptr;
  float *out = nullptr, *lse = nullptr;
  const float *dout = nullptr, *savedOut = nullptr, *savedLse = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dE = nullptr, *dF = nullptr,
        *dparams = nullptr;
  bool dropout = false;
  uint64_t dropoutSeed = 0;
  uint32_t dropoutOffset = 0;
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

  /// The same on caller-owned buffers (AttentionCall); no copies.
  Status call(const AttentionCall &c) const;
  const KernelDesc &forwardDesc() const { return fwd_; }
  const std::optional<KernelDesc> &backwardDesc() const { return bwd_; }

  /// Whether the shared object came from the kernel cache.
  bool fromCache() const { return fromCache_; }
  double compileSeconds() const { return compileSeconds_; }

private:
  CpuAttention(SharedObject so) : so_(std::move(so)) {}
  Status callLsh(const AttentionCall &c) const;
  SharedObject so_;
  KernelDesc fwd_;
  std::optional<KernelDesc> bwd_;
  void *fwdFn_ = nullptr, *bwdFn_ = nullptr;
  bool fromCache_ = false;
  double compileSeconds_ = 0;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_CPUATTENTION_H
