//===- Sema.cpp - Semantic checks of .attn specs --------------------------===//
#include "dsl/Sema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace attnc {

using namespace ast;

namespace {

const char *const kBuiltins[] = {"abs",     "exp", "log", "sqrt",  "tanh",
                                 "sigmoid", "min", "max", "where", "float"};
const char *const kVariables[] = {"s", "b", "h", "q", "kv"};
const char *const kReservedWords[] = {"true", "false", "auto"};

/// True if `e` reads the variable `name` anywhere.
bool readsVariable(const Expr &e, const char *name) {
  if (e.kind == ExprKind::Var && e.name == name)
    return true;
  for (const auto &a : e.args)
    if (readsVariable(*a, name))
      return true;
  return false;
}

bool isNumeric(ExprType t) { return t == ExprType::Int || t == ExprType::Float; }

ExprType promote(ExprType a, ExprType b) {
  return (a == ExprType::Float || b == ExprType::Float) ? ExprType::Float : ExprType::Int;
}

/// Types one score or mask expression in the scope of one attention variant.
class ExprChecker {
public:
  ExprChecker(const AttentionDecl &decl, bool allowScore, DiagnosticEngine &diag)
      : decl(decl), allowScore(allowScore), diag(diag) {}

  ExprType check(Expr &e) {
    e.type = infer(e);
    return e.type;
  }

private:
  ExprType fail(const SourceLoc &loc, const std::string &msg) {
    diag.error(loc, msg);
    return ExprType::Unknown;
  }

  const HeadParam *findParam(const std::string &name) const {
    for (const HeadParam &p : decl.params)
      if (p.name == name)
        return &p;
    return nullptr;
  }

  ExprType infer(Expr &e) {
    switch (e.kind) {
    case ExprKind::IntLit:
      return ExprType::Int;
    case ExprKind::FloatLit:
      if (std::fabs(e.floatValue) > std::numeric_limits<float>::max())
        return fail(e.loc, "number '" + e.name + "' does not fit in f32 (scores are f32)");
      return ExprType::Float;
    case ExprKind::BoolLit:
      return ExprType::Bool;
    case ExprKind::Var:
      if (e.name == "s") {
        if (!allowScore)
          return fail(e.loc, "the score 's' cannot appear in a mask; masks "
                             "depend only on b, h, q and kv");
        return ExprType::Float;
      }
      for (const char *v : kVariables)
        if (e.name == v)
          return ExprType::Int;
      if (findParam(e.name))
        return fail(e.loc, "per-head parameter '" + e.name + "' must be indexed by head: write '" +
                               e.name + "(h)'");
      return fail(e.loc,
                  "unknown name '" + e.name + "'; expected s, b, h, q, kv or a declared parameter");
    case ExprKind::Unary: {
      ExprType t = check(*e.args[0]);
      if (t == ExprType::Unknown)
        return t;
      if (e.name == "!") {
        if (t != ExprType::Bool)
          return fail(e.loc, std::string("'!' needs a boolean operand, found ") + exprTypeName(t));
        return t;
      }
      if (!isNumeric(t))
        return fail(e.loc, std::string("unary '-' needs a number, found ") + exprTypeName(t));
      return t;
    }
    case ExprKind::Binary:
      return inferBinary(e);
    case ExprKind::Select: {
      ExprType c = check(*e.args[0]);
      ExprType a = check(*e.args[1]);
      ExprType b = check(*e.args[2]);
      if (c == ExprType::Unknown || a == ExprType::Unknown || b == ExprType::Unknown)
        return ExprType::Unknown;
      return selectType(e, c, a, b);
    }
    case ExprKind::Call:
      return inferCall(e);
    }
    return ExprType::Unknown;
  }

  ExprType selectType(Expr &e, ExprType c, ExprType a, ExprType b) {
    if (c != ExprType::Bool)
      return fail(e.args[0]->loc,
                  std::string("condition must be boolean, found ") + exprTypeName(c));
    if (a == ExprType::Bool && b == ExprType::Bool)
      return ExprType::Bool;
    if (!isNumeric(a) || !isNumeric(b))
      return fail(e.loc, std::string("both branches must be numbers or both "
                                     "booleans, found ") +
                             exprTypeName(a) + " and " + exprTypeName(b));
    return promote(a, b);
  }

