//===- Parser.cpp - Recursive-descent parser for .attn specs --------------===//
#include "dsl/Parser.h"
#include "dialect/TrainBlock.h"
#include "dsl/Sema.h"

#include <algorithm>
#include <set>

namespace attnc {

using namespace ast;

//===----------------------------------------------------------------------===//
// Token plumbing
//===----------------------------------------------------------------------===//

void Parser::consume() {
  if (failed)
    return;
  tok = lexer.next();
  if (tok.kind == Tok::Error)
    failed = true; // the lexer has reported it
}

std::string Parser::describe(const Token &t) const {
  switch (t.kind) {
  case Tok::Ident:
  case Tok::Int:
  case Tok::Float: {
    std::string text(t.text.substr(0, 40));
    return "'" + text + (t.text.size() > 40 ? "...'" : "'");
  }
  default:
    return tokName(t.kind);
  }
}

bool Parser::error(const SourceLoc &loc, const std::string &msg) {
  if (!failed)
    diag.error(loc, msg);
  failed = true;
  return false;
}

bool Parser::errorExpected(const std::string &what) {
  return error(tok.loc, "expected " + what + ", found " + describe(tok));
}

bool Parser::expect(Tok kind, const char *what) {
  if (failed)
    return false;
  if (tok.kind != kind)
    return errorExpected(what);
  consume();
  return !failed;
}

bool Parser::expectKeyword(std::string_view word) {
  if (failed)
    return false;
  if (!isKeyword(word))
    return errorExpected("'" + std::string(word) + "'");
  consume();
  return !failed;
}

bool Parser::parseNumber(double &out, const char *what) {
  bool negative = false;
  if (tok.kind == Tok::Minus) {
    negative = true;
    consume();
  }
  if (tok.kind != Tok::Int && tok.kind != Tok::Float)
    return errorExpected(what);
  out = negative ? -tok.floatValue : tok.floatValue;
  consume();
  return !failed;
}

bool Parser::parseDropout(const SourceLoc &loc, double &out) {
  if (!parseNumber(out, "a probability after 'dropout'"))
    return false;
  if (out < 0 || out >= 1)
    return error(loc, "dropout must be in [0, 1), found " + std::to_string(out));
  return true;
}

bool Parser::parseInt(int64_t &out, const char *what) {
  if (tok.kind != Tok::Int)
    return errorExpected(what);
  out = tok.intValue;
  consume();
  return !failed;
}

//===----------------------------------------------------------------------===//
// key = value argument lists
//===----------------------------------------------------------------------===//

bool Parser::parseArgs(std::vector<Arg> &args) {
  if (!expect(Tok::LParen, "'('"))
    return false;
  std::set<std::string> seenKeys;
  while (!failed && tok.kind != Tok::RParen) {
    if (!args.empty() && !expect(Tok::Comma, "',' or ')'"))
      return false;
    if (tok.kind != Tok::Ident)
      return errorExpected("an argument name");
    Arg a;
    a.key = std::string(tok.text);
    a.keyLoc = tok.loc;
    if (!seenKeys.insert(a.key).second)
      return error(a.keyLoc, "argument '" + a.key + "' is given twice");
    consume();
    if (!expect(Tok::Assign, ("'=' after '" + a.key + "'").c_str()))
      return false;
    if (tok.kind != Tok::Ident && tok.kind != Tok::Int && tok.kind != Tok::Float)
      return errorExpected("a value for '" + a.key + "'");
    a.value = tok;
    args.push_back(a);
    consume();
  }
  return expect(Tok::RParen, "')'");
}

bool Parser::argTunable(const Arg &a, Tunable &out) {
  out.present = true;
  out.loc = a.value.loc;
  if (a.value.kind == Tok::Ident && a.value.text == "auto") {
    out.isAuto = true;
    return true;
  }
  if (a.value.kind != Tok::Int)
    return error(a.value.loc,
                 "expected an integer or 'auto' for '" + a.key + "', found " + describe(a.value));
  out.isAuto = false;
  out.value = a.value.intValue;
  return true;
}

bool Parser::argInt(const Arg &a, int64_t &out) {
  if (a.value.kind != Tok::Int)
    return error(a.value.loc,
                 "expected an integer for '" + a.key + "', found " + describe(a.value));
  out = a.value.intValue;
  return true;
}

bool Parser::argBool(const Arg &a, bool &out) {
  if (a.value.kind == Tok::Ident && (a.value.text == "true" || a.value.text == "false")) {
    out = a.value.text == "true";
    return true;
  }
  return error(a.value.loc,
               "expected 'true' or 'false' for '" + a.key + "', found " + describe(a.value));
}

bool Parser::unknownArg(const Arg &a, const char *construct, const char *allowed) {
  return error(a.keyLoc, "unknown argument '" + a.key + "' to " + construct +
                             "; expected one of: " + allowed);
}

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

std::optional<Spec> Parser::parseSpec() {
  Spec spec;
  while (!failed && tok.kind != Tok::Eof) {
    if (tok.kind == Tok::Semi) {
      consume();
    } else if (isKeyword("attention")) {
      parseAttention(spec);
    } else if (isKeyword("model")) {
      parseModel(spec);
    } else {
      errorExpected("'attention' or 'model'");
    }
  }
  if (failed)
    return std::nullopt;
  return spec;
}

bool Parser::parseAttention(Spec &spec) {
  AttentionDecl decl;
  decl.loc = tok.loc;
  consume(); // 'attention'
  if (tok.kind != Tok::Ident)
    return errorExpected("an attention name");
  decl.name = std::string(tok.text);
  consume();
  if (!expect(Tok::LBrace, "'{'"))
    return false;
  std::set<std::string> seenClauses;
  while (!failed && tok.kind != Tok::RBrace) {
    SourceLoc itemLoc = tok.loc;
    // These clauses set one property each; writing one twice is a mistake.
    for (const char *once : {"kv", "qk", "scale", "dropout", "tile"})
      if (isKeyword(once) && !seenClauses.insert(once).second)
        return error(itemLoc, "attention '" + decl.name + "' has two '" + once + "' clauses");
    if (tok.kind == Tok::Semi) {
      consume();
    } else if (isKeyword("kv")) {
      consume();
      if (isKeyword("direct")) {
        decl.kv = KvKind::Direct;
        consume();
      } else if (isKeyword("lowrank")) {
        decl.kv = KvKind::LowRank;
        decl.lowRank.loc = tok.loc;
        consume();
        std::vector<Arg> args;
        if (!parseArgs(args))
          return false;
        for (const Arg &a : args) {
          if (a.key == "k") {
            if (!argTunable(a, decl.lowRank.k))
              return false;
          } else if (a.key == "share") {
            static const std::pair<const char *, ShareMode> modes[] = {
                {"none", ShareMode::None},
                {"headwise", ShareMode::Headwise},
                {"kv", ShareMode::Kv},
                {"layerwise", ShareMode::Layerwise}};
            auto it = std::find_if(std::begin(modes), std::end(modes), [&](auto &m) {
              return a.value.kind == Tok::Ident && a.value.text == m.first;
            });
            if (it == std::end(modes))
              return error(a.value.loc, "unknown sharing mode " + describe(a.value) +
                                            "; expected none, headwise, kv or layerwise");
            decl.lowRank.share = it->second;
          } else {
            return unknownArg(a, "lowrank", "k, share");
          }
        }
      } else {
        return errorExpected("'direct' or 'lowrank' after 'kv'");
      }
    } else if (isKeyword("qk")) {
      consume();
      if (!isKeyword("shared") && !isKeyword("separate"))
        return errorExpected("'shared' or 'separate' after 'qk'");
      decl.sharedQK = isKeyword("shared");
      decl.sharedQKExplicit = true;
      decl.sharedQKLoc = itemLoc;
      consume();
    } else if (isKeyword("bucket")) {
      consume();
      if (!isKeyword("lsh"))
        return errorExpected("'lsh' after 'bucket'");
      Lsh lsh;
      lsh.loc = tok.loc;
      consume();
      std::vector<Arg> args;
      if (!parseArgs(args))
        return false;
      for (const Arg &a : args) {
        bool ok = true;
        if (a.key == "buckets")
          ok = argTunable(a, lsh.buckets);
        else if (a.key == "rounds")
          ok = argTunable(a, lsh.rounds);
        else if (a.key == "chunk")
          ok = argTunable(a, lsh.chunk);
        else if (a.key == "before") {
          ok = argInt(a, lsh.before);
          lsh.beforeLoc = a.value.loc;
        } else if (a.key == "after") {
          ok = argInt(a, lsh.after);
          lsh.afterLoc = a.value.loc;
        } else if (a.key == "seed")
          ok = argInt(a, lsh.seed);
        else if (a.key == "dense_fallback")
          ok = argBool(a, lsh.denseFallback);
        else
          return unknownArg(a, "lsh",
                            "buckets, rounds, chunk, before, after, seed, dense_fallback");
        if (!ok)
          return false;
      }
      if (decl.lsh)
        return error(itemLoc, "attention '" + decl.name + "' has two 'bucket' clauses");
      decl.lsh = lsh;
    } else if (isKeyword("mask")) {
      consume();
      if (isKeyword("causal")) {
        decl.causal = true;
        decl.causalLoc = itemLoc;
        consume();
      } else if (isKeyword("padding")) {
        decl.keyPadding = true;
        consume();
      } else {
        ExprPtr e = parseExpr();
        if (!e)
          return false;
        decl.masks.push_back(std::move(e));
      }
    } else if (isKeyword("score")) {
      consume();
      if (decl.score)
        return error(itemLoc, "attention '" + decl.name +
                                  "' has two 'score' clauses; combine them into one expression");
      decl.score = parseExpr();
      if (!decl.score)
        return false;
    } else if (isKeyword("scale")) {
      consume();
      double v;
      if (!parseNumber(v, "a number after 'scale'"))
        return false;
      decl.scale = v;
      decl.scaleLoc = itemLoc;
    } else if (isKeyword("dropout")) {
      consume();
      if (!parseDropout(itemLoc, decl.dropout))
        return false;
    } else if (isKeyword("param") || isKeyword("const")) {
      HeadParam p;
      p.learned = isKeyword("param");
      p.loc = itemLoc;
      consume();
      if (tok.kind != Tok::Ident)
        return errorExpected("a parameter name");
      p.name = std::string(tok.text);
      consume();
      if (!expect(Tok::LParen, "'(h)' after the parameter name") || !expectKeyword("h") ||
          !expect(Tok::RParen, "')'"))
        return false;
      if (tok.kind == Tok::Assign) {
        consume();
        if (isKeyword("alibi")) {
          p.init = HeadParam::Init::Alibi;
          consume();
        } else if (!parseNumber(p.value, "a number or 'alibi' as initial value")) {
          return false;
        }
      }
      decl.params.push_back(p);
    } else if (isKeyword("tile")) {
      decl.tile.loc = tok.loc;
      consume();
      std::vector<Arg> args;
      if (!parseArgs(args))
        return false;
      for (const Arg &a : args) {
        bool ok;
        if (a.key == "block_q")
          ok = argTunable(a, decl.tile.blockQ);
        else if (a.key == "block_kv")
          ok = argTunable(a, decl.tile.blockKv);
        else if (a.key == "warps")
          ok = argTunable(a, decl.tile.warps);
        else if (a.key == "stages")
          ok = argTunable(a, decl.tile.stages);
        else
          return unknownArg(a, "tile", "block_q, block_kv, warps, stages");
        if (!ok)
          return false;
      }
    } else {
      return errorExpected("an attention clause (kv, qk, bucket, mask, score, "
                           "scale, dropout, param, const, tile) or '}'");
    }
  }
  if (!expect(Tok::RBrace, "'}'"))
    return false;
  spec.attentions.push_back(std::move(decl));
  return true;
}

bool Parser::parseModel(Spec &spec) {
  ModelDecl model;
  model.loc = tok.loc;
  consume(); // 'model'
  if (tok.kind != Tok::Ident)
    return errorExpected("a model name");
  model.name = std::string(tok.text);
  consume();
  if (!expect(Tok::LBrace, "'{'"))
    return false;
  std::set<std::string> seenFields;
  while (!failed && tok.kind != Tok::RBrace) {
    SourceLoc itemLoc = tok.loc;
    for (const char *once : {"dtype", "objective", "dropout"})
      if (isKeyword(once) && !seenFields.insert(once).second)
        return error(itemLoc,
                     "'" + std::string(once) + "' is given twice in model '" + model.name + "'");
    std::pair<const char *, Dim *> dims[] = {{"vocab", &model.vocab},    {"seq", &model.seq},
                                             {"d_model", &model.dModel}, {"heads", &model.heads},
                                             {"d_ff", &model.dFf},       {"layers", &model.layers}};
    auto dim =
        std::find_if(std::begin(dims), std::end(dims), [&](auto &d) { return isKeyword(d.first); });
    if (tok.kind == Tok::Semi) {
      consume();
    } else if (dim != std::end(dims)) {
      std::string key(tok.text);
      consume();
      if (dim->second->present)
        return error(itemLoc, "'" + key + "' is given twice in model '" + model.name + "'");
      dim->second->present = true;
      dim->second->loc = tok.loc;
      if (!parseInt(dim->second->value, ("an integer after '" + key + "'").c_str()))
        return false;
    } else if (isKeyword("dtype")) {
      consume();
      if (isKeyword("fp32"))
        model.dtype = DType::F32;
      else if (isKeyword("fp16"))
        model.dtype = DType::F16;
      else if (isKeyword("bf16"))
        model.dtype = DType::BF16;
      else
        return errorExpected("fp32, fp16 or bf16 after 'dtype'");
      consume();
    } else if (isKeyword("objective")) {
      consume();
      if (isKeyword("causal_lm"))
        model.objective = Objective::CausalLM;
      else if (isKeyword("mlm"))
        model.objective = Objective::MLM;
      else if (isKeyword("duplicate"))
        model.objective = Objective::Duplicate;
      else
        return errorExpected("causal_lm, mlm or duplicate after 'objective'");
      consume();
    } else if (isKeyword("dropout")) {
      consume();
      if (!parseDropout(itemLoc, model.dropout))
        return false;
    } else if (isKeyword("layer")) {
      if (!parseLayer(model))
        return false;
    } else if (isKeyword("train")) {
      if (model.train.present)
        return error(itemLoc, "'train' is given twice in model '" + model.name + "'");
      if (!parseTrain(model))
        return false;
    } else {
      return errorExpected("a model field (vocab, seq, d_model, heads, d_ff, "
                           "layers, dtype, objective, dropout, layer, train) or '}'");
    }
  }
  if (!expect(Tok::RBrace, "'}'"))
    return false;
  spec.models.push_back(std::move(model));
  return true;
}

bool Parser::parseTrain(ModelDecl &model) {
  TrainDecl &train = model.train;
  train.loc = tok.loc;
  train.present = true;
  consume(); // 'train'
  if (!expect(Tok::LBrace, "'{' after 'train'"))
    return false;
  while (!failed && tok.kind != Tok::RBrace) {
    if (tok.kind == Tok::Semi) {
      consume();
      continue;
    }
    const TrainSettingInfo *info =
        tok.kind == Tok::Ident ? findTrainSetting(std::string(tok.text)) : nullptr;
    if (!info)
      return errorExpected("a training setting (" + trainSettingKeys() + ") or '}'");
    Setting &setting = *train.setting(info->key);
    if (setting.present)
      return error(tok.loc, "'" + std::string(info->key) +
                                "' is given twice in the train block of model '" + model.name +
                                "'");
    consume();
    setting.loc = tok.loc;
    setting.present = true;
    if (!parseNumber(setting.value, ("a number after '" + std::string(info->key) + "'").c_str()))
      return false;
    if (std::string why = checkTrainSetting(*info, setting.value); !why.empty())
      return error(setting.loc, why);
  }
  return expect(Tok::RBrace, "'}'");
}

bool Parser::parseLayer(ModelDecl &model) {
  LayerDecl layer;
  layer.loc = tok.loc;
  consume(); // 'layer'
  if (isKeyword("reversible")) {
    layer.reversible = true;
    consume();
  } else if (isKeyword("standard")) {
    consume();
  }
  if (!expect(Tok::LBrace, "'{' (or 'reversible' / 'standard') after 'layer'"))
    return false;
  while (!failed && tok.kind != Tok::RBrace) {
    if (tok.kind == Tok::Semi) {
      consume();
    } else if (isKeyword("attention")) {
      SourceLoc loc = tok.loc;
      consume();
      if (tok.kind != Tok::Ident)
        return errorExpected("the name of an attention definition");
      if (++layer.numAttention == 1) {
        layer.attention = std::string(tok.text);
        layer.attentionLoc = tok.loc;
      }
      (void)loc;
      consume();
    } else if (isKeyword("ffn")) {
      FfnDecl ffn;
      ffn.loc = tok.loc;
      consume();
      if (tok.kind == Tok::LParen) {
        std::vector<Arg> args;
        if (!parseArgs(args))
          return false;
        for (const Arg &a : args) {
          if (a.key == "act") {
            if (a.value.kind == Tok::Ident && a.value.text == "gelu")
              ffn.act = Activation::Gelu;
            else if (a.value.kind == Tok::Ident && a.value.text == "relu")
              ffn.act = Activation::Relu;
            else if (a.value.kind == Tok::Ident && a.value.text == "silu")
              ffn.act = Activation::Silu;
            else
              return error(a.value.loc, "unknown activation " + describe(a.value) +
                                            "; expected gelu, relu or silu");
          } else if (a.key == "chunk") {
            if (!argTunable(a, ffn.chunk))
              return false;
          } else {
            return unknownArg(a, "ffn", "act, chunk");
          }
        }
      }
      if (++layer.numFfn == 1)
        layer.ffn = ffn;
    } else {
      return errorExpected("'attention', 'ffn' or '}' in a layer");
    }
  }
  if (!expect(Tok::RBrace, "'}'"))
    return false;
  model.layerDecls.push_back(std::move(layer));
  return true;
}

//===----------------------------------------------------------------------===//
// Expressions (precedence climbing; depth-limited)
//===----------------------------------------------------------------------===//

std::string Parser::tooDeep() {
  return "expression is nested too deeply (more than " + std::to_string(kMaxExprDepth) + " levels)";
}

bool Parser::enterNesting(const SourceLoc &loc) {
  if (++nesting <= kMaxExprDepth)
    return true;
  --nesting;
  return error(loc, tooDeep());
}

ExprPtr Parser::makeNode(ExprKind kind, SourceLoc loc, std::string name,
                         std::vector<ExprPtr> args) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->loc = std::move(loc);
  e->name = std::move(name);
  unsigned depth = 0;
  for (auto &a : args)
    depth = std::max(depth, a->depth);
  e->depth = depth + 1;
  e->args = std::move(args);
  if (e->depth > kMaxExprDepth) {
    error(e->loc, tooDeep());
    return nullptr;
  }
  return e;
}

