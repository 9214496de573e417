#include "compiler/onnx/decode_wrap.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dynvm::compiler::onnx {
namespace {

namespace pb = ::onnx;

constexpr char kExpected[] =
    "a step model has inputs input_ids, attention_mask, position_ids (optional), "
    "use_cache_branch (optional) and past_key_values.{i}.key/value, outputs logits and "
    "present.{i}.key/value";

absl::Status Refuse(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--decode: ", what, " (", kExpected, ")"));
}

// The step's signature, checked.
struct Step {
  int layers = 0;
  bool position_ids = false;
  // Optimum's merged decoder: a bool input choosing between its no-past branch (the prompt
  // step) and its with-past branch (the loop); its declared rank (0 or 1).
  bool use_cache_branch = false;
  int use_cache_branch_rank = 1;
  int mask_type = pb::TensorProto::INT64;
  int64_t kv_heads = 0, head_dim = 0;
  std::string key_dims_note;
  // Why prompt rows of different lengths cannot be decoded ("" when they can: the step takes
  // position_ids, reads attention_mask's values, and has no com.microsoft attention operator,
  // whose GroupQueryAttention reads the mask as sequence lengths that a gap would break).
  std::string no_padding_reason;
};

// What in g or its subgraphs keeps a gap in attention_mask from being a plain mask: the first
// com.microsoft attention operator's name; sets *reads_mask when a node other than Shape reads
// attention_mask.
void ScanForPadding(const pb::GraphProto& g, std::string* msft_attention, bool* reads_mask) {
  for (const pb::NodeProto& n : g.node()) {
    if (n.domain() == "com.microsoft" && absl::StrContains(n.op_type(), "Attention") &&
        msft_attention->empty()) {
      *msft_attention = n.op_type();
    }
    if (n.op_type() != "Shape") {
      for (const std::string& in : n.input()) *reads_mask |= in == "attention_mask";
    }
    for (const pb::AttributeProto& a : n.attribute()) {
      if (a.has_g()) ScanForPadding(a.g(), msft_attention, reads_mask);
      for (const pb::GraphProto& sub : a.graphs()) ScanForPadding(sub, msft_attention, reads_mask);
    }
  }
}

// "past_key_values.{i}.key" -> (i, true); ".value" -> (i, false).
bool ParseCacheName(const std::string& name, absl::string_view prefix, int* layer, bool* key) {
  if (!absl::StartsWith(name, prefix)) return false;
  absl::string_view rest = absl::string_view(name).substr(prefix.size());
  const size_t dot = rest.find('.');
  if (dot == absl::string_view::npos) return false;
  const absl::string_view kind = rest.substr(dot + 1);
  if (kind != "key" && kind != "value") return false;
  *key = kind == "key";
  return absl::SimpleAtoi(rest.substr(0, dot), layer) && *layer >= 0;
}

int ElemType(const pb::ValueInfoProto& v) { return v.type().tensor_type().elem_type(); }

absl::StatusOr<Step> CheckSignature(const pb::GraphProto& g) {
  std::set<std::string> initializers;
  for (const pb::TensorProto& t : g.initializer()) initializers.insert(t.name());
  Step s;
  std::set<std::string> seen;
  std::map<std::pair<int, bool>, const pb::ValueInfoProto*> past;
  for (const pb::ValueInfoProto& in : g.input()) {
    if (initializers.count(in.name()) != 0) continue;
    int layer = 0;
    bool key = false;
    if (in.name() == "input_ids" || in.name() == "attention_mask" || in.name() == "position_ids") {
      if (in.name() == "attention_mask") s.mask_type = ElemType(in);
      if (in.name() == "position_ids") s.position_ids = true;
      if (in.name() != "attention_mask" && ElemType(in) != pb::TensorProto::INT64) {
        return Refuse(absl::StrCat("input '", in.name(), "' must be int64"));
      }
      seen.insert(in.name());
    } else if (in.name() == "use_cache_branch") {
      const auto& dims = in.type().tensor_type().shape().dim();
      const bool one = dims.size() == 1 && (!dims[0].has_dim_value() || dims[0].dim_value() == 1);
      if (ElemType(in) != pb::TensorProto::BOOL || (dims.size() != 0 && !one)) {
        return Refuse("input 'use_cache_branch' must be a bool of one element ([] or [1])");
      }
      s.use_cache_branch = true;
      s.use_cache_branch_rank = dims.size();
    } else if (ParseCacheName(in.name(), "past_key_values.", &layer, &key)) {
      past[{layer, key}] = &in;
    } else {
      return Refuse(absl::StrCat("unexpected input '", in.name(), "'"));
    }
  }
  for (const char* name : {"input_ids", "attention_mask"}) {
    if (seen.count(name) == 0) return Refuse(absl::StrCat("missing input '", name, "'"));
  }
  if (s.mask_type != pb::TensorProto::INT64 && s.mask_type != pb::TensorProto::INT32) {
    return Refuse("input 'attention_mask' must be int64 or int32");
  }
  s.layers = past.empty() ? 0 : past.rbegin()->first.first + 1;
  if (s.layers == 0) return Refuse("missing input 'past_key_values.0.key'");
  for (int i = 0; i < s.layers; ++i) {
    for (bool key : {true, false}) {
      const std::string name = absl::StrCat("past_key_values.", i, key ? ".key" : ".value");
      auto it = past.find({i, key});
      if (it == past.end()) return Refuse(absl::StrCat("missing input '", name, "'"));
      const pb::ValueInfoProto& v = *it->second;
      const auto& dims = v.type().tensor_type().shape().dim();
      if (ElemType(v) != pb::TensorProto::FLOAT || dims.size() != 4 || !dims[1].has_dim_value() ||
          !dims[3].has_dim_value()) {
        return Refuse(absl::StrCat("input '", name,
                                   "' must be f32 [batch, kv_heads, past, head_dim] with kv_heads "
                                   "and head_dim known"));
      }
      if (s.kv_heads == 0) {
        s.kv_heads = dims[1].dim_value();
        s.head_dim = dims[3].dim_value();
      }
    }
  }
  std::set<std::string> outputs;
  for (const pb::ValueInfoProto& out : g.output()) {
    int layer = 0;
    bool key = false;
    if (out.name() == "logits" ||
        (ParseCacheName(out.name(), "present.", &layer, &key) && layer < s.layers)) {
      outputs.insert(out.name());
    } else {
      return Refuse(absl::StrCat("unexpected output '", out.name(), "'"));
    }
  }
  if (outputs.count("logits") == 0) return Refuse("missing output 'logits'");
  std::string msft_attention;
  bool reads_mask = false;
  ScanForPadding(g, &msft_attention, &reads_mask);
  if (!s.position_ids) {
    s.no_padding_reason = "the step model has no position_ids input";
  } else if (!msft_attention.empty()) {
    s.no_padding_reason = absl::StrCat("the step model's com.microsoft ", msft_attention,
                                       " is not run with a gap in its mask");
  } else if (!reads_mask) {
    s.no_padding_reason = "the step model reads only attention_mask's shape";
  }
  for (int i = 0; i < s.layers; ++i) {
    for (const char* kv : {".key", ".value"}) {
      const std::string name = absl::StrCat("present.", i, kv);
      if (outputs.count(name) == 0) return Refuse(absl::StrCat("missing output '", name, "'"));
    }
  }
  // The names the wrapper adds must be free.
  const std::set<std::string> reserved = {"prompt", "max_new_tokens", "temperature",
                                          "top_k",  "top_p",          "repetition_penalty",
                                          "seed",   "stop_token",     "tokens"};
  auto taken = [&](const std::string& name) {
    return reserved.count(name) != 0 || absl::StartsWith(name, "decode_");
  };
  for (const std::string& name : initializers) {
    if (taken(name))
      return Refuse(absl::StrCat("the step model already names a value '", name, "'"));
  }
  for (const pb::NodeProto& n : g.node()) {
    for (const auto* list : {&n.input(), &n.output()}) {
      for (const std::string& name : *list) {
        if (taken(name)) {
          return Refuse(absl::StrCat("the step model already names a value '", name, "'"));
        }
      }
    }
  }
  return s;
}

// Appends nodes to a graph, each with a fresh "decode_..." output.
class Builder {
 public:
  explicit Builder(pb::GraphProto* g) : g_(g) {}

