//===- CApiThreadsTest.cpp - attnc.h's thread-safety contract -------------===//
//
// Eight threads at once, as attnc.h allows: each compiles a handle of its
// own, runs forward and backward on it and on one handle all threads share,
// and compiles specs with errors on lines of its own (one the front end
// finds, one a pass finds). Every result
// must equal the serial run's afterwards, bit for bit (the kernels are deterministic
// and a call's scratch is its own), and every error message must be the
// thread's own: the compiler's words are kept per call, not per process.
// Run it under ThreadSanitizer with scripts/tsan.sh.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "test/unit/support/CApiTensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int B = 2, H = 3, N = 45, D = 32;
constexpr int kThreads = 8;
constexpr int kBrokenRounds = 500, kUntileableRounds = 20;
/// The handle the threads share, compiled before they start.
constexpr const char *kSharedSpec = "attention alibi {\n  param slope(h) = alibi\n"
                                    "  score s + slope(h) * float(kv - q)\n  mask causal\n}\n";
/// The threads' own handles: another kernel, so that on a cold kernel
/// cache the eight compiles really run at once.
constexpr const char *kOwnSpec = "attention half_alibi {\n  param slope(h) = alibi\n"
                                 "  score s + 0.5 * slope(h) * float(kv - q)\n}\n";

struct Error {
  attnc_error *e = nullptr;
  ~Error() { attnc_error_free(e); }
  std::string message() const { return e ? attnc_error_message(e) : ""; }
};

attnc_variant *compile(const std::string &spec, Error &err, const char *target = "cpu") {
  attnc_compile_options o;
  attnc_compile_options_init(&o);
  o.heads = H, o.head_dim = D, o.backward = 1, o.target = target;
  attnc_variant *v = nullptr;
  err.e = attnc_compile(spec.c_str(), nullptr, &o, &v);
  return v;
}

using attnc::test::randn;

/// One forward and backward: its inputs (from `seed`) and all it wrote.
struct CallResult {
  std::vector<float> out, lse, dq, dk, dv, dslope;
  std::string error; ///< empty when both calls succeeded
};

CallResult forwardBackward(const attnc_variant *v, unsigned seed) {
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, seed), k = randn(n, seed + 1), val = randn(n, seed + 2),
                     dout = randn(n, seed + 3), slope(H);
  CallResult r;
  r.out.resize(n), r.lse.resize(size_t(B) * H * N), r.dq.resize(n), r.dk.resize(n);
  r.dv.resize(n), r.dslope.resize(H);
  auto t = [](std::vector<float> &x, std::vector<int64_t> shape) {
    return attnc::test::contiguousTensor(x.data(), ATTNC_F32, ATTNC_CPU, shape);
  };
  attnc_tensor st = t(slope, {H}), ds = t(r.dslope, {H});
  Error init;
  init.e = attnc_variant_init_param(v, 0, 0, &st);
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = t(q, {B, H, N, D}), c.k = t(k, {B, H, N, D}), c.v = t(val, {B, H, N, D});
  c.params = &st;
  c.out = t(r.out, {B, H, N, D}), c.lse = t(r.lse, {B, H, N});
  c.dout = t(dout, {B, H, N, D});
  c.dq = t(r.dq, {B, H, N, D}), c.dk = t(r.dk, {B, H, N, D}), c.dv = t(r.dv, {B, H, N, D});
  c.dparams = &ds;
  Error fwd, bwd;
  if (!init.e)
    fwd.e = attnc_forward(v, &c);
  if (!init.e && !fwd.e)
    bwd.e = attnc_backward(v, &c);
  r.error = init.message() + fwd.message() + bwd.message();
  return r;
}

void expectSame(const CallResult &got, const CallResult &want, const std::string &who) {
  ASSERT_EQ(got.error, "") << who;
  EXPECT_EQ(got.out, want.out) << who << ": out";
  EXPECT_EQ(got.lse, want.lse) << who << ": lse";
  EXPECT_EQ(got.dq, want.dq) << who << ": dq";
  EXPECT_EQ(got.dk, want.dk) << who << ": dk";
  EXPECT_EQ(got.dv, want.dv) << who << ": dv";
  EXPECT_EQ(got.dslope, want.dslope) << who << ": dslope";
}

/// Thread i's broken spec: the misspelt mask on line i + 2 (the front
/// end's error).
std::string brokenSpec(int i) {
  return "attention a {\n" + std::string(size_t(i), '\n') + "  mask causul\n}\n";
}

