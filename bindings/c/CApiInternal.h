//===- CApiInternal.h - What the C ABI's translation units share -*- C++ -*-===//
//
// The handle behind attnc_variant (a compiled variant: its CPU kernels, or
// its CUDA kernels on a GPU or on the SIMT emulator) and the helpers that
// build the C ABI's error messages. CApi.cpp compiles and runs on the CPU;
// CApiCuda.cpp runs the CUDA kernels on the caller's device buffers.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_BINDINGS_C_CAPIINTERNAL_H
#define ATTNC_BINDINGS_C_CAPIINTERNAL_H

#include "attnc/attnc.h"

#include "runtime/AttentionIO.h"
#include "runtime/CpuAttention.h"
#include "runtime/CudaAttention.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct attnc_error {
  std::string message;
};

namespace attnc::capi {

/// One tensor a call takes after q, k, v (attnc_variant_param).
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool learned = true;
  enum Kind { E, F, Rotations, Head } kind = Head;
  int headIndex = 0; ///< Head: the row of params [P, H]
  ParamDecl decl;    ///< Head: its init
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// Hands parameter `ps`'s data `d` to a call's arguments (AttentionCall
/// or DeviceAttentionArgs): E, F and the rotations by pointer, a
/// per-head row through `headRow(row index, data)`, whose result (an
/// error or null) is returned.
template <class Args, class HeadRow>
attnc_error *bindParam(const ParamSpec &ps, const float *d, Args &args, HeadRow headRow) {
  switch (ps.kind) {
  case ParamSpec::E:
    args.E = d;
    return nullptr;
  case ParamSpec::F:
    args.F = d;
    return nullptr;
  case ParamSpec::Rotations:
    args.rotations = d;
    return nullptr;
  case ParamSpec::Head:
    return headRow(ps.headIndex, d);
  }
  return nullptr;
}

/// Device memory of a CUDA variant's own, freed with it.
using DeviceBuffer = std::shared_ptr<void>;

/// What a CUDA variant keeps between calls, on its device.
struct CudaState {
  std::optional<CudaAttention> kernels;
  bool emulated = false; ///< cuda-sim: the SIMT emulator, tensors in host memory
  int ordinal = -1;      ///< the GPU (cuda)
  attnc_dtype dtype = ATTNC_F32;
  /// [P, H]: the per-head parameters gathered for the kernels, and their
  /// gradients; E's and F's gradients when a caller does not want them.
  DeviceBuffer headParams, headGrads, dEScratch, dFScratch;
  /// One call at a time: the kernels' scratch is one per handle.
  std::mutex calls;
};

attnc_error *fail(std::string message);
/// Runs `fn`, turning an escaping exception into an error value.
attnc_error *guard(const std::function<attnc_error *()> &fn);

/// Where a variant runs, from attnc_compile_options.
struct Target {
  std::string name;       ///< cpu, cuda, cuda-sim
  std::string arch;       ///< CUDA targets: the arch compiled for (or emulated)
  bool archGiven = false; ///< options.arch was set (else `arch` is a default)
  bool cuda = false, emulated = false;
  int ordinal = -1; ///< cuda: the GPU
};
/// Checks `o` (of any version) and resolves its target: the GPU and its
/// arch for cuda. Errors name the option and its value; `who` the call.
attnc_error *checkOptions(const attnc_compile_options *o, const char *who, Target &t);
/// The checks every call starts with, whatever its target: the struct's
/// size and q's rank.
attnc_error *checkCall(const attnc_call &c);
/// The checks of a call against what `var` was compiled for, once its keys'
/// length is known: lengths only with key padding, no more keys than a
/// low-rank E has columns, the parameter tensors given.
attnc_error *checkCallFits(const attnc_variant &var, const attnc_call &c, int64_t keys);
/// v.params from v.sig, v.heads, v.headDim and v.maxSeq.
attnc_error *describeParams(attnc_variant &v);
const char *dtypeName(attnc_dtype d);
std::string shapeStr(const int64_t *shape, int ndim);
/// "q (f32 [2, 3, 77, 64], strides [...])".
std::string describe(const char *what, const attnc_tensor &t);

/// Allocates a CUDA variant's kept buffers (after its kernels compiled).
attnc_error *prepareCuda(const attnc_variant &v, CudaState &cuda);
/// attnc_forward and attnc_backward of a CUDA variant: the caller's device
/// buffers, enqueued on its stream, no host wait.
attnc_error *cudaForward(const attnc_variant &v, const attnc_call &c);
attnc_error *cudaBackward(const attnc_variant &v, const attnc_call &c);

} // namespace attnc::capi

struct attnc_variant {
  std::string name;
  attnc::AttentionSignature sig;
  int64_t heads = 0, headDim = 0, maxSeq = 0;
  bool keyPadding = false;
  std::vector<attnc::capi::ParamSpec> params;
  std::optional<attnc::CpuAttention> cpu;
  std::unique_ptr<attnc::capi::CudaState> cuda; ///< targets cuda and cuda-sim
};

#endif // ATTNC_BINDINGS_C_CAPIINTERNAL_H