ExprPtr Parser::parseExpr() {
  if (failed)
    return nullptr;
  if (!enterNesting(tok.loc))
    return nullptr;
  ExprPtr e = parseTernary();
  --nesting;
  return e;
}

ExprPtr Parser::parseTernary() {
  ExprPtr cond = parseBinary(0);
  if (!cond || tok.kind != Tok::Question)
    return cond;
  SourceLoc loc = tok.loc;
  consume();
  ExprPtr a = parseExpr();
  if (!a || !expect(Tok::Colon, "':' in a conditional expression"))
    return nullptr;
  ExprPtr b = parseExpr();
  if (!b)
    return nullptr;
  std::vector<ExprPtr> args;
  args.push_back(std::move(cond));
  args.push_back(std::move(a));
  args.push_back(std::move(b));
  return makeNode(ExprKind::Select, loc, "?:", std::move(args));
}

/// Binary operator precedence, or -1 for a token that is not one.
static int precedence(Tok t) {
  switch (t) {
  case Tok::OrOr:
    return 1;
  case Tok::AndAnd:
    return 2;
  case Tok::EqEq:
  case Tok::NotEq:
    return 3;
  case Tok::Less:
  case Tok::LessEq:
  case Tok::Greater:
  case Tok::GreaterEq:
    return 4;
  case Tok::Plus:
  case Tok::Minus:
    return 5;
  case Tok::Star:
  case Tok::Slash:
  case Tok::Percent:
    return 6;
  default:
    return -1;
  }
}