  pb::NodeProto* Node(const std::string& op, std::vector<std::string> inputs,
                      std::vector<std::string> outputs, const std::string& domain = "") {
    pb::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_domain(domain);
    n->set_name(absl::StrCat("decode_", op, "_", g_->node_size()));
    for (std::string& i : inputs) n->add_input(std::move(i));
    for (std::string& o : outputs) n->add_output(std::move(o));
    return n;
  }
  std::string Op(const std::string& op, std::vector<std::string> inputs,
                 const std::string& domain = "") {
    std::string out = absl::StrCat("decode_v", ++counter_);
    Node(op, std::move(inputs), {out}, domain);
    return out;
  }
  // Concat along axis 0 (shapes).
  std::string Concat0(std::vector<std::string> inputs) {
    std::string out = absl::StrCat("decode_v", ++counter_);
    Attr(Node("Concat", std::move(inputs), {out}), "axis", 0);
    return out;
  }
  std::string Ints(std::vector<int64_t> v, bool scalar = false) {
    std::string out;
    pb::TensorProto* t = Constant(pb::TensorProto::INT64, &out);
    if (!scalar) t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return out;
  }
  // A bool constant of one element, rank 0 or 1.
  std::string Bool(bool v, int rank) {
    std::string out;
    pb::TensorProto* t = Constant(pb::TensorProto::BOOL, &out);
    if (rank == 1) t->add_dims(1);
    t->add_int32_data(v ? 1 : 0);
    return out;
  }
  // Slice of a 1-D shape: elements [b, e).
  std::string Dims(const std::string& shape, int64_t b, int64_t e) {
    return Op("Slice", {shape, Ints({b}), Ints({e})});
  }
  // ConstantOfShape(shape) of `type` filled with `value`.
  std::string Fill(const std::string& shape, int type, double value) {
    std::string out = absl::StrCat("decode_v", ++counter_);
    pb::NodeProto* n = Node("ConstantOfShape", {shape}, {out});
    pb::AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(pb::AttributeProto::TENSOR);
    pb::TensorProto* t = a->mutable_t();
    t->set_data_type(type);
    t->add_dims(1);
    if (type == pb::TensorProto::FLOAT) {
      t->add_float_data(static_cast<float>(value));
    } else if (type == pb::TensorProto::INT32) {
      t->add_int32_data(static_cast<int32_t>(value));
    } else {
      t->add_int64_data(static_cast<int64_t>(value));
    }
    return out;
  }
  // Whether some row's token is not the stop token: a bool scalar.
  std::string Going(const std::string& token, const std::string& stop) {
    const std::string going = Op("Not", {Op("Equal", {token, stop})});
    const std::string out = absl::StrCat("decode_v", ++counter_);
    Attr(Node("Cast", {going}, {out}), "to", pb::TensorProto::INT64);
    const std::string any = absl::StrCat("decode_v", ++counter_);
    Attr(Node("ReduceMax", {out}, {any}), "keepdims", 0);
    const std::string result = absl::StrCat("decode_v", ++counter_);
    Attr(Node("Cast", {any}, {result}), "to", pb::TensorProto::BOOL);
    return result;
  }
  std::string Cast(const std::string& x, int to) {
    const std::string out = absl::StrCat("decode_v", ++counter_);
    Attr(Node("Cast", {x}, {out}), "to", to);
    return out;
  }
  // The number of true elements of a bool tensor: an i64 scalar.
  std::string Count(const std::string& x) {
    const std::string out = absl::StrCat("decode_v", ++counter_);
    Attr(Node("ReduceSum", {Cast(x, pb::TensorProto::INT64)}, {out}), "keepdims", 0);
    return out;
  }
  // Fails the run at a node named `name` (the VM's error names it) when some element of the
  // bool tensor `bad` is true: a Gather of index 1 from a one-element table, which it refuses.
  // Returns the Gather's output, an i64 zero scalar, for a later value to depend on.
  std::string Check(const std::string& bad, const std::string& name) {
    const std::string count = Count(bad);
    const std::string index = Cast(Op("Greater", {count, Ints({0}, true)}), pb::TensorProto::INT64);
    const std::string out = absl::StrCat("decode_v", ++counter_);
    Node("Gather", {Ints({0}), index}, {out})->set_name(name);
    return out;
  }
  // A Constant node with a fresh output (*out); returns its value tensor of `type`, to fill.
  pb::TensorProto* Constant(int type, std::string* out) {
    *out = absl::StrCat("decode_c", ++counter_);
    pb::AttributeProto* a = Node("Constant", {}, {*out})->add_attribute();
    a->set_name("value");
    a->set_type(pb::AttributeProto::TENSOR);
    pb::TensorProto* t = a->mutable_t();
    t->set_data_type(type);
    return t;
  }
  static void Attr(pb::NodeProto* n, const std::string& name, int64_t v) {
    pb::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INT);
    a->set_i(v);
  }

