//===- CublasTest.cpp - cuBLAS loader and the row-major GEMM mapping ------===//
//
// No GPU needed. The row-major -> column-major mapping of runtime/Cublas.h
// is checked by running the mapped call through a naive column-major GEMM
// written here with cublasGemmEx's argument semantics (transa/transb, m, n,
// k, lda, ldb, ldc), on the raw row-major buffers, against a
// double-precision row-major reference, for all four (ta, tb) on
// non-square shapes; the leading dimensions must also satisfy cuBLAS's
// validity rules. The loader must report a missing library clearly. Where
// cuBLAS and a GPU are present, a real GEMM runs too.
//
//===----------------------------------------------------------------------===//
#include "runtime/Cublas.h"
#include "runtime/CudaDriver.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

using namespace attnc;
using namespace attnc::cuda;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// cublasGemmEx's semantics (alpha 1, beta 0) in column-major storage:
/// C[i + j·ldc] = Σ_l opa(X)[i, l] · opb(Y)[l, j], where opa(X)[i, l] is
/// X[i + l·lda] (N) or X[l + i·lda] (T), and likewise for Y.
void columnMajorGemm(const ColumnMajorGemm &g, const float *X, const float *Y, float *C) {
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double x = g.transa ? X[l + i * g.lda] : X[i + l * g.lda];
        const double y = g.transb ? Y[j + l * g.ldb] : Y[l + j * g.ldb];
        acc += x * y;
      }
      C[i + j * g.ldc] = float(acc);
    }
}

/// Row-major C[M, N] = op(A)·op(B) in double, A stored [K, M] when ta else
/// [M, K], B stored [N, K] when tb else [K, N].
std::vector<double> rowMajorReference(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                      const std::vector<float> &A, const std::vector<float> &B) {
  std::vector<double> C(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < K; ++l) {
        const double a = ta ? A[size_t(l * M + i)] : A[size_t(i * K + l)];
        const double b = tb ? B[size_t(j * K + l)] : B[size_t(l * N + j)];
        acc += a * b;
      }
      C[size_t(i * N + j)] = acc;
    }
  return C;
}

std::vector<float> randomMatrix(size_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

//===----------------------------------------------------------------------===//
// The mapping
//===----------------------------------------------------------------------===//

TEST(CublasMapping, RowMajorThroughColumnMajorAllTransposes) {
  struct Shape {
    int64_t M, N, K;
  };
  // Non-square, pairwise different dimensions (a swapped M/N or a wrong
  // leading dimension changes the result or reads out of bounds), plus
  // degenerate vectors.
  const Shape shapes[] = {{3, 5, 7}, {7, 2, 4}, {1, 6, 3}, {5, 1, 9}, {4, 3, 1}, {13, 11, 17}};
  std::mt19937 rng(1234);
  for (const Shape &s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                     " K=" + std::to_string(s.K) + " ta=" + std::to_string(ta) +
                     " tb=" + std::to_string(tb));
        const std::vector<float> A = randomMatrix(size_t(s.M * s.K), rng);
        const std::vector<float> B = randomMatrix(size_t(s.K * s.N), rng);
        const ColumnMajorGemm g = mapRowMajorGemm(ta, tb, s.M, s.N, s.K);
        ASSERT_TRUE(g.swapped);
        // cuBLAS's shape and leading-dimension rules: C is m x n, op(first)
        // m x k, op(second) k x n; ld >= rows of the stored matrix.
        EXPECT_EQ(g.m * g.n, s.M * s.N);
        EXPECT_EQ(g.k, s.K);
        EXPECT_GE(g.ldc, std::max<int64_t>(1, g.m));
        EXPECT_GE(g.lda, std::max<int64_t>(1, g.transa ? g.k : g.m));
        EXPECT_GE(g.ldb, std::max<int64_t>(1, g.transb ? g.n : g.k));
        // The stored operands must fit in the buffers they index.
        const int64_t firstCols = g.transa ? g.m : g.k, secondCols = g.transb ? g.k : g.n;
        const std::vector<float> &first = g.swapped ? B : A;
        const std::vector<float> &second = g.swapped ? A : B;
        ASSERT_LE((firstCols - 1) * g.lda + (g.transa ? g.k : g.m), int64_t(first.size()));
        ASSERT_LE((secondCols - 1) * g.ldb + (g.transb ? g.n : g.k), int64_t(second.size()));
        std::vector<float> C(size_t((g.n - 1) * g.ldc + g.m), std::nanf(""));
        columnMajorGemm(g, first.data(), second.data(), C.data());
        // C holds row-major C[M, N] (densely, ldc = N).
        ASSERT_EQ(g.ldc, s.N);
        const std::vector<double> ref = rowMajorReference(ta, tb, s.M, s.N, s.K, A, B);
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j)
            ASSERT_NEAR(C[size_t(i * s.N + j)], ref[size_t(i * s.N + j)], 1e-5)
                << "C[" << i << ", " << j << "]";
      }
}

