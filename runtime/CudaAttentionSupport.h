//===- CudaAttentionSupport.h - Helpers of CudaAttention's sources -*- C++ -*-===//
//
// Private to runtime/CudaAttention*.cpp (not installed, not included
// elsewhere): device arrays released by their owner, uploads and downloads
// in the kernels' element type, and the workspace layouts the entries share.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDAATTENTIONSUPPORT_H
#define ATTNC_RUNTIME_CUDAATTENTIONSUPPORT_H

#include "runtime/CudaAttention.h"
#include "runtime/HalfFloat.h"

#include "attnc/abi/LshTileModel.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace attnc::cuda_attention {

inline size_t elemBytes(const std::string &dtype) {
  return dtype == "f32" || dtype == "i32" ? 4 : 2;
}

/// Host f32 values converted to the kernels' element type.
inline std::vector<uint8_t> toDevice(const float *v, size_t n, const std::string &dtype) {
  std::vector<uint8_t> out(n * elemBytes(dtype));
  if (dtype == "f32") {
    std::memcpy(out.data(), v, n * 4);
    return out;
  }
  uint16_t *o = reinterpret_cast<uint16_t *>(out.data());
  for (size_t i = 0; i < n; ++i)
    o[i] = dtype == "f16" ? half::toHalf(v[i]) : half::toBf16(v[i]);
  return out;
}

inline std::vector<float> fromDevice(const std::vector<uint8_t> &bytes, const std::string &dtype) {
  size_t n = bytes.size() / elemBytes(dtype);
  std::vector<float> out(n);
  if (dtype == "f32") {
    std::memcpy(out.data(), bytes.data(), n * 4);
    return out;
  }
  const uint16_t *in = reinterpret_cast<const uint16_t *>(bytes.data());
  for (size_t i = 0; i < n; ++i)
    out[i] = dtype == "f16" ? half::fromHalf(in[i]) : half::fromBf16(in[i]);
  return out;
}

inline const float *f32(const st::Tensor *t) {
  return t ? reinterpret_cast<const float *>(t->data.data()) : nullptr;
}

/// Device memory of a KernelDevice, released when destroyed.
class DeviceArray {
public:
  DeviceArray() = default;
  DeviceArray(KernelDevice *dev, void *p, size_t bytes) : dev_(dev), p_(p), bytes_(bytes) {}
  DeviceArray(DeviceArray &&o) noexcept : dev_(o.dev_), p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
  }
  DeviceArray &operator=(DeviceArray &&o) noexcept {
    std::swap(dev_, o.dev_), std::swap(p_, o.p_), std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceArray() {
    if (p_)
      dev_->release(p_);
  }
  template <typename T = void> T *as() const { return static_cast<T *>(p_); }
  size_t bytes() const { return bytes_; }

private:
  KernelDevice *dev_ = nullptr;
  void *p_ = nullptr;
  size_t bytes_ = 0;
};

/// `bytes` of device memory holding `host` (when given) or zeros.
inline Expected<DeviceArray> deviceArray(KernelDevice &dev, size_t bytes, const std::string &what,
                                         const void *host = nullptr) {
  Expected<void *> p = dev.allocate(std::max<size_t>(bytes, 16), what);
  if (!p)
    return p.takeError();
  DeviceArray a(&dev, *p, bytes);
  if (Status s = host ? dev.upload(*p, host, bytes) : dev.zero(*p, bytes); !s)
    return s.takeError();
  return a;
}

/// `bytes` of `host` on the device in `out`, or nothing when `host` is
/// null (the optional inputs: lengths, per-head parameters).
inline Status uploadOptional(KernelDevice &dev, const void *host, size_t bytes,
                             const std::string &what, std::optional<DeviceArray> &out) {
  if (!host)
    return {};
  Expected<DeviceArray> a = deviceArray(dev, bytes, what, host);
  if (!a)
    return a.takeError();
  out.emplace(std::move(*a));
  return {};
}

/// An optional host tensor (F, per-head parameters) on the device, or
/// nothing.
inline Status uploadOptional(KernelDevice &dev, const st::Tensor *t, const std::string &what,
                             std::optional<DeviceArray> &out) {
  return uploadOptional(dev, t ? t->data.data() : nullptr, t ? t->data.size() : 0, what, out);
}

inline Expected<std::vector<float>> download(KernelDevice &dev, const DeviceArray &buf, size_t n,
                                             const std::string &dtype) {
  std::vector<uint8_t> bytes(n * elemBytes(dtype));
  if (Status s = dev.download(bytes.data(), buf.as(), bytes.size()); !s)
    return s.takeError();
  return fromDevice(bytes, dtype);
}

/// A forward's outputs as host f32 tensors: out [B, H, N, D], held in
/// `dtype` on the device, and lse [B, H, N], held in f32.
inline Expected<AttentionOutputs> downloadForward(KernelDevice &dev, const DeviceArray &out,
                                                  const DeviceArray &lse, int64_t B, int64_t H,
                                                  int64_t N, int64_t D, const std::string &dtype) {
  Expected<std::vector<float>> o = download(dev, out, size_t(B * H * N * D), dtype),
                               l = download(dev, lse, size_t(B * H * N), "f32");
  if (!o || !l)
    return makeError(!o ? o.error() : l.error());
  AttentionOutputs r;
  r.out = st::Tensor::f32({B, H, N, D}, *o);
  r.lse = st::Tensor::f32({B, H, N}, *l);
  return r;
}

inline std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// A contiguous view of `a`.
inline DeviceTensor view(const char *name, const DeviceArray &a, std::vector<int64_t> shape,
                         const std::string &dtype) {
  return DeviceTensor{name, a.as(), std::move(shape), {}, dtype};
}

/// Offsets of parts of `bytes` laid out one after the other, each 256-byte
/// aligned; the total last.
inline std::vector<size_t> packParts(std::vector<size_t> bytes) {
  size_t total = 0;
  for (size_t &p : bytes) {
    const size_t at = total;
    total += (p + 255) / 256 * 256;
    p = at;
  }
  bytes.push_back(total);
  return bytes;
}

/// The LSH kernels' workspace (offsets, the total last): buckets, perm,
/// keys, round_out, round_lse, the sort's counts; the backward's delta,
/// round_dq, round_dk, round_dv; out and lse when the caller gave none.
/// `hashThreads`: threads of the hash and sort kernels (the op's tile).
inline std::vector<size_t> lshWorkspaceParts(int64_t B, int64_t H, int64_t N, int64_t D, int64_t R,
                                             int chunk, int buckets, int hashThreads, bool backward,
                                             bool ownOut, size_t elemBytes) {
  const int64_t bh = B * H, npad = attnc::tile::lshPaddedLength(int(N), chunk);
  const size_t nqd = size_t(bh * N * D);
  const size_t counts =
      size_t(attnc::tile::lshSortCounts(int(N), hashThreads, buckets, int(bh), int(R)));
  std::vector<size_t> parts = {
      size_t(bh * R * N) * 4, size_t(bh * R * npad) * 4,      nqd * 4, nqd * R * 4,
      size_t(bh * R * N) * 4, std::max<size_t>(counts, 1) * 4};
  if (backward)
    parts.insert(parts.end(), {size_t(bh * N) * 4, nqd * R * 4, nqd * R * 4, nqd * R * 4});
  if (ownOut)
    parts.insert(parts.end(), {nqd * elemBytes, size_t(bh * N) * 4});
  return packParts(std::move(parts));
}

} // namespace attnc::cuda_attention

#endif // ATTNC_RUNTIME_CUDAATTENTIONSUPPORT_H