 private:
  pb::GraphProto* g_;
  int counter_ = 0;
};

// The outer graph's values the prologue makes.
struct Prologue {
  std::string batch, len, len_scalar, zero, one, batch_len, positions, empty_cache;
  // The prompt's rows (docs/llm.md, "Prompts of different lengths"): its ids with the padding
  // as 0, its mask (mask_type), each row's length [batch, 1] and the padding P - length.
  std::string ids, mask, lengths, pad;
};

void AddValue(google::protobuf::RepeatedPtrField<pb::ValueInfoProto>* list, const std::string& name,
              int type, std::vector<std::string> dims, bool has_shape) {
  pb::ValueInfoProto* v = list->Add();
  v->set_name(name);
  pb::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  if (!has_shape) return;
  pb::TensorShapeProto* shape = t->mutable_shape();
  for (const std::string& d : dims) {
    int64_t n = 0;
    if (absl::SimpleAtoi(d, &n)) {
      shape->add_dim()->set_dim_value(n);
    } else {
      shape->add_dim()->set_dim_param(d);
    }
  }
}

std::string CacheName(const char* prefix, int i, bool key) {
  return absl::StrCat(prefix, i, key ? ".key" : ".value");
}

// The loop body: the step's nodes, fed by the carried ids, positions and cache (the body's inputs
// carry the step's own cache names, so the step's Concat(past, new) appends onto a carried value
// and the memory plan grows it in place); Sample, Emit, the tokens so far and the condition.
void BuildBody(const Step& s, pb::GraphProto* step, pb::GraphProto* body) {
  constexpr int kI64 = pb::TensorProto::INT64;
  AddValue(body->mutable_input(), "decode_i", kI64, {}, true);
  AddValue(body->mutable_input(), "decode_cond", pb::TensorProto::BOOL, {}, true);
  AddValue(body->mutable_input(), "decode_ids", kI64, {"batch", "1"}, true);
  AddValue(body->mutable_input(), "decode_pos", kI64, {"batch", "1"}, true);
  AddValue(body->mutable_input(), "decode_tokens", kI64, {}, false);
  for (int i = 0; i < s.layers; ++i) {
    for (bool key : {true, false}) {
      AddValue(body->mutable_input(), CacheName("past_key_values.", i, key), pb::TensorProto::FLOAT,
               {}, false);
    }
  }
  Builder b(body);
  b.Node("Identity", {"decode_ids"}, {"input_ids"});
  if (s.position_ids) b.Node("Identity", {"decode_pos"}, {"position_ids"});
  // A merged decoder's with-past branch: a constant, so the import keeps only that branch.
  if (s.use_cache_branch) {
    b.Node("Identity", {b.Bool(true, s.use_cache_branch_rank)}, {"use_cache_branch"});
  }
  const std::string ids_shape = b.Op("Shape", {"decode_ids"});
  const std::string batch = b.Dims(ids_shape, 0, 1);
  const std::string past_len = b.Dims(b.Op("Shape", {"past_key_values.0.key"}), 2, 3);
  const std::string total = b.Op("Add", {past_len, b.Ints({1})});
  // The mask: 1 but over a row's padding, columns length_r .. prompt_len - 1 (column c is kept
  // when c + 1 <= length_r or c + 1 > prompt_len).
  const std::string column =
      b.Op("CumSum", {b.Fill(b.Concat0({batch, total}), kI64, 1), b.Ints({1}, /*scalar=*/true)});
  const std::string keep = b.Op("Or", {b.Op("LessOrEqual", {column, "decode_lengths"}),
                                       b.Op("Greater", {column, "decode_prompt_len"})});
  b.Node("Identity", {b.Cast(keep, s.mask_type)}, {"attention_mask"});
  // The step's own nodes and value_info, moved.
  for (pb::NodeProto& n : *step->mutable_node()) body->add_node()->Swap(&n);
  for (pb::ValueInfoProto& v : *step->mutable_value_info()) body->add_value_info()->Swap(&v);
  // The one position's logits -> one token per row; the prompt step made token 0.
  const std::string zero = b.Op("Squeeze", {b.Ints({0}), b.Ints({0})});
  pb::NodeProto* gather = b.Node("Gather", {"logits", zero}, {"decode_last_logits"});
  Builder::Attr(gather, "axis", 1);
  const std::string index = b.Op("Add", {"decode_i", b.Op("Squeeze", {b.Ints({1}), b.Ints({0})})});
  // The repetition penalty applies to the prompt and the tokens so far (decode_tokens holds
  // them all, the one fed to this step included).
  b.Node("Sample",
         {"decode_last_logits", "temperature", "seed", index, "top_k", "top_p",
          "repetition_penalty", "prompt", "decode_tokens"},
         {"decode_tok"}, "dynvm");
  Builder::Attr(b.Node("Emit", {"decode_tok"}, {}, "dynvm"), "stream", 0);
  const std::string col = b.Op("Unsqueeze", {"decode_tok", b.Ints({1})});
  b.Node("Identity", {col}, {"decode_ids_out"});
  Builder::Attr(b.Node("Concat", {"decode_tokens", col}, {"decode_tokens_out"}), "axis", 1);
  // The next token's position: total less the row's padding.
  b.Node(
      "Sub",
      {b.Op("Expand", {b.Op("Reshape", {total, b.Ints({1, 1})}), b.Concat0({batch, b.Ints({1})})}),
       "decode_pad"},
      {"decode_pos_out"});
  b.Node("Identity", {b.Going("decode_tok", "decode_stop")}, {"decode_cond_out"});

  AddValue(body->mutable_output(), "decode_cond_out", pb::TensorProto::BOOL, {}, true);
  AddValue(body->mutable_output(), "decode_ids_out", kI64, {"batch", "1"}, true);
  AddValue(body->mutable_output(), "decode_pos_out", kI64, {"batch", "1"}, true);
  AddValue(body->mutable_output(), "decode_tokens_out", kI64, {}, false);
  for (int i = 0; i < s.layers; ++i) {
    for (bool key : {true, false}) {
      AddValue(body->mutable_output(), CacheName("present.", i, key), pb::TensorProto::FLOAT, {},
               false);
    }
  }
}