/// Thread i's untileable spec, its variant on line i + 1: it parses, and
/// the kernel pipeline's attn-tile rejects it (an MLIR diagnostic, which
/// may come from the pass manager's threads).
std::string untileableSpec(int i) {
  return std::string(size_t(i), '\n') +
         "attention a {\n  mask causal\n  tile(block_q = 3, block_kv = 5)\n}\n";
}

TEST(CApiThreads, EightThreadsAgreeWithTheSerialRun) {
  Error err;
  attnc_variant *shared = compile(kSharedSpec, err);
  ASSERT_NE(shared, nullptr) << err.message();

  struct Seen {
    CallResult own, onShared;
    std::string compileError, brokenError, untileableError;
  };
  std::vector<Seen> seen(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      Seen &s = seen[size_t(i)];
      Error ownErr;
      attnc_variant *own = compile(kOwnSpec, ownErr);
      s.compileError = own ? "" : ownErr.message() + " (no handle)";
      if (own)
        s.own = forwardBackward(own, 100u + 10u * unsigned(i));
      s.onShared = forwardBackward(shared, 500u + 10u * unsigned(i));
      // All at once, many times: errors that leaked between threads
      // would show here.
      ready.fetch_add(1);
      while (ready.load() < kThreads)
        std::this_thread::yield();
      std::string first;
      for (int round = 0; round < kBrokenRounds; ++round) {
        Error brokenErr;
        attnc_variant *broken = compile(brokenSpec(i), brokenErr);
        attnc_variant_free(broken);
        if (round == 0)
          first = s.brokenError = brokenErr.message();
        else if (brokenErr.message() != first) // keep what differed
          s.brokenError += "\n" + brokenErr.message();
      }
      for (int round = 0; round < kUntileableRounds; ++round) {
        Error err;
        attnc_variant_free(compile(untileableSpec(i), err, "cuda-sim"));
        if (round == 0)
          first = s.untileableError = err.message();
        else if (err.message() != first)
          s.untileableError += "\n" + err.message();
      }
      attnc_variant_free(own);
    });
  for (std::thread &t : threads)
    t.join();

  // The serial run afterwards: one thread, every seed the threads used.
  Error serialErr;
  attnc_variant *serial = compile(kOwnSpec, serialErr);
  ASSERT_NE(serial, nullptr) << serialErr.message();
  std::vector<CallResult> serialOwn, serialShared;
  for (int i = 0; i < kThreads; ++i) {
    serialOwn.push_back(forwardBackward(serial, 100u + 10u * unsigned(i)));
    serialShared.push_back(forwardBackward(shared, 500u + 10u * unsigned(i)));
    ASSERT_EQ(serialOwn.back().error, "");
    ASSERT_EQ(serialShared.back().error, "");
  }
  attnc_variant_free(serial);
  attnc_variant_free(shared);

  for (int i = 0; i < kThreads; ++i) {
    const std::string who = "thread " + std::to_string(i);
    const Seen &s = seen[size_t(i)];
    ASSERT_EQ(s.compileError, "") << who;
    expectSame(s.own, serialOwn[size_t(i)], who + ", own handle");
    expectSame(s.onShared, serialShared[size_t(i)], who + ", shared handle");
    // Its own errors, located on its own lines, and nobody else's.
    const std::string mine = "<spec>:" + std::to_string(i + 2) + ":";
    EXPECT_NE(s.brokenError.find(mine), std::string::npos) << who << ": " << s.brokenError;
    const std::string mineTile = "<spec>:" + std::to_string(i + 1) + ":1: error:";
    EXPECT_NE(s.untileableError.find(mineTile), std::string::npos)
        << who << ": " << s.untileableError;
    EXPECT_NE(s.untileableError.find("is not a shape the kernel supports"), std::string::npos)
        << who << ": " << s.untileableError;
    for (int j = 0; j < kThreads; ++j) {
      if (j == i)
        continue;
      EXPECT_EQ(s.brokenError.find("<spec>:" + std::to_string(j + 2) + ":"), std::string::npos)
          << who << " was given thread " << j << "'s words: " << s.brokenError;
      EXPECT_EQ(s.untileableError.find("<spec>:" + std::to_string(j + 1) + ":1:"),
                std::string::npos)
          << who << " was given thread " << j << "'s words: " << s.untileableError;
    }
  }
}

} // namespace
