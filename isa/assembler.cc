#include "isa/assembler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"
#include "schema/writer.h"

namespace dynvm::isa {
namespace {

// ---- lexical helpers ----

// Removes a trailing comment (';' outside a string) and surrounding space.
absl::string_view StripComment(absl::string_view line) {
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ';') {
      return absl::StripAsciiWhitespace(line.substr(0, i));
    }
  }
  return absl::StripAsciiWhitespace(line);
}

// Splits at `sep` outside quotes and brackets.
std::vector<std::string> SplitTop(absl::string_view s, char sep) {
  std::vector<std::string> out;
  int depth = 0;
  bool in_string = false;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '(' || c == '[')
      ++depth;
    else if (c == ')' || c == ']')
      --depth;
    else if (c == sep && depth == 0) {
      out.emplace_back(absl::StripAsciiWhitespace(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  std::string last(absl::StripAsciiWhitespace(s.substr(start)));
  if (!last.empty() || !out.empty()) out.push_back(last);
  return out;
}

// Splits on whitespace outside quotes and brackets.
std::vector<std::string> Words(absl::string_view s) {
  std::vector<std::string> out;
  int depth = 0;
  bool in_string = false;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      cur += c;
      if (c == '\\' && i + 1 < s.size())
        cur += s[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) && depth == 0) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

absl::StatusOr<std::string> Unquote(absl::string_view s) {
  if (s.size() < 2 || s.front() != '"' || s.back() != '"') {
    return absl::InvalidArgumentError(absl::StrCat("expected a quoted string, got ", s));
  }
  std::string out;
  for (size_t i = 1; i + 1 < s.size(); ++i) {
    char c = s[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i + 1 > s.size() - 1) return absl::InvalidArgumentError("dangling escape in string");
    c = s[i];
    if (c == 'n') {
      out += '\n';
    } else if (c == 'x') {
      if (i + 2 >= s.size()) return absl::InvalidArgumentError("short \\x escape");
      int v;
      if (!absl::SimpleHexAtoi(s.substr(i + 1, 2), &v))
        return absl::InvalidArgumentError("bad \\x escape");
      out += static_cast<char>(v);
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

// "(a, b)" or "[a, b]" -> items.
absl::StatusOr<std::vector<std::string>> Bracketed(absl::string_view s, char open, char close) {
  if (s.size() < 2 || s.front() != open || s.back() != close) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", std::string(1, open), "...", std::string(1, close), ", got ", s));
  }
  return SplitTop(s.substr(1, s.size() - 2), ',');
}

absl::StatusOr<int64_t> ParseInt(absl::string_view s) {
  int64_t v;
  if (absl::StartsWith(s, "0x")) {
    uint64_t u;
    if (absl::SimpleHexAtoi(s.substr(2), &u)) return static_cast<int64_t>(u);
  } else if (absl::SimpleAtoi(s, &v)) {
    return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", s, "'"));
}

absl::StatusOr<uint32_t> ParseU32(absl::string_view s) {
  DYNVM_ASSIGN_OR_RETURN(int64_t v, ParseInt(s));
  if (v < 0 || v > 0xFFFFFFFFll)
    return absl::InvalidArgumentError(absl::StrCat("value out of range: ", s));
  return static_cast<uint32_t>(v);
}

absl::StatusOr<double> ParseF64(absl::string_view s) {
  if (absl::StartsWith(s, "0x")) {
    uint64_t bits;
    if (!absl::SimpleHexAtoi(s.substr(2), &bits))
      return absl::InvalidArgumentError(absl::StrCat("bad float bits ", s));
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  double d;
  if (!absl::SimpleAtod(s, &d))
    return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", s, "'"));
  return d;
}

absl::StatusOr<float> ParseF32(absl::string_view s) {
  if (absl::StartsWith(s, "0x")) {
    uint32_t bits;
    if (!absl::SimpleHexAtoi(s.substr(2), &bits))
      return absl::InvalidArgumentError(absl::StrCat("bad float bits ", s));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  float f;
  if (!absl::SimpleAtof(s, &f))
    return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", s, "'"));
  return f;
}

absl::StatusOr<uint8_t> ParseDTypeWord(absl::string_view s, bool allow_any) {
  if (allow_any && s == "any") return kAnyDType;
  std::optional<DType> d = ParseDType(s);
  if (!d) return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", s, "'"));
  return static_cast<uint8_t>(*d);
}

absl::StatusOr<fb::ObjectKind> ParseKindWord(absl::string_view s) {
  if (s == "tensor") return fb::ObjectKind::Tensor;
  if (s == "storage") return fb::ObjectKind::Storage;
  if (s == "seq") return fb::ObjectKind::Sequence;
  if (s == "opt") return fb::ObjectKind::Optional;
  return absl::InvalidArgumentError(absl::StrCat("unknown object kind '", s, "'"));
}

absl::StatusOr<fb::ObjectType> ParseObjectType(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  DYNVM_ASSIGN_OR_RETURN(fb::ObjectKind kind, ParseKindWord(parts[0]));
  if (kind == fb::ObjectKind::Storage) {
    // A storage has no element type; `storage:DTYPE` keeps the byte a compiler wrote there
    // (vm-compile writes 0, vm-as 255: "any"), so that vm-dis | vm-as gives back the same file.
    if (parts.size() > 2) return absl::InvalidArgumentError("expected storage or storage:DTYPE");
    uint8_t dtype = kAnyDType;
    if (parts.size() == 2) {
      DYNVM_ASSIGN_OR_RETURN(uint8_t dt, ParseDTypeWord(parts[1], false));
      dtype = dt;
    }
    return fb::ObjectType(fb::ObjectKind::Storage, dtype, fb::ObjectKind::Tensor);
  }
  if (kind == fb::ObjectKind::Optional) {
    if (parts.size() != 3)
      return absl::InvalidArgumentError(absl::StrCat("expected opt:KIND:DTYPE, got ", s));
    DYNVM_ASSIGN_OR_RETURN(fb::ObjectKind elem, ParseKindWord(parts[1]));
    absl::StatusOr<uint8_t> dt = ParseDTypeWord(parts[2], false);
    if (!dt.ok()) return dt.status();
    return fb::ObjectType(fb::ObjectKind::Optional, *dt, elem);
  }
  if (parts.size() != 2)
    return absl::InvalidArgumentError(absl::StrCat("expected KIND:DTYPE, got ", s));
  DYNVM_ASSIGN_OR_RETURN(uint8_t dt, ParseDTypeWord(parts[1], false));
  return fb::ObjectType(kind, dt, fb::ObjectKind::Tensor);
}

absl::StatusOr<fb::ScalarType> ParseScalarType(absl::string_view s) {
  if (s == "i64") return fb::ScalarType::I64;
  if (s == "f64") return fb::ScalarType::F64;
  if (s == "bool") return fb::ScalarType::Bool;
  return absl::InvalidArgumentError(absl::StrCat("unknown scalar type '", s, "'"));
}

absl::StatusOr<std::unique_ptr<fb::PortT>> ParsePort(absl::string_view s) {
  auto p = std::make_unique<fb::PortT>();
  if (absl::ConsumePrefix(&s, "dyn:")) p->dynamic = true;
  if (absl::ConsumeSuffix(&s, "?")) p->optional = true;
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  if (parts.size() == 2) {
    DYNVM_ASSIGN_OR_RETURN(fb::ObjectKind k, ParseKindWord(parts[0]));
    p->kind = k;
    s = parts[1];
  } else if (parts.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad port '", s, "'"));
  }
  DYNVM_ASSIGN_OR_RETURN(uint8_t dt, ParseDTypeWord(s, true));
  p->dtype = dt;
  return p;
}

absl::StatusOr<std::unique_ptr<fb::AttributeT>> ParseAttr(absl::string_view s) {
  const size_t eq = s.find('=');
  if (eq == absl::string_view::npos)
    return absl::InvalidArgumentError(absl::StrCat("attribute without '=': ", s));
  auto a = std::make_unique<fb::AttributeT>();
  a->name = std::string(s.substr(0, eq));
  absl::string_view v = s.substr(eq + 1);
  const size_t colon = v.find(':');
  if (colon == absl::string_view::npos)
    return absl::InvalidArgumentError(absl::StrCat("attribute value needs a type: ", s));
  absl::string_view type = v.substr(0, colon), body = v.substr(colon + 1);
  if (type == "i") {
    a->type = fb::AttrType::Int;
    DYNVM_ASSIGN_OR_RETURN(int64_t x, ParseInt(body));
    a->i = x;
  } else if (type == "f") {
    a->type = fb::AttrType::Float;
    DYNVM_ASSIGN_OR_RETURN(float x, ParseF32(body));
    a->f = x;
  } else if (type == "s") {
    a->type = fb::AttrType::String;
    DYNVM_ASSIGN_OR_RETURN(std::string x, Unquote(body));
    a->s = x;
  } else if (type == "ints" || type == "floats" || type == "strings") {
    DYNVM_ASSIGN_OR_RETURN(std::vector<std::string> items, Bracketed(body, '[', ']'));
    for (const std::string& it : items) {
      if (type == "ints") {
        DYNVM_ASSIGN_OR_RETURN(int64_t x, ParseInt(it));
        a->ints.push_back(x);
      } else if (type == "floats") {
        DYNVM_ASSIGN_OR_RETURN(float x, ParseF32(it));
        a->floats.push_back(x);
      } else {
        DYNVM_ASSIGN_OR_RETURN(std::string x, Unquote(it));
        a->strings.push_back(x);
      }
    }
    a->type = type == "ints"     ? fb::AttrType::Ints
              : type == "floats" ? fb::AttrType::Floats
                                 : fb::AttrType::Strings;
  } else if (type == "t") {
    a->type = fb::AttrType::Tensor;
    if (!absl::ConsumePrefix(&body, "c"))
      return absl::InvalidArgumentError("tensor attribute must name a constant cN");
    DYNVM_ASSIGN_OR_RETURN(uint32_t x, ParseU32(body));
    a->tensor = x;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown attribute type '", type, "'"));
  }
  return a;
}

// Encodes `values:[...]` constant data for `dtype`.
absl::StatusOr<std::string> EncodeValues(const std::vector<std::string>& items, DType dtype) {
  std::string out;
  for (const std::string& it : items) {
    auto put = [&](const auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    if (IsFloat(dtype)) {
      DYNVM_ASSIGN_OR_RETURN(double d, ParseF64(it));
      switch (dtype) {
        case DType::kF32:
          put(static_cast<float>(d));
          break;
        case DType::kF64:
          put(d);
          break;
        case DType::kF16:
          put(Half(static_cast<float>(d)).bits);
          break;
        default:
          put(BFloat16(static_cast<float>(d)).bits);
          break;
      }
    } else if (dtype == DType::kBool) {
      if (it != "true" && it != "false" && it != "0" && it != "1")
        return absl::InvalidArgumentError(absl::StrCat("bad bool ", it));
      put(static_cast<uint8_t>(it == "true" || it == "1"));
    } else if (IsInteger(dtype)) {
      DYNVM_ASSIGN_OR_RETURN(int64_t v, ParseInt(it));
      switch (DTypeSize(dtype)) {
        case 1:
          put(static_cast<int8_t>(v));
          break;
        case 2:
          put(static_cast<int16_t>(v));
          break;
        case 4:
          put(static_cast<int32_t>(v));
          break;
        default:
          put(v);
          break;
      }
    } else {
      return absl::UnimplementedError("values: not supported for this dtype");
    }
  }
  return out;
}

// ---- the assembler proper ----

// The most bytes of `external` constants (a weights-apart executable) AssembleToBytes lays out:
// it builds the layout in memory.
constexpr int64_t kMaxExternalBytes = int64_t{512} << 20;

class Assembler {
 public:
  absl::StatusOr<Assembly> Run(absl::string_view text);

 private:
  struct OpenBlock {
    bool is_loop;
    uint32_t start_pc;    // if or loop
    uint32_t start_jump;  // word index of its jump operand
    int64_t else_pc = -1;
    uint32_t else_jump = 0;
    std::vector<std::pair<uint32_t, uint32_t>> breaks;     // (pc, jump word)
    std::vector<std::pair<uint32_t, uint32_t>> continues;  // (pc, jump word)
  };
  struct FuncFixup {
    size_t function;
    uint32_t word;
    std::string name;
    int line;
  };

  absl::Status Err(absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", msg));
  }
  absl::Status Directive(const std::vector<std::string>& w);
  absl::Status ConstDirective(const std::vector<std::string>& w);
  absl::Status KernelDirective(const std::vector<std::string>& w);
  absl::Status FunctionDirective(const std::vector<std::string>& w);
  absl::Status Instruction(absl::string_view line);
  // One operand of an instruction: encodes `arg` as operand `type` into `cw`.
  absl::Status EncodeOperand(Operand type, const std::string& arg, size_t function_index,
                             CodeWriter& cw);
  absl::Status IndexOperand(Operand type, const std::string& arg, size_t function_index,
                            CodeWriter& cw);
  absl::Status ListOperand(Operand type, const std::string& arg, CodeWriter& cw);
  absl::Status Structure(Opcode op, const std::string& mnemonic, uint32_t pc, int64_t jump_word);
  absl::Status EndFunction();
  absl::StatusOr<uint32_t> Reg(absl::string_view s, char bank) const;
  absl::StatusOr<uint32_t> ValueWord(absl::string_view s) const;
  absl::StatusOr<std::unique_ptr<fb::ParamT>> ParseParam(const std::vector<std::string>& w,
                                                         bool input);

  Assembly out_;
  int line_ = 0;
  fb::FunctionT* fn_ = nullptr;
  std::vector<OpenBlock> blocks_;
  std::vector<FuncFixup> fixups_;
  std::vector<std::unique_ptr<fb::SourceLocationT>> locations_;
  std::optional<std::string> pending_loc_;
  int64_t max_site_ = -1;
  bool sites_declared_ = false;
  absl::flat_hash_map<std::string, Opcode> mnemonics_;
};

absl::StatusOr<uint32_t> Assembler::Reg(absl::string_view s, char bank) const {
  if (s == "_") return kAbsentRegister;
  const char prefix[3] = {'%', bank, 0};
  if (!absl::ConsumePrefix(&s, prefix)) {
    return Err(absl::StrCat("expected a %", std::string(1, bank), " register, got '", s, "'"));
  }
  absl::StatusOr<uint32_t> r = ParseU32(s);
  if (!r.ok() || *r >= kRegisterFlag) return Err(absl::StrCat("bad register number '", s, "'"));
  return *r;
}

absl::StatusOr<uint32_t> Assembler::ValueWord(absl::string_view s) const {
  if (absl::StartsWith(s, "%s")) {
    DYNVM_ASSIGN_OR_RETURN(uint32_t r, Reg(s, 's'));
    return ValueRegister(r);
  }
  absl::StatusOr<int64_t> v = ParseInt(s);
  if (!v.ok() || *v < 0 || *v >= kRegisterFlag) {
    return Err(absl::StrCat("value '", s, "' must be a %s register or an integer in [0, 2^31)"));
  }
  return static_cast<uint32_t>(*v);
}

absl::StatusOr<std::unique_ptr<fb::ParamT>> Assembler::ParseParam(const std::vector<std::string>& w,
                                                                  bool input) {
  if (w.size() != 3) return Err(absl::StrCat(w[0], " NAME [dims] | *"));
  auto p = std::make_unique<fb::ParamT>();
  p->name = w[1];
  if (w[2] == "*") {
    p->has_shape = false;
  } else {
    absl::StatusOr<std::vector<std::string>> dims = Bracketed(w[2], '[', ']');
    if (!dims.ok()) return Err(dims.status().message());
    for (const std::string& d : *dims) {
      auto dim = std::make_unique<fb::DimT>();
      int64_t v;
      if (absl::SimpleAtoi(d, &v)) {
        dim->value = v;
      } else {
        dim->symbol = d;
      }
      p->shape.push_back(std::move(dim));
    }
  }
  const size_t index = input ? fn_->signature->inputs.size() : fn_->signature->outputs.size();
  const fb::ObjectType* t = nullptr;
  if (input && index < fn_->object_types.size()) t = &fn_->object_types[index];
  if (!input && index < fn_->object_results.size()) t = &fn_->object_results[index];
  if (t == nullptr)
    return Err(absl::StrCat(w[0], " ", index,
                            " has no matching register or result; declare .oregs/.oresults first"));
  p->kind = t->kind();
  p->dtype = t->dtype();
  return p;
}

absl::Status Assembler::Directive(const std::vector<std::string>& w) {
  const std::string& d = w[0];
  auto& exe = *out_.exe;
  if (d == ".producer") {
    if (w.size() != 2) return Err(".producer \"text\"");
    absl::StatusOr<std::string> s = Unquote(w[1]);
    if (!s.ok()) return Err(s.status().message());
    exe.producer = *s;
  } else if (d == ".string") {
    if (w.size() != 2) return Err(".string \"text\"");
    absl::StatusOr<std::string> s = Unquote(w[1]);
    if (!s.ok()) return Err(s.status().message());
    exe.strings.push_back(*s);
  } else if (d == ".weights") {
    if (w.size() != 4 || !absl::StartsWith(w[2], "hash=") || !absl::StartsWith(w[3], "size=")) {
      return Err(".weights \"file\" hash=N size=N");
    }
    auto ref = std::make_unique<fb::WeightsRefT>();
    absl::StatusOr<std::string> f = Unquote(w[1]);
    uint64_t hash, size;  // the hash is a full 64-bit value: parsed unsigned
    if (!f.ok() || !absl::SimpleAtoi(w[2].substr(5), &hash) ||
        !absl::SimpleAtoi(w[3].substr(5), &size)) {
      return Err("bad .weights: expected \"file\" hash=N size=N with unsigned decimal N");
    }
    ref->file_name = *f;
    ref->hash = hash;
    ref->size = size;
    exe.weights = std::move(ref);
  } else if (d == ".const") {
    return ConstDirective(w);
  } else if (d == ".kernel") {
    return KernelDirective(w);
  } else if (d == ".compressed") {
    if (w.size() != 1) return Err(".compressed takes no operands");
    out_.compress = true;
  } else if (d == ".function") {
    if (w.size() != 2) return Err(".function NAME");
    if (fn_ != nullptr) return Err(".function inside a function (missing .end)");
    exe.functions.push_back(std::make_unique<fb::FunctionT>());
    fn_ = exe.functions.back().get();
    fn_->name = w[1];
    max_site_ = -1;
    sites_declared_ = false;
  } else {
    return Err(absl::StrCat("unknown directive ", d));
  }
  return absl::OkStatus();
}

absl::Status Assembler::ConstDirective(const std::vector<std::string>& w) {
  auto& exe = *out_.exe;
  if (w.size() < 4)
    return Err(".const DTYPE [dims] [name=\"..\"] [weight] hex:..|values:[..]|external");
  auto c = std::make_unique<fb::ConstantT>();
  absl::StatusOr<uint8_t> dt = ParseDTypeWord(w[1], false);
  if (!dt.ok()) return Err(dt.status().message());
  c->dtype = *dt;
  absl::StatusOr<std::vector<std::string>> dims = Bracketed(w[2], '[', ']');
  if (!dims.ok()) return Err(dims.status().message());
  for (const std::string& x : *dims) {
    absl::StatusOr<int64_t> v = ParseInt(x);
    if (!v.ok()) return Err(v.status().message());
    c->shape.push_back(*v);
  }
  std::string data;
  bool have_data = false, external = false;
  int64_t declared_offset = -1, declared_size = -1;
  for (size_t i = 3; i < w.size(); ++i) {
    absl::string_view x = w[i];
    if (absl::ConsumePrefix(&x, "name=")) {
      absl::StatusOr<std::string> s = Unquote(x);
      if (!s.ok()) return Err(s.status().message());
      c->name = *s;
    } else if (x == "weight") {
      c->is_weight = true;
    } else if (x == "external") {
      have_data = true;
      external = true;
    } else if (absl::ConsumePrefix(&x, "offset=") || absl::ConsumePrefix(&x, "size=")) {
      // Where an external constant lies in the weights file (what vm-dis prints).
      absl::StatusOr<int64_t> v = ParseInt(x);
      if (!v.ok() || *v < 0) return Err(absl::StrCat("bad .const field '", w[i], "'"));
      (absl::StartsWith(w[i], "offset=") ? declared_offset : declared_size) = *v;
    } else if (absl::ConsumePrefix(&x, "hex:")) {
      if (x.size() % 2 != 0) return Err("odd number of hex digits");
      for (size_t k = 0; k < x.size(); k += 2) {
        int v;
        if (!absl::SimpleHexAtoi(x.substr(k, 2), &v)) return Err("bad hex data");
        data += static_cast<char>(v);
      }
      have_data = true;
    } else if (absl::ConsumePrefix(&x, "values:")) {
      absl::StatusOr<std::vector<std::string>> items = Bracketed(x, '[', ']');
      if (!items.ok()) return Err(items.status().message());
      absl::StatusOr<std::string> bytes = EncodeValues(*items, static_cast<DType>(c->dtype));
      if (!bytes.ok()) return Err(bytes.status().message());
      data = *bytes;
      have_data = true;
    } else {
      return Err(absl::StrCat("unknown .const field '", x, "'"));
    }
  }
  if (!have_data) return Err(".const needs hex:, values: or external");
  if (!external && (declared_offset >= 0 || declared_size >= 0))
    return Err("offset= and size= are for external constants");
  if (external && declared_size > kMaxExternalBytes) {
    return Err(absl::StrCat("external constant of ", declared_size, " bytes: vm-as lays out at ",
                            "most ", kMaxExternalBytes, " bytes of external constants"));
  }
  exe.constants.push_back(std::move(c));
  out_.constants.push_back(std::move(data));
  out_.external_layout.push_back({declared_offset, declared_size});
  return absl::OkStatus();
}

absl::Status Assembler::KernelDirective(const std::vector<std::string>& w) {
  auto& exe = *out_.exe;
  if (w.size() < 2) return Err(".kernel \"op\" ...");
  auto k = std::make_unique<fb::KernelT>();
  absl::StatusOr<std::string> op = Unquote(w[1]);
  if (!op.ok()) return Err(op.status().message());
  k->op = *op;
  for (size_t i = 2; i < w.size(); ++i) {
    absl::string_view x = w[i];
    if (absl::ConsumePrefix(&x, "domain=")) {
      absl::StatusOr<std::string> s = Unquote(x);
      if (!s.ok()) return Err(s.status().message());
      k->domain = *s;
    } else if (absl::ConsumePrefix(&x, "backend=")) {
      absl::StatusOr<std::string> s = Unquote(x);
      if (!s.ok()) return Err(s.status().message());
      k->backend = *s;
    } else if (absl::ConsumePrefix(&x, "device=")) {
      if (x == "cpu")
        k->device = 0;
      else if (x == "cuda")
        k->device = 1;
      else
        return Err(absl::StrCat("unknown device '", x, "'"));
    } else if (absl::StartsWith(x, "in(") || absl::StartsWith(x, "out(")) {
      const bool is_in = x[0] == 'i';
      x.remove_prefix(is_in ? 2 : 3);
      absl::StatusOr<std::vector<std::string>> items = Bracketed(x, '(', ')');
      if (!items.ok()) return Err(items.status().message());
      for (const std::string& it : *items) {
        absl::StatusOr<std::unique_ptr<fb::PortT>> p = ParsePort(it);
        if (!p.ok()) return Err(p.status().message());
        (is_in ? k->inputs : k->outputs).push_back(*std::move(p));
      }
    } else if (absl::ConsumePrefix(&x, "attrs")) {
      absl::StatusOr<std::vector<std::string>> items = Bracketed(x, '(', ')');
      if (!items.ok()) return Err(items.status().message());
      for (const std::string& it : *items) {
        absl::StatusOr<std::unique_ptr<fb::AttributeT>> a = ParseAttr(it);
        if (!a.ok()) return Err(a.status().message());
        k->attrs.push_back(*std::move(a));
      }
    } else {
      return Err(absl::StrCat("unknown .kernel field '", x, "'"));
    }
  }
  exe.kernels.push_back(std::move(k));
  return absl::OkStatus();
}

absl::Status Assembler::FunctionDirective(const std::vector<std::string>& w) {
  const std::string& d = w[0];
  if (d == ".params") {
    if (w.size() != 3) return Err(".params OBJECTS SCALARS");
    absl::StatusOr<uint32_t> o = ParseU32(w[1]), s = ParseU32(w[2]);
    if (!o.ok() || !s.ok()) return Err("bad .params");
    fn_->num_object_params = *o;
    fn_->num_scalar_params = *s;
  } else if (d == ".sregs" || d == ".sresults") {
    for (size_t i = 1; i < w.size(); ++i) {
      absl::StatusOr<fb::ScalarType> t = ParseScalarType(w[i]);
      if (!t.ok()) return Err(t.status().message());
      (d == ".sregs" ? fn_->scalar_types : fn_->scalar_results).push_back(*t);
    }
  } else if (d == ".oregs" || d == ".oresults") {
    for (size_t i = 1; i < w.size(); ++i) {
      absl::StatusOr<fb::ObjectType> t = ParseObjectType(w[i]);
      if (!t.ok()) return Err(t.status().message());
      (d == ".oregs" ? fn_->object_types : fn_->object_results).push_back(*t);
    }
  } else if (d == ".sites") {
    if (w.size() != 2) return Err(".sites N");
    absl::StatusOr<uint32_t> n = ParseU32(w[1]);
    if (!n.ok()) return Err(n.status().message());
    fn_->num_invoke_sites = *n;
    sites_declared_ = true;
  } else if (d == ".entry") {
    if (w.size() != 1) return Err(".entry takes no operands");
    if (!fn_->signature) fn_->signature = std::make_unique<fb::SignatureT>();
  } else if (d == ".input" || d == ".output") {
    if (!fn_->signature) fn_->signature = std::make_unique<fb::SignatureT>();
    absl::StatusOr<std::unique_ptr<fb::ParamT>> p = ParseParam(w, d == ".input");
    if (!p.ok()) return p.status();
    (d == ".input" ? fn_->signature->inputs : fn_->signature->outputs).push_back(*std::move(p));
  } else if (d == ".bound") {
    if (w.size() != 3) return Err(".bound SYMBOL N");
    auto b = std::make_unique<fb::SymbolBoundT>();
    b->name = w[1];
    absl::StatusOr<int64_t> n = ParseInt(w[2]);
    if (!n.ok()) return Err(n.status().message());
    b->bound = *n;
    fn_->bounds.push_back(std::move(b));
  } else if (d == ".loc") {
    if (w.size() != 2) return Err(".loc \"node\"");
    absl::StatusOr<std::string> s = Unquote(w[1]);
    if (!s.ok()) return Err(s.status().message());
    pending_loc_ = *s;
  } else if (d == ".end") {
    return EndFunction();
  } else {
    return Err(absl::StrCat("unknown directive ", d, " inside a function"));
  }
  return absl::OkStatus();
}

absl::Status Assembler::EndFunction() {
  if (!blocks_.empty())
    return Err(absl::StrCat(blocks_.back().is_loop ? "loop" : "if", " not closed before .end"));
  if (!sites_declared_) fn_->num_invoke_sites = static_cast<uint32_t>(max_site_ + 1);
  if (pending_loc_) return Err(".loc with no instruction after it");
  fn_ = nullptr;
  return absl::OkStatus();
}

absl::Status Assembler::Instruction(absl::string_view line) {
  size_t sp = 0;
  while (sp < line.size() && !absl::ascii_isspace(static_cast<unsigned char>(line[sp]))) ++sp;
  const std::string mnemonic(line.substr(0, sp));
  auto it = mnemonics_.find(mnemonic);
  if (it == mnemonics_.end()) return Err(absl::StrCat("unknown instruction '", mnemonic, "'"));
  const Opcode op = it->second;
  const OpcodeInfo& info = GetOpcodeInfo(op);
  std::vector<std::string> args = SplitTop(absl::StripAsciiWhitespace(line.substr(sp)), ',');
  size_t expected = 0;
  for (int k = 0; k < info.num_operands; ++k)
    expected += info.operands[k] == Operand::kJump ? 0 : 1;
  if (args.size() != expected) {
    return Err(absl::StrCat(mnemonic, " takes ", expected, " operands, got ", args.size()));
  }
  std::vector<uint32_t>& code = fn_->code;
  const size_t function_index = out_.exe->functions.size() - 1;
  if (pending_loc_) {
    auto loc = std::make_unique<fb::SourceLocationT>();
    loc->function = static_cast<uint32_t>(function_index);
    loc->pc = static_cast<uint32_t>(code.size());
    loc->node = *std::move(pending_loc_);
    pending_loc_.reset();
    locations_.push_back(std::move(loc));
  }
  CodeWriter cw(&code);
  const uint32_t pc = cw.Begin(op);
  int64_t jump_word = -1;
  size_t a = 0;
  for (int k = 0; k < info.num_operands; ++k) {
    const Operand type = info.operands[k];
    if (type == Operand::kJump) {
      jump_word = static_cast<int64_t>(code.size());
      cw.Word(0);
      continue;
    }
    DYNVM_RETURN_IF_ERROR(EncodeOperand(type, args[a++], function_index, cw));
  }
  if (absl::Status s = cw.End(); !s.ok()) return Err(s.message());
  return Structure(op, mnemonic, pc, jump_word);
}

absl::Status Assembler::EncodeOperand(Operand type, const std::string& arg, size_t function_index,
                                      CodeWriter& cw) {
  absl::StatusOr<uint32_t> word;
  switch (type) {
    case Operand::kRI:
    case Operand::kRF:
    case Operand::kRB:
    case Operand::kRS:
    case Operand::kWI:
    case Operand::kWF:
    case Operand::kWB:
    case Operand::kWS:
      word = Reg(arg, 's');
      break;
    case Operand::kRT:
    case Operand::kWT:
    case Operand::kMT:
    case Operand::kWG:
    case Operand::kRG:
    case Operand::kRQ:
    case Operand::kWQ:
    case Operand::kMQ:
    case Operand::kRP:
    case Operand::kWP:
    case Operand::kRX:
    case Operand::kWX:
    case Operand::kKill:
      word = Reg(arg, 'o');
      break;
    case Operand::kImm32:
      word = ParseU32(arg);
      break;
    case Operand::kImm64: {
      absl::StatusOr<int64_t> v = ParseInt(arg);
      if (!v.ok()) return Err(v.status().message());
      cw.Imm64(*v);
      return absl::OkStatus();
    }
    case Operand::kImmF64: {
      absl::StatusOr<double> v = ParseF64(arg);
      if (!v.ok()) return Err(v.status().message());
      cw.F64(*v);
      return absl::OkStatus();
    }
    case Operand::kValue:
      word = ValueWord(arg);
      break;
    case Operand::kDType: {
      absl::StatusOr<uint8_t> d = ParseDTypeWord(arg, false);
      if (!d.ok()) return Err(d.status().message());
      word = *d;
      break;
    }
    case Operand::kDevice:
      if (arg == "cpu")
        word = 0u;
      else if (arg == "cuda")
        word = 1u;
      else
        return Err(absl::StrCat("unknown device '", arg, "'"));
      break;
    case Operand::kKernel:
    case Operand::kConst:
    case Operand::kString:
    case Operand::kSite:
    case Operand::kFunc:
      return IndexOperand(type, arg, function_index, cw);
    case Operand::kListRX:
    case Operand::kListWX:
    case Operand::kListOut:
    case Operand::kListRS:
    case Operand::kListWS:
    case Operand::kListValue:
      return ListOperand(type, arg, cw);
    case Operand::kJump:
      break;
  }
  if (!word.ok()) return Err(word.status().message());
  cw.Word(*word);
  return absl::OkStatus();
}

// kN, cN, strN, #N and @function operands.
absl::Status Assembler::IndexOperand(Operand type, const std::string& arg, size_t function_index,
                                     CodeWriter& cw) {
  absl::string_view x = arg;
  absl::StatusOr<uint32_t> word;
  switch (type) {
    case Operand::kKernel:
    case Operand::kConst:
      if (!absl::ConsumePrefix(&x, type == Operand::kKernel ? "k" : "c")) {
        return Err(
            absl::StrCat("expected ", type == Operand::kKernel ? "kN" : "cN", ", got '", arg, "'"));
      }
      word = ParseU32(x);
      break;
    case Operand::kString:
      if (!absl::ConsumePrefix(&x, "str"))
        return Err(absl::StrCat("expected strN, got '", arg, "'"));
      word = ParseU32(x);
      break;
    case Operand::kSite:
      if (!absl::ConsumePrefix(&x, "#")) return Err(absl::StrCat("expected #N, got '", arg, "'"));
      word = ParseU32(x);
      if (word.ok()) max_site_ = std::max<int64_t>(max_site_, *word);
      break;
    default:  // kFunc
      if (!absl::ConsumePrefix(&x, "@"))
        return Err(absl::StrCat("expected @function, got '", arg, "'"));
      fixups_.push_back(
          {function_index, static_cast<uint32_t>(fn_->code.size()), std::string(x), line_});
      word = 0u;
      break;
  }
  if (!word.ok()) return Err(word.status().message());
  cw.Word(*word);
  return absl::OkStatus();
}

// (%oN, ...), (%sN, ...) and [value, ...] operands.
absl::Status Assembler::ListOperand(Operand type, const std::string& arg, CodeWriter& cw) {
  const bool values = type == Operand::kListValue;
  absl::StatusOr<std::vector<std::string>> items =
      Bracketed(arg, values ? '[' : '(', values ? ']' : ')');
  if (!items.ok()) return Err(items.status().message());
  std::vector<uint32_t> words;
  for (const std::string& item : *items) {
    absl::StatusOr<uint32_t> w;
    if (values)
      w = ValueWord(item);
    else
      w = Reg(item, (type == Operand::kListRS || type == Operand::kListWS) ? 's' : 'o');
    if (!w.ok()) return w.status();
    words.push_back(*w);
  }
  cw.List(words);
  return absl::OkStatus();
}

// Structure: derives jump offsets from the nesting of if/else/endif and loop/endloop.
absl::Status Assembler::Structure(Opcode op, const std::string& mnemonic, uint32_t pc,
                                  int64_t jump_word) {
  std::vector<uint32_t>& code = fn_->code;
  auto set_jump = [&](uint32_t word_index, uint32_t from_pc, int64_t target) {
    code[word_index] =
        static_cast<uint32_t>(static_cast<int32_t>(target - static_cast<int64_t>(from_pc)));
  };
  const uint32_t next_pc = static_cast<uint32_t>(code.size());
  auto innermost_loop = [&]() -> OpenBlock* {
    for (auto b = blocks_.rbegin(); b != blocks_.rend(); ++b) {
      if (b->is_loop) return &*b;
    }
    return nullptr;
  };
  switch (op) {
    case Opcode::kIf:
    case Opcode::kLoop:
      blocks_.push_back(OpenBlock{op == Opcode::kLoop, pc, static_cast<uint32_t>(jump_word)});
      break;
    case Opcode::kElse: {
      if (blocks_.empty() || blocks_.back().is_loop || blocks_.back().else_pc >= 0)
        return Err("else without if");
      OpenBlock& b = blocks_.back();
      b.else_pc = pc;
      b.else_jump = static_cast<uint32_t>(jump_word);
      set_jump(b.start_jump, b.start_pc, next_pc);
      break;
    }
    case Opcode::kEndIf: {
      if (blocks_.empty() || blocks_.back().is_loop) return Err("endif without if");
      OpenBlock b = std::move(blocks_.back());
      blocks_.pop_back();
      if (b.else_pc >= 0) {
        set_jump(b.else_jump, static_cast<uint32_t>(b.else_pc), pc);
      } else {
        set_jump(b.start_jump, b.start_pc, pc);
      }
      break;
    }
    case Opcode::kEndLoop: {
      if (blocks_.empty() || !blocks_.back().is_loop) return Err("endloop without loop");
      OpenBlock b = std::move(blocks_.back());
      blocks_.pop_back();
      set_jump(static_cast<uint32_t>(jump_word), pc, b.start_pc);
      set_jump(b.start_jump, b.start_pc, next_pc);
      for (auto [from, w] : b.breaks) set_jump(w, from, next_pc);
      for (auto [from, w] : b.continues) set_jump(w, from, pc);
      break;
    }
    case Opcode::kBreak:
    case Opcode::kBreakIf:
    case Opcode::kBreakUnless:
    case Opcode::kContinue: {
      OpenBlock* loop = innermost_loop();
      if (loop == nullptr) return Err(absl::StrCat(mnemonic, " outside a loop"));
      (op == Opcode::kContinue ? loop->continues : loop->breaks)
          .push_back({pc, static_cast<uint32_t>(jump_word)});
      break;
    }
    default:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<Assembly> Assembler::Run(absl::string_view text) {
  for (int i = 0; i < kNumOpcodes; ++i) {
    mnemonics_[std::string(GetOpcodeInfo(static_cast<Opcode>(i)).mnemonic)] =
        static_cast<Opcode>(i);
  }
  out_.exe = std::make_unique<fb::ExecutableT>();
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_;
    absl::string_view line = StripComment(raw);
    if (line.empty()) continue;
    if (line[0] == '.') {
      std::vector<std::string> w = Words(line);
      const bool function_level = w[0] != ".function" && w[0] != ".producer" && w[0] != ".string" &&
                                  w[0] != ".const" && w[0] != ".kernel" && w[0] != ".weights" &&
                                  w[0] != ".compressed";
      if (function_level) {
        if (fn_ == nullptr) return Err(absl::StrCat(w[0], " outside a function"));
        DYNVM_RETURN_IF_ERROR(FunctionDirective(w));
      } else {
        if (fn_ != nullptr && w[0] != ".function")
          return Err(absl::StrCat(w[0], " inside a function"));
        DYNVM_RETURN_IF_ERROR(Directive(w));
      }
      continue;
    }
    if (fn_ == nullptr) return Err("instruction outside a function");
    DYNVM_RETURN_IF_ERROR(Instruction(line));
  }
  if (fn_ != nullptr) return Err(absl::StrCat("function '", fn_->name, "' has no .end"));
  absl::flat_hash_map<std::string, uint32_t> function_index;
  for (size_t i = 0; i < out_.exe->functions.size(); ++i) {
    function_index.emplace(out_.exe->functions[i]->name, static_cast<uint32_t>(i));
  }
  for (const FuncFixup& f : fixups_) {
    auto it = function_index.find(f.name);
    if (it == function_index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", f.line, ": unknown function @", f.name));
    }
    out_.exe->functions[f.function]->code[f.word] = it->second;
  }
  if (!locations_.empty()) {
    out_.exe->debug = std::make_unique<fb::DebugInfoT>();
    out_.exe->debug->locations = std::move(locations_);
  }
  return std::move(out_);
}

}  // namespace

absl::StatusOr<Assembly> Assemble(absl::string_view text) { return Assembler().Run(text); }

absl::StatusOr<std::string> AssembleToBytes(absl::string_view text) {
  DYNVM_ASSIGN_OR_RETURN(Assembly a, Assemble(text));
  // An executable whose constants live in a weights file (.weights) holds no constant data;
  // its constants keep the offsets and sizes the text declares. The writer lays constants out
  // in table order, 64-byte aligned, so a layout it would not make is refused below.
  // The layout is made in memory (one zero block that every external constant views, and the
  // writer's segment), so the external constants may add up to kMaxExternalBytes.
  std::vector<absl::string_view> data(a.constants.begin(), a.constants.end());
  int64_t total = 0, largest = 0;
  for (const Assembly::Layout& l : a.external_layout) {
    total += std::max<int64_t>(l.size, 0);
    largest = std::max(largest, l.size);
  }
  if (a.exe->weights != nullptr && total > kMaxExternalBytes) {
    return absl::InvalidArgumentError(absl::StrCat("external constants of ", total,
                                                   " bytes in all: vm-as lays out at most ",
                                                   kMaxExternalBytes));
  }
  const std::string zeros(a.exe->weights != nullptr ? static_cast<size_t>(largest) : 0, '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    const int64_t size = a.external_layout[i].size;
    if (a.exe->weights != nullptr && size >= 0) {
      data[i] = absl::string_view(zeros.data(), static_cast<size_t>(size));
    }
  }
  schema::WriteOptions options;
  options.compress = a.compress;
  DYNVM_ASSIGN_OR_RETURN(std::string bytes, schema::SerializeExecutable(*a.exe, data, options));
  for (size_t i = 0; i < data.size(); ++i) {
    const int64_t offset = a.external_layout[i].offset;
    if (a.exe->weights != nullptr && offset >= 0 &&
        a.exe->constants[i]->offset != static_cast<uint64_t>(offset)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "constant ", i, ": offset=", offset, " is not where the layout puts it (",
          a.exe->constants[i]->offset, ": each constant 64-byte aligned, in table order)"));
    }
  }
  return bytes;
}

}  // namespace dynvm::isa
