#pragma once
// A small JSON reader and writer for byteps-trace: enough for Chrome trace files (objects,
// arrays, strings, numbers, true/false/null), with errors that say where the text went wrong.
// The library's headers write their trace files without it (detail/trace.hpp); only the tool
// and its tests read JSON, so byteps takes no JSON dependency.

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bps::trace_tool {

struct json {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;  ///< a string's value, or a number as written (rewritten as it was read)
  std::vector<json> items;
  struct member;
  std::vector<member> members;  ///< in the file's order

  // Defined below, where `member` is complete.
  const json* find(std::string_view key) const;
  json* find(std::string_view key);
  double number_or(std::string_view key, double fallback) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  static json of(double n, int decimals = 3);
  static json of(std::string s);
};

/// One key and its value of an object. Its own type, not a std::pair: a pair of a class that is
/// not yet complete is refused by clang with libstdc++ (the type would need itself to be whole).
struct json::member {
  std::string key;
  json value;
};

inline const json* json::find(std::string_view key) const {
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}
inline json* json::find(std::string_view key) {
  for (auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}
inline double json::number_or(std::string_view key, double fallback) const {
  const json* v = find(key);
  return v != nullptr && v->type == kind::number ? v->number : fallback;
}
inline std::string json::string_or(std::string_view key, std::string fallback) const {
  const json* v = find(key);
  return v != nullptr && v->type == kind::string ? v->text : fallback;
}
inline json json::of(double n, int decimals) {
  json j;
  j.type = kind::number;
  j.number = n;
  j.text = fmt::format("{:.{}f}", n, decimals);
  return j;
}
inline json json::of(std::string s) {
  json j;
  j.type = kind::string;
  j.text = std::move(s);
  return j;
}

class json_parser {
 public:
  /// `what` names the text in errors (a file's path).
  json_parser(std::string_view text, std::string what) : s_(text), what_(std::move(what)) {}

  json parse() {
    json v = value(0);
    skip_space();
    if (p_ != s_.size()) fail("text after the end of the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view why) const {
    std::size_t line = 1;
    for (std::size_t i = 0; i < p_ && i < s_.size(); ++i) line += s_[i] == '\n';
    throw std::runtime_error(
        fmt::format("{}: not valid JSON at line {} (byte {}): {}", what_, line, p_, why));
  }
  void skip_space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n' || s_[p_] == '\r' || s_[p_] == '\t'))
      ++p_;
  }
  bool eat(char c) {
    skip_space();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("expected '{}'", c));
  }
  bool word(std::string_view w) {
    if (s_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  json value(int depth) {
    if (depth > 64) fail("nested deeper than 64 levels");
    skip_space();
    if (p_ >= s_.size()) fail("unexpected end of text");
    json v;
    const char c = s_[p_];
    if (c == '{') {
      ++p_;
      v.type = json::kind::object;
      if (eat('}')) return v;
      do {
        skip_space();
        if (p_ >= s_.size() || s_[p_] != '"') fail("expected a member name in quotes");
        std::string key = string();
        expect(':');
        v.members.push_back({std::move(key), value(depth + 1)});
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++p_;
      v.type = json::kind::array;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.type = json::kind::string;
      v.text = string();
    } else if (word("true")) {
      v.type = json::kind::boolean;
      v.boolean = true;
    } else if (word("false")) {
      v.type = json::kind::boolean;
    } else if (word("null")) {
      v.type = json::kind::null;
    } else {
      v.type = json::kind::number;
      const std::size_t start = p_;
      while (p_ < s_.size() &&
             std::string_view("+-0123456789.eE").find(s_[p_]) != std::string_view::npos)
        ++p_;
      v.text = std::string(s_.substr(start, p_ - start));
      char* end = nullptr;
      v.number = std::strtod(v.text.c_str(), &end);
      if (v.text.empty() || end != v.text.c_str() + v.text.size()) fail("expected a value");
    }
    return v;
  }

  std::string string() {
    ++p_;  // the opening quote
    std::string out;
    while (p_ < s_.size() && s_[p_] != '"') {
      char c = s_[p_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) break;
      c = s_[p_++];
      switch (c) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (p_ + 4 > s_.size()) fail("a \\u escape needs 4 hex digits");
          const auto code = std::strtoul(std::string(s_.substr(p_, 4)).c_str(), nullptr, 16);
          p_ += 4;
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xc0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3f));
          } else {
            out += static_cast<char>(0xe0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (code & 0x3f));
          }
          break;
        }
        default:
          out += c;  // \" \\ \/
      }
    }
    if (p_ >= s_.size()) fail("a string is not closed");
    ++p_;
    return out;
  }

  std::string_view s_;
  std::string what_;
  std::size_t p_ = 0;
};

inline json parse_json(std::string_view text, std::string what) {
  return json_parser(text, std::move(what)).parse();
}

inline void write_json(const json& v, std::string& out) {
  switch (v.type) {
    case json::kind::null:
      out += "null";
      return;
    case json::kind::boolean:
      out += v.boolean ? "true" : "false";
      return;
    case json::kind::number:
      out += v.text;
      return;
    case json::kind::string:
      out += '"';
      for (char c : v.text) {
        if (c == '"' || c == '\\')
          out += {'\\', c};
        else if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        else
          out += c;
      }
      out += '"';
      return;
    case json::kind::array:
      out += '[';
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        if (i > 0) out += ",\n";
        write_json(v.items[i], out);
      }
      out += ']';
      return;
    case json::kind::object:
      out += '{';
      for (std::size_t i = 0; i < v.members.size(); ++i) {
        if (i > 0) out += ',';
        write_json(json::of(v.members[i].key), out);
        out += ':';
        write_json(v.members[i].value, out);
      }
      out += '}';
      return;
  }
}

}  // namespace bps::trace_tool