  ExprType inferBinary(Expr &e) {
    ExprType a = check(*e.args[0]);
    ExprType b = check(*e.args[1]);
    if (a == ExprType::Unknown || b == ExprType::Unknown)
      return ExprType::Unknown;
    const std::string &op = e.name;
    auto mismatch = [&](const char *need) {
      return fail(e.loc, "'" + op + "' needs " + need + " operands, found " + exprTypeName(a) +
                             " and " + exprTypeName(b));
    };
    if (op == "&&" || op == "||")
      return (a == ExprType::Bool && b == ExprType::Bool) ? ExprType::Bool : mismatch("boolean");
    if (op == "==" || op == "!=") {
      if (a == ExprType::Bool && b == ExprType::Bool)
        return ExprType::Bool;
      return (isNumeric(a) && isNumeric(b)) ? ExprType::Bool
                                            : mismatch("two numeric or two boolean");
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=")
      return (isNumeric(a) && isNumeric(b)) ? ExprType::Bool : mismatch("numeric");
    if ((op == "/" || op == "%") && e.args[1]->kind == ExprKind::IntLit && e.args[1]->intValue == 0)
      return fail(e.loc, "integer division by zero");
    if (op == "%")
      return (a == ExprType::Int && b == ExprType::Int) ? ExprType::Int : mismatch("integer");
    // + - * /
    if (!isNumeric(a) || !isNumeric(b))
      return mismatch("numeric");
    return promote(a, b);
  }

  ExprType inferCall(Expr &e) {
    if (const HeadParam *p = findParam(e.name)) {
      if (e.args.size() != 1)
        return fail(e.loc, "per-head parameter '" + e.name +
                               "' takes one argument (the head), found " +
                               std::to_string(e.args.size()));
      ExprType t = check(*e.args[0]);
      if (t == ExprType::Unknown)
        return t;
      if (t != ExprType::Int)
        return fail(e.args[0]->loc,
                    std::string("a head index must be an integer, found ") + exprTypeName(t));
      if (p->learned && !(e.args[0]->kind == ExprKind::Var && e.args[0]->name == "h"))
        return fail(e.args[0]->loc, "learned parameter '" + e.name +
                                        "' must be indexed by 'h' (its gradient is "
                                        "accumulated per head); use 'const' for a fixed table");
      return ExprType::Float;
    }
    if (!isBuiltinFunction(e.name))
      return fail(e.loc, "unknown function '" + e.name +
                             "'; expected abs, exp, log, sqrt, tanh, sigmoid, min, "
                             "max, where, float or a declared per-head parameter");
    size_t want = (e.name == "min" || e.name == "max") ? 2 : e.name == "where" ? 3 : 1;
    if (e.args.size() != want)
      return fail(e.loc, "'" + e.name + "' takes " + std::to_string(want) + " argument" +
                             (want == 1 ? "" : "s") + ", found " + std::to_string(e.args.size()));
    std::vector<ExprType> ts;
    for (auto &a : e.args) {
      ts.push_back(check(*a));
      if (ts.back() == ExprType::Unknown)
        return ExprType::Unknown;
    }
    if (e.name == "where")
      return selectType(e, ts[0], ts[1], ts[2]);
    for (size_t i = 0; i < ts.size(); ++i)
      if (!isNumeric(ts[i]))
        return fail(e.args[i]->loc,
                    "'" + e.name + "' needs a number, found " + exprTypeName(ts[i]));
    if (e.name == "abs")
      return ts[0];
    if (e.name == "min" || e.name == "max")
      return promote(ts[0], ts[1]);
    return ExprType::Float; // exp log sqrt tanh sigmoid float
  }

  const AttentionDecl &decl;
  bool allowScore;
  DiagnosticEngine &diag;
};

class SpecChecker {
public:
  SpecChecker(Spec &spec, DiagnosticEngine &diag) : spec(spec), diag(diag) {}

  bool run() {
    std::vector<std::pair<const std::string *, const SourceLoc *>> decls;
    for (const AttentionDecl &a : spec.attentions)
      decls.push_back({&a.name, &a.loc});
    for (const ModelDecl &m : spec.models)
      decls.push_back({&m.name, &m.loc});
    std::stable_sort(decls.begin(), decls.end(), [](const auto &x, const auto &y) {
      return std::make_pair(x.second->line, x.second->col) <
             std::make_pair(y.second->line, y.second->col);
    });
    for (const auto &[name, loc] : decls)
      declare(*name, *loc);
    for (AttentionDecl &a : spec.attentions)
      checkAttention(a);
    for (ModelDecl &m : spec.models)
      checkModel(m);
    return !diag.hasErrors();
  }

private:
  void declare(const std::string &name, const SourceLoc &loc) {
    auto [it, inserted] = symbols.emplace(name, loc);
    if (!inserted) {
      diag.error(loc, "'" + name + "' is already defined");
      diag.note(it->second, "previous definition of '" + name + "' is here");
    }
  }

  void checkTunable(const Tunable &t, const char *what, int64_t lo, int64_t hi,
                    const SourceLoc &fallback) {
    if (t.isAuto)
      return;
    if (t.value < lo || t.value > hi)
      diag.error(t.present ? t.loc : fallback, std::string(what) + " must be in [" +
                                                   std::to_string(lo) + ", " + std::to_string(hi) +
                                                   "], found " + std::to_string(t.value));
  }

