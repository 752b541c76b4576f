//===- CudaTestSupport.h - NVRTC builds of the CUDA kernels in tests ------===//
//
// What the NVRTC halves of test/unit/kernels/CudaKernelsTest.cpp and
// test/unit/kernels/CudaLshTest.cpp share: the matrix they build (dtypes, head
// dims, archs), the emitter's helpers and two variants as
// codegen/VariantEmitter.cpp writes them (dense; causal + key padding + a
// two-parameter score modifier + a user mask), compilation by NVRTC with the
// options the runtime passes too, and ptxas's per-entry resource report
// (-Xptxas=-v) with the checks every kernel must pass. Each arch compiles
// with the NVRTC the runtime would choose for it (runtime/NvrtcLibraries.h:
// sm_70 with the CUDA 12 NVRTC that scripts/bootstrap.sh installs). Needs
// the ATTNC_SOURCE_DIR and ATTNC_CUDA_INCLUDE_DIR definitions of the tests'
// cmake files and the runtime library. No GPU is needed.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_CUDATESTSUPPORT_H
#define ATTNC_TEST_UNIT_CUDATESTSUPPORT_H

#include "runtime/NvrtcLibraries.h"

#include <gtest/gtest.h>
#include <nvrtc.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace cudatest {

//===-- What is compiled --------------------------------------------------===//

struct DType {
  const char *name; ///< test name part
  const char *cuda; ///< element type T
  int bytes;
};
inline const DType kDTypes[] = {
    {"fp32", "float", 4}, {"fp16", "__half", 2}, {"bf16", "__nv_bfloat16", 2}};
inline const int kHeadDims[] = {32, 64, 80, 96, 128, 256};
inline const int kArchs[] = {70, 75, 80, 90};

/// The emitter's helpers (codegen/VariantEmitter.cpp), for the variants.
inline const char *const kHelpers = R"(namespace {
ATTNC_HD int attnc_clamp_head(int h, int H) { return h < 0 ? 0 : (h >= H ? H - 1 : h); }
} // namespace
)";

