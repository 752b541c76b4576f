//===- Manifest.h - The artifact manifest: one schema, written and read here ===//
//
// An artifact (attnc compile -o DIR) is described by DIR/manifest.json: the
// target, the kernel source and each kernel's launch description, and the
// compiled training steps of the spec's models. These structs are its one
// schema: the kernel emitter (codegen/KernelEmitter.cpp) fills them, the
// driver writes them with writeManifest, and the runtime reads them back with
// parseManifest. No MLIR: the runtime-only build reads artifacts too.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_MANIFEST_H
#define ATTNC_RUNTIME_MANIFEST_H

#include "runtime/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

/// The format version manifest.json carries; the runtime refuses others.
inline constexpr int kManifestFormatVersion = 1;

/// A per-head parameter as the spec declares it.
struct ParamDecl {
  std::string name;
  bool alibi = false; ///< initialised to ALiBi slopes 2^(-8(h+1)/H)
  double value = 0;   ///< else to this constant
  bool learned = true;
};

/// What the runtime needs to launch one kernel: derived from its manifest
/// entry (ManifestKernel::desc).
struct KernelDesc {
  std::string name;
  bool backward = false;
  int headDim = 0, blockQ = 0, blockKv = 0;
  int warps = 1;     ///< CUDA: threads per block / 32
  int stages = 1;    ///< CUDA: K/V (forward) or Q/dO, K/V (backward) pipeline stages
  int smemBytes = 0; ///< CUDA: dynamic shared memory per block
  bool causal = false, keyPadding = false;
  int numParams = 0;
  bool lowrank = false;
  std::string share;            ///< none, headwise, kv (lowrank only)
  int lowrankK = 0, maxSeq = 0; ///< lowrank: E's rows and columns
  /// Keys are the normalised queries (LSH, and its dense fallback); the
  /// entry points ignore k and fold dk into dq.
  bool sharedQk = false;
  struct Lsh {
    int numBuckets = 0, rounds = 0, chunk = 0, before = 0, after = 0;
    uint64_t seed = 0;
  };
  std::optional<Lsh> lsh; ///< LSH kernels (AttnLshArgs entry points)
  float scale = 1;
  float dropout = 0; ///< attention dropout while training (kDropout kernels)
  std::vector<std::string> entryPoints;
};

/// One "kernels" entry: a fused op's forward or backward kernels, as the
/// emitter describes them and the file holds them.
struct ManifestKernel {
  std::string name; ///< the op's `kernel` attribute
  bool backward = false;
  std::string dtype; ///< f32, f16, bf16
  int64_t headDim = 0;
  int64_t blockQ = 0, blockKv = 0, warps = 0, stages = 0;
  bool causal = false, keyPadding = false, deterministic = false;
  int64_t numParams = 0;
  std::string kvSource; ///< direct, lowrank or lsh
  std::string share;    ///< lowrank sharing, or ""
  double scale = 1;
  int64_t smemBytes = 0; ///< dynamic shared memory per block (CUDA)
  std::vector<std::string> entryPoints;
  /// The function holding the op: a forward and its backward share it.
  std::string function;
  int64_t lowrankK = 0, maxSeq = 0; ///< E's rows and columns (low-rank)
  /// Shared-QK dense attention (LSH's dense fallback): keys are the
  /// normalised queries, and the self score replaces a query's own score.
  bool sharedQk = false;
  std::optional<double> selfScore;
  /// Attention dropout probability while training (0: none).
  double dropout = 0;
  struct Lsh {
    int64_t numBuckets = 0, rounds = 0, chunk = 0, before = 0, after = 0, seed = 0;
  };
  std::optional<Lsh> lsh; ///< LSH kernels (kvSource "lsh")
  std::vector<ParamDecl> params;

  /// The launch description of these kernels.
  KernelDesc desc() const;
};

/// One "models" entry: a compiled whole-model training step: its source in
/// the artifact (CPU: the step's C++; CUDA: the host code, with the kernels
/// in `stepKernels`), how it binds, and the model's training configuration
/// as JSON (runtime/train/ModelConfigJson.h).
struct ManifestModel {
  std::string name, stepSource, stepSymbol, attentionFunction;
  std::string stepKernels; ///< CUDA target: the step's kernels (.cu)
  int stepAbi = 1;         ///< CUDA target: ATTNC_CUDA_STEP_ABI it was compiled for
  int batch = 0;
  int64_t arenaBytes = 0, keptBytes = 0;
  std::vector<std::string> args;
  std::vector<int> gradArgs;
  std::string configJson; ///< a JSON object
  /// The model's recommended training settings (the spec's `train` block,
  /// runtime/train/TrainSettings.h) as a JSON object; "{}" when it has none
  /// or the artifact predates them.
  std::string trainJson = "{}";
  /// The model's inference function (@infer_<model>, "inference" in the
  /// JSON; absent in artifacts compiled before it): the CPU C++ that holds
  /// it (for both targets), its entry point, arena, sequences per call and
  /// arguments.
  std::string inferSource, inferSymbol;
  int64_t inferArenaBytes = 0;
  int inferBatch = 0;
  std::vector<std::string> inferArgs;
};

struct Manifest {
  int formatVersion = kManifestFormatVersion;
  std::string target;   ///< cuda or cpu
  std::string arch;     ///< sm_XX for cuda, "host" for cpu
  std::string source;   ///< file name of the kernel source in the artifact
  std::string specHash; ///< SHA-256 of the spec text (hex), or ""
  std::vector<ManifestKernel> kernels;
  std::vector<ManifestModel> models; ///< absent in artifacts without models
  /// CUDA artifacts: the same attention functions compiled for the CPU
  /// ("host_kernels": source file and kernels), which the CUDA training
  /// step calls when its kernels run on the SIMT emulator (attnc-rt train
  /// --engine cuda-sim) on a machine without a GPU. Empty: none.
  std::string hostSource;
  std::vector<ManifestKernel> hostKernels;
};

/// manifest.json's text (keys sorted, two-space indents).
std::string writeManifest(const Manifest &manifest);
/// Parses manifest.json; errors name the file and the offending field
/// ("kernels[1].tile.block_q: expected an integer").
Expected<Manifest> parseManifest(const std::string &text, const std::string &path);
/// Reads and parses DIR/manifest.json; the error says when DIR is not an
/// artifact.
Expected<Manifest> loadManifest(const std::string &dir);

} // namespace attnc

#endif // ATTNC_RUNTIME_MANIFEST_H