ExprPtr Parser::parseBinary(int minPrec) {
  ExprPtr lhs = parseUnary();
  while (lhs && !failed) {
    int prec = precedence(tok.kind);
    if (prec < 0 || prec < minPrec)
      return lhs;
    Token op = tok;
    consume();
    if (!enterNesting(op.loc))
      return nullptr;
    ExprPtr rhs = parseBinary(prec + 1); // binary operators are left-associative
    --nesting;
    if (!rhs)
      return nullptr;
    std::vector<ExprPtr> args;
    args.push_back(std::move(lhs));
    args.push_back(std::move(rhs));
    lhs = makeNode(ExprKind::Binary, op.loc, std::string(op.text), std::move(args));
  }
  return failed ? nullptr : std::move(lhs);
}

ExprPtr Parser::parseUnary() {
  if (tok.kind == Tok::Minus || tok.kind == Tok::Bang) {
    Token op = tok;
    consume();
    if (!enterNesting(op.loc))
      return nullptr;
    ExprPtr operand = parseUnary();
    --nesting;
    if (!operand)
      return nullptr;
    std::vector<ExprPtr> args;
    args.push_back(std::move(operand));
    return makeNode(ExprKind::Unary, op.loc, std::string(op.text), std::move(args));
  }
  return parsePrimary();
}

