//===- Sass.cpp - Kernels' machine code, as nvdisasm prints it -----------===//
#include "runtime/perf/Sass.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace attnc::perf {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

/// "/*0590*/" at the start of `s`: the offset, and `s` moved past it.
bool readOffsetComment(std::string_view &s, uint32_t &value) {
  if (!startsWith(s, "/*"))
    return false;
  size_t end = s.find("*/");
  if (end == std::string_view::npos || end == 2)
    return false;
  std::string digits(s.substr(2, end - 2));
  char *stop = nullptr;
  unsigned long v = std::strtoul(digits.c_str(), &stop, 16);
  if (*stop != '\0')
    return false;
  value = uint32_t(v);
  s.remove_prefix(end + 2);
  return true;
}

/// "/* 0x000fea0000001818 */": the 64-bit word.
bool readWordComment(std::string_view s, uint64_t &word) {
  s = trim(s);
  if (!startsWith(s, "/*") || s.size() < 4 || s.substr(s.size() - 2) != "*/")
    return false;
  std::string_view inner = trim(s.substr(2, s.size() - 4));
  if (!startsWith(inner, "0x"))
    return false;
  std::string digits(inner.substr(2));
  char *stop = nullptr;
  word = std::strtoull(digits.c_str(), &stop, 16);
  return *stop == '\0' && !digits.empty();
}

/// A label line: "name:" with nothing after it.
bool readLabel(std::string_view line, std::string &label) {
  std::string_view s = trim(line);
  if (s.size() < 2 || s.back() != ':' || startsWith(s, "/*") || startsWith(s, "//"))
    return false;
  s.remove_suffix(1);
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$'))
      return false;
  label = std::string(s);
  return true;
}

/// The instruction text between the offset and the " ;".
bool readInstruction(std::string_view body, SassInstruction &inst) {
  body = trim(body);
  if (!body.empty() && body.front() == '@') {
    size_t sp = body.find(' ');
    if (sp == std::string_view::npos)
      return false;
    inst.predicate = std::string(body.substr(0, sp));
    body = trim(body.substr(sp));
  }
  size_t sp = body.find(' ');
  inst.opcode = std::string(body.substr(0, sp));
  inst.operands = sp == std::string_view::npos ? "" : std::string(trim(body.substr(sp)));
  if (inst.opcode.empty() || !std::isupper(static_cast<unsigned char>(inst.opcode.front())))
    return false;
  // Branch and convergence targets print as `(.L_x_12).
  size_t tick = inst.operands.find("`(");
  if (tick != std::string::npos) {
    size_t close = inst.operands.find(')', tick);
    if (close == std::string::npos)
      return false;
    inst.target = inst.operands.substr(tick + 2, close - tick - 2);
  }
  return true;
}

std::string_view baseOf(std::string_view opcode) { return opcode.substr(0, opcode.find('.')); }

bool isOneOf(std::string_view s, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

bool hasModifier(std::string_view opcode, std::string_view modifier) {
  size_t at = 0;
  while ((at = opcode.find('.', at)) != std::string_view::npos) {
    ++at;
    std::string_view rest = opcode.substr(at);
    std::string_view mod = rest.substr(0, rest.find('.'));
    if (mod == modifier)
      return true;
  }
  return false;
}

/// Bytes a warp moves with an LDS/STS-like access of the opcode's width.
double accessBytes(std::string_view opcode) {
  if (hasModifier(opcode, "128"))
    return 32 * 16;
  if (hasModifier(opcode, "64"))
    return 32 * 8;
  if (hasModifier(opcode, "U16") || hasModifier(opcode, "S16"))
    return 32 * 2;
  if (hasModifier(opcode, "U8") || hasModifier(opcode, "S8"))
    return 32 * 1;
  return 32 * 4;
}

/// ldmatrix/stmatrix: .4, .2 or one 8x8 matrix of 16-bit values (128 B).
double matrixBytes(std::string_view opcode) {
  if (hasModifier(opcode, "4"))
    return 4 * 128;
  if (hasModifier(opcode, "2"))
    return 2 * 128;
  return 128;
}

/// An MMA's FLOPs per warp from its shape modifier: "16816" is m16 n8 k16,
/// "64x128x16" a warpgroup's m64 n128 k16 (a quarter per warp).
double mmaFlops(std::string_view opcode) {
  size_t dot = opcode.find('.');
  if (dot == std::string_view::npos)
    return 0;
  std::string_view shape = opcode.substr(dot + 1);
  shape = shape.substr(0, shape.find('.'));
  if (shape.find('x') != std::string_view::npos) { // HGMMA.64x128x16
    long m = 0, n = 0, k = 0;
    std::string text(shape);
    if (std::sscanf(text.c_str(), "%ldx%ldx%ld", &m, &n, &k) != 3)
      return 0;
    return 2.0 * m * n * k / 4;
  }
  // mma.sync shapes as SASS spells them.
  if (shape == "16816")
    return 2.0 * 16 * 8 * 16;
  if (shape == "1688")
    return 2.0 * 16 * 8 * 8;
  if (shape == "16832")
    return 2.0 * 16 * 8 * 32;
  if (shape == "8832")
    return 2.0 * 8 * 8 * 32;
  if (shape == "884") // Volta: one of the four steps of an m8n8k4 per quad pair
    return 2.0 * 8 * 8 * 4;
  return 0;
}

} // namespace