// Renames the step's own values (its inputs and every node's outputs; not the initializers) in
// a copy of its nodes, recursively into subgraphs, which read them by name (a subgraph's own
// inputs, outputs and value_info are renamed with its nodes).
void RenameInGraph(pb::GraphProto* g, const std::map<std::string, std::string>& names) {
  auto rename = [&](std::string* name) {
    auto it = names.find(*name);
    if (it != names.end()) *name = it->second;
  };
  for (auto* list : {g->mutable_input(), g->mutable_output(), g->mutable_value_info()}) {
    for (pb::ValueInfoProto& v : *list) rename(v.mutable_name());
  }
  for (pb::NodeProto& n : *g->mutable_node()) {
    for (std::string& in : *n.mutable_input()) rename(&in);
    for (std::string& out : *n.mutable_output()) rename(&out);
    for (pb::AttributeProto& a : *n.mutable_attribute()) {
      if (a.has_g()) RenameInGraph(a.mutable_g(), names);
      for (pb::GraphProto& sub : *a.mutable_graphs()) RenameInGraph(&sub, names);
    }
  }
}

// Calls add(name) for each value a node of g makes, recursively into its subgraphs.
template <typename Add>
void AddNodeOutputs(const pb::GraphProto& g, Add& add) {
  for (const pb::NodeProto& n : g.node()) {
    for (const std::string& out : n.output()) {
      if (!out.empty()) add(out);
    }
    for (const pb::AttributeProto& a : n.attribute()) {
      if (a.has_g()) AddNodeOutputs(a.g(), add);
      for (const pb::GraphProto& sub : a.graphs()) AddNodeOutputs(sub, add);
    }
  }
}