  void checkAttention(AttentionDecl &a) {
    if (a.kv == KvKind::LowRank) {
      checkTunable(a.lowRank.k, "low-rank k", 1, int64_t(1) << 24, a.lowRank.loc);
      if (a.causal)
        diag.error(a.causalLoc, "causal low-rank attention is not supported: the "
                                "Linformer projection mixes future positions into every key");
    }
    if (a.lsh) {
      Lsh &l = *a.lsh;
      if (a.kv == KvKind::LowRank)
        diag.error(l.loc, "attention '" + a.name +
                              "' cannot be both low-rank ('kv lowrank') and LSH-bucketed");
      if (a.sharedQKExplicit && !a.sharedQK)
        diag.error(a.sharedQKLoc, "LSH attention needs 'qk shared' (keys are the "
                                  "normalised queries), found 'qk separate'");
      a.sharedQK = true;
      checkTunable(l.buckets, "buckets", 2, 1 << 16, l.loc);
      if (!l.buckets.isAuto && l.buckets.value % 2 != 0)
        diag.error(l.buckets.present ? l.buckets.loc : l.loc,
                   "buckets must be even (the hash is argmax over [xR; -xR]), found " +
                       std::to_string(l.buckets.value));
      checkTunable(l.rounds, "rounds", 1, 64, l.loc);
      checkTunable(l.chunk, "chunk", 1, 1 << 20, l.loc);
      if (l.before < 0 || l.before > 16)
        diag.error(l.beforeLoc.line ? l.beforeLoc : l.loc,
                   "before must be in [0, 16], found " + std::to_string(l.before));
      if (l.after < 0 || l.after > 16)
        diag.error(l.afterLoc.line ? l.afterLoc : l.loc,
                   "after must be in [0, 16], found " + std::to_string(l.after));
      for (const HeadParam &p : a.params)
        if (p.learned)
          diag.error(p.loc, "learned parameter '" + p.name +
                                "' is not supported with LSH attention yet; declare it "
                                "'const' (a fixed per-head value)");
    } else if (a.sharedQK) {
      diag.error(a.sharedQKLoc,
                 "shared QK is only defined for LSH attention (add a 'bucket lsh(...)' clause)");
    }
    if (a.scale && !(*a.scale > 0))
      diag.error(a.scaleLoc, "scale must be positive, found " + std::to_string(*a.scale));
    std::set<std::string> seen;
    for (const HeadParam &p : a.params) {
      bool reserved = isBuiltinFunction(p.name);
      for (const char *v : kVariables)
        reserved |= p.name == v;
      for (const char *w : kReservedWords)
        reserved |= p.name == w;
      if (reserved)
        diag.error(p.loc,
                   "parameter name '" + p.name + "' is reserved (a variable or builtin function)");
      if (!seen.insert(p.name).second)
        diag.error(p.loc, "parameter '" + p.name + "' is declared twice");
    }
    checkTunable(a.tile.blockQ, "tile block_q", 1, 1024, a.tile.loc);
    checkTunable(a.tile.blockKv, "tile block_kv", 1, 1024, a.tile.loc);
    checkTunable(a.tile.stages, "tile stages", 1, 8, a.tile.loc);
    if (!a.tile.warps.isAuto) {
      int64_t w = a.tile.warps.value;
      if (w != 1 && w != 2 && w != 4 && w != 8 && w != 16)
        diag.error(a.tile.warps.loc,
                   "tile warps must be 1, 2, 4, 8 or 16, found " + std::to_string(w));
    }
    if (a.score) {
      ExprType t = ExprChecker(a, /*allowScore=*/true, diag).check(*a.score);
      if (t == ExprType::Bool)
        diag.error(a.score->loc, "a score must be a number, found bool; use 'mask' "
                                 "for boolean conditions");
    }
    if (a.kv == KvKind::LowRank) {
      // Low-rank keys are projections of all positions: there is no key index.
      for (const ExprPtr &m : a.masks)
        if (readsVariable(*m, "kv"))
          diag.error(m->loc, "a mask of low-rank attention cannot read 'kv': projected "
                             "keys mix all positions");
      if (a.score && readsVariable(*a.score, "kv"))
        diag.error(a.score->loc, "a score of low-rank attention cannot read 'kv': projected "
                                 "keys mix all positions");
    }
    for (ExprPtr &m : a.masks) {
      ExprType t = ExprChecker(a, /*allowScore=*/false, diag).check(*m);
      if (t != ExprType::Bool && t != ExprType::Unknown)
        diag.error(m->loc, std::string("a mask must be a boolean condition (true keeps "
                                       "the key), found ") +
                               exprTypeName(t));
    }
  }

