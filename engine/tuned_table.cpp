// Tuned tables (tuned_table.h): validation, the file format, the lookup.
#include "tuned_table.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "common/check.h"
#include "json.h"

namespace pa::engine {
namespace {

// The names of common/quant.cuh's name(KvFormat), which a host-only file cannot include.
constexpr KvFormat kFormats[] = {KvFormat::bf16, KvFormat::int8, KvFormat::fp8_e4m3};
const char* format_name(KvFormat f) {
  switch (f) {
    case KvFormat::bf16: return "bf16";
    case KvFormat::int8: return "int8";
    case KvFormat::fp8_e4m3: return "fp8_e4m3";
  }
  return "?";
}

auto key_of(const TunedEntry& e) { return std::make_tuple(e.group, e.max_context, e.max_batch); }

std::string describe(const TunedEntry& e) {
  return "(max_batch " + std::to_string(e.max_batch) + ", max_context " + std::to_string(e.max_context) +
         ", group " + std::to_string(e.group) + ")";
}

// Reads an object's fields by name: each required one once, nothing unknown.
class Fields {
 public:
  Fields(const json::Value& v, std::string where, std::vector<std::string> known)
      : v_(v), where_(std::move(where)), known_(std::move(known)) {
    PA_REQUIRE(v.is_object(), where_ + " must be an object, found " + json::name(v.type));
    for (const auto& [key, value] : v.members) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string list;
      for (const std::string& k : known_) list += (list.empty() ? "" : ", ") + k;
      throw Error(where_ + ": unknown field \"" + key + "\" (a tuned table's " + where_ + " has " + list + ")");
    }
  }

  const json::Value& required(const std::string& key) const {
    const json::Value* f = v_.find(key);
    PA_REQUIRE(f, where_ + ": the field \"" + key + "\" is missing");
    return *f;
  }
  const json::Value* optional(const std::string& key) const { return v_.find(key); }

  int integer(const std::string& key) const {
    const json::Value& f = required(key);
    PA_REQUIRE(f.is_number() && std::floor(f.number) == f.number && std::fabs(f.number) < 1e9,
               where_ + ": \"" + key + "\" must be an integer, found " +
                   (f.is_number() ? std::to_string(f.number) : std::string(json::name(f.type))));
    return static_cast<int>(f.number);
  }

  std::string text(const std::string& key, const json::Value& f) const {
    PA_REQUIRE(f.is_string(), where_ + ": \"" + key + "\" must be a string, found " + json::name(f.type));
    return f.string;
  }

 private:
  const json::Value& v_;
  std::string where_;
  std::vector<std::string> known_;
};

}  // namespace

bool operator==(const TunedEntry& a, const TunedEntry& b) {
  return key_of(a) == key_of(b) && a.num_splits == b.num_splits;
}

TunedTable::TunedTable(const TunedShape& shape, std::vector<TunedEntry> entries, std::string device,
                       const std::string& source)
    : shape_(shape), entries_(std::move(entries)), device_(std::move(device)) {
  const std::string who = source + ": ";
  PA_REQUIRE(shape_.num_kv_heads >= 1 && shape_.head_dim >= 1 && shape_.block_size >= 1,
             who + "shape: num_kv_heads " + std::to_string(shape_.num_kv_heads) + ", head_dim " +
                 std::to_string(shape_.head_dim) + " and block_size " + std::to_string(shape_.block_size) +
                 " must be positive");
  PA_REQUIRE(!entries_.empty(), who + "the table has no entries");
  for (size_t i = 0; i < entries_.size(); ++i) {
    const TunedEntry& e = entries_[i];
    const std::string at = who + "entries[" + std::to_string(i) + "] " + describe(e) + ": ";
    PA_REQUIRE(e.max_batch >= 1 && e.max_context >= 1 && e.group >= 1,
               at + "max_batch, max_context and group must be positive");
    PA_REQUIRE(e.num_splits >= 1 && e.num_splits <= TUNED_MAX_SPLITS,
               at + "num_splits " + std::to_string(e.num_splits) + " is outside 1.." +
                   std::to_string(TUNED_MAX_SPLITS));
  }
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const TunedEntry& a, const TunedEntry& b) { return key_of(a) < key_of(b); });
  for (size_t i = 1; i < entries_.size(); ++i)
    PA_REQUIRE(key_of(entries_[i - 1]) != key_of(entries_[i]),
               who + "the key " + describe(entries_[i]) + " appears twice");
}

