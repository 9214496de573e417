// For tests: a small strict JSON parser (RFC 8259: objects, arrays, strings with escapes,
// numbers, true, false, null) and a checker of Chrome trace-event files as vm/profiler.h writes
// them. Written independently of the profiler's writer, so it is an oracle for it.
#ifndef DYNVM_VM_TRACE_TESTING_H_
#define DYNVM_VM_TRACE_TESTING_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dynvm::testing {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Json> array;
  // Object members in file order (two vectors: std::pair<std::string, Json> would need Json
  // complete here, which libstdc++ refuses under clang).
  std::vector<std::string> keys;
  std::vector<Json> values;

  // The member `key` of an object, or nullptr.
  const Json* Get(absl::string_view key) const {
    if (type != Type::kObject) return nullptr;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &values[i];
    }
    return nullptr;
  }
  bool IsNumber() const { return type == Type::kNumber; }
  bool IsString() const { return type == Type::kString; }
};

class JsonParser {
 public:
  static absl::StatusOr<Json> Parse(absl::string_view text) {
    JsonParser p(text);
    Json v;
    DYNVM_RETURN_IF_ERROR(p.Value(v, 0));
    p.SkipSpace();
    if (p.pos_ != text.size()) return p.Error("trailing characters");
    return v;
  }