// The prompt step, run once before the loop: a copy of the step's nodes with their values
// renamed "decode_prefill/...", fed the prompt, its positions 0 .. prompt_len - 1, an all-ones
// mask and the empty cache. Returns the renaming (step name -> outer name).
std::map<std::string, std::string> BuildPrefill(const Step& s, const pb::GraphProto& step,
                                                const Prologue& p, Builder& b, pb::GraphProto* g) {
  std::map<std::string, std::string> names;
  auto add = [&](const std::string& name) { names[name] = "decode_prefill/" + name; };
  add("input_ids");
  add("attention_mask");
  if (s.position_ids) add("position_ids");
  if (s.use_cache_branch) add("use_cache_branch");
  for (int i = 0; i < s.layers; ++i) {
    for (bool key : {true, false}) add(CacheName("past_key_values.", i, key));
  }
  // Every value the nodes make, in subgraphs too: a merged decoder's branches, inlined once
  // their condition is known, must not repeat the loop body's names.
  AddNodeOutputs(step, add);
  b.Node("Identity", {p.ids}, {names["input_ids"]});
  if (s.position_ids) b.Node("Identity", {p.positions}, {names["position_ids"]});
  // A merged decoder's no-past branch runs the prompt.
  if (s.use_cache_branch) {
    b.Node("Identity", {b.Bool(false, s.use_cache_branch_rank)}, {names["use_cache_branch"]});
  }
  b.Node("Identity", {p.mask}, {names["attention_mask"]});
  for (int i = 0; i < s.layers; ++i) {
    for (bool key : {true, false}) {
      b.Node("Identity", {p.empty_cache}, {names[CacheName("past_key_values.", i, key)]});
    }
  }
  pb::GraphProto copy;
  *copy.mutable_node() = step.node();
  for (const pb::ValueInfoProto& v : step.value_info()) {
    auto it = names.find(v.name());
    if (it == names.end()) continue;
    pb::ValueInfoProto* kept = g->add_value_info();
    *kept = v;
    kept->set_name(it->second);
  }
  RenameInGraph(&copy, names);
  for (pb::NodeProto& n : *copy.mutable_node()) g->add_node()->Swap(&n);
  return names;
}