TunedTable TunedTable::parse(std::string_view text, const std::string& source) {
  const json::Value doc = json::parse(text, source);
  const Fields top(doc, source, {"tuned_plan_version", "device", "shape", "entries"});
  const int version = top.integer("tuned_plan_version");
  PA_REQUIRE(version == TUNED_PLAN_VERSION, source + ": tuned_plan_version " + std::to_string(version) +
                                                " is not " + std::to_string(TUNED_PLAN_VERSION) +
                                                ", the version this engine reads");
  std::string device;
  if (const json::Value* d = top.optional("device")) device = top.text("device", *d);

  const Fields s(top.required("shape"), source + ": shape", {"num_kv_heads", "head_dim", "block_size", "kv_format"});
  TunedShape shape;
  shape.num_kv_heads = s.integer("num_kv_heads");
  shape.head_dim = s.integer("head_dim");
  shape.block_size = s.integer("block_size");
  const std::string format = s.text("kv_format", s.required("kv_format"));
  bool known = false;
  for (KvFormat f : kFormats) {
    if (format == format_name(f)) {
      shape.format = f;
      known = true;
    }
  }
  PA_REQUIRE(known, source + ": shape: kv_format \"" + format + "\" is not one of bf16, int8, fp8_e4m3");

  const json::Value& list = top.required("entries");
  PA_REQUIRE(list.is_array(), source + ": \"entries\" must be an array, found " + json::name(list.type));
  std::vector<TunedEntry> entries;
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Fields e(list.items[i], source + ": entries[" + std::to_string(i) + "]",
                   {"max_batch", "max_context", "group", "num_splits"});
    entries.push_back({e.integer("max_batch"), e.integer("max_context"), e.integer("group"), e.integer("num_splits")});
  }
  return TunedTable(shape, std::move(entries), std::move(device), source);
}

TunedTable TunedTable::load(const std::string& path) { return parse(json::read_file(path), path); }

std::string TunedTable::to_json() const {
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) q += c;
    }
    return q + "\"";
  };
  std::string s = "{\n  \"tuned_plan_version\": " + std::to_string(TUNED_PLAN_VERSION) + ",\n";
  if (!device_.empty()) s += "  \"device\": " + quoted(device_) + ",\n";
  s += "  \"shape\": {\"num_kv_heads\": " + std::to_string(shape_.num_kv_heads) +
       ", \"head_dim\": " + std::to_string(shape_.head_dim) + ", \"block_size\": " +
       std::to_string(shape_.block_size) + ", \"kv_format\": \"" + format_name(shape_.format) + "\"},\n";
  s += "  \"entries\": [\n";
  for (size_t i = 0; i < entries_.size(); ++i) {
    const TunedEntry& e = entries_[i];
    s += "    {\"max_batch\": " + std::to_string(e.max_batch) + ", \"max_context\": " +
         std::to_string(e.max_context) + ", \"group\": " + std::to_string(e.group) +
         ", \"num_splits\": " + std::to_string(e.num_splits) + "}" + (i + 1 < entries_.size() ? ",\n" : "\n");
  }
  return s + "  ]\n}\n";
}

const TunedEntry* TunedTable::find(int num_requests, int span_keys, int group) const {
  // Sorted by (group, max_context, max_batch): the first entry of the group
  // that serves both bounds is the tightest.
  for (const TunedEntry& e : entries_) {
    if (e.group == group && e.max_context >= span_keys && e.max_batch >= num_requests) return &e;
  }
  return nullptr;
}

}  // namespace pa::engine
