//===- CApiCuda.cpp - The C ABI's CUDA calls: caller's buffers and stream -===//
//
// attnc_forward and attnc_backward of a variant compiled for "cuda" (a GPU)
// or "cuda-sim" (the same kernels on the SIMT emulator, host memory). The
// caller's tensors go to CudaAttention's device entries as they are:
//   - f32 tensors, any kind and kernel dtype: attendF32OnDevice (it
//     converts for f16/bf16 kernels and projects low-rank keys and values
//     on the device);
//   - tensors of the kernels' dtype: forwardOnDevice/backwardOnDevice
//     (dense) or lshOnDevice, read and written in place.
// Everything is enqueued on the caller's stream; nothing waits for the
// device, so a fault inside a kernel surfaces at the caller's next
// synchronisation. The per-head parameters, which the caller holds as
// separate [H] tensors, are gathered into the variant's [P, H] buffer by
// device copies on that stream.
//
//===----------------------------------------------------------------------===//
#include "CApiInternal.h"

#include "runtime/CudaDriver.h"

#include <algorithm>
#include <cstring>

using namespace attnc;

namespace attnc::capi {

namespace {

/// Device memory of `cuda`'s device, released with the last reference.
Expected<DeviceBuffer> allocate(CudaState &cuda, size_t bytes, const std::string &what) {
  KernelDevice &dev = cuda.kernels->kernelDevice();
  Expected<void *> p = dev.allocate(bytes, what);
  if (!p)
    return p.takeError();
  // The device outlives the buffer: the variant holds both, kernels last.
  KernelDevice *owner = &dev;
  return DeviceBuffer(*p, [owner](void *q) { owner->release(q); });
}

/// A caller's tensor as a CUDA operand: in the variant's memory (the GPU
/// it was compiled for; host memory on the emulator), of `dtype`, of
/// `shape` (-1: any), contiguous. Alignment is the kernels' to check (they
/// know which loads are vectorised).
attnc_error *operand(const attnc_variant &var, const char *what, const attnc_tensor &t,
                     const std::vector<int64_t> &shape, attnc_dtype dtype, DeviceTensor &out) {
  const CudaState &cuda = *var.cuda;
  if (!t.data)
    return fail(std::string(what) + ": no data (null pointer)");
  if (cuda.emulated && t.device != ATTNC_CPU)
    return fail(std::string(what) +
                ": on a CUDA device; this variant runs on the SIMT emulator (cuda-sim), whose "
                "device memory is host memory");
  if (!cuda.emulated) {
    if (t.device != ATTNC_CUDA)
      return fail(std::string(what) + ": host memory; this variant runs on CUDA device " +
                  std::to_string(cuda.ordinal) + " (pass device tensors)");
    Expected<int> where = cuda::pointerDevice(t.data);
    if (!where)
      return fail(std::string(what) + ": " + where.error());
    if (*where != cuda.ordinal)
      return fail(std::string(what) + ": on CUDA device " + std::to_string(*where) +
                  "; this variant was compiled for device " + std::to_string(cuda.ordinal));
  }
  if (t.dtype != dtype)
    return fail(describe(what, t) + ": expected " + dtypeName(dtype));
  if (t.ndim != int(shape.size()) ||
      !std::equal(shape.begin(), shape.end(), t.shape,
                  [](int64_t want, int64_t got) { return want < 0 || want == got; }))
    return fail(describe(what, t) + ": expected shape " +
                shapeStr(shape.data(), int(shape.size())));
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != stride)
      return fail(describe(what, t) +
                  ": not contiguous; CUDA calls never copy (make the copy on your stream, "
                  "e.g. .contiguous())");
    stride *= t.shape[d];
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0)
    return fail(describe(what, t) + ": not 4-byte aligned");
  out = DeviceTensor{
      what, t.data, std::vector<int64_t>(t.shape, t.shape + t.ndim), {}, dtypeName(dtype)};
  return nullptr;
}

