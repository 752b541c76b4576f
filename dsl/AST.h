//===- AST.h - Abstract syntax of .attn specs -------------------*- C++ -*-===//
//
// A spec is a list of attention variants and models. Every tunable integer
// (`k`, `chunk`, tile sizes) is a `Tunable`: a number or `auto`.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DSL_AST_H
#define ATTNC_DSL_AST_H

#include "attnc/abi/Activations.h"
#include "dsl/Diagnostics.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace attnc::ast {

/// An integer that may be left to the tuner (`auto`).
struct Tunable {
  bool present = false; ///< written in the spec (else the default applies)
  bool isAuto = false;
  int64_t value = 0;
  SourceLoc loc;

  static Tunable fixed(int64_t v) { return {false, false, v, {}}; }
  static Tunable automatic() { return {false, true, 0, {}}; }
  std::string str() const { return isAuto ? "auto" : std::to_string(value); }
};

/// Static type of a score/mask expression.
enum class ExprType { Unknown, Int, Float, Bool };
const char *exprTypeName(ExprType t);

enum class ExprKind { IntLit, FloatLit, BoolLit, Var, Call, Unary, Binary, Select };

/// Score and mask expressions. One node type keeps the tree small and the
/// dumper, sema and MLIRGen simple; `depth` bounds recursion everywhere.
struct Expr {
  ExprKind kind;
  SourceLoc loc;
  int64_t intValue = 0;
  double floatValue = 0;
  std::string name; ///< variable, function or operator spelling
  std::vector<std::unique_ptr<Expr>> args;
  unsigned depth = 1;
  ExprType type = ExprType::Unknown; ///< filled in by Sema
};
using ExprPtr = std::unique_ptr<Expr>;

enum class KvKind { Direct, LowRank };
enum class ShareMode { None, Headwise, Kv, Layerwise };
const char *shareModeName(ShareMode m);

struct LowRank {
  Tunable k = Tunable::automatic();
  ShareMode share = ShareMode::None;
  SourceLoc loc;
};

struct Lsh {
  SourceLoc loc;
  Tunable buckets = Tunable::fixed(32);
  Tunable rounds = Tunable::fixed(1);
  Tunable chunk = Tunable::fixed(64);
  int64_t before = 1;
  int64_t after = 0;
  SourceLoc beforeLoc, afterLoc;
  int64_t seed = 0;
  bool denseFallback = true; ///< emit dense attention for short inputs
};

/// A named per-head parameter used in score expressions as `name(h)`.
struct HeadParam {
  std::string name;
  SourceLoc loc;
  enum class Init { Constant, Alibi } init = Init::Constant;
  double value = 0;
  bool learned = true;
};

struct TileConfig {
  Tunable blockQ = Tunable::automatic();
  Tunable blockKv = Tunable::automatic();
  Tunable warps = Tunable::automatic();
  Tunable stages = Tunable::automatic();
  SourceLoc loc;
};

struct AttentionDecl {
  std::string name;
  SourceLoc loc;
  KvKind kv = KvKind::Direct;
  LowRank lowRank;
  bool sharedQK = false;
  SourceLoc sharedQKLoc;
  bool sharedQKExplicit = false;
  std::optional<Lsh> lsh;
  bool causal = false;
  SourceLoc causalLoc;
  bool keyPadding = false;
  std::vector<ExprPtr> masks; ///< user masks, combined with AND
  ExprPtr score;
  std::optional<double> scale;
  SourceLoc scaleLoc;
  double dropout = 0;
  std::vector<HeadParam> params;
  TileConfig tile;
};

enum class DType { F32, F16, BF16 };
enum class Objective { CausalLM, MLM, Duplicate };
using Activation = ::attnc::act::Kind; // Gelu, Relu, Silu
const char *dtypeName(DType d);
const char *objectiveName(Objective o);
const char *activationName(Activation a);

struct FfnDecl {
  SourceLoc loc;
  Activation act = Activation::Gelu;
  Tunable chunk = Tunable::automatic();
};

struct LayerDecl {
  SourceLoc loc;
  bool reversible = false;
  std::string attention; ///< name of an AttentionDecl
  SourceLoc attentionLoc;
  unsigned numAttention = 0;
  std::optional<FfnDecl> ffn;
  unsigned numFfn = 0;
};

/// An integer model dimension with where it was written.
struct Dim {
  int64_t value = 0;
  bool present = false;
  SourceLoc loc;
};

/// A training setting of a `train { ... }` block, with where it was written.
struct Setting {
  double value = 0;
  bool present = false;
  SourceLoc loc;
};

/// A model's recommended training settings (`train { lr 2e-3; warmup 30;
/// batch 8; steps 300 }`): what attnc train uses where no flag says
/// otherwise. Each is optional.
struct TrainDecl {
  SourceLoc loc;
  bool present = false;
  Setting lr, warmup, batch, steps, weightDecay, clip, evalEvery;
  /// The setting of keyword `key` (dialect/TrainBlock.h), or null.
  Setting *setting(const std::string &key);
  const Setting *setting(const std::string &key) const {
    return const_cast<TrainDecl *>(this)->setting(key);
  }
};

struct ModelDecl {
  std::string name;
  SourceLoc loc;
  Dim vocab, seq, dModel, heads, dFf, layers;
  DType dtype = DType::F32;
  Objective objective = Objective::CausalLM;
  double dropout = 0;
  TrainDecl train;
  std::vector<LayerDecl> layerDecls; ///< exactly one after Sema
};

struct Spec {
  std::vector<AttentionDecl> attentions;
  std::vector<ModelDecl> models;

  const AttentionDecl *findAttention(const std::string &name) const;
};

/// Prints the AST with source locations (`attnc compile --emit=ast`).
void dump(const Spec &spec, std::ostream &os);

} // namespace attnc::ast

#endif // ATTNC_DSL_AST_H