// Prompts of different lengths: row r holds its tokens, then -1 up to prompt_len. The prompt
// step runs every row at positions 0 .. prompt_len - 1 with the padding masked out (as token
// 0), row r's first token comes from its position length_r - 1, and its later tokens sit at
// positions length_r, length_r + 1, ... of the cache's prompt_len, prompt_len + 1, ... columns
// (the mask hides the gap). Checked: each row is tokens then -1s, with at least one token; a
// step model that cannot take a gap (Step::no_padding_reason) refuses any padding.
void BuildPromptRows(const Step& s, Builder& b, Prologue& p) {
  const std::string valid = b.Op("GreaterOrEqual", {"prompt", p.zero});
  const std::string valid_i64 = b.Cast(valid, pb::TensorProto::INT64);
  const std::string lengths = b.Op("ReduceSum", {valid_i64, b.Ints({1})});  // [batch, 1]
  const std::string minus_one = b.Ints({-1}, /*scalar=*/true);
  const std::string misplaced = b.Op("Xor", {valid, b.Op("Less", {p.positions, lengths})});
  const std::string not_padding =
      b.Op("And", {b.Op("Not", {valid}), b.Op("Not", {b.Op("Equal", {"prompt", minus_one})})});
  const std::string bad_entry = b.Op("Or", {misplaced, not_padding});
  std::string checked =
      b.Op("Add", {b.Check(bad_entry,
                           "decode_prompt_check (each prompt row must hold token ids, then "
                           "-1 as padding up to prompt_len)"),
                   b.Check(b.Op("Less", {lengths, p.one}),
                           "decode_prompt_check (each prompt row must hold at least one token)")});
  if (!s.no_padding_reason.empty()) {
    checked = b.Op(
        "Add", {checked, b.Check(b.Op("Not", {valid}),
                                 absl::StrCat("decode_prompt_padding_check (prompt rows of "
                                              "different lengths (-1 padding) cannot be decoded: ",
                                              s.no_padding_reason, ")"))});
  }
  b.Node("Add", {lengths, checked}, {"decode_lengths"});
  p.lengths = "decode_lengths";
  p.pad = b.Op("Sub", {p.len, p.lengths});
  b.Node("Identity", {p.pad}, {"decode_pad"});
  b.Node("Identity", {p.len_scalar}, {"decode_prompt_len"});
  p.ids = b.Op("Where", {valid, "prompt", b.Op("Add", {p.zero, checked})});
  p.mask = s.mask_type == pb::TensorProto::INT64 ? valid_i64 : b.Cast(valid, s.mask_type);
}