/// The forward's operands and parameters, checked, as the device entries
/// take them; the per-head parameters gathered on the stream.
attnc_error *prepare(const attnc_variant &var, const attnc_call &c, DeviceAttentionArgs &x,
                     attnc_dtype &io) {
  if (attnc_error *e = checkCall(c))
    return e;
  CudaState &cuda = *var.cuda;
  CudaAttention &kernels = *cuda.kernels;
  io = c.q.dtype;
  const attnc_dtype direct = attnc_variant_tensor_dtype(&var);
  if (io != ATTNC_F32 && io != direct)
    return fail(describe("q", c.q) + ": '" + var.name + "' takes f32" +
                (direct != ATTNC_F32 ? std::string(" or ") + dtypeName(direct) : std::string()) +
                " tensors" +
                (direct == ATTNC_F32 && cuda.dtype != ATTNC_F32
                     ? std::string(" (its ") + dtypeName(cuda.dtype) +
                           " kernels read converted copies of them)"
                     : std::string()));
  const int64_t B = c.q.shape[0], H = var.heads, N = c.q.shape[2], D = var.headDim;
  const std::vector<int64_t> s4{B, H, N, D};
  if (attnc_error *e = operand(var, "q", c.q, s4, io, x.q))
    return e;
  // Keys and values may have their own length (cross attention), except
  // where the keys are the queries (shared QK).
  if (!var.sig.sharedQk)
    if (attnc_error *e = operand(var, "k", c.k, {B, H, -1, D}, io, x.k))
      return e;
  const int64_t Nk = var.sig.sharedQk ? N : x.k.shape[2];
  if (attnc_error *e = operand(var, "v", c.v, {B, H, Nk, D}, io, x.v))
    return e;
  if (attnc_error *e = operand(var, "out", c.out, s4, io, x.out))
    return e;
  if (attnc_error *e = operand(var, "lse", c.lse, {B, H, N}, ATTNC_F32, x.lse))
    return e;
  if (attnc_error *e = checkCallFits(var, c, Nk))
    return e;
  if (c.lengths) { // low-rank: the projections leave padded keys out
    DeviceTensor lengths;
    if (attnc_error *e = operand(var, "lengths", *c.lengths, {B}, ATTNC_I32, lengths))
      return e;
    x.lengths = static_cast<const int *>(lengths.data);
  }
  const int numParams = int(var.params.size());
  if (Status s = kernels.useStream(c.stream); !s)
    return fail(s.error());
  KernelDevice &dev = kernels.kernelDevice();
  char *head = static_cast<char *>(cuda.headParams.get());
  for (int i = 0; i < numParams; ++i) {
    const ParamSpec &ps = var.params[size_t(i)];
    DeviceTensor t;
    if (attnc_error *e = operand(var, ps.name.c_str(), c.params[i], ps.shape, ATTNC_F32, t))
      return e;
    const size_t row = sizeof(float) * size_t(H);
    if (attnc_error *e = bindParam(ps, static_cast<const float *>(t.data), x,
                                   [&](int index, const float *d) -> attnc_error * {
                                     Status s = dev.copy(head + size_t(index) * row, d, row);
                                     return s ? nullptr : fail(s.error());
                                   }))
      return e;
  }
  x.params = var.sig.params.empty() ? nullptr : static_cast<const float *>(cuda.headParams.get());
  x.eColumns = var.maxSeq;
  return nullptr;
}

/// The variant's kernels through the entry its tensors' dtype takes.
Status run(CudaAttention &kernels, const DeviceAttentionArgs &x, bool f32, bool backward) {
  if (f32)
    return kernels.attendF32OnDevice(x, backward);
  if (kernels.forwardKernel().lsh)
    return kernels.lshOnDevice(x, backward);
  return backward ? kernels.backwardOnDevice(x) : kernels.forwardOnDevice(x);
}

} // namespace

attnc_error *prepareCuda(const attnc_variant &v, CudaState &cuda) {
  const size_t perHead = sizeof(float) * std::max<size_t>(v.sig.params.size(), 1) * size_t(v.heads);
  for (DeviceBuffer *b : {&cuda.headParams, &cuda.headGrads}) {
    Expected<DeviceBuffer> got = allocate(cuda, perHead, "the per-head parameters");
    if (!got)
      return fail(got.error());
    *b = *got;
  }
  for (const ParamSpec &p : v.params) {
    if (p.kind != ParamSpec::E && p.kind != ParamSpec::F)
      continue;
    Expected<DeviceBuffer> got =
        allocate(cuda, sizeof(float) * size_t(p.numel()), "the gradient of " + p.name);
    if (!got)
      return fail(got.error());
    (p.kind == ParamSpec::E ? cuda.dEScratch : cuda.dFScratch) = *got;
  }
  return nullptr;
}

