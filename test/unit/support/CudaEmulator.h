//===- CudaEmulator.h - Runs CUDA kernel headers on the host --------------===//
//
// The block emulator (kernels/emulator/attnc/simt_emulator.h) plus
// what tests hand the emulated kernels: device-like buffers with guard
// zones, and the dense and modified variants as host structs. Include it
// before the kernel headers, in one translation unit per test executable.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_CUDAEMULATOR_H
#define ATTNC_TEST_UNIT_CUDAEMULATOR_H

#include "attnc/simt_emulator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

//===-- What tests hand the emulated kernels ------------------------------===//

namespace emu {

/// Host conversions to and from the kernels' element types (int: indices,
/// lengths).
template <class T> struct HostElem;
template <> struct HostElem<float> {
  static float to(float x) { return x; }
  static float from(float x) { return x; }
};
template <> struct HostElem<__half> {
  static __half to(float x) { return __float2half_rn(x); }
  static float from(__half x) { return __half2float(x); }
};
template <> struct HostElem<__nv_bfloat16> {
  static __nv_bfloat16 to(float x) { return __float2bfloat16_rn(x); }
  static float from(__nv_bfloat16 x) { return __bfloat162float(x); }
};
template <> struct HostElem<int> {
  static int to(float x) { return int(x); }
  static float from(int x) { return float(x); }
};

/// A device-like buffer: 0xff-filled (NaN, or -1 for int) contents until
/// written, guard zones on both sides checked afterwards. Registered as
/// global memory while it lives (cp.async sources must lie in one).
template <class T> struct Buffer : GlobalMemory {
  static constexpr size_t kGuard = 64; // elements, keeps 16-byte alignment
  std::vector<T> data;
  size_t n;
  explicit Buffer(size_t n) : data(n + 2 * kGuard), n(n) {
    std::memset(static_cast<void *>(data.data()), 0xff, data.size() * sizeof(T));
    registerGlobal(this);
  }
  template <class U> explicit Buffer(const std::vector<U> &v) : Buffer(v.size()) {
    for (size_t i = 0; i < n; ++i)
      data[kGuard + i] = HostElem<T>::to(float(v[i]));
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  ~Buffer() override { unregisterGlobal(this); }
  /// Whether [p, p + bytes) lies in the n elements (not the guards).
  bool contains(const void *p, size_t bytes) const override {
    const auto *c = static_cast<const unsigned char *>(p);
    const auto *lo = reinterpret_cast<const unsigned char *>(data.data() + kGuard);
    return c >= lo && c + bytes <= lo + n * sizeof(T);
  }
  T *ptr() { return data.data() + kGuard; }
  std::vector<float> values() const {
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i)
      r[i] = HostElem<T>::from(data[kGuard + i]);
    return r;
  }
  bool guardsIntact() const {
    const unsigned char *b = reinterpret_cast<const unsigned char *>(data.data());
    const size_t g = kGuard * sizeof(T), end = (kGuard + n) * sizeof(T);
    for (size_t i = 0; i < g; ++i)
      if (b[i] != 0xff || b[end + i] != 0xff)
        return false;
    return true;
  }
};

/// The schedules a test runs its launches under, comparing their results
/// bit for bit: ATTNC_EMU_SCHEDULES when set (comma-separated, e.g.
/// "index,reverse,random:7"), else the first `count` of index, reverse and
/// random:`seed`.
inline std::vector<Schedule> testSchedules(int count, std::uint64_t seed = 1) {
  std::vector<Schedule> r;
  if (const char *env = std::getenv("ATTNC_EMU_SCHEDULES"); env && *env) {
    std::string list = env;
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      Schedule s;
      if (!parseSchedule(list.substr(at, end - at), s)) {
        std::fprintf(stderr,
                     "emu: ATTNC_EMU_SCHEDULES=%s: expected a comma-separated list of "
                     "index, reverse, random or random:SEED\n",
                     env);
        std::abort();
      }
      r.push_back(s);
      at = end + 1;
    }
    return r;
  }
  const Schedule all[] = {indexSchedule(), reverseSchedule(), randomSchedule(seed)};
  for (int i = 0; i < count && i < 3; ++i)
    r.push_back(all[i]);
  return r;
}

/// The first index where a and b differ in their bits, or -1.
template <class V> long long firstBitDifference(const std::vector<V> &a, const std::vector<V> &b) {
  if (a.size() != b.size())
    return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(V)) != 0)
      return (long long)i;
  return -1;
}

/// Dense attention, the identity policy.
struct DenseVariant {
  static constexpr bool kCausal = false;
  static constexpr bool kKeyPadding = false;
  static constexpr bool kHasScoreMod = false;
  static constexpr bool kHasMask = false;
  static constexpr int kNumParams = 0;
  static constexpr bool kHasMaxBack = false, kHasMaxAhead = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = 0, kMaxAhead = 0;
  static float score(float s, int, int, int, int, const float *, int) { return s; }
  static float score_grad(float, int, int, int, int, const float *, int, float *) { return 1.0f; }
  static bool keep(int, int, int, int, const float *, int) { return true; }
};

/// The modified variant of the NVRTC tests (causal, key padding,
/// cap[h] tanh(s / cap[h]) + slope[h] (kv - q)) with a window q - kv <
/// kWindow narrow enough to bite on small shapes.
template <int kWindow> struct ModVariant {
  static constexpr bool kCausal = true;
  static constexpr bool kKeyPadding = true;
  static constexpr bool kHasScoreMod = true;
  static constexpr bool kHasMask = true;
  static constexpr int kNumParams = 2;
  // The band attn-key-band proves for the window: blocks outside are skipped.
  static constexpr bool kHasMaxBack = true, kHasMaxAhead = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = kWindow - 1, kMaxAhead = 0;
  static float score(float s, int, int h, int q, int kv, const float *params, int H) {
    const float cap = params[0 * H + h], slope = params[1 * H + h];
    return cap * tanhf(s / cap) + slope * float(kv - q);
  }
  static float score_grad(float s, int, int h, int q, int kv, const float *params, int H,
                          float *dparams) {
    const float cap = params[0 * H + h];
    const float th = tanhf(s / cap), d = 1.0f - th * th;
    dparams[0] = th - s / cap * d;
    dparams[1] = float(kv - q);
    return d;
  }
  static bool keep(int, int, int q, int kv, const float *, int) { return q - kv < kWindow; }
};

/// `Base` with attention dropout compiled in (the masks of kernels/abi/attnc/abi/Philox.h
/// attentionKeep, drawn when the arguments' dropout is above 0).
template <class Base> struct WithDropout : Base { static constexpr bool kDropout = true; };

} // namespace emu

#endif // ATTNC_TEST_UNIT_CUDAEMULATOR_H