// The outer graph's nodes before the loop: the prompt's positions, the empty cache, the prompt's
// rows and lengths, the stop token checked against the vocabulary (when the logits' last dim is
// known).
Prologue BuildPrologue(const Step& s, int64_t vocab, Builder& b) {
  Prologue p;
  const std::string shape = b.Op("Shape", {"prompt"});
  p.batch = b.Dims(shape, 0, 1);
  p.len = b.Dims(shape, 1, 2);
  p.len_scalar = b.Op("Squeeze", {p.len, b.Ints({0})});
  p.zero = b.Ints({0}, /*scalar=*/true);
  p.one = b.Ints({1}, /*scalar=*/true);
  const std::string range = b.Op("Range", {p.zero, p.len_scalar, p.one});
  p.batch_len = b.Concat0({p.batch, p.len});
  p.positions = b.Op("Expand", {b.Op("Unsqueeze", {range, b.Ints({0})}), p.batch_len});
  const std::string cache_shape =
      b.Concat0({p.batch, b.Ints({s.kv_heads}), b.Ints({0}), b.Ints({s.head_dim})});
  p.empty_cache = b.Fill(cache_shape, pb::TensorProto::FLOAT, 0);
  BuildPromptRows(s, b, p);
  if (vocab <= 0) {
    b.Node("Identity", {"stop_token"}, {"decode_stop"});
    return p;
  }
  // -1 -> -1; [0, vocab) -> itself through a Gather of 0 .. vocab - 1; anything else -> vocab,
  // which that Gather refuses.
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = i;
  const std::string table = b.Ints(ids);
  const std::string minus_one = b.Op("Squeeze", {b.Ints({-1}), b.Ints({0})});
  const std::string v = b.Op("Squeeze", {b.Ints({vocab}), b.Ints({0})});
  const std::string never = b.Op("Equal", {"stop_token", minus_one});
  const std::string negative = b.Op("Less", {"stop_token", p.zero});
  const std::string index =
      b.Op("Where", {never, p.zero, b.Op("Where", {negative, v, "stop_token"})});
  pb::NodeProto* check = b.Node("Gather", {table, index}, {"decode_checked"});
  check->set_name(absl::StrCat(
      "decode_stop_token_check (stop_token must be -1 or a token id in [0, ", vocab, "))"));
  b.Node("Where", {never, minus_one, "decode_checked"}, {"decode_stop"});
  return p;
}

// Token 0 from the prompt step's last position, emitted only when max_new_tokens > 0 (an If
// whose then-branch emits it); returns the token as a [batch, 1] column.
std::string FirstToken(const Prologue& p, const std::map<std::string, std::string>& names,
                       Builder& b) {
  // Row r's logits at its last prompt position: row r * prompt_len + length_r - 1 of the logits
  // [batch, prompt_len, vocab] read as [batch * prompt_len, vocab].
  const std::string rows = b.Op(
      "Reshape", {names.at("logits"), b.Concat0({b.Op("Mul", {p.batch, p.len}), b.Ints({-1})})});
  const std::string starts =
      b.Op("Mul",
           {b.Op("Range", {p.zero, b.Op("Squeeze", {p.batch, b.Ints({0})}), p.one}), p.len_scalar});
  const std::string last = b.Op("Sub", {b.Op("Squeeze", {p.lengths, b.Ints({1})}), p.one});
  b.Node("Gather", {rows, b.Op("Add", {starts, last})}, {"decode_first_logits"});
  b.Node("Sample",
         {"decode_first_logits", "temperature", "seed", p.zero, "top_k", "top_p",
          "repetition_penalty", "prompt"},
         {"decode_first"}, "dynvm");
  const std::string wanted = b.Op("Greater", {"max_new_tokens", p.zero});
  pb::NodeProto* branch = b.Node("If", {wanted}, {"decode_first_emitted"});
  for (bool emit : {true, false}) {
    pb::AttributeProto* a = branch->add_attribute();
    a->set_name(emit ? "then_branch" : "else_branch");
    a->set_type(pb::AttributeProto::GRAPH);
    pb::GraphProto* sub = a->mutable_g();
    sub->set_name(emit ? "decode_emit_first" : "decode_skip_first");
    Builder sb(sub);
    if (emit) Builder::Attr(sb.Node("Emit", {"decode_first"}, {}, "dynvm"), "stream", 0);
    const std::string out = emit ? "decode_first_then" : "decode_first_else";
    sb.Node("Identity", {"decode_first"}, {out});
    AddValue(sub->mutable_output(), out, pb::TensorProto::INT64, {}, false);
  }
  return b.Op("Unsqueeze", {"decode_first_emitted", b.Ints({1})});
}

}  // namespace

