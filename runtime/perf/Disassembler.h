//===- Disassembler.h - A CUBIN's SASS, through nvdisasm --------*- C++ -*-===//
//
// nvdisasm is the one tool that prints a CUBIN's machine code; NVIDIA ships
// it with the toolkit and as the PyPI wheel nvidia-cuda-nvdisasm, which
// scripts/bootstrap.sh installs into .deps/sass-tools (the build tree links
// it at lib/attnc/sass-tools). CUDA 13's nvdisasm reads sm_75 and newer:
// it refuses Volta's CUBINs.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PERF_DISASSEMBLER_H
#define ATTNC_RUNTIME_PERF_DISASSEMBLER_H

#include "runtime/Error.h"

#include <string>

namespace attnc::perf {

/// The nvdisasm to run: $ATTNC_NVDISASM, else the one beside the binary
/// (<root>/lib/attnc/sass-tools), else the CUDA toolkit's ($CUDA_HOME,
/// /usr/local/cuda), else one on $PATH. The error says how to get one.
Expected<std::string> findNvdisasm();

/// `cubin`'s code sections, as `nvdisasm -c -hex` prints them (Sass.h reads
/// that). The error carries nvdisasm's own message (an arch it does not
/// read, a damaged CUBIN).
Expected<std::string> disassemble(const std::string &cubin);

} // namespace attnc::perf

#endif // ATTNC_RUNTIME_PERF_DISASSEMBLER_H