/// Dense attention: the identity policy.
inline const char *const kDenseVariant = R"(struct AttnVariant_dense {
  static constexpr bool kCausal = false;
  static constexpr bool kKeyPadding = false;
  static constexpr bool kHasScoreMod = false;
  static constexpr bool kHasMask = false;
  static constexpr int kNumParams = 0;
  static constexpr bool kHasMaxBack = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = 0;
  static constexpr bool kHasMaxAhead = false;
  static constexpr int kMaxAhead = 0;

  ATTNC_HD static float score(float s, int b, int h, int q, int kv, const float *params, int H) {
    (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H;
    return s;
  }

  ATTNC_HD static float score_grad(float s, int b, int h, int q, int kv, const float *params, int H, float *dparams) {
    (void)s; (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H; (void)dparams;
    return 1.0f;
  }

  ATTNC_HD static bool keep(int b, int h, int q, int kv, const float *params, int H) {
    (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H;
    return true;
  }
};
)";

/// Causal, key padding, score = cap[h] tanh(s / cap[h]) + slope[h] (kv - q)
/// with forward-mode derivatives as the emitter writes them, and a sliding
/// window mask q - kv < 128.
inline const char *const kModVariant = R"(struct AttnVariant_mod {
  static constexpr bool kCausal = true;
  static constexpr bool kKeyPadding = true;
  static constexpr bool kHasScoreMod = true;
  static constexpr bool kHasMask = true;
  static constexpr int kNumParams = 2;
  static constexpr bool kHasMaxBack = true;
  static constexpr bool kDropout = true; // the masks compiled in (drawn when a.dropout > 0)
  static constexpr int kMaxBack = 127; // keys with q - kv > it are masked
  static constexpr bool kHasMaxAhead = false;
  static constexpr int kMaxAhead = 0;

  ATTNC_HD static float score(float s, int b, int h, int q, int kv, const float *params, int H) {
    (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H;
    const float v0 = params[0 * H + attnc_clamp_head(h, H)];
    const float v1 = params[1 * H + attnc_clamp_head(h, H)];
    const float v2 = s / v0;
    const float v3 = tanhf(v2);
    const float v4 = v0 * v3;
    const int v5 = kv - q;
    const float v6 = (float)v5;
    const float v7 = v1 * v6;
    const float v8 = v4 + v7;
    return v8;
  }

  ATTNC_HD static float score_grad(float s, int b, int h, int q, int kv, const float *params, int H, float *dparams) {
    (void)s; (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H; (void)dparams;
    const float v0 = params[0 * H + attnc_clamp_head(h, H)];
    const float v1 = params[1 * H + attnc_clamp_head(h, H)];
    const float v2 = s / v0;
    const float v2_t0 = 1.0f / v0;
    const float v2_t1 = -s / (v0 * v0);
    const float v3 = tanhf(v2);
    const float v3_d = 1.0f - v3 * v3;
    const float v3_t0 = v3_d * v2_t0;
    const float v3_t1 = v3_d * v2_t1;
    const float v4_t0 = v0 * v3_t0;
    const float v4_t1 = v3 + v0 * v3_t1;
    const int v5 = kv - q;
    const float v6 = (float)v5;
    (void)v1; (void)v2;
    dparams[0] = v4_t1;
    dparams[1] = v6;
    return v4_t0;
  }

  ATTNC_HD static bool keep(int b, int h, int q, int kv, const float *params, int H) {
    (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H;
    const int v0 = q - kv;
    const bool v1 = v0 < 128;
    return v1;
  }
};
)";

struct VariantCase {
  const char *op;     ///< NAME in the entry points' names
  const char *type;   ///< struct name
  const char *source; ///< struct definition
  int numParams;
};
inline const VariantCase kVariants[] = {{"dense", "AttnVariant_dense", kDenseVariant, 0},
                                        {"mod", "AttnVariant_mod", kModVariant, 2}};

/// The part of a generated translation unit before its entry points: the
/// emitter's helpers, then every variant.
inline void writeVariants(std::ostream &os) {
  os << kHelpers << "\n";
  for (const VariantCase &v : kVariants)
    os << v.source << "\n";
}

//===-- NVRTC and the ptxas report ----------------------------------------===//

/// ptxas's report for one entry point (-Xptxas=-v).
struct Usage {
  int registers = -1, stackFrame = -1, spillStores = -1, spillLoads = -1;
  int staticSmem = 0;
};

/// The integer just before `unit` in `line` (e.g. "12 bytes smem"), or -1.
inline int numberBefore(const std::string &line, const std::string &unit) {
  size_t at = line.find(unit);
  if (at == std::string::npos || at < 2)
    return -1;
  size_t end = at - 1, begin = end;
  while (begin > 0 && isdigit(static_cast<unsigned char>(line[begin - 1])))
    --begin;
  return begin == end ? -1 : std::stoi(line.substr(begin, end - begin));
}

/// Parses "Function properties for NAME", "N bytes stack frame, N bytes
/// spill stores, N bytes spill loads" and "Used N registers, ..., N bytes
/// smem" lines into per-entry usage.
inline std::map<std::string, Usage> parsePtxasLog(const std::string &log) {
  std::map<std::string, Usage> out;
  std::istringstream in(log);
  std::string line, current;
  const std::string props = "Function properties for ";
  while (std::getline(in, line)) {
    if (size_t at = line.find(props); at != std::string::npos) {
      current = line.substr(at + props.size());
      while (!current.empty() && isspace(static_cast<unsigned char>(current.back())))
        current.pop_back();
      out[current];
    } else if (!current.empty() && line.find("bytes stack frame") != std::string::npos) {
      Usage &u = out[current];
      u.stackFrame = numberBefore(line, "bytes stack frame");
      u.spillStores = numberBefore(line, "bytes spill stores");
      u.spillLoads = numberBefore(line, "bytes spill loads");
    } else if (!current.empty() && line.find("Used ") != std::string::npos &&
               line.find(" registers") != std::string::npos) {
      Usage &u = out[current];
      u.registers = numberBefore(line, "registers");
      u.staticSmem = std::max(0, numberBefore(line, "bytes smem"));
    }
  }
  return out;
}

struct Compiled {
  bool ok = false;
  std::string log;
  std::string ptx; ///< compile(..., ptx = true) only
  double seconds = 0;
};

/// The NVRTC options the kernels are checked with: what the runtime must
/// pass too.
inline std::vector<std::string> nvrtcOptions(int sm, bool ptx = false) {
  std::vector<std::string> o = {(ptx ? "--gpu-architecture=compute_" : "--gpu-architecture=sm_") +
                                    std::to_string(sm),
                                "-std=c++17",
                                std::string("-I") + ATTNC_SOURCE_DIR + "/kernels/abi",
                                std::string("-I") + ATTNC_SOURCE_DIR + "/kernels/common",
                                std::string("-I") + ATTNC_SOURCE_DIR + "/kernels/cuda",
                                std::string("-I") + ATTNC_CUDA_INCLUDE_DIR};
  if (!ptx) // no ptxas runs for a compute_XX target
    o.push_back("-Xptxas=-v");
  return o;
}

/// Compiles `source` (named `program` in NVRTC's messages) for sm_`sm` to a
/// cubin; the log holds ptxas's report. With `ptx`, for compute_`sm` to
/// PTX instead (Compiled::ptx), which says which instructions were chosen.
inline Compiled compile(const std::string &source, int sm, const char *program, bool ptx = false) {
  Compiled c;
  const auto start = std::chrono::steady_clock::now();
  attnc::Expected<const attnc::NvrtcLibrary *> lib =
      attnc::chooseNvrtc(sm, attnc::nvrtcLibraries());
  if (!lib) {
    c.log = lib.error();
    return c;
  }
  const attnc::NvrtcApi &api = *(*lib)->api;
  nvrtcProgram prog;
  if (api.createProgram(&prog, source.c_str(), program, 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    c.log = "nvrtcCreateProgram failed";
    return c;
  }
  const std::vector<std::string> opts = nvrtcOptions(sm, ptx);
  std::vector<const char *> argv;
  for (const std::string &o : opts)
    argv.push_back(o.c_str());
  const nvrtcResult r = api.compileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t n = 0;
  api.getProgramLogSize(prog, &n);
  c.log.resize(n);
  if (n > 0)
    api.getProgramLog(prog, c.log.data());
  size_t cubin = 0;
  if (ptx) {
    c.ok = r == NVRTC_SUCCESS && api.getPTXSize(prog, &cubin) == NVRTC_SUCCESS && cubin > 1;
    if (c.ok) {
      c.ptx.resize(cubin);
      c.ok = api.getPTX(prog, c.ptx.data()) == NVRTC_SUCCESS;
    }
  } else {
    c.ok = r == NVRTC_SUCCESS && api.getCUBINSize(prog, &cubin) == NVRTC_SUCCESS && cubin > 0;
  }
  if (r != NVRTC_SUCCESS)
    c.log = std::string(api.getErrorString(r)) + "\n" + c.log;
  api.destroyProgram(&prog);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

/// Warnings from the kernel headers fail the test (the generated part is the
/// emitter's).
inline void expectNoHeaderWarnings(const std::string &log) {
  std::istringstream logLines(log);
  for (std::string line; std::getline(logLines, line);)
    if (line.find("warning") != std::string::npos && line.find("codegen/") != std::string::npos)
      ADD_FAILURE() << "NVRTC warning: " << line;
}

/// What every entry point's report must show: a register count of at most
/// `maxRegisters`, no spills, no stack frame.
inline void expectNoSpills(const Usage &u, int maxRegisters) {
  EXPECT_GE(u.registers, 0);
  EXPECT_LE(u.registers, maxRegisters);
  EXPECT_EQ(u.spillStores, 0);
  EXPECT_EQ(u.spillLoads, 0);
  EXPECT_EQ(u.stackFrame, 0);
}

/// Parses ptxas's report in `log` and visits the report of each of
/// `entries` (anything with a `name`) under SCOPED_TRACE(name): it must
/// exist, then `check(entry, usage)` prints and checks it.
template <class E, class Check>
void forEachReport(const std::string &log, const std::vector<E> &entries, Check check) {
  const std::map<std::string, Usage> usage = parsePtxasLog(log);
  for (const E &e : entries) {
    SCOPED_TRACE(e.name);
    auto it = usage.find(e.name);
    ASSERT_NE(it, usage.end()) << "no ptxas report for " << e.name << "\n" << log;
    check(e, it->second);
  }
}

} // namespace cudatest

#endif // ATTNC_TEST_UNIT_CUDATESTSUPPORT_H