Expected<std::vector<SassFunction>> parseSass(std::string_view text) {
  std::vector<SassFunction> functions;
  std::vector<std::string> pendingLabels;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() + 1 : eol + 1;

    std::string_view s = trim(line);
    if (startsWith(s, "//--") && s.find(" .text.") != std::string_view::npos) {
      std::string_view rest = s.substr(s.find(" .text.") + 7);
      SassFunction f;
      f.name = std::string(rest.substr(0, rest.find(' ')));
      functions.push_back(std::move(f));
      pendingLabels.clear();
      continue;
    }
    if (functions.empty())
      continue;
    SassFunction &f = functions.back();
    std::string label;
    if (readLabel(s, label)) {
      f.labels[label] = f.code.size();
      continue;
    }
    uint64_t word = 0;
    if (readWordComment(s, word)) { // the second word of the last instruction
      if (!f.code.empty() && f.code.back().stall < 0)
        f.code.back().stall = int((word >> 41) & 0xf);
      continue;
    }
    uint32_t offset = 0;
    if (!readOffsetComment(s, offset))
      continue;
    size_t semi = s.find(';');
    if (semi == std::string_view::npos)
      return makeError("SASS of " + f.name + ": no ';' after the instruction at offset " +
                       std::to_string(offset) + ": " + std::string(trim(line)));
    SassInstruction inst;
    inst.offset = offset;
    if (!readInstruction(s.substr(0, semi), inst))
      return makeError("SASS of " + f.name + ": cannot read the instruction at offset " +
                       std::to_string(offset) + ": " + std::string(trim(line)));
    f.code.push_back(std::move(inst));
  }
  for (const SassFunction &f : functions)
    for (const SassInstruction &inst : f.code)
      if (!inst.target.empty() && baseOf(inst.opcode) == "BRA" && !f.labels.count(inst.target))
        return makeError("SASS of " + f.name + ": the branch at offset " +
                         std::to_string(inst.offset) + " goes to " + inst.target +
                         ", which the function does not define");
  return functions;
}

std::vector<SassLoop> findLoops(const SassFunction &function) {
  std::map<size_t, size_t> lastOfHeader; // header index → furthest back edge
  for (size_t i = 0; i < function.code.size(); ++i) {
    const SassInstruction &inst = function.code[i];
    if (inst.target.empty() || baseOf(inst.opcode) != "BRA")
      continue;
    auto label = function.labels.find(inst.target);
    if (label == function.labels.end() || label->second >= i)
      continue; // forward, or the trap's branch to itself
    size_t &last = lastOfHeader[label->second];
    last = std::max(last, i);
  }
  std::vector<SassLoop> loops;
  for (auto [first, last] : lastOfHeader)
    loops.push_back(SassLoop{first, last, 0, true});
  for (SassLoop &loop : loops)
    for (const SassLoop &other : loops) {
      if (&other == &loop)
        continue;
      if (other.first <= loop.first && other.last >= loop.last)
        ++loop.depth;
      if (other.first >= loop.first && other.last <= loop.last)
        loop.innermost = false;
    }
  return loops;
}

const char *pipeName(Pipe pipe) {
  switch (pipe) {
  case Pipe::Tensor:
    return "tensor";
  case Pipe::Fma:
    return "fma";
  case Pipe::Alu:
    return "alu";
  case Pipe::Mufu:
    return "mufu";
  case Pipe::Fp64:
    return "fp64";
  case Pipe::Uniform:
    return "uniform";
  case Pipe::Shared:
    return "shared";
  case Pipe::Global:
    return "global";
  case Pipe::Local:
    return "local";
  case Pipe::Shuffle:
    return "shuffle";
  case Pipe::Barrier:
    return "barrier";
  case Pipe::Control:
    return "control";
  }
  return "?";
}

