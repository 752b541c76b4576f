//===- TargetFlags.h - One way to say where a command runs ------*- C++ -*-===//
//
// Every command that compiles or runs kernels spells its target and arch
// the same way (docs/decisions.md, "One target vocabulary"):
//   --target cpu       the CPU (the default everywhere);
//   --target cuda      the GPU present;
//   --target cuda-sim  the CUDA kernels on the CPU's SIMT emulator;
//   --arch sm_XX       the CUDA architecture (sm_70 or newer); default: the
//                      GPU present's, else sm_80 (driver::defaultCudaArch).
// A command that cannot honour a target says so and why.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TOOLS_TARGETFLAGS_H
#define ATTNC_TOOLS_TARGETFLAGS_H

#include <CLI/CLI.hpp>

#include <string>

namespace attnc::tools {

/// --target; `what` says what it places ("the attention runs"); `byDefault`
/// what leaving it out means.
inline CLI::Option *addTargetFlag(CLI::App *cmd, std::string &target, const std::string &what,
                                  const std::string &note = "",
                                  const std::string &byDefault = "cpu") {
  return cmd
      ->add_option("--target", target,
                   "where " + what +
                       ": cpu, cuda (the GPU present) or cuda-sim (the CUDA kernels on the "
                       "CPU's SIMT emulator); default " +
                       byDefault + (note.empty() ? "" : "; " + note))
      ->check(CLI::IsMember({"cpu", "cuda", "cuda-sim"}));
}

/// --arch; `what` says what it decides.
inline CLI::Option *addArchFlag(CLI::App *cmd, std::string &arch, const std::string &what) {
  return cmd->add_option("--arch", arch,
                         "the CUDA architecture " + what +
                             " (sm_70 or newer; default: the GPU present's, else sm_80)");
}

} // namespace attnc::tools

#endif // ATTNC_TOOLS_TARGETFLAGS_H
