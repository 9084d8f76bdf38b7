// A small JSON reader for the engine's tuned tables (tuned_table.h) and the
// tools that read Google Benchmark's output (exercises/03_autotune). It keeps
// what those files need: objects in their order, arrays, strings with the
// standard escapes (\uXXXX outside ASCII is refused), numbers as double,
// true/false/null. A malformed file throws pa::Error with its line and column.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pa::engine::json {

struct Value {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Value> items;                             // an array's elements
  std::vector<std::pair<std::string, Value>> members;  // an object's fields, in file order

  bool is_object() const { return type == Type::object; }
  bool is_array() const { return type == Type::array; }
  bool is_number() const { return type == Type::number; }
  bool is_string() const { return type == Type::string; }
  // The field `key` of an object, or null when absent (or not an object).
  const Value* find(std::string_view key) const;
};

const char* name(Value::Type type);

// `source` names the text in error messages (a path, or "tuned table").
Value parse(std::string_view text, const std::string& source);

// The whole file; throws pa::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace pa::engine::json