  void checkDim(const ModelDecl &m, const Dim &d, const char *name, int64_t lo, int64_t hi) {
    if (!d.present) {
      diag.error(m.loc, "model '" + m.name + "' is missing '" + name + "'");
      return;
    }
    if (d.value < lo || d.value > hi)
      diag.error(d.loc, std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], found " + std::to_string(d.value));
  }

  void checkModel(ModelDecl &m) {
    checkDim(m, m.vocab, "vocab", 2, 1 << 20);
    checkDim(m, m.seq, "seq", 1, 1 << 24);
    checkDim(m, m.dModel, "d_model", 1, 1 << 16);
    checkDim(m, m.heads, "heads", 1, 1024);
    checkDim(m, m.layers, "layers", 1, 4096);
    if (!m.dFf.present) {
      m.dFf.value = 4 * m.dModel.value;
    } else if (m.dFf.value < 1 || m.dFf.value > (1 << 20)) {
      diag.error(m.dFf.loc, "d_ff must be in [1, 1048576], found " + std::to_string(m.dFf.value));
    }
    if (m.heads.present && m.dModel.present && m.heads.value > 0 &&
        m.dModel.value % m.heads.value != 0)
      diag.error(m.heads.loc, "heads (" + std::to_string(m.heads.value) +
                                  ") must divide d_model (" + std::to_string(m.dModel.value) + ")");
    if (m.objective == Objective::Duplicate && m.seq.present && m.seq.value % 2 != 0)
      diag.error(m.seq.loc, "the duplicate objective ('0 w 0 w') needs an even seq, found " +
                                std::to_string(m.seq.value));
    const TrainDecl &t = m.train;
    if (t.warmup.present && t.steps.present && t.warmup.value > t.steps.value)
      diag.error(t.warmup.loc, "warmup " + std::to_string(int64_t(t.warmup.value)) +
                                   " is longer than the " + std::to_string(int64_t(t.steps.value)) +
                                   " training steps of model '" + m.name + "'");
    if (m.layerDecls.empty()) {
      diag.error(m.loc, "model '" + m.name + "' has no 'layer' block");
      return;
    }
    if (m.layerDecls.size() > 1)
      diag.error(m.layerDecls[1].loc, "model '" + m.name +
                                          "' has more than one 'layer' block; "
                                          "'layers N' repeats the one block N times");
    checkLayer(m, m.layerDecls[0]);
  }

  void checkLayer(const ModelDecl &m, const LayerDecl &l) {
    if (l.numAttention != 1 || (l.reversible && l.numFfn != 1) || l.numFfn > 1) {
      std::string kind = l.reversible ? "a reversible layer" : "a layer";
      std::string need = l.reversible ? "exactly one 'attention' and one 'ffn'"
                                      : "exactly one 'attention' and at most one 'ffn'";
      diag.error(l.loc, kind + " needs " + need + ", found " + std::to_string(l.numAttention) +
                            " attention and " + std::to_string(l.numFfn) + " ffn");
    }
    if (l.ffn)
      checkTunable(l.ffn->chunk, "ffn chunk", 1, int64_t(1) << 24, l.ffn->loc);
    if (l.numAttention == 0)
      return;
    const AttentionDecl *a = spec.findAttention(l.attention);
    if (!a) {
      diag.error(l.attentionLoc, "unknown attention '" + l.attention + "'");
      return;
    }
    if (a->kv == KvKind::LowRank && !a->lowRank.k.isAuto && m.seq.present &&
        a->lowRank.k.value > m.seq.value) {
      diag.error(a->lowRank.k.present ? a->lowRank.k.loc : a->lowRank.loc,
                 "low-rank k = " + std::to_string(a->lowRank.k.value) + " exceeds seq = " +
                     std::to_string(m.seq.value) + " of model '" + m.name + "'");
      diag.note(l.attentionLoc, "used here");
    }
    bool needsCausal = m.objective == Objective::CausalLM || m.objective == Objective::Duplicate;
    if (needsCausal && !a->causal) {
      diag.error(l.attentionLoc, std::string("objective ") + objectiveName(m.objective) +
                                     " predicts the next byte and needs causal attention, but '" +
                                     a->name + "' has no 'mask causal'");
    }
    if (m.objective == Objective::MLM && a->causal)
      diag.warning(l.attentionLoc, "objective mlm with causal attention '" + a->name +
                                       "': masked positions cannot see later context");
  }

  Spec &spec;
  DiagnosticEngine &diag;
  std::map<std::string, SourceLoc> symbols;
};

} // namespace

bool isBuiltinFunction(const std::string &name) {
  for (const char *f : kBuiltins)
    if (name == f)
      return true;
  return false;
}

bool checkSpec(Spec &spec, DiagnosticEngine &diag) { return SpecChecker(spec, diag).run(); }

} // namespace attnc
