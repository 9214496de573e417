#include "isa/disassembler.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"
#include "schema/fb_util.h"

namespace dynvm::isa {
namespace {

const char* KindWord(fb::ObjectKind k) {
  switch (k) {
    case fb::ObjectKind::Tensor:
      return "tensor";
    case fb::ObjectKind::Storage:
      return "storage";
    case fb::ObjectKind::Sequence:
      return "seq";
    case fb::ObjectKind::Optional:
      return "opt";
  }
  return "?";
}

std::string DTypeWord(uint8_t d) {
  if (d == kAnyDType) return "any";
  return std::string(DTypeName(static_cast<DType>(d)));
}

std::string ObjectTypeText(const fb::ObjectType& t) {
  switch (t.kind()) {
    case fb::ObjectKind::Storage:
      return t.dtype() == kAnyDType ? "storage" : absl::StrCat("storage:", DTypeWord(t.dtype()));
    case fb::ObjectKind::Optional:
      return absl::StrCat("opt:", KindWord(t.elem_kind()), ":", DTypeWord(t.dtype()));
    default:
      return absl::StrCat(KindWord(t.kind()), ":", DTypeWord(t.dtype()));
  }
}

const char* ScalarWord(fb::ScalarType t) {
  switch (t) {
    case fb::ScalarType::I64:
      return "i64";
    case fb::ScalarType::F64:
      return "f64";
    case fb::ScalarType::Bool:
      return "bool";
  }
  return "?";
}

std::string PortText(const fb::Port& p) {
  std::string s;
  if (p.dynamic()) s += "dyn:";
  if (p.kind() != fb::ObjectKind::Tensor) absl::StrAppend(&s, KindWord(p.kind()), ":");
  s += DTypeWord(p.dtype());
  if (p.optional()) s += "?";
  return s;
}

std::string AttrText(const fb::Attribute& a) {
  std::string v;
  switch (a.type()) {
    case fb::AttrType::Int:
      v = absl::StrCat("i:", a.i());
      break;
    case fb::AttrType::Float:
      v = absl::StrCat("f:", FormatF32(a.f()));
      break;
    case fb::AttrType::String:
      v = absl::StrCat("s:", QuoteString(schema::Sv(a.s())));
      break;
    case fb::AttrType::Ints: {
      std::vector<int64_t> xs;
      if (a.ints()) xs.assign(a.ints()->begin(), a.ints()->end());
      v = absl::StrCat("ints:[", absl::StrJoin(xs, ","), "]");
      break;
    }
    case fb::AttrType::Floats: {
      std::vector<std::string> xs;
      if (a.floats())
        for (float f : *a.floats()) xs.push_back(FormatF32(f));
      v = absl::StrCat("floats:[", absl::StrJoin(xs, ","), "]");
      break;
    }
    case fb::AttrType::Strings: {
      std::vector<std::string> xs;
      if (a.strings())
        for (const auto* s : *a.strings()) xs.push_back(QuoteString(schema::Sv(s)));
      v = absl::StrCat("strings:[", absl::StrJoin(xs, ","), "]");
      break;
    }
    case fb::AttrType::Tensor:
      v = absl::StrCat("t:c", a.tensor());
      break;
  }
  return absl::StrCat(schema::Sv(a.name()), "=", v);
}

std::string ParamText(const fb::Param& p) {
  if (!p.has_shape()) return absl::StrCat(schema::Sv(p.name()), " *");
  std::vector<std::string> dims;
  if (p.shape()) {
    for (const fb::Dim* d : *p.shape()) {
      dims.push_back(d->value() >= 0 ? absl::StrCat(d->value())
                                     : std::string(schema::Sv(d->symbol())));
    }
  }
  return absl::StrCat(schema::Sv(p.name()), " [", absl::StrJoin(dims, ","), "]");
}

std::string ValueText(uint32_t w) {
  return IsValueRegister(w) ? absl::StrCat("%s", w & ~kRegisterFlag) : absl::StrCat(w);
}

std::string RegListText(absl::Span<const uint32_t> regs, char bank) {
  std::vector<std::string> xs;
  for (uint32_t r : regs)
    xs.push_back(r == kAbsentRegister ? "_" : absl::StrCat("%", std::string(1, bank), r));
  return absl::StrCat("(", absl::StrJoin(xs, ", "), ")");
}

}  // namespace

std::string QuoteString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string FormatF64(double v) {
  if (std::isfinite(v)) return absl::StrFormat("%.17g", v);
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return absl::StrFormat("0x%016x", bits);
}

std::string FormatF32(float v) {
  if (std::isfinite(v)) return absl::StrFormat("%.9g", v);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return absl::StrFormat("0x%08x", bits);
}

namespace {

// The directives before the first function: producer, compression, weights file, strings,
// constants (with their data, or where they lie in the weights file) and kernels.
absl::Status AppendTables(const fb::Executable& exe, absl::Span<const uint8_t> constants,
                          const DisassembleOptions& options, std::string& out) {
  if (exe.producer())
    absl::StrAppend(&out, ".producer ", QuoteString(schema::Sv(exe.producer())), "\n");
  if (options.compressed) out += ".compressed\n";
  if (exe.weights()) {
    absl::StrAppend(&out, ".weights ", QuoteString(schema::Sv(exe.weights()->file_name())),
                    " hash=", exe.weights()->hash(), " size=", exe.weights()->size(), "\n");
  }
  if (exe.strings()) {
    for (const auto* s : *exe.strings())
      absl::StrAppend(&out, ".string ", QuoteString(schema::Sv(s)), "\n");
  }
  if (exe.constants()) {
    for (uint32_t i = 0; i < exe.constants()->size(); ++i) {
      const fb::Constant* c = exe.constants()->Get(i);
      std::vector<int64_t> shape;
      if (c->shape()) shape.assign(c->shape()->begin(), c->shape()->end());
      absl::StrAppend(&out, ".const ", DTypeWord(c->dtype()), " [", absl::StrJoin(shape, ","), "]");
      if (c->name()) absl::StrAppend(&out, " name=", QuoteString(schema::Sv(c->name())));
      if (c->is_weight()) out += " weight";
      if (exe.weights() != nullptr) {
        absl::StrAppend(&out, " external offset=", c->offset(), " size=", c->size());
      } else if (!options.constant_data) {
        out += " external";
      } else {
        out += " hex:";
        if (c->offset() + c->size() > constants.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("constant ", i, " lies outside the segment"));
        }
        for (uint64_t b = 0; b < c->size(); ++b)
          absl::StrAppendFormat(&out, "%02x", constants[c->offset() + b]);
      }
      absl::StrAppend(&out, "  ; c", i, "\n");
    }
  }
  if (exe.kernels()) {
    for (uint32_t i = 0; i < exe.kernels()->size(); ++i) {
      const fb::Kernel* k = exe.kernels()->Get(i);
      absl::StrAppend(&out, ".kernel ", QuoteString(schema::Sv(k->op())));
      if (k->domain() && k->domain()->size() > 0)
        absl::StrAppend(&out, " domain=", QuoteString(schema::Sv(k->domain())));
      if (k->device() != 0) absl::StrAppend(&out, " device=", k->device() == 1 ? "cuda" : "?");
      if (k->backend() && k->backend()->size() > 0)
        absl::StrAppend(&out, " backend=", QuoteString(schema::Sv(k->backend())));
      std::vector<std::string> ports;
      if (k->inputs())
        for (const auto* p : *k->inputs()) ports.push_back(PortText(*p));
      absl::StrAppend(&out, " in(", absl::StrJoin(ports, ", "), ")");
      ports.clear();
      if (k->outputs())
        for (const auto* p : *k->outputs()) ports.push_back(PortText(*p));
      absl::StrAppend(&out, " out(", absl::StrJoin(ports, ", "), ")");
      if (k->attrs() && k->attrs()->size() > 0) {
        std::vector<std::string> attrs;
        for (const auto* a : *k->attrs()) attrs.push_back(AttrText(*a));
        absl::StrAppend(&out, " attrs(", absl::StrJoin(attrs, ", "), ")");
      }
      absl::StrAppend(&out, "  ; k", i, "\n");
    }
  }
  return absl::OkStatus();
}

// A function's directives: parameters, register and result types, sites, signature, bounds.
void AppendFunctionHeader(const fb::Function& f, std::string& out) {
  absl::StrAppend(&out, "\n.function ", schema::Sv(f.name()), "\n");
  absl::StrAppend(&out, "  .params ", f.num_object_params(), " ", f.num_scalar_params(), "\n");
  std::vector<std::string> types;
  if (f.scalar_types())
    for (auto t : *f.scalar_types()) types.push_back(ScalarWord(t));
  if (!types.empty()) absl::StrAppend(&out, "  .sregs ", absl::StrJoin(types, " "), "\n");
  types.clear();
  if (f.object_types())
    for (const auto* t : *f.object_types()) types.push_back(ObjectTypeText(*t));
  if (!types.empty()) absl::StrAppend(&out, "  .oregs ", absl::StrJoin(types, " "), "\n");
  types.clear();
  if (f.object_results())
    for (const auto* t : *f.object_results()) types.push_back(ObjectTypeText(*t));
  if (!types.empty()) absl::StrAppend(&out, "  .oresults ", absl::StrJoin(types, " "), "\n");
  types.clear();
  if (f.scalar_results())
    for (auto t : *f.scalar_results()) types.push_back(ScalarWord(t));
  if (!types.empty()) absl::StrAppend(&out, "  .sresults ", absl::StrJoin(types, " "), "\n");
  if (f.num_invoke_sites() > 0) absl::StrAppend(&out, "  .sites ", f.num_invoke_sites(), "\n");
  if (f.signature()) {
    out += "  .entry\n";
    if (f.signature()->inputs())
      for (const auto* p : *f.signature()->inputs())
        absl::StrAppend(&out, "  .input ", ParamText(*p), "\n");
    if (f.signature()->outputs())
      for (const auto* p : *f.signature()->outputs())
        absl::StrAppend(&out, "  .output ", ParamText(*p), "\n");
  }
  if (f.bounds()) {
    for (const auto* b : *f.bounds())
      absl::StrAppend(&out, "  .bound ", schema::Sv(b->name()), " ", b->bound(), "\n");
  }
}

// The text of operand slot `s` of the instruction whose words start at `w` ("" for a jump,
// which the nesting implies).
std::string OperandText(const fb::Executable& exe, const Decoded::Slot& s, const uint32_t* w) {
  const uint32_t v = w[s.pos];
  absl::Span<const uint32_t> list(w + s.pos + 1, s.count);
  switch (s.type) {
    case Operand::kRI:
    case Operand::kRF:
    case Operand::kRB:
    case Operand::kRS:
    case Operand::kWI:
    case Operand::kWF:
    case Operand::kWB:
    case Operand::kWS:
      return absl::StrCat("%s", v);
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
      return absl::StrCat("%o", v);
    case Operand::kImm32:
      return absl::StrCat(v);
    case Operand::kImm64:
      return absl::StrCat(ReadImm64(w + s.pos));
    case Operand::kImmF64:
      return FormatF64(ReadF64(w + s.pos));
    case Operand::kValue:
      return ValueText(v);
    case Operand::kDType:
      return DTypeWord(static_cast<uint8_t>(v));
    case Operand::kDevice:
      return v == 0 ? "cpu" : "cuda";
    case Operand::kKernel:
      return absl::StrCat("k", v);
    case Operand::kConst:
      return absl::StrCat("c", v);
    case Operand::kFunc:
      return absl::StrCat("@", schema::Sv(exe.functions()->Get(v)->name()));
    case Operand::kString:
      return absl::StrCat("str", v);
    case Operand::kSite:
      return absl::StrCat("#", v);
    case Operand::kJump:
      return "";
    case Operand::kListRX:
    case Operand::kListWX:
    case Operand::kListOut:
      return RegListText(list, 'o');
    case Operand::kListRS:
    case Operand::kListWS:
      return RegListText(list, 's');
    case Operand::kListValue: {
      std::vector<std::string> xs;
      for (uint32_t x : list) xs.push_back(ValueText(x));
      return absl::StrCat("[", absl::StrJoin(xs, ", "), "]");
    }
  }
  return "";
}

// Function `fi`'s code, one instruction a line, indented by nesting, each preceded by its
// `.loc` when the debug info has one. `loc_index` walks the sorted locations.
absl::Status AppendCode(const fb::Executable& exe, uint32_t fi, const DisassembleOptions& options,
                        uint32_t& loc_index, std::string& out) {
  const fb::Function* f = exe.functions()->Get(fi);
  const auto* locs = exe.debug() ? exe.debug()->locations() : nullptr;
  absl::Span<const uint32_t> code(f->code()->data(), f->code()->size());
  int depth = 0;
  for (uint32_t pc = 0; pc < code.size();) {
    Decoded d;
    DYNVM_RETURN_IF_ERROR(DecodeAt(code, pc, &d));
    while (locs && loc_index < locs->size() &&
           std::make_pair(locs->Get(loc_index)->function(), locs->Get(loc_index)->pc()) <
               std::make_pair(fi, pc)) {
      ++loc_index;
    }
    if (locs && loc_index < locs->size() && locs->Get(loc_index)->function() == fi &&
        locs->Get(loc_index)->pc() == pc) {
      const auto* node = locs->Get(loc_index)->node();
      absl::StrAppend(&out, std::string(2 + 2 * depth, ' '), ".loc ", QuoteString(schema::Sv(node)),
                      "\n");
    }
    if (d.op == Opcode::kElse || d.op == Opcode::kEndIf || d.op == Opcode::kEndLoop) --depth;
    const OpcodeInfo& info = GetOpcodeInfo(d.op);
    std::string line = absl::StrCat(std::string(2 + 2 * std::max(depth, 0), ' '), info.mnemonic);
    std::vector<std::string> ops;
    for (int k = 0; k < d.num_operands; ++k) {
      if (d.slots[k].type == Operand::kJump) continue;  // implied by the nesting
      ops.push_back(OperandText(exe, d.slots[k], code.data() + pc));
    }
    if (!ops.empty()) absl::StrAppend(&line, " ", absl::StrJoin(ops, ", "));
    if (options.pcs) {
      if (line.size() < 48) line.resize(48, ' ');
      absl::StrAppend(&line, "  ; pc ", pc);
    }
    absl::StrAppend(&out, line, "\n");
    if (d.op == Opcode::kIf || d.op == Opcode::kElse || d.op == Opcode::kLoop) ++depth;
    pc += d.length;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> Disassemble(const fb::Executable& exe,
                                        absl::Span<const uint8_t> constants,
                                        const DisassembleOptions& options) {
  std::string out = "; dynvm assembly\n";
  DYNVM_RETURN_IF_ERROR(AppendTables(exe, constants, options, out));
  uint32_t loc_index = 0;
  for (uint32_t fi = 0; fi < exe.functions()->size(); ++fi) {
    AppendFunctionHeader(*exe.functions()->Get(fi), out);
    DYNVM_RETURN_IF_ERROR(AppendCode(exe, fi, options, loc_index, out));
    out += ".end\n";
  }
  return out;
}

}  // namespace dynvm::isa
