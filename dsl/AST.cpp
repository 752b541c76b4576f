//===- AST.cpp - AST helpers and the --emit=ast dumper --------------------===//
#include "dsl/AST.h"
#include "dialect/TrainBlock.h"

namespace attnc::ast {

const char *exprTypeName(ExprType t) {
  switch (t) {
  case ExprType::Unknown:
    return "unknown";
  case ExprType::Int:
    return "int";
  case ExprType::Float:
    return "float";
  case ExprType::Bool:
    return "bool";
  }
  return "unknown";
}

const char *shareModeName(ShareMode m) {
  switch (m) {
  case ShareMode::None:
    return "none";
  case ShareMode::Headwise:
    return "headwise";
  case ShareMode::Kv:
    return "kv";
  case ShareMode::Layerwise:
    return "layerwise";
  }
  return "none";
}

const char *dtypeName(DType d) {
  switch (d) {
  case DType::F32:
    return "fp32";
  case DType::F16:
    return "fp16";
  case DType::BF16:
    return "bf16";
  }
  return "fp32";
}

const char *objectiveName(Objective o) {
  switch (o) {
  case Objective::CausalLM:
    return "causal_lm";
  case Objective::MLM:
    return "mlm";
  case Objective::Duplicate:
    return "duplicate";
  }
  return "causal_lm";
}

const char *activationName(Activation a) { return act::kindName(a); }

const AttentionDecl *Spec::findAttention(const std::string &name) const {
  for (const AttentionDecl &a : attentions)
    if (a.name == name)
      return &a;
  return nullptr;
}

namespace {

/// Locations print as `@file:line:col`, like Toy's dumper.
std::string at(const SourceLoc &loc) { return " @" + loc.str(); }

class Dumper {
public:
  explicit Dumper(std::ostream &os) : os(os) {}

  void dump(const Spec &spec) {
    for (const AttentionDecl &a : spec.attentions)
      dump(a);
    for (const ModelDecl &m : spec.models)
      dump(m);
  }

private:
  std::ostream &line() { return os << std::string(indent * 2, ' '); }

  void dump(const Expr &e) {
    std::string type = e.type == ExprType::Unknown ? "" : std::string(" : ") + exprTypeName(e.type);
    switch (e.kind) {
    case ExprKind::IntLit:
      line() << "Int " << e.intValue << type << at(e.loc) << "\n";
      return;
    case ExprKind::FloatLit:
      line() << "Float " << e.name << type << at(e.loc) << "\n";
      return;
    case ExprKind::BoolLit:
      line() << "Bool " << e.name << type << at(e.loc) << "\n";
      return;
    case ExprKind::Var:
      line() << "Var " << e.name << type << at(e.loc) << "\n";
      return;
    case ExprKind::Call:
      line() << "Call " << e.name << type << at(e.loc) << "\n";
      break;
    case ExprKind::Unary:
      line() << "Unary '" << e.name << "'" << type << at(e.loc) << "\n";
      break;
    case ExprKind::Binary:
      line() << "Binary '" << e.name << "'" << type << at(e.loc) << "\n";
      break;
    case ExprKind::Select:
      line() << "Select" << type << at(e.loc) << "\n";
      break;
    }
    ++indent;
    for (const auto &a : e.args)
      dump(*a);
    --indent;
  }

  void dump(const AttentionDecl &a) {
    line() << "Attention " << a.name << at(a.loc) << "\n";
    ++indent;
    if (a.kv == KvKind::LowRank)
      line() << "KV lowrank k=" << a.lowRank.k.str() << " share=" << shareModeName(a.lowRank.share)
             << at(a.lowRank.loc) << "\n";
    else
      line() << "KV direct\n";
    line() << "QK " << (a.sharedQK ? "shared" : "separate") << "\n";
    if (a.lsh) {
      const Lsh &l = *a.lsh;
      line() << "LSH buckets=" << l.buckets.str() << " rounds=" << l.rounds.str()
             << " chunk=" << l.chunk.str() << " before=" << l.before << " after=" << l.after
             << " seed=" << l.seed << " dense_fallback=" << (l.denseFallback ? "true" : "false")
             << at(l.loc) << "\n";
    }
    if (a.causal)
      line() << "Mask causal" << at(a.causalLoc) << "\n";
    if (a.keyPadding)
      line() << "Mask padding\n";
    for (const ExprPtr &m : a.masks) {
      line() << "Mask\n";
      ++indent;
      dump(*m);
      --indent;
    }
    if (a.score) {
      line() << "Score\n";
      ++indent;
      dump(*a.score);
      --indent;
    }
    if (a.scale)
      line() << "Scale " << *a.scale << at(a.scaleLoc) << "\n";
    if (a.dropout > 0)
      line() << "Dropout " << a.dropout << "\n";
    for (const HeadParam &p : a.params) {
      line() << (p.learned ? "Param " : "Const ") << p.name << "(h) = ";
      if (p.init == HeadParam::Init::Alibi)
        os << "alibi";
      else
        os << p.value;
      os << at(p.loc) << "\n";
    }
    line() << "Tile block_q=" << a.tile.blockQ.str() << " block_kv=" << a.tile.blockKv.str()
           << " warps=" << a.tile.warps.str() << " stages=" << a.tile.stages.str() << "\n";
    --indent;
  }

  void dump(const ModelDecl &m) {
    line() << "Model " << m.name << at(m.loc) << "\n";
    ++indent;
    line() << "vocab=" << m.vocab.value << " seq=" << m.seq.value << " d_model=" << m.dModel.value
           << " heads=" << m.heads.value << " d_ff=" << m.dFf.value << " layers=" << m.layers.value
           << "\n";
    line() << "dtype=" << dtypeName(m.dtype) << " objective=" << objectiveName(m.objective)
           << " dropout=" << m.dropout << "\n";
    if (m.train.present) {
      line() << "Train" << at(m.train.loc) << "\n";
      ++indent;
      for (const TrainSettingInfo &info : kTrainSettings)
        if (const Setting *s = m.train.setting(info.key); s->present)
          line() << info.key << "=" << s->value << at(s->loc) << "\n";
      --indent;
    }
    for (const LayerDecl &l : m.layerDecls) {
      line() << "Layer " << (l.reversible ? "reversible" : "standard") << at(l.loc) << "\n";
      ++indent;
      if (l.numAttention)
        line() << "Attention " << l.attention << at(l.attentionLoc) << "\n";
      if (l.ffn)
        line() << "FFN act=" << activationName(l.ffn->act) << " chunk=" << l.ffn->chunk.str()
               << at(l.ffn->loc) << "\n";
      --indent;
    }
    --indent;
  }

  std::ostream &os;
  unsigned indent = 0;
};

} // namespace

void dump(const Spec &spec, std::ostream &os) { Dumper(os).dump(spec); }

Setting *TrainDecl::setting(const std::string &key) {
  std::pair<const char *, Setting *> table[] = {{"lr", &lr},
                                                {"warmup", &warmup},
                                                {"batch", &batch},
                                                {"steps", &steps},
                                                {"weight_decay", &weightDecay},
                                                {"clip", &clip},
                                                {"eval_every", &evalEvery}};
  for (auto &[name, s] : table)
    if (key == name)
      return s;
  return nullptr;
}

} // namespace attnc::ast