InstructionCost costOf(std::string_view opcode) {
  std::string_view base = baseOf(opcode);
  InstructionCost c;
  if (isOneOf(base, {"HMMA", "IMMA", "BMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA"})) {
    c.pipe = Pipe::Tensor, c.tensorFlops = mmaFlops(opcode);
  } else if (isOneOf(base, {"LDSM", "STSM"})) {
    c.pipe = Pipe::Shared, c.sharedBytes = matrixBytes(opcode);
  } else if (isOneOf(base, {"LDS", "STS", "ATOMS"})) {
    c.pipe = Pipe::Shared, c.sharedBytes = accessBytes(opcode);
  } else if (base == "LDGSTS") { // cp.async: global in, shared out
    c.pipe = Pipe::Global, c.sharedBytes = accessBytes(opcode);
  } else if (isOneOf(base, {"LDG", "STG", "RED", "REDG", "ATOM", "ATOMG", "LD", "ST", "UTMALDG",
                            "UTMASTG", "UTMAPF", "UBLKCP", "CCTL"})) {
    c.pipe = Pipe::Global;
  } else if (isOneOf(base, {"LDL", "STL"})) {
    c.pipe = Pipe::Local;
  } else if (isOneOf(base, {"FFMA", "FMUL", "FADD", "FFMA32I", "FMUL32I", "FADD32I", "IMAD", "IMUL",
                            "IMAD32I", "IMUL32I", "IDP", "IDP4A", "HFMA2", "HADD2", "HMUL2",
                            "FSWZADD"})) {
    c.pipe = Pipe::Fma;
    if (isOneOf(base, {"FFMA", "FFMA32I"}))
      c.simtFlops = 2 * 32;
    else if (isOneOf(base, {"FMUL", "FADD", "FMUL32I", "FADD32I"}))
      c.simtFlops = 32;
  } else if (isOneOf(base, {"MUFU", "I2F", "F2I", "F2F", "FRND"})) {
    c.pipe = Pipe::Mufu;
  } else if (isOneOf(base, {"DFMA", "DADD", "DMUL", "DSETP", "DMNMX"})) {
    c.pipe = Pipe::Fp64;
  } else if (isOneOf(base,
                     {"SHFL", "S2R", "LDC", "VOTE", "VOTEU", "MATCH", "REDUX", "B2R", "R2B"})) {
    c.pipe = Pipe::Shuffle;
  } else if (isOneOf(base, {"BAR", "DEPBAR", "LDGDEPBAR", "WARPSYNC", "MEMBAR", "ERRBAR",
                            "WARPGROUP", "SYNCS", "ARRIVES", "FENCE"})) {
    c.pipe = Pipe::Barrier;
  } else if (isOneOf(base, {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC",
                            "YIELD", "NOP", "KILL", "BPT", "BREAK", "BMOV"})) {
    c.pipe = Pipe::Control;
  } else if (base.size() > 1 && base.front() == 'U') { // the uniform datapath
    c.pipe = Pipe::Uniform;
  } else if (isOneOf(base, {"S2UR", "R2UR"})) {
    c.pipe = Pipe::Uniform;
  } else { // IADD3, LOP3, ISETP, FSETP, FMNMX, SEL, SHF, LEA, PRMT, MOV, F2FP, ...
    c.pipe = Pipe::Alu;
  }
  return c;
}

PipeCounts countRange(const SassFunction &function, size_t first, size_t last) {
  PipeCounts counts;
  bool stalls = true;
  double stallSum = 0;
  for (size_t i = first; i <= last && i < function.code.size(); ++i) {
    const SassInstruction &inst = function.code[i];
    InstructionCost c = costOf(inst.opcode);
    counts.instructions[int(c.pipe)] += 1;
    counts.total += 1;
    counts.sharedBytes += c.sharedBytes;
    counts.tensorFlops += c.tensorFlops;
    counts.simtFlops += c.simtFlops;
    stalls = stalls && inst.stall >= 0;
    stallSum += std::max(inst.stall, 1); // an issue takes a cycle even at stall 0
  }
  counts.stallCycles = stalls ? stallSum : -1;
  return counts;
}

const SassLoop *hotLoop(const SassFunction &function, const std::vector<SassLoop> &loops) {
  const SassLoop *best = nullptr;
  double bestTensor = -1;
  for (const SassLoop &loop : loops) {
    double tensor = countRange(function, loop.first, loop.last).of(Pipe::Tensor);
    size_t length = loop.last - loop.first;
    if (!best || tensor > bestTensor || (tensor == bestTensor && length > best->last - best->first))
      best = &loop, bestTensor = tensor;
  }
  return best;
}

} // namespace attnc::perf
