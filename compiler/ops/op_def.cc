#include "compiler/ops/op_def.h"

#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dynvm::compiler {
namespace {

std::string Key(absl::string_view domain, absl::string_view name) {
  return absl::StrCat(domain == "ai.onnx" ? "" : domain, "::", name);
}

bool KindOfCode(char c, AttrKind* kind) {
  switch (c) {
    case 'i':
      *kind = AttrKind::kInt;
      return true;
    case 'f':
      *kind = AttrKind::kFloat;
      return true;
    case 's':
      *kind = AttrKind::kString;
      return true;
    case 'I':
      *kind = AttrKind::kInts;
      return true;
    case 'F':
      *kind = AttrKind::kFloats;
      return true;
    case 'S':
      *kind = AttrKind::kStrings;
      return true;
    case 't':
      *kind = AttrKind::kTensor;
      return true;
    case 'g':
      *kind = AttrKind::kGraph;
      return true;
    case 'T':
      *kind = AttrKind::kTypeProto;
      return true;
    case 'x':
      *kind = AttrKind::kSparseTensor;
      return true;
  }
  return false;
}

// Parses a row's signature and attribute strings (op_def.h, OpRow). A malformed row is a
// programmer error: it is recorded in `errors` (op_def_test asserts there are none) and the
// malformed part is left out.
std::unique_ptr<OpDef> FromRow(absl::string_view domain, const OpRow& row,
                               std::vector<std::string>& errors) {
  auto def = std::make_unique<OpDef>();
  def->domain = std::string(domain);
  def->name = row.name;
  def->since = row.since;
  def->traits = row.traits;
  if (row.infer != nullptr) def->infer = row.infer;
  def->lower = row.lower;
  def->view_if = row.view_if;
  if (row.refused != nullptr) def->refusal = row.refused;
  auto error = [&](absl::string_view what, absl::string_view item) {
    errors.push_back(absl::StrCat(def->QualifiedName(), ": malformed ", what, " '", item, "'"));
  };
  for (absl::string_view item : absl::StrSplit(row.signature, ' ', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(item, ':');
    OpVersion v;
    if (f.size() == 2 && f[1] == "x" && absl::SimpleAtoi(f[0], &v.since) &&
        (def->versions.empty() || def->versions.back().since < v.since)) {
      v.refused = true;
      if (def->refusal.empty()) error("refused version without a reason", item);
      def->versions.push_back(v);
      continue;
    }
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &v.since) ||
        !absl::SimpleAtoi(f[1], &v.max_inputs) || !absl::SimpleAtoi(f[2], &v.required_mask) ||
        (!def->versions.empty() && def->versions.back().since >= v.since)) {
      error("signature", item);
      continue;
    }
    def->versions.push_back(v);
  }
  for (absl::string_view item : absl::StrSplit(row.attrs, ' ', absl::SkipEmpty())) {
    const size_t colon = item.find(':');
    AttrDef a;
    if (colon == absl::string_view::npos || colon + 1 >= item.size() ||
        !KindOfCode(item[colon + 1], &a.kind)) {
      error("attribute", item);
      continue;
    }
    absl::string_view range = item.substr(colon + 2);
    if (!range.empty()) {
      std::vector<absl::string_view> r = absl::StrSplit(range.substr(1), '-');
      if (range[0] != '@' || r.size() > 2 || !absl::SimpleAtoi(r[0], &a.since) ||
          (r.size() == 2 && !absl::SimpleAtoi(r[1], &a.until))) {
        error("attribute range", item);
        continue;
      }
    }
    def->attrs[std::string(item.substr(0, colon))] = a;
  }
  return def;
}

}  // namespace

absl::string_view AttrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kFloat:
      return "FLOAT";
    case AttrKind::kInt:
      return "INT";
    case AttrKind::kString:
      return "STRING";
    case AttrKind::kTensor:
      return "TENSOR";
    case AttrKind::kGraph:
      return "GRAPH";
    case AttrKind::kFloats:
      return "FLOATS";
    case AttrKind::kInts:
      return "INTS";
    case AttrKind::kStrings:
      return "STRINGS";
    case AttrKind::kSparseTensor:
      return "SPARSE_TENSOR";
    case AttrKind::kTypeProto:
      return "TYPE_PROTO";
  }
  return "UNKNOWN";
}

const OpVersion* OpDef::VersionAt(int64_t opset) const {
  const OpVersion* found = nullptr;
  for (const OpVersion& v : versions) {
    if (v.since <= opset) found = &v;
  }
  return found;
}

const AttrDef* OpDef::AttrAt(absl::string_view attr, int64_t opset) const {
  auto it = attrs.find(attr);
  if (it == attrs.end() || opset < it->second.since || opset >= it->second.until) return nullptr;
  return &it->second;
}

std::string OpDef::QualifiedName() const {
  return domain.empty() ? name : absl::StrCat(domain, "::", name);
}

void OpTable::Add(absl::string_view domain, absl::Span<const OpRow> rows) {
  for (const OpRow& row : rows) {
    std::unique_ptr<OpDef> def = FromRow(domain, row, errors_);
    const OpDef* p = def.get();
    if (!defs_.emplace(Key(domain, row.name), std::move(def)).second) {
      errors_.push_back(absl::StrCat(p->QualifiedName(), " is defined twice"));
      continue;
    }
    order_.push_back(p);
  }
}

const OpDef* OpTable::Find(absl::string_view domain, absl::string_view name) const {
  auto it = defs_.find(Key(domain, name));
  return it == defs_.end() ? nullptr : it->second.get();
}

const OpTable& BuiltinOps() {
  static const OpTable* table = [] {
    auto* t = new OpTable();
    DefineElementwiseOps(*t);
    DefineTensorOps(*t);
    DefineIndexingOps(*t);
    DefineReduceOps(*t);
    DefineNnOps(*t);
    DefineQuantOps(*t);
    DefineSignalOps(*t);
    DefineStringOps(*t);
    DefineSequenceOps(*t);
    DefineDynvmOps(*t);
    DefineMsftOps(*t);
    return t;
  }();
  return *table;
}

const OpDef* FindOpDef(absl::string_view domain, absl::string_view op) {
  if (const OpDef* d = BuiltinOps().Find(domain, op); d != nullptr) return d;
  return OpRegistry::Global().FindDef(domain, op);
}

bool HasTrait(const Node& n, OpTrait t) {
  const OpDef* d = FindOpDef(n.domain, n.op);
  if (d == nullptr || !d->has(t)) return false;
  return t != kView || d->view_if == nullptr || d->view_if(n);
}

}  // namespace dynvm::compiler