TEST(CublasMapping, ExpectedArguments) {
  // C[2, 3] = A[2, 4] · B[4, 3]: column-major C'[3, 2] = B'[3, 4] · A'[4, 2].
  ColumnMajorGemm g = mapRowMajorGemm(false, false, 2, 3, 4);
  EXPECT_FALSE(g.transa);
  EXPECT_FALSE(g.transb);
  EXPECT_EQ(g.m, 3);
  EXPECT_EQ(g.n, 2);
  EXPECT_EQ(g.k, 4);
  EXPECT_EQ(g.lda, 3);
  EXPECT_EQ(g.ldb, 4);
  EXPECT_EQ(g.ldc, 3);
  // Both transposed: A stored [4, 2], B stored [3, 4].
  g = mapRowMajorGemm(true, true, 2, 3, 4);
  EXPECT_TRUE(g.transa);
  EXPECT_TRUE(g.transb);
  EXPECT_EQ(g.lda, 4);
  EXPECT_EQ(g.ldb, 2);
  EXPECT_EQ(g.ldc, 3);
  // K = 0 still has valid (>= 1) leading dimensions.
  g = mapRowMajorGemm(false, true, 2, 3, 0);
  EXPECT_EQ(g.lda, 1);
  EXPECT_EQ(g.ldb, 1);
}

//===----------------------------------------------------------------------===//
// Precision names
//===----------------------------------------------------------------------===//

TEST(CublasPrecision, ParseRoundTripsAndNamesBadValues) {
  for (GemmPrecision p :
       {GemmPrecision::F32, GemmPrecision::Tf32, GemmPrecision::Bf16, GemmPrecision::Fp16}) {
    Expected<GemmPrecision> q = parseGemmPrecision(gemmPrecisionName(p));
    ASSERT_TRUE(q.ok()) << q.error();
    EXPECT_EQ(*q, p);
  }
  EXPECT_EQ(*parseGemmPrecision("tf32"), GemmPrecision::Tf32);
  for (const char *bad : {"fp32", "F32", "half", "", "bf16 "}) {
    Expected<GemmPrecision> q = parseGemmPrecision(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_TRUE(contains(q.error(), "'" + std::string(bad) + "'")) << q.error();
    EXPECT_TRUE(contains(q.error(), "f32, tf32, bf16 or fp16")) << q.error();
  }
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

TEST(CublasLoad, MissingLibraryIsAClearError) {
  Expected<std::unique_ptr<Cublas>> c = Cublas::load("libcublas-attnc-does-not-exist.so.13");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error(), "libcublas-attnc-does-not-exist.so.13 not found:")) << c.error();
  Status s = Cublas::probe("libcublas-attnc-does-not-exist.so.13");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error(), c.error());
}

TEST(CublasLoad, LibraryWithoutCublasSymbolsNamesThem) {
  // libm loads but has no cuBLAS entry points.
  Expected<std::unique_ptr<Cublas>> c = Cublas::load("libm.so.6");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error(), "libm.so.6 lacks cublasCreate_v2")) << c.error();
  EXPECT_TRUE(contains(c.error(), "cublasGemmEx")) << c.error();
  // cublasGetStatusString is optional: not reported missing.
  EXPECT_FALSE(contains(c.error(), "cublasGetStatusString")) << c.error();
}

TEST(CublasLoad, CreateLoadsOrExplains) {
  // Here: cuBLAS 13 is installed but there is no GPU, so the library loads
  // and handle creation fails with a message naming the call; on a GPU
  // machine the handle is created.
  Expected<std::unique_ptr<Cublas>> c = Cublas::create();
  if (c.ok()) {
    EXPECT_TRUE(contains((*c)->library(), "libcublas.so")) << (*c)->library();
    return;
  }
  const std::string &e = c.error();
  const bool noLibrary = contains(e, "libcublas.so.13 not found:") &&
                         contains(e, "also tried libcublas.so.12, libcublas.so");
  const bool noHandle =
      contains(e, "cublasCreate_v2 (libcublas.so") && contains(e, "CUBLAS_STATUS_");
  EXPECT_TRUE(noLibrary || noHandle) << e;
}

