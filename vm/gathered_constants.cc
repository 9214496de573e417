#include "vm/gathered_constants.h"

#include <algorithm>

#include "absl/types/span.h"
#include "common/dtype.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"
#include "isa/operands.h"
#include "schema/executable_generated.h"
#include "schema/fb_util.h"

namespace dynvm {
namespace {

using schema::Sv;

constexpr uint32_t kAbsent = 0xFFFFFFFF;  // an absent optional kernel input

bool IsObjectRegister(isa::Operand t) {
  switch (t) {
    case isa::Operand::kRT:
    case isa::Operand::kWT:
    case isa::Operand::kMT:
    case isa::Operand::kWG:
    case isa::Operand::kRG:
    case isa::Operand::kRQ:
    case isa::Operand::kWQ:
    case isa::Operand::kMQ:
    case isa::Operand::kRP:
    case isa::Operand::kWP:
    case isa::Operand::kRX:
    case isa::Operand::kWX:
    case isa::Operand::kKill:
      return true;
    default:
      return false;
  }
}

bool IsObjectList(isa::Operand t) {
  return t == isa::Operand::kListRX || t == isa::Operand::kListWX || t == isa::Operand::kListOut;
}

// Whether kernel `k` is an ONNX Gather of rows (axis 0) of constant `c`.
bool GathersRows(const fb::Kernel& k, const fb::Constant& c) {
  if (Sv(k.op()) != "Gather") return false;
  const absl::string_view domain = k.domain() ? Sv(k.domain()) : "";
  if (!domain.empty() && domain != "ai.onnx") return false;
  if (k.inputs() == nullptr || k.inputs()->size() != 2) return false;
  int64_t axis = 0;
  if (k.attrs()) {
    for (const fb::Attribute* a : *k.attrs()) {
      if (Sv(a->name()) != "axis") continue;
      if (a->type() != fb::AttrType::Int) return false;
      axis = a->i();
    }
  }
  const int64_t rank = c.shape() ? static_cast<int64_t>(c.shape()->size()) : 0;
  return rank >= 1 && (axis == 0 || axis == -rank);
}

// The uses of the constants loaded into registers in function `f`: `gathered` marks those read as
// a row gather's table, `dense` those read any other way.
void ScanFunction(const fb::Executable& exe, const fb::Function& f, std::vector<bool>& gathered,
                  std::vector<bool>& dense) {
  const absl::Span<const uint32_t> code(f.code()->data(), f.code()->size());
  const uint32_t num_objects = f.object_types() ? f.object_types()->size() : 0;
  std::vector<std::vector<uint32_t>> loaded(num_objects);  // register -> constants loaded there
  auto each = [&](auto fn) {
    for (uint32_t pc = 0; pc < code.size();) {
      isa::Decoded d;
      if (!isa::DecodeAt(code, pc, &d).ok()) {  // verified: cannot happen; stay dense
        std::fill(dense.begin(), dense.end(), true);
        return;
      }
      fn(d, code.data() + pc);
      pc += d.length;
    }
  };
  each([&](const isa::Decoded& d, const uint32_t* ip) {
    if (d.op == isa::Opcode::kLoadConst) {
      isa::Operands<isa::op::LoadConst> in(ip);
      const uint32_t r = in.reg<isa::op::LoadConst::kDst>();
      if (r < num_objects) loaded[r].push_back(in.word<isa::op::LoadConst::kConst>());
      return;
    }
    for (int i = 0; i < d.num_operands; ++i) {  // a constant read by another instruction
      if (d.slots[i].type == isa::Operand::kConst) dense[ip[d.slots[i].pos]] = true;
    }
  });
  auto use = [&](uint32_t r, bool as_table, const fb::Kernel* k) {
    if (r >= num_objects) return;
    for (uint32_t c : loaded[r]) {
      if (as_table && GathersRows(*k, *exe.constants()->Get(c))) {
        gathered[c] = true;
      } else {
        dense[c] = true;
      }
    }
  };
  each([&](const isa::Decoded& d, const uint32_t* ip) {
    if (d.op == isa::Opcode::kLoadConst) return;
    for (int i = 0; i < d.num_operands; ++i) {
      const isa::Decoded::Slot& sl = d.slots[i];
      if (IsObjectRegister(sl.type)) use(ip[sl.pos], false, nullptr);
      if (!IsObjectList(sl.type)) continue;
      const uint32_t* list = ip + sl.pos + 1;
      // An invoke's first input, with a second (the indices) that no constant was loaded into.
      const bool table = d.op == isa::Opcode::kInvoke && sl.type == isa::Operand::kListRX &&
                         sl.count == 2 && list[1] != kAbsent && list[1] != list[0] &&
                         (list[1] >= num_objects || loaded[list[1]].empty());
      const fb::Kernel* k =
          table ? exe.kernels()->Get(
                      isa::Operands<isa::op::Invoke>(ip).word<isa::op::Invoke::kKernel>())
                : nullptr;
      for (uint32_t j = 0; j < sl.count; ++j) {
        if (list[j] != kAbsent) use(list[j], table && j == 0, k);
      }
    }
  });
}

}  // namespace

std::vector<bool> GatheredConstants(const fb::Executable& exe) {
  const uint32_t n = exe.constants() ? exe.constants()->size() : 0;
  std::vector<bool> gathered(n, false), dense(n, false);
  if (exe.kernels()) {  // a tensor attribute is read whole by its kernel
    for (const fb::Kernel* k : *exe.kernels()) {
      if (k->attrs() == nullptr) continue;
      for (const fb::Attribute* a : *k->attrs()) {
        if (a->type() == fb::AttrType::Tensor && a->tensor() < n) dense[a->tensor()] = true;
      }
    }
  }
  if (exe.functions()) {
    for (const fb::Function* f : *exe.functions()) ScanFunction(exe, *f, gathered, dense);
  }
  std::vector<bool> out(n, false);
  for (uint32_t c = 0; c < n; ++c) {
    // Strings stay in the copy: the loader checks their offset tables once, at load.
    const bool string = exe.constants()->Get(c)->dtype() == static_cast<uint8_t>(DType::kString);
    out[c] = gathered[c] && !dense[c] && !string;
  }
  return out;
}

std::vector<schema::FileRange> GatheredConstantRanges(const fb::Executable& exe,
                                                      uint64_t segment_offset) {
  const std::vector<bool> gathered = GatheredConstants(exe);
  std::vector<schema::FileRange> ranges;
  for (uint32_t c = 0; c < gathered.size(); ++c) {
    const fb::Constant* k = exe.constants()->Get(c);
    if (!gathered[c] || k->size() < kMinFileBackedConstantBytes) continue;
    ranges.push_back({segment_offset + k->offset(), segment_offset + k->offset() + k->size()});
  }
  return ranges;
}

}  // namespace dynvm
