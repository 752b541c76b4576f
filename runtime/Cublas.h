//===- Cublas.h - cuBLAS GEMMs loaded at run time ---------------*- C++ -*-===//
//
// The dense GEMMs of GPU training (docs/mixed-precision.md) go to cuBLAS.
// Like the driver (CudaDriver.h), cuBLAS is dlopened, never linked, so
// attnc binaries start on machines without it. Which cuBLAS serves which
// GPU (cublasCandidates):
//
//   - Turing and newer (sm_75+): "libcublas.so.13", then "libcublas.so.12",
//     then "libcublas.so", on the loader's path, then in the toolkit's
//     library folders;
//   - Volta (sm_70, sm_72), which CUDA 13's cuBLAS dropped: a cuBLAS 12
//     only, from $ATTNC_CUBLAS12 (a libcublas.so.12 or a folder holding
//     one), the project's .deps/cublas-cu12 (`scripts/bootstrap.sh
//     --cublas12` installs PyPI's nvidia-cublas-cu12 there, at set-up), the
//     loader's path, then the toolkit's folders.
//
// A machine with none gets an Error saying what to install.
//
// Only what training needs: a handle bound to a stream per call and
// gemm(), a row-major fp32 GEMM whose inner products may run in a reduced
// precision (GemmPrecision: the cuBLAS compute type). Storage stays fp32
// throughout; cuBLAS rounds the inputs to TF32, bf16 or fp16 inside the
// tensor-core paths and accumulates in fp32.
//
// cuBLAS is column-major. A row-major matrix X[r, c] is the column-major
// matrix Xᵀ[c, r] with leading dimension c, so the row-major product
// C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B's
// buffer is cuBLAS's first operand and A's the second (mapRowMajorGemm).
//
// A Cublas object (one cuBLAS handle) is not thread-safe: use one per
// thread. The GEMMs are asynchronous on the given stream.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUBLAS_H
#define ATTNC_RUNTIME_CUBLAS_H

#include "runtime/Error.h"

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnc::cuda {

/// How a GEMM's inner products are computed; the data is fp32 in all cases.
enum class GemmPrecision {
  F32,  ///< CUBLAS_COMPUTE_32F: full fp32 (no TF32)
  Tf32, ///< CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to TF32 (sm_80+)
  Bf16, ///< CUBLAS_COMPUTE_32F_FAST_16BF: inputs rounded to bf16 (sm_80+)
  Fp16, ///< CUBLAS_COMPUTE_32F_FAST_16F: inputs rounded to fp16
};

/// "f32", "tf32", "bf16" or "fp16".
const char *gemmPrecisionName(GemmPrecision p);
/// Parses what gemmPrecisionName() writes; the error names the bad value
/// and the valid ones.
Expected<GemmPrecision> parseGemmPrecision(std::string_view name);

/// A row-major GEMM C[M, N] = op(A)·op(B) expressed as cuBLAS's
/// column-major call (the arguments of cublasGemmEx, in its order).
struct ColumnMajorGemm {
  bool transa = false, transb = false; ///< CUBLAS_OP_T when true, else CUBLAS_OP_N
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 1, ldb = 1, ldc = 1;
  /// True when cuBLAS's first operand is the row-major B and its second
  /// the row-major A (always, for this mapping: Cᵀ = op(B)ᵀ·op(A)ᵀ).
  bool swapped = true;
};

/// The column-major call computing row-major C[M, N] = op(A)·op(B), where
/// op(A) is [M, K] (A stored [K, M] when ta, else [M, K]) and op(B) is
/// [K, N] (B stored [N, K] when tb, else [K, N]), all densely packed.
/// Leading dimensions are at least 1, as cuBLAS requires.
ColumnMajorGemm mapRowMajorGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K);

/// The cuBLAS libraries that may serve a GPU of compute capability `sm`
/// (70 for sm_70; 0 for any CUDA 13 serves), in the order create() tries
/// them (see the file comment).
std::vector<std::string> cublasCandidates(int sm);

/// Where a binary looks for cuBLAS 12 beside it:
/// <installRoot>/lib/attnc/cublas-cu12, which the build tree links to the
/// .deps/cublas-cu12 that `scripts/bootstrap.sh --cublas12` fills (PyPI's
/// nvidia-cublas-cu12); "" when the binary cannot tell where it is.
std::string projectCublas12Dir();

/// A loaded cuBLAS and one handle.
class Cublas {
public:
  /// Loads the first of cublasCandidates(sm) that loads and creates a
  /// handle (sm 0: any GPU CUDA 13 serves). Errors: "libcublas.so.13 not
  /// found: ... (also tried ...)", for Volta with what to install; a
  /// library lacking an entry point; cublasCreate_v2's failure (e.g. no
  /// GPU or driver).
  static Expected<std::unique_ptr<Cublas>> create(int sm = 0);
  /// The library create(sm) would load (dlopened and resolved, no handle,
  /// no GPU needed), or create's error before cublasCreate_v2.
  static Expected<std::string> find(int sm = 0);
  /// The same from one named library only (tests name a library that does
  /// not exist to check the message).
  static Expected<std::unique_ptr<Cublas>> load(const std::string &library);
  /// dlopens and resolves `library` without creating a handle (no GPU
  /// needed): Ok, or the error load() would give before cublasCreate_v2.
  static Status probe(const std::string &library);

  Cublas(const Cublas &) = delete;
  Cublas &operator=(const Cublas &) = delete;
  ~Cublas();

  /// The library actually loaded ("libcublas.so.13").
  const std::string &library() const { return library_; }

  /// Row-major C[M, N] = op(A)·op(B) (or C += op(A)·op(B) when
  /// `accumulate`) on `stream`, fp32 storage, dense row-major operands (see
  /// mapRowMajorGemm), inner products in precision `p`. M, N or K of 0 is
  /// allowed (K = 0 gives C = 0, or C unchanged when accumulating).
  /// Errors name the call and the shape: "cublasGemmEx (M=.., N=.., K=..,
  /// ta=.., tb=.., tf32): CUBLAS_STATUS_INVALID_VALUE (...)".
  Status gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
              float *C, GemmPrecision p, CUstream stream, bool accumulate = false);

private:
  Cublas();
  struct Api; ///< the dlopened library's entry points
  static Expected<std::unique_ptr<Api>> open(const std::string &library);
  std::unique_ptr<Api> api_;
  void *handle_ = nullptr; ///< cublasHandle_t
  std::string library_;
};

} // namespace attnc::cuda

#endif // ATTNC_RUNTIME_CUBLAS_H
