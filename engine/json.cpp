// The JSON reader of json.h: recursive descent over the text, one position.
#include "json.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/check.h"

namespace pa::engine::json {
namespace {

class Reader {
 public:
  Reader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("text after the end of the document");
    return v;
  }

 private:
  // Deep enough for any table; a bound keeps a hostile file from exhausting the stack.
  static constexpr int MAX_DEPTH = 64;

  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(source_ + ": line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  char peek() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end of the text");
    return text_[pos_];
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "', found '" + text_[pos_] + "'");
    ++pos_;
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("unknown literal (expected " + std::string(word) + ")");
    pos_ += word.size();
  }

  Value value(int depth) {
    if (depth > MAX_DEPTH) fail("nested deeper than " + std::to_string(MAX_DEPTH) + " levels");
    Value v;
    const char c = peek();
    if (c == '{') {
      v.type = Value::Type::object;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        if (peek() != '"') fail("expected a field name in quotes");
        std::string key = string();
        if (v.find(key)) fail("field \"" + key + "\" appears twice");
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = Value::Type::array;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = Value::Type::string;
      v.string = string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.type = Value::Type::boolean;
      v.boolean = c == 't';
      literal(v.boolean ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = Value::Type::number;
      v.number = number();
      return v;
    }
    fail(std::string("unexpected '") + c + "'");
  }

  std::string string() {
    ++pos_;  // the opening quote
    std::string s;
    while (true) {
      if (pos_ >= text_.size()) fail("a string is not closed");
      const char c = text_[pos_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("a string is not closed");
      const char e = text_[pos_++];
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          if (pos_ + 4 > text_.size()) fail("a short \\u escape");
          const std::string hex(text_.substr(pos_, 4));
          char* end = nullptr;
          const long code = std::strtol(hex.c_str(), &end, 16);
          if (end != hex.c_str() + 4) fail("a malformed \\u escape");
          if (code >= 0x80) fail("a \\u escape outside ASCII (not needed by these files)");
          s += static_cast<char>(code);
          pos_ += 4;
          break;
        }
        default: fail(std::string("unknown escape \\") + e);
      }
    }
  }

  double number() {
    // JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    const size_t begin = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ == from) fail("a malformed number");
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      digits();
    }
    return std::strtod(std::string(text_.substr(begin, pos_ - begin)).c_str(), nullptr);
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

const char* name(Value::Type type) {
  switch (type) {
    case Value::Type::null: return "null";
    case Value::Type::boolean: return "a boolean";
    case Value::Type::number: return "a number";
    case Value::Type::string: return "a string";
    case Value::Type::array: return "an array";
    case Value::Type::object: return "an object";
  }
  return "?";
}

Value parse(std::string_view text, const std::string& source) { return Reader(text, source).document(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PA_REQUIRE(in.good(), "cannot open " + path + " for reading");
  std::ostringstream s;
  s << in.rdbuf();
  PA_REQUIRE(!in.bad(), "cannot read " + path);
  return s.str();
}

}  // namespace pa::engine::json
