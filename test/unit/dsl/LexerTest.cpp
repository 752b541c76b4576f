//===- LexerTest.cpp - Lexer units ----------------------------------------===//
#include "dsl/Lexer.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace attnc;

namespace {
struct Lexed {
  std::vector<Token> tokens;
  std::string errors;
};

Lexed lex(std::string_view text) {
  static std::string keep; // tokens view into the buffer
  keep = std::string(text);
  std::ostringstream os;
  DiagnosticEngine diag(keep, os);
  Lexer lexer(keep, std::make_shared<const std::string>("t.attn"), diag);
  Lexed out;
  for (;;) {
    Token t = lexer.next();
    out.tokens.push_back(t);
    if (t.kind == Tok::Eof || t.kind == Tok::Error)
      break;
  }
  out.errors = os.str();
  return out;
}
} // namespace

TEST(Lexer, NumbersAndOperators) {
  Lexed l = lex("k = 256 s-1.5e2 <= != && || %");
  std::vector<Tok> kinds;
  for (auto &t : l.tokens)
    kinds.push_back(t.kind);
  EXPECT_EQ(kinds, (std::vector<Tok>{Tok::Ident, Tok::Assign, Tok::Int, Tok::Ident, Tok::Minus,
                                     Tok::Float, Tok::LessEq, Tok::NotEq, Tok::AndAnd, Tok::OrOr,
                                     Tok::Percent, Tok::Eof}));
  EXPECT_EQ(l.tokens[2].intValue, 256);
  EXPECT_DOUBLE_EQ(l.tokens[5].floatValue, 150.0);
}

TEST(Lexer, TracksLinesAndColumnsAcrossComments) {
  Lexed l = lex("// comment\n  /* block\n */ model");
  ASSERT_EQ(l.tokens[0].kind, Tok::Ident);
  EXPECT_EQ(l.tokens[0].loc.line, 3u);
  EXPECT_EQ(l.tokens[0].loc.col, 5u);
}

TEST(Lexer, ReportsBinaryBytesAsHex) {
  Lexed l = lex("model \x01");
  EXPECT_EQ(l.tokens.back().kind, Tok::Error);
  EXPECT_NE(l.errors.find("t.attn:1:7: error: unexpected character '\\x01'"), std::string::npos)
      << l.errors;
}

TEST(Lexer, ReportsUnterminatedComment) {
  Lexed l = lex("model /* never closed");
  EXPECT_NE(l.errors.find("t.attn:1:7: error: unterminated block comment"), std::string::npos)
      << l.errors;
}

TEST(Lexer, RejectsHugeIntegers) {
  Lexed l = lex("k = 99999999999999999999999");
  EXPECT_NE(l.errors.find("too large"), std::string::npos) << l.errors;
}

TEST(Lexer, RejectsNumberFollowedByLetters) {
  Lexed l = lex("seq 12abc");
  EXPECT_NE(l.errors.find("unexpected 'a' after number '12'"), std::string::npos) << l.errors;
}
