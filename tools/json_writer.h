// A small streaming JSON writer for the CLI's --json output: objects, arrays, strings, numbers, bools.
// Commas are inserted automatically; non-finite numbers are written as null (JSON has no inf or NaN).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace flashattn::cli {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  // The key of the next value inside an object.
  JsonWriter& key(const std::string& k) {
    separate();
    write_string(k);
    text_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& v) {
    separate();
    write_string(v);
    return *this;
  }
  JsonWriter& value(const char* v) { return value(std::string(v)); }
  JsonWriter& value(bool v) {
    separate();
    text_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(int64_t v) {
    separate();
    text_ += std::to_string(v);
    return *this;
  }
  JsonWriter& value(uint64_t v) {
    separate();
    text_ += std::to_string(v);
    return *this;
  }
  JsonWriter& value(double v) {
    separate();
    if (!std::isfinite(v)) {
      text_ += "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", v);
      text_ += buf;
    }
    return *this;
  }
  JsonWriter& null() {
    separate();
    text_ += "null";
    return *this;
  }
  template <typename T>
  JsonWriter& field(const std::string& k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return text_; }

 private:
  JsonWriter& open(char c) {
    separate();
    text_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char c) {
    first_.pop_back();
    text_ += c;
    return *this;
  }
  // A comma before every element but the first of its container; none right after a key.
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) text_ += ',';
    first_.back() = false;
  }
  void write_string(const std::string& s) {
    text_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': text_ += "\\\""; break;
        case '\\': text_ += "\\\\"; break;
        case '\n': text_ += "\\n"; break;
        case '\t': text_ += "\\t"; break;
        case '\r': text_ += "\\r"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            text_ += buf;
          } else {
            text_ += char(c);
          }
      }
    }
    text_ += '"';
  }

  std::string text_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace flashattn::cli
