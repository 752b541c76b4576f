//===- Lexer.h - Tokens of the .attn language -------------------*- C++ -*-===//
//
// Hand-written lexer. Keywords are contextual (plain identifiers the parser
// compares against), so a user may name a parameter `chunk` or `mask`.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DSL_LEXER_H
#define ATTNC_DSL_LEXER_H

#include "dsl/Diagnostics.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace attnc {

enum class Tok {
  Eof,
  Error,
  Ident,
  Int,
  Float,
  LBrace,
  RBrace,
  LParen,
  RParen,
  Comma,
  Semi,
  Assign,
  Question,
  Colon,
  Plus,
  Minus,
  Star,
  Slash,
  Percent,
  Less,
  LessEq,
  Greater,
  GreaterEq,
  EqEq,
  NotEq,
  AndAnd,
  OrOr,
  Bang,
};

/// Human-readable spelling of a token kind, for "expected X" messages.
const char *tokName(Tok t);

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text;
  SourceLoc loc;
  int64_t intValue = 0;
  double floatValue = 0;
};

class Lexer {
public:
  Lexer(std::string_view buffer, std::shared_ptr<const std::string> file, DiagnosticEngine &diag)
      : buf(buffer), file(std::move(file)), diag(diag) {
    // Editors on some systems start UTF-8 files with a byte-order mark.
    if (buf.substr(0, 3) == "\xEF\xBB\xBF")
      pos = 3;
  }

  /// Returns the next token; on a lexical error reports it and returns
  /// Tok::Error (the parser stops at the first error).
  Token next();

private:
  SourceLoc here() const { return SourceLoc{file, line, col}; }
  char peek(size_t ahead = 0) const { return pos + ahead < buf.size() ? buf[pos + ahead] : '\0'; }
  bool atEnd(size_t ahead = 0) const { return pos + ahead >= buf.size(); }
  void advance();
  bool skipTrivia();
  Token lexNumber(SourceLoc loc);

  std::string_view buf;
  std::shared_ptr<const std::string> file;
  DiagnosticEngine &diag;
  size_t pos = 0;
  unsigned line = 1, col = 1;
};

} // namespace attnc

#endif // ATTNC_DSL_LEXER_H