TEST(CublasLoad, VoltaTakesOnlyCublas12) {
  // CUDA 13's cuBLAS loads on a V100 but has no sm_70 kernels: Volta's
  // candidates are cuBLAS 12 files only, the project's own first among the
  // unnamed ones; Turing's start with CUDA 13's.
  ::unsetenv("ATTNC_CUBLAS12");
  const std::vector<std::string> volta = cublasCandidates(70);
  ASSERT_FALSE(volta.empty());
  for (const std::string &c : volta)
    EXPECT_TRUE(c.size() >= 15 && c.compare(c.size() - 15, 15, "libcublas.so.12") == 0) << c;
  EXPECT_EQ(volta[0], projectCublas12Dir() + "/nvidia/cublas/lib/libcublas.so.12");
  const std::vector<std::string> turing = cublasCandidates(75);
  ASSERT_FALSE(turing.empty());
  EXPECT_EQ(turing[0], "libcublas.so.13");
  EXPECT_EQ(cublasCandidates(0), turing);
  // $ATTNC_CUBLAS12 (a file or a folder) comes first.
  ::setenv("ATTNC_CUBLAS12", "/opt/cublas12", 1);
  const std::vector<std::string> named = cublasCandidates(70);
  ::unsetenv("ATTNC_CUBLAS12");
  ASSERT_GE(named.size(), 2u);
  EXPECT_EQ(named[0], "/opt/cublas12");
  EXPECT_EQ(named[1], "/opt/cublas12/libcublas.so.12");
  EXPECT_EQ(cublasCandidates(75), turing);
}

TEST(CublasLoad, VoltaWithoutCublas12SaysWhatToInstall) {
  ::setenv("ATTNC_CUBLAS12", "/nonexistent-attnc-cublas12", 1);
  Expected<std::string> found = Cublas::find(70);
  ::unsetenv("ATTNC_CUBLAS12");
  if (found.ok()) {
    // A cuBLAS 12 is here (.deps/cublas-cu12 or the loader's path).
    EXPECT_TRUE(contains(*found, "libcublas.so.12")) << *found;
    return;
  }
  EXPECT_TRUE(contains(found.error(), "/nonexistent-attnc-cublas12 not found")) << found.error();
  EXPECT_TRUE(contains(found.error(), "sm_70 needs a cuBLAS 12")) << found.error();
  EXPECT_TRUE(contains(found.error(), "scripts/bootstrap.sh --cublas12")) << found.error();
}

//===----------------------------------------------------------------------===//
// A real GEMM, where there is a GPU
//===----------------------------------------------------------------------===//

TEST(CublasGpu, GemmMatchesReferenceInEveryPrecision) {
  if (!Driver::available() || *deviceCount() == 0)
    GTEST_SKIP() << "no GPU: " << Driver::available().error();
  Expected<Context> ctx = Context::create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.error();
  ASSERT_TRUE(ctx->makeCurrent().ok()); // this thread's, for the raw calls below
  Expected<std::unique_ptr<Cublas>> cb = Cublas::create();
  ASSERT_TRUE(cb.ok()) << cb.error();
  const int64_t M = 37, N = 29, K = 53;
  std::mt19937 rng(7);
  const std::vector<float> A = randomMatrix(size_t(M * K), rng),
                           B = randomMatrix(size_t(K * N), rng);
  Expected<DeviceBuffer> dA = DeviceBuffer::allocate(A.size() * 4),
                         dB = DeviceBuffer::allocate(B.size() * 4),
                         dC = DeviceBuffer::allocate(size_t(M * N) * 4);
  ASSERT_TRUE(dA && dB && dC);
  ASSERT_TRUE(dA->upload(A.data(), A.size() * 4));
  ASSERT_TRUE(dB->upload(B.data(), B.size() * 4));
  // Tolerances per precision: input rounding of 2^-11 (fp16, TF32's
  // 10-bit mantissa) or 2^-8 (bf16) relative, over K terms of magnitude <= 1.
  const std::pair<GemmPrecision, double> cases[] = {{GemmPrecision::F32, 1e-4},
                                                    {GemmPrecision::Tf32, 3e-2},
                                                    {GemmPrecision::Fp16, 3e-2},
                                                    {GemmPrecision::Bf16, 2e-1}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [p, tol] : cases) {
        SCOPED_TRACE(std::string(gemmPrecisionName(p)) + " ta=" + std::to_string(ta) +
                     " tb=" + std::to_string(tb));
        // The buffers hold A and B as given; with ta/tb they are read as
        // the stored transposes ([K, M] and [N, K]).
        Status s = (*cb)->gemm(ta, tb, M, N, K, dA->as<float>(), dB->as<float>(), dC->as<float>(),
                               p, nullptr);
        ASSERT_TRUE(s.ok()) << s.error();
        std::vector<float> C(size_t(M * N));
        ASSERT_TRUE(dC->download(C.data(), C.size() * 4));
        const std::vector<double> ref = rowMajorReference(ta, tb, M, N, K, A, B);
        for (size_t i = 0; i < C.size(); ++i)
          ASSERT_NEAR(C[i], ref[i], tol) << i;
      }
}

} // namespace