 private:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", what, " at byte ", pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Literal(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  absl::Status Value(Json& v, int depth) {
    if (depth > 64) return Error("nesting too deep");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v.type = Json::Type::kString;
      return String(v.str);
    }
    if (Literal("true")) {
      v.type = Json::Type::kBool;
      v.b = true;
      return absl::OkStatus();
    }
    if (Literal("false")) {
      v.type = Json::Type::kBool;
      return absl::OkStatus();
    }
    if (Literal("null")) return absl::OkStatus();
    return Number(v);
  }
  absl::Status Number(Json& v) {
    // -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
    const size_t start = pos_;
    auto digits = [this] {
      size_t n = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_, ++n;
      return n;
    };
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return Error("expected a value");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Error("expected digits after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("expected an exponent");
    }
    v.type = Json::Type::kNumber;
    v.number = std::strtod(std::string(text_.substr(start, pos_ - start)).c_str(), nullptr);
    return absl::OkStatus();
  }
  absl::Status String(std::string& out) {
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Error("short \\u escape");
          uint32_t cp = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = text_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= h - '0';
            else if (h >= 'a' && h <= 'f')
              cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              cp |= h - 'A' + 10;
            else
              return Error("bad \\u escape");
          }
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else {
            out += '?';  // tests only compare ASCII names
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }
  absl::Status Array(Json& v, int depth) {
    v.type = Json::Type::kArray;
    ++pos_;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      v.array.emplace_back();
      DYNVM_RETURN_IF_ERROR(Value(v.array.back(), depth + 1));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }
  absl::Status Object(Json& v, int depth) {
    v.type = Json::Type::kObject;
    ++pos_;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a member name");
      std::string key;
      DYNVM_RETURN_IF_ERROR(String(key));
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      v.keys.push_back(std::move(key));
      v.values.emplace_back();
      DYNVM_RETURN_IF_ERROR(Value(v.values.back(), depth + 1));
      SkipSpace();
      if (pos_ >= text_.size()) return Error("unterminated object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or '}'");
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// One complete ("X") event of a trace.
struct TraceSpan {
  std::string name;
  std::string cat;
  double ts = 0;  // microseconds
  double dur = 0;
  double tid = 0;
  const Json* args = nullptr;
  int parent = -1;  // index of the innermost span containing it (same thread), or -1
};

struct TraceSummary {
  std::vector<TraceSpan> spans;  // sorted by start, parents before children
  std::vector<std::pair<std::string, double>>
      counters;  // (name, value of args.bytes), in file order
  int metadata = 0;
};

// Checks that `root` is a Chrome trace-event file: an object whose "traceEvents" is an array of
// events, each with a one-letter "ph" and integer "pid"; metadata ("M") events with a name;
// complete ("X") events with a string name, a "tid", "ts" >= 0 and "dur" >= 0; counter ("C")
// events with a name, "ts" and numeric "args.bytes". Checks that the X events of a thread nest
// properly (each lies inside the span that contains its start) and records each one's parent.
inline absl::StatusOr<TraceSummary> CheckTrace(const Json& root) {
  if (root.type != Json::Type::kObject) return absl::InvalidArgumentError("trace: not an object");
  const Json* events = root.Get("traceEvents");
  if (events == nullptr || events->type != Json::Type::kArray) {
    return absl::InvalidArgumentError("trace: no traceEvents array");
  }
  TraceSummary out;
  std::map<double, std::vector<TraceSpan>> by_tid;
  for (size_t i = 0; i < events->array.size(); ++i) {
    const Json& e = events->array[i];
    const std::string where = absl::StrCat("traceEvents[", i, "]");
    const Json* ph = e.Get("ph");
    const Json* pid = e.Get("pid");
    const Json* name = e.Get("name");
    if (ph == nullptr || !ph->IsString() || ph->str.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no one-letter ph"));
    }
    if (pid == nullptr || !pid->IsNumber() || pid->number != std::floor(pid->number)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no integer pid"));
    }
    if (name == nullptr || !name->IsString() || name->str.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no name"));
    }
    const Json* ts = e.Get("ts");
    if (ph->str == "M") {
      ++out.metadata;
      continue;
    }
    if (ts == nullptr || !ts->IsNumber() || ts->number < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no ts >= 0"));
    }
    if (ph->str == "C") {
      const Json* args = e.Get("args");
      const Json* bytes = args != nullptr ? args->Get("bytes") : nullptr;
      if (bytes == nullptr || !bytes->IsNumber() || bytes->number < 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": counter without args.bytes >= 0"));
      }
      out.counters.emplace_back(name->str, bytes->number);
      continue;
    }
    if (ph->str != "X")
      return absl::InvalidArgumentError(absl::StrCat(where, ": unexpected ph ", ph->str));
    const Json* tid = e.Get("tid");
    const Json* dur = e.Get("dur");
    if (tid == nullptr || !tid->IsNumber())
      return absl::InvalidArgumentError(absl::StrCat(where, ": no tid"));
    if (dur == nullptr || !dur->IsNumber() || dur->number < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no dur >= 0"));
    }
    TraceSpan s;
    s.name = name->str;
    if (const Json* cat = e.Get("cat"); cat != nullptr && cat->IsString()) s.cat = cat->str;
    s.ts = ts->number;
    s.dur = dur->number;
    s.tid = tid->number;
    s.args = e.Get("args");
    by_tid[tid->number].push_back(std::move(s));
  }
  // Nesting, per thread: sorted by start (longest first on ties), every span must end within
  // the innermost open span that contains its start. Times are in microseconds with nanosecond
  // digits; compare in nanoseconds rounded to integers.
  auto ns = [](double us) { return static_cast<int64_t>(std::llround(us * 1000.0)); };
  for (auto& [tid, spans] : by_tid) {
    std::stable_sort(spans.begin(), spans.end(), [&](const TraceSpan& a, const TraceSpan& b) {
      return ns(a.ts) != ns(b.ts) ? ns(a.ts) < ns(b.ts) : ns(a.dur) > ns(b.dur);
    });
    const int base = static_cast<int>(out.spans.size());
    std::vector<int> stack;
    for (size_t i = 0; i < spans.size(); ++i) {
      TraceSpan& s = spans[i];
      const int64_t start = ns(s.ts), end = ns(s.ts) + ns(s.dur);
      while (!stack.empty()) {
        const TraceSpan& top = out.spans[stack.back()];
        if (start < ns(top.ts) + ns(top.dur)) break;
        stack.pop_back();
      }
      if (!stack.empty()) {
        const TraceSpan& top = out.spans[stack.back()];
        if (end > ns(top.ts) + ns(top.dur)) {
          return absl::InvalidArgumentError(absl::StrCat("span '", s.name, "' at ", s.ts,
                                                         " us ends after its parent '", top.name,
                                                         "' (", top.ts, " + ", top.dur, " us)"));
        }
        s.parent = stack.back();
      }
      out.spans.push_back(std::move(s));
      stack.push_back(base + static_cast<int>(i));
    }
  }
  return out;
}

}  // namespace dynvm::testing

#endif  // DYNVM_VM_TRACE_TESTING_H_
