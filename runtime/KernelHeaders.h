//===- KernelHeaders.h - Where the kernel header tree is --------*- C++ -*-===//
//
// The JIT compilers (NVRTC for CUDA, the host compiler for the CPU and the
// SIMT emulator) compile generated sources against the kernel header tree,
// which has one folder per layer (docs/design.md):
//
//   abi/attnc/abi/   argument structs, tile models, Philox: include-free
//   common/attnc/common/  semantics both kernel families share
//   cpu/attnc/       the CPU kernels          cuda/attnc/  the CUDA kernels
//   emulator/attnc/  the SIMT emulator that runs CUDA kernel code on the CPU
//
// It is found relative to the binary the runtime is linked into, in the build
// tree and in an installation alike (<prefix>/bin/attnc finds
// <prefix>/share/attnc/kernels), or through $ATTNC_KERNEL_INCLUDE; never
// through the source tree.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_KERNELHEADERS_H
#define ATTNC_RUNTIME_KERNELHEADERS_H

#include "runtime/Error.h"

#include <string>
#include <vector>

namespace attnc {

/// Which generated code is compiled: it decides the family layer.
enum class KernelFamily {
  Cpu,         ///< the host compiler, CPU kernels
  Cuda,        ///< NVRTC, CUDA kernels
  CudaEmulator ///< the host compiler, CUDA kernels on the SIMT emulator
};

/// The folder above the one holding the binary this code is linked into:
/// <prefix> of <prefix>/bin/attnc, <build> of <build>/bin/attnc and of
/// <build>/test/attnc-*-tests. Where a binary finds what ships beside it
/// (share/attnc/kernels, lib/attnc/nvrtc-cu12, lib/attnc/cublas-cu12); ""
/// when the binary cannot tell where it is.
std::string installRoot();
/// installRoot() + "/" + relative, or "" when installRoot() is.
std::string besideInstallRoot(const std::string &relative);

/// The root of the kernel header tree: $ATTNC_KERNEL_INCLUDE when set, else
/// `share/attnc/kernels` one level above the folder of the binary holding
/// this code (bin/, or test/ in the build tree). The error names what was
/// looked at and how to point at the headers.
Expected<std::string> kernelHeaderRoot();

/// The include directories `family` compiles with, lowest layer first:
/// root/abi, root/common, then root/cpu or root/cuda (the emulator's
/// folder, the CUDA folders and the toolkit's headers for CudaEmulator).
Expected<std::vector<std::string>> kernelIncludeDirs(KernelFamily family);

} // namespace attnc

#endif // ATTNC_RUNTIME_KERNELHEADERS_H