ExprPtr Parser::parsePrimary() {
  if (failed)
    return nullptr;
  Token t = tok;
  switch (t.kind) {
  case Tok::Int: {
    consume();
    auto e = makeNode(ExprKind::IntLit, t.loc, std::string(t.text), {});
    if (e)
      e->intValue = t.intValue;
    return e;
  }
  case Tok::Float: {
    consume();
    auto e = makeNode(ExprKind::FloatLit, t.loc, std::string(t.text), {});
    if (e)
      e->floatValue = t.floatValue;
    return e;
  }
  case Tok::LParen: {
    consume();
    ExprPtr e = parseExpr();
    if (!e || !expect(Tok::RParen, "')'"))
      return nullptr;
    return e;
  }
  case Tok::Ident: {
    consume();
    if (t.text == "true" || t.text == "false") {
      auto e = makeNode(ExprKind::BoolLit, t.loc, std::string(t.text), {});
      if (e)
        e->intValue = t.text == "true";
      return e;
    }
    if (tok.kind != Tok::LParen)
      return makeNode(ExprKind::Var, t.loc, std::string(t.text), {});
    consume();
    std::vector<ExprPtr> args;
    while (!failed && tok.kind != Tok::RParen) {
      if (!args.empty() && !expect(Tok::Comma, "',' or ')' in a call"))
        return nullptr;
      if (args.size() >= 8) {
        error(tok.loc, "too many arguments in a call to '" + std::string(t.text) + "'");
        return nullptr;
      }
      ExprPtr a = parseExpr();
      if (!a)
        return nullptr;
      args.push_back(std::move(a));
    }
    if (!expect(Tok::RParen, "')'"))
      return nullptr;
    return makeNode(ExprKind::Call, t.loc, std::string(t.text), std::move(args));
  }
  default:
    errorExpected("an expression");
    return nullptr;
  }
}

//===----------------------------------------------------------------------===//
// Entry point
//===----------------------------------------------------------------------===//

std::optional<Spec> parseAndCheck(std::string_view buffer, const std::string &filename,
                                  DiagnosticEngine &diag) {
  auto file = std::make_shared<const std::string>(filename);
  if (buffer.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    diag.error(SourceLoc{file, 1, 1},
               "the spec is empty; expected at least one 'attention' or 'model'");
    return std::nullopt;
  }
  Lexer lexer(buffer, file, diag);
  Parser parser(lexer, diag);
  std::optional<Spec> spec = parser.parseSpec();
  if (!spec || diag.hasErrors())
    return std::nullopt;
  if (spec->attentions.empty() && spec->models.empty()) {
    diag.error(SourceLoc{file, 1, 1}, "the spec defines nothing; expected at "
                                      "least one 'attention' or 'model'");
    return std::nullopt;
  }
  if (!checkSpec(*spec, diag))
    return std::nullopt;
  return spec;
}

} // namespace attnc