absl::Status WrapStepModelForDecode(pb::ModelProto* model) {
  pb::GraphProto* g = model->mutable_graph();
  absl::StatusOr<Step> checked = CheckSignature(*g);
  if (!checked.ok()) return checked.status();
  const Step& s = *checked;
  int64_t opset = 0;
  bool has_dynvm = false;
  for (const pb::OperatorSetIdProto& o : model->opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
    has_dynvm |= o.domain() == "dynvm";
  }
  if (opset < 13) {
    return Refuse(
        absl::StrCat("the step model's opset is ", opset, "; --decode needs 13 or later"));
  }
  if (!has_dynvm) {
    pb::OperatorSetIdProto* o = model->add_opset_import();
    o->set_domain("dynvm");
    o->set_version(1);
  }
  int64_t vocab = 0;
  for (const pb::ValueInfoProto& out : g->output()) {
    const auto& dims = out.type().tensor_type().shape().dim();
    if (out.name() == "logits" && dims.size() == 3 && dims[2].has_dim_value()) {
      vocab = dims[2].dim_value();
    }
  }
  // The step graph becomes the body; the outer graph keeps the initializers.
  pb::GraphProto step;
  step.mutable_node()->Swap(g->mutable_node());
  step.mutable_value_info()->Swap(g->mutable_value_info());
  std::set<std::string> initializers;
  for (const pb::TensorProto& t : g->initializer()) initializers.insert(t.name());
  google::protobuf::RepeatedPtrField<pb::ValueInfoProto> kept_inputs;
  for (const pb::ValueInfoProto& in : g->input()) {
    if (initializers.count(in.name()) != 0) *kept_inputs.Add() = in;
  }
  g->mutable_input()->Swap(&kept_inputs);
  g->clear_output();
  constexpr int kI64 = pb::TensorProto::INT64;
  AddValue(g->mutable_input(), "prompt", kI64, {"batch", "prompt_len"}, true);
  AddValue(g->mutable_input(), "max_new_tokens", kI64, {}, true);
  AddValue(g->mutable_input(), "temperature", pb::TensorProto::FLOAT, {}, true);
  AddValue(g->mutable_input(), "top_k", kI64, {}, true);
  AddValue(g->mutable_input(), "top_p", pb::TensorProto::FLOAT, {}, true);
  AddValue(g->mutable_input(), "repetition_penalty", pb::TensorProto::FLOAT, {}, true);
  AddValue(g->mutable_input(), "seed", kI64, {}, true);
  AddValue(g->mutable_input(), "stop_token", kI64, {}, true);
  AddValue(g->mutable_output(), "tokens", kI64, {"batch", "steps"}, true);

  Builder b(g);
  const Prologue p = BuildPrologue(s, vocab, b);
  const std::map<std::string, std::string> names = BuildPrefill(s, step, p, b, g);
  const std::string first = FirstToken(p, names, b);
  // The loop: max(max_new_tokens - 1, 0) single-token steps while some row has not stopped.
  const std::string trip = b.Op("Sub", {"max_new_tokens", p.one});
  const std::string going = b.Going("decode_first", "decode_stop");
  std::vector<std::string> inputs = {trip, going, first, p.lengths, first};
  for (int i = 0; i < s.layers; ++i) {
    for (bool key : {true, false}) inputs.push_back(names.at(CacheName("present.", i, key)));
  }
  std::vector<std::string> outputs = {"decode_ids_final", "decode_pos_final",
                                      "decode_tokens_final"};
  for (int i = 0; i < 2 * s.layers; ++i) outputs.push_back(absl::StrCat("decode_cache_final", i));
  pb::NodeProto* loop = b.Node("Loop", inputs, outputs);
  loop->set_name("decode_loop");
  pb::AttributeProto* body = loop->add_attribute();
  body->set_name("body");
  body->set_type(pb::AttributeProto::GRAPH);
  body->mutable_g()->set_name("decode_step");
  BuildBody(s, &step, body->mutable_g());
  // max_new_tokens = 0: no tokens (the prompt step ran, its token is dropped, not emitted).
  b.Node("Slice",
         {"decode_tokens_final", b.Ints({0}), b.Op("Unsqueeze", {"max_new_tokens", b.Ints({0})}),
          b.Ints({1})},
         {"tokens"});
  return absl::OkStatus();
}

}  // namespace dynvm::compiler::onnx
