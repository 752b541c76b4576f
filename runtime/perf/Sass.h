//===- Sass.h - Kernels' machine code, as nvdisasm prints it ----*- C++ -*-===//
//
// The performance model (docs/perf-model.md) reads what the GPU will run:
// the SASS of a CUBIN, disassembled by nvdisasm (`-c -hex`: code sections
// only, each instruction followed by its two 64-bit words). This file turns
// that text into functions of instructions, finds their loops from the
// branches that jump backwards, and sorts instructions onto the SM's
// pipes. No GPU and no CUDA library: text in, counts out.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PERF_SASS_H
#define ATTNC_RUNTIME_PERF_SASS_H

#include "runtime/Error.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace attnc::perf {

/// One instruction: `/*0590*/ @P1 LDS.128 R4, [R11+0x300] ;`.
struct SassInstruction {
  uint32_t offset = 0;   ///< bytes from the function's start
  std::string predicate; ///< "@P1", "@!P0", or ""
  std::string opcode;    ///< with its modifiers: "HMMA.16816.F32"
  std::string operands;  ///< as printed, without the closing " ;"
  std::string target;    ///< a branch's label (".L_x_12"), or ""
  /// The control word's stall count: cycles before the warp may issue its
  /// next instruction (sm_70 and later; -1 without `-hex`).
  int stall = -1;
};

/// One function (kernel) of the disassembly.
struct SassFunction {
  std::string name;
  std::vector<SassInstruction> code;
  /// Label → index in `code` of the instruction it names (code.size() for
  /// a label after the last instruction).
  std::map<std::string, size_t> labels;
};

/// The functions of nvdisasm's output, in its order. Lines it does not
/// know (directives, warnings) are skipped; an error says which function
/// has an instruction it cannot read or a branch to a label it lacks.
Expected<std::vector<SassFunction>> parseSass(std::string_view text);

/// A loop: the instructions from a backward branch's target to the branch
/// (indices into SassFunction::code, both inclusive). Back edges to one
/// header merge into one loop.
struct SassLoop {
  size_t first = 0, last = 0;
  int depth = 0;         ///< loops around it
  bool innermost = true; ///< holds no other loop
};

/// The function's loops, outermost first (by first instruction). A branch
/// to itself (the trap after EXIT) is no loop.
std::vector<SassLoop> findLoops(const SassFunction &function);

/// The SM's units an instruction occupies (Nsight Compute's pipelines,
/// coarsened; docs/perf-model.md lists every opcode's).
enum class Pipe {
  Tensor,  ///< HMMA, IMMA, HGMMA ...
  Fma,     ///< FFMA, FMUL, FADD, IMAD, HFMA2 ...
  Alu,     ///< IADD3, LOP3, ISETP, FSETP, FMNMX, SEL, SHF, F2FP ...
  Mufu,    ///< MUFU.EX2, RCP, ...; conversions I2F, F2I, F2F
  Fp64,    ///< DFMA, DADD, DMUL
  Uniform, ///< the uniform datapath: UIADD3, ULDC, S2UR ...
  Shared,  ///< LDS, LDSM, STS, ATOMS, STSM
  Global,  ///< LDG, STG, LDGSTS (cp.async), RED, ATOMG, TMA
  Local,   ///< LDL, STL: register spills and dynamically indexed arrays
  Shuffle, ///< SHFL, S2R, LDC, VOTE: the other MIO work
  Barrier, ///< BAR, DEPBAR, LDGDEPBAR, WARPSYNC, MEMBAR, WARPGROUP
  Control, ///< BRA, EXIT, BSSY, BSYNC, CALL, RET, NOP
};
constexpr int kPipeCount = 12;
const char *pipeName(Pipe pipe);

/// What one warp's instruction costs: its pipe, the bytes it moves through
/// shared memory, and its tensor-core FLOPs.
struct InstructionCost {
  Pipe pipe = Pipe::Alu;
  double sharedBytes = 0; ///< read or written in shared memory, per warp
  double tensorFlops = 0; ///< per warp
  double simtFlops = 0;   ///< fp32 FLOPs on the FMA pipe, per warp (FFMA: 64)
};
InstructionCost costOf(std::string_view opcode);

/// Per warp over a range of instructions (a loop's body, once).
struct PipeCounts {
  std::array<double, kPipeCount> instructions{};
  int total = 0;
  double sharedBytes = 0, tensorFlops = 0, simtFlops = 0;
  /// Sum of the stall counts: the fewest cycles one warp needs to issue
  /// the range (-1: no control words read).
  double stallCycles = -1;
  double of(Pipe pipe) const { return instructions[int(pipe)]; }
};
PipeCounts countRange(const SassFunction &function, size_t first, size_t last);

/// The loop a kernel spends its time in: of the loops holding tensor-core
/// instructions, the one with the most (ties: the longer); without any,
/// the longest loop. Null when the function has no loop.
const SassLoop *hotLoop(const SassFunction &function, const std::vector<SassLoop> &loops);

} // namespace attnc::perf

#endif // ATTNC_RUNTIME_PERF_SASS_H