attnc_error *cudaForward(const attnc_variant &v, const attnc_call &c) {
  CudaState &cuda = *v.cuda;
  std::lock_guard<std::mutex> lock(cuda.calls);
  // The variant's context for the call; the caller's comes back after it.
  Expected<DeviceScope> scope = cuda.kernels->kernelDevice().enter();
  if (!scope)
    return fail(scope.error());
  DeviceAttentionArgs x;
  attnc_dtype io = ATTNC_F32;
  if (attnc_error *e = prepare(v, c, x, io))
    return e;
  if (Status s = run(*cuda.kernels, x, io == ATTNC_F32, /*backward=*/false); !s)
    return fail(s.error());
  return nullptr;
}

attnc_error *cudaBackward(const attnc_variant &v, const attnc_call &c) {
  CudaState &cuda = *v.cuda;
  CudaAttention &kernels = *cuda.kernels;
  if (!kernels.backwardKernel())
    return fail("'" + v.name + "' was compiled without its backward (options.backward = 1)");
  std::lock_guard<std::mutex> lock(cuda.calls);
  // The variant's context for the call; the caller's comes back after it.
  Expected<DeviceScope> scope = cuda.kernels->kernelDevice().enter();
  if (!scope)
    return fail(scope.error());
  DeviceAttentionArgs x;
  attnc_dtype io = ATTNC_F32;
  if (attnc_error *e = prepare(v, c, x, io))
    return e;
  const std::vector<int64_t> s4 = x.q.shape, keys4 = x.v.shape;
  if (attnc_error *e = operand(v, "dout", c.dout, s4, io, x.dout))
    return e;
  if (attnc_error *e = operand(v, "dq", c.dq, s4, io, x.dq))
    return e;
  if (attnc_error *e = operand(v, "dv", c.dv, keys4, io, x.dv))
    return e;
  // dk: shared-QK variants fold the key path into dq; their dk is ignored.
  if (!v.sig.sharedQk)
    if (attnc_error *e = operand(v, "dk", c.dk, keys4, io, x.dk))
      return e;
  const KernelDesc &k = kernels.forwardKernel();
  if (k.lsh) // LSH reruns its forward into scratch: the caller's out stays as it is
    x.out = {}, x.lse = {};
  KernelDevice &dev = kernels.kernelDevice();
  const int64_t H = v.heads;
  const size_t row = sizeof(float) * size_t(H);
  const int numParams = int(v.params.size());
  std::vector<DeviceTensor> wanted(static_cast<size_t>(numParams));
  for (int i = 0; i < numParams; ++i) {
    const ParamSpec &ps = v.params[size_t(i)];
    if (!ps.learned || !c.dparams || !c.dparams[i].data)
      continue;
    if (attnc_error *e = operand(v, ("d" + ps.name).c_str(), c.dparams[i], ps.shape, ATTNC_F32,
                                 wanted[size_t(i)]))
      return e;
  }
  if (!v.sig.params.empty()) { // the kernels accumulate into [P, H]
    if (Status s = dev.zero(cuda.headGrads.get(), row * v.sig.params.size()); !s)
      return fail(s.error());
    x.dparams = static_cast<float *>(cuda.headGrads.get());
  }
  for (int i = 0; i < numParams; ++i) {
    const ParamSpec &ps = v.params[size_t(i)];
    void *dst = wanted[size_t(i)].data;
    if (ps.kind == ParamSpec::E)
      x.dE = static_cast<float *>(dst ? dst : cuda.dEScratch.get());
    else if (ps.kind == ParamSpec::F)
      x.dF = static_cast<float *>(dst ? dst : cuda.dFScratch.get());
  }
  if (Status s = run(kernels, x, io == ATTNC_F32, /*backward=*/true); !s)
    return fail(s.error());
  for (int i = 0; i < numParams; ++i) {
    const ParamSpec &ps = v.params[size_t(i)];
    if (ps.kind == ParamSpec::Head && wanted[size_t(i)].data)
      if (Status s =
              dev.copy(wanted[size_t(i)].data,
                       static_cast<char *>(cuda.headGrads.get()) + size_t(ps.headIndex) * row, row);
          !s)
        return fail(s.error());
  }
  return nullptr;
}

} // namespace attnc::capi
