//===- ParserTest.cpp - Parser and Sema units -----------------------------===//
#include "dsl/Parser.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace attnc;

namespace {
struct Result {
  std::optional<ast::Spec> spec;
  std::string errors;
};

Result parse(const std::string &text) {
  std::ostringstream os;
  DiagnosticEngine diag(text, os);
  Result r;
  r.spec = parseAndCheck(text, "t.attn", diag);
  r.errors = os.str();
  return r;
}
} // namespace

TEST(Parser, LinformerVariant) {
  Result r = parse("attention lin { kv lowrank(k = 128, share = headwise) }");
  ASSERT_TRUE(r.spec) << r.errors;
  const ast::AttentionDecl &a = r.spec->attentions.at(0);
  EXPECT_EQ(a.kv, ast::KvKind::LowRank);
  EXPECT_EQ(a.lowRank.k.value, 128);
  EXPECT_EQ(a.lowRank.share, ast::ShareMode::Headwise);
}

TEST(Parser, LshImpliesSharedQK) {
  Result r = parse("attention l { bucket lsh(buckets = 8, rounds = auto) mask causal }");
  ASSERT_TRUE(r.spec) << r.errors;
  const ast::AttentionDecl &a = r.spec->attentions.at(0);
  EXPECT_TRUE(a.sharedQK);
  EXPECT_TRUE(a.lsh->rounds.isAuto);
  EXPECT_EQ(a.lsh->buckets.value, 8);
}

TEST(Parser, PrecedenceAndTypes) {
  Result r = parse("attention x { score s - 2 * abs(q - kv) mask q >= kv && kv > 0 }");
  ASSERT_TRUE(r.spec) << r.errors;
  const ast::Expr &score = *r.spec->attentions[0].score;
  EXPECT_EQ(score.name, "-");
  EXPECT_EQ(score.type, ast::ExprType::Float);
  EXPECT_EQ(score.args[1]->name, "*");
  EXPECT_EQ(score.args[1]->type, ast::ExprType::Int);
  EXPECT_EQ(r.spec->attentions[0].masks[0]->name, "&&");
}

TEST(Parser, DefaultDff) {
  Result r = parse("attention a { mask causal }\n"
                   "model m { vocab 256 seq 64 d_model 32 heads 2 layers 1 "
                   "layer { attention a ffn } }");
  ASSERT_TRUE(r.spec) << r.errors;
  EXPECT_EQ(r.spec->models[0].dFf.value, 128);
}

TEST(Parser, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '(');
  Result r = parse("attention a { score " + deep + "s }");
  EXPECT_FALSE(r.spec);
  EXPECT_NE(r.errors.find("nested too deeply"), std::string::npos) << r.errors;
}

TEST(Parser, LongOperatorChainIsBounded) {
  std::string chain = "s";
  for (int i = 0; i < 50000; ++i)
    chain += " + 1";
  Result r = parse("attention a { score " + chain + " }");
  EXPECT_FALSE(r.spec);
  EXPECT_NE(r.errors.find("nested too deeply"), std::string::npos) << r.errors;
}

TEST(Parser, CommentOnlySpecIsEmpty) {
  Result r = parse("// nothing here\n");
  EXPECT_FALSE(r.spec);
  EXPECT_NE(r.errors.find("t.attn:1:1: error: the spec defines nothing"), std::string::npos)
      << r.errors;
}

TEST(Parser, ReportsManySemanticErrorsAtOnce) {
  Result r = parse("attention a { bucket lsh(buckets = 3, chunk = 0) }");
  EXPECT_FALSE(r.spec);
  EXPECT_NE(r.errors.find("buckets must be even"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("chunk must be in [1,"), std::string::npos) << r.errors;
}
