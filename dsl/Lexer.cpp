//===- Lexer.cpp - Tokens of the .attn language ---------------------------===//
#include "dsl/Lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace attnc {

const char *tokName(Tok t) {
  switch (t) {
  case Tok::Eof:
    return "end of file";
  case Tok::Error:
    return "invalid token";
  case Tok::Ident:
    return "identifier";
  case Tok::Int:
    return "integer";
  case Tok::Float:
    return "number";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::Comma:
    return "','";
  case Tok::Semi:
    return "';'";
  case Tok::Assign:
    return "'='";
  case Tok::Question:
    return "'?'";
  case Tok::Colon:
    return "':'";
  case Tok::Plus:
    return "'+'";
  case Tok::Minus:
    return "'-'";
  case Tok::Star:
    return "'*'";
  case Tok::Slash:
    return "'/'";
  case Tok::Percent:
    return "'%'";
  case Tok::Less:
    return "'<'";
  case Tok::LessEq:
    return "'<='";
  case Tok::Greater:
    return "'>'";
  case Tok::GreaterEq:
    return "'>='";
  case Tok::EqEq:
    return "'=='";
  case Tok::NotEq:
    return "'!='";
  case Tok::AndAnd:
    return "'&&'";
  case Tok::OrOr:
    return "'||'";
  case Tok::Bang:
    return "'!'";
  }
  return "token";
}

void Lexer::advance() {
  if (atEnd())
    return;
  if (buf[pos] == '\n') {
    ++line;
    col = 1;
  } else {
    ++col;
  }
  ++pos;
}

/// Skips whitespace and comments; returns false (after reporting) on an
/// unterminated block comment.
bool Lexer::skipTrivia() {
  while (!atEnd()) {
    char c = peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance();
    } else if (c == '/' && peek(1) == '/') {
      while (!atEnd() && peek() != '\n')
        advance();
    } else if (c == '/' && peek(1) == '*') {
      SourceLoc start = here();
      advance();
      advance();
      while (!atEnd() && !(peek() == '*' && peek(1) == '/'))
        advance();
      if (atEnd()) {
        diag.error(start, "unterminated block comment");
        return false;
      }
      advance();
      advance();
    } else {
      return true;
    }
  }
  return true;
}

Token Lexer::lexNumber(SourceLoc loc) {
  size_t start = pos;
  bool isFloat = false;
  while (std::isdigit(static_cast<unsigned char>(peek())))
    advance();
  if (peek() == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))) {
    isFloat = true;
    advance();
    while (std::isdigit(static_cast<unsigned char>(peek())))
      advance();
  }
  if (peek() == 'e' || peek() == 'E') {
    size_t ahead = 1;
    if (peek(1) == '+' || peek(1) == '-')
      ahead = 2;
    if (std::isdigit(static_cast<unsigned char>(peek(ahead)))) {
      isFloat = true;
      for (size_t i = 0; i < ahead; ++i)
        advance();
      while (std::isdigit(static_cast<unsigned char>(peek())))
        advance();
    }
  }
  Token tok;
  tok.loc = loc;
  tok.text = buf.substr(start, pos - start);
  if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_') {
    diag.error(here(), "unexpected '" + std::string(1, peek()) + "' after number '" +
                           std::string(tok.text) + "'");
    tok.kind = Tok::Error;
    return tok;
  }
  std::string text(tok.text);
  errno = 0;
  if (isFloat) {
    tok.kind = Tok::Float;
    tok.floatValue = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && tok.floatValue != 0) { // overflow; underflow is 0
      diag.error(loc, "number '" + text + "' is out of range");
      tok.kind = Tok::Error;
    }
  } else {
    tok.kind = Tok::Int;
    if (text.size() > 18) { // beyond any dimension or seed we accept
      diag.error(loc, "integer '" + text.substr(0, 40) + (text.size() > 40 ? "...'" : "'") +
                          " is too large (at most 18 digits)");
      tok.kind = Tok::Error;
      return tok;
    }
    tok.intValue = std::strtoll(text.c_str(), nullptr, 10);
    tok.floatValue = static_cast<double>(tok.intValue);
  }
  return tok;
}

Token Lexer::next() {
  Token tok;
  if (!skipTrivia()) {
    tok.kind = Tok::Error;
    tok.loc = here();
    return tok;
  }
  tok.loc = here();
  if (atEnd()) {
    tok.kind = Tok::Eof;
    return tok;
  }
  unsigned char c = static_cast<unsigned char>(peek());
  if (std::isalpha(c) || c == '_') {
    size_t start = pos;
    while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')
      advance();
    tok.kind = Tok::Ident;
    tok.text = buf.substr(start, pos - start);
    if (tok.text.size() > 256) {
      diag.error(tok.loc, "identifier is longer than 256 characters");
      tok.kind = Tok::Error;
    }
    return tok;
  }
  if (std::isdigit(c) || (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))))
    return lexNumber(tok.loc);

  auto single = [&](Tok k) {
    tok.kind = k;
    tok.text = buf.substr(pos, 1);
    advance();
    return tok;
  };
  auto twoOrOne = [&](char second, Tok two, Tok one) {
    if (peek(1) == second) {
      tok.kind = two;
      tok.text = buf.substr(pos, 2);
      advance();
      advance();
      return tok;
    }
    return single(one);
  };
  switch (c) {
  case '{':
    return single(Tok::LBrace);
  case '}':
    return single(Tok::RBrace);
  case '(':
    return single(Tok::LParen);
  case ')':
    return single(Tok::RParen);
  case ',':
    return single(Tok::Comma);
  case ';':
    return single(Tok::Semi);
  case '?':
    return single(Tok::Question);
  case ':':
    return single(Tok::Colon);
  case '+':
    return single(Tok::Plus);
  case '-':
    return single(Tok::Minus);
  case '*':
    return single(Tok::Star);
  case '/':
    return single(Tok::Slash);
  case '%':
    return single(Tok::Percent);
  case '<':
    return twoOrOne('=', Tok::LessEq, Tok::Less);
  case '>':
    return twoOrOne('=', Tok::GreaterEq, Tok::Greater);
  case '=':
    return twoOrOne('=', Tok::EqEq, Tok::Assign);
  case '!':
    return twoOrOne('=', Tok::NotEq, Tok::Bang);
  case '&':
    if (peek(1) == '&')
      return twoOrOne('&', Tok::AndAnd, Tok::AndAnd);
    break;
  case '|':
    if (peek(1) == '|')
      return twoOrOne('|', Tok::OrOr, Tok::OrOr);
    break;
  default:
    break;
  }
  char hex[8];
  static const char digits[] = "0123456789abcdef";
  hex[0] = '\\';
  hex[1] = 'x';
  hex[2] = digits[c >> 4];
  hex[3] = digits[c & 15];
  hex[4] = 0;
  std::string shown = (c >= 0x20 && c < 0x7f) ? std::string(1, c) : hex;
  diag.error(tok.loc, "unexpected character '" + shown + "'");
  tok.kind = Tok::Error;
  return tok;
}

} // namespace attnc
