#include "vm/profiler.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "kernels/tensor.h"
#include "vm/executable.h"
#include "vm/executable_impl.h"

namespace dynvm {
namespace {

// Microseconds with nanosecond precision, as Chrome's trace format wants them ("12.345").
std::string Micros(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t a = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  return absl::StrFormat("%s%d.%03d", sign, a / 1000, a % 1000);
}

// The length of the valid UTF-8 sequence at s[i], or 0.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t min;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// A JSON string literal. Names come from the executable file: bytes that are not valid UTF-8
// become U+FFFD, so the trace stays valid JSON.
std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        out += "\\ufffd";
      } else {
        out.append(s.data() + i, n);
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7F) {
          absl::StrAppendFormat(&out, "\\u%04x", u);
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }
double Pct(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / whole : 0.0;
}

}  // namespace

Profiler::Profiler() {
  epoch_ = std::chrono::steady_clock::now();
  // The cost of one clock read, so the summary can say how much of the time outside kernels is
  // the profiler's own: the best of a few batches.
  constexpr int kBatch = 256;
  double best = 1e9;
  for (int round = 0; round < 8; ++round) {
    const auto a = std::chrono::steady_clock::now();
    int64_t sink = 0;
    for (int i = 0; i < kBatch; ++i) sink += Now();
    const auto b = std::chrono::steady_clock::now();
    if (sink == -1) best = 0;  // keeps the reads
    best = std::min(best, std::chrono::duration<double, std::nano>(b - a).count() / kBatch);
  }
  clock_read_ns_ = best;
  clock_reads_ = 0;
}

void Profiler::Clear() {
  spans_.clear();
  counters_.clear();
  parallel_jobs_.clear();
  ranges_.clear();
  parallel_log_.Clear();
  shape_data_.clear();
  kernels_.clear();
  kernel_ids_.clear();
  names_.clear();
  name_ids_.clear();
  loop_totals_.clear();
  loop_total_names_.clear();
  loop_total_ids_.clear();
  exe_ = nullptr;
  run_kernels_.clear();
  function_names_.clear();
  function_plain_names_.clear();
  loop_names_.clear();
  site_names_.clear();
  open_.clear();
  loops_.clear();
  kernel_ns_ = 0;
  last_bytes_ = last_device_bytes_ = -1;
  runs_ = run_ns_ = 0;
  clock_reads_ = 0;
  epoch_ = std::chrono::steady_clock::now();
}

int32_t Profiler::Intern(absl::string_view name) {
  auto it = name_ids_.find(name);
  if (it != name_ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(names_.size());
  names_.emplace_back(name);
  name_ids_.emplace(std::string(name), id);
  return id;
}

void Profiler::BeginRun(const Executable& exe, int function) {
  {  // the run's executable: its kernels' and functions' names (interned across runs)
    exe_ = &exe;
    run_kernels_.assign(exe.num_kernels(), 0);
    for (int k = 0; k < exe.num_kernels(); ++k) {
      KernelInfo info;
      info.op = exe.kernel_spec(k).op;
      info.name = exe.kernel(k).name();
      // "op.dtype.backend[.variant]" (docs/kernels.md); the variant may itself contain dots.
      std::vector<std::string> parts = absl::StrSplit(info.name, absl::MaxSplits('.', 3));
      if (parts.size() >= 3) info.backend = parts[2];
      if (parts.size() >= 4) info.variant = parts[3];
      std::string key = absl::StrCat(info.op, std::string(1, '\0'), info.name);
      auto it = kernel_ids_.find(key);
      if (it == kernel_ids_.end()) {
        it = kernel_ids_.emplace(std::move(key), static_cast<int32_t>(kernels_.size())).first;
        kernels_.push_back(std::move(info));
      }
      run_kernels_[k] = it->second;
    }
    function_names_.assign(exe.num_functions(), 0);
    function_plain_names_.assign(exe.num_functions(), "");
    site_names_.assign(exe.num_functions(), {});
    for (int f = 0; f < exe.num_functions(); ++f) {
      function_plain_names_[f] = exe.function(f).name;
      function_names_[f] = Intern(absl::StrCat("call ", exe.function(f).name));
      site_names_[f].assign(exe.rep().function_entry(f).num_sites, -1);
    }
    loop_names_.clear();
  }
  last_bytes_ = last_device_bytes_ = -1;  // the first sample of each run is recorded
  parallel_log_.Clear();  // a kernel that failed in an earlier run left its jobs here
  open_.push_back({Intern(absl::StrCat("run ", exe.function(function).name)), Now(), kernel_ns_});
}

void Profiler::EndRun() {
  CloseLoopsTo(0);
  while (open_.size() > 1) Close(SpanKind::kCall, 0);  // a failed run leaves calls open
  if (open_.empty()) return;
  Close(SpanKind::kRun, 0);
  ++runs_;
  run_ns_ += spans_.back().dur_ns;
}

void Profiler::Close(SpanKind kind, int64_t arg) {
  if (open_.empty()) return;  // the interpreter's calls are balanced; never trust it blindly
  const Open o = open_.back();
  open_.pop_back();
  const int64_t now = Now();
  spans_.push_back(
      {kind, o.name, o.start_ns, now - o.start_ns, arg, kernel_ns_ - o.kernel_ns_at_start});
}

void Profiler::BeginLoop(int function, uint32_t pc) {
  const uint64_t key = (static_cast<uint64_t>(function) << 32) | pc;
  auto it = loop_names_.find(key);
  if (it == loop_names_.end()) {
    it = loop_names_.emplace(key, Intern(absl::StrCat(function_plain_names_[function], "@", pc)))
             .first;
  }
  const int32_t name = it->second;
  auto total = loop_total_ids_.find(name);
  if (total == loop_total_ids_.end()) {
    total = loop_total_ids_.emplace(name, static_cast<int32_t>(loop_totals_.size())).first;
    loop_totals_.emplace_back();
    loop_total_names_.push_back(name);
  }
  ++loop_totals_[total->second].entries;
  const int64_t now = Now();
  loops_.push_back({name, total->second, now, kernel_ns_, 0, now, kernel_ns_});
}

void Profiler::EndIteration(bool again) {
  if (loops_.empty()) return;
  OpenLoop& l = loops_.back();
  const int64_t now = Now();
  const int64_t dur = now - l.iteration_start_ns;
  const int64_t in_kernels = kernel_ns_ - l.iteration_kernel_ns_at_start;
  spans_.push_back(
      {SpanKind::kIteration, l.name, l.iteration_start_ns, dur, l.iteration, in_kernels});
  LoopAccum& acc = loop_totals_[l.loop_index];
  ++acc.iterations;
  acc.total_ns += dur;
  acc.kernel_ns += in_kernels;
  ++l.iteration;
  if (again) {
    l.iteration_start_ns = now;
    l.iteration_kernel_ns_at_start = kernel_ns_;
    return;
  }
  spans_.push_back({SpanKind::kLoop, l.name, l.start_ns, now - l.start_ns, l.iteration,
                    kernel_ns_ - l.kernel_ns_at_start});
  loops_.pop_back();
}

void Profiler::Kernel(int kernel, int function, uint32_t site, uint32_t pc, int64_t start,
                      int64_t end, const Tensor* const* inputs, uint32_t n_in,
                      Tensor* const* outputs, uint32_t n_out) {
  kernel_ns_ += end - start;
  int32_t& site_name = site_names_[function][site];
  if (site_name < 0) {
    absl::string_view node = exe_->SourceNode(function, pc);
    site_name =
        Intern(node.empty() ? absl::StrCat(function_plain_names_[function], "@", pc)
                            : absl::StrCat(function_plain_names_[function], "@", pc, " ", node));
  }
  const auto offset = static_cast<int64_t>(shape_data_.size());
  shape_data_.push_back(site_name);
  shape_data_.push_back(n_in);
  shape_data_.push_back(n_out);
  auto add = [this](const Tensor* t) {
    if (t == nullptr || !t->defined()) {
      shape_data_.push_back(0);
      shape_data_.push_back(-1);
      return;
    }
    shape_data_.push_back(static_cast<int64_t>(t->dtype()));
    shape_data_.push_back(t->rank());
    for (int d = 0; d < t->rank(); ++d) shape_data_.push_back(t->dim(d));
  };
  for (uint32_t j = 0; j < n_in; ++j) add(inputs[j]);
  for (uint32_t j = 0; j < n_out; ++j) add(outputs[j]);
  if (!parallel_log_.calls.empty()) TakeParallelJobs(static_cast<int32_t>(spans_.size()), start);
  spans_.push_back(
      {SpanKind::kKernel, run_kernels_[kernel], start, end - start, offset, end - start});
}

void Profiler::TakeParallelJobs(int32_t span, int64_t start) {
  const int64_t base = epoch_ns();
  for (const ParallelLog::Call& c : parallel_log_.calls) {
    // A job of a kernel that failed (its invoke logged no span) started before this one.
    if (c.start_ns - base < start) continue;
    parallel_jobs_.push_back({span, c.tasks, static_cast<int32_t>(ranges_.size()), c.pool_busy, c.n,
                              c.start_ns - base, c.end_ns - c.start_ns, c.join_wait_ns});
    for (int32_t i = 0; i < c.tasks; ++i) {
      const ParallelLog::Range& r = parallel_log_.ranges[c.first_range + i];
      ranges_.push_back(
          {r.thread, r.index, r.begin, r.end, r.start_ns - base, r.end_ns - r.start_ns});
    }
  }
  parallel_log_.Clear();
}

absl::string_view Profiler::SiteOf(const Span& span) const {
  if (span.kind != SpanKind::kKernel) return "";
  return names_[shape_data_[span.arg]];
}

std::string Profiler::ShapesOf(const Span& span) const {
  if (span.kind != SpanKind::kKernel) return "";
  size_t p = static_cast<size_t>(span.arg) + 1;
  const int64_t n_in = shape_data_[p++];
  const int64_t n_out = shape_data_[p++];
  std::string side[2];
  for (int64_t j = 0; j < n_in + n_out; ++j) {
    std::string& out = side[j < n_in ? 0 : 1];
    if (!out.empty()) out += ' ';
    const auto dtype = static_cast<DType>(shape_data_[p++]);
    const int64_t rank = shape_data_[p++];
    if (rank < 0) {
      out += "-";  // absent
      continue;
    }
    absl::StrAppend(&out, DTypeName(dtype), "[");
    for (int64_t d = 0; d < rank; ++d) absl::StrAppend(&out, d > 0 ? "," : "", shape_data_[p++]);
    out += "]";
  }
  return absl::StrCat(side[0], " -> ", side[1]);
}

Profiler::Totals Profiler::ComputeTotals() const {
  Totals t;
  t.runs = runs_;
  t.run_ns = run_ns_;
  std::vector<KernelTotal> per(kernels_.size());
  for (size_t i = 0; i < kernels_.size(); ++i) per[i].kernel = &kernels_[i];
  for (const Span& s : spans_) {
    if (s.kind != SpanKind::kKernel) continue;
    ++per[s.name].calls;
    per[s.name].total_ns += s.dur_ns;
    t.kernel_ns += s.dur_ns;
    ++t.kernel_calls;
  }
  // Parallel jobs: per kernel, and per thread.
  std::vector<ThreadTotal> threads;
  std::vector<std::pair<int32_t, int64_t>> busy;  // one job's threads and their busy time
  for (const ParallelJob& j : parallel_jobs_) {
    KernelTotal& k = per[spans_[j.span].name];
    if (j.pool_busy) {
      ++k.busy_pool_jobs;
      continue;
    }
    ++k.jobs;
    k.max_tasks = std::max(k.max_tasks, j.tasks);
    k.job_ns += j.dur_ns;
    k.join_wait_ns += j.join_wait_ns;
    busy.clear();
    int64_t job_range_ns = 0;
    for (int32_t i = 0; i < j.tasks; ++i) {
      const Range& r = ranges_[j.first_range + i];
      const bool stolen = r.thread == 0 && r.index != 0;
      k.stolen += stolen;
      job_range_ns += r.dur_ns;
      auto it = std::find_if(busy.begin(), busy.end(),
                             [&](const auto& b) { return b.first == r.thread; });
      if (it == busy.end()) {
        busy.push_back({r.thread, r.dur_ns});
      } else {
        it->second += r.dur_ns;
      }
      if (static_cast<size_t>(r.thread) >= threads.size()) {
        for (auto n = static_cast<int32_t>(threads.size()); n <= r.thread; ++n)
          threads.push_back({n});
      }
      ThreadTotal& th = threads[r.thread];
      ++th.ranges;
      th.stolen += stolen;
      th.busy_ns += r.dur_ns;
    }
    k.ranges += j.tasks;
    k.range_ns += job_range_ns;
    k.mean_thread_ns += static_cast<double>(job_range_ns) / j.tasks;
    int64_t most = 0;
    for (const auto& b : busy) most = std::max(most, b.second);
    k.max_thread_ns += most;
  }
  t.threads = std::move(threads);
  for (KernelTotal& k : per) {
    if (k.calls > 0) t.kernels.push_back(k);
  }
  std::stable_sort(
      t.kernels.begin(), t.kernels.end(),
      [](const KernelTotal& a, const KernelTotal& b) { return a.total_ns > b.total_ns; });
  std::vector<std::vector<int64_t>> outside(loop_totals_.size());
  for (const Span& s : spans_) {
    if (s.kind != SpanKind::kIteration) continue;
    auto it = loop_total_ids_.find(s.name);
    if (it != loop_total_ids_.end()) outside[it->second].push_back(s.dur_ns - s.kernel_ns);
  }
  for (size_t i = 0; i < loop_totals_.size(); ++i) {
    const LoopAccum& a = loop_totals_[i];
    std::vector<int64_t>& v = outside[i];
    int64_t median = 0;
    if (!v.empty()) {
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      median = v[v.size() / 2];
    }
    t.loops.push_back(
        {names_[loop_total_names_[i]], a.entries, a.iterations, a.total_ns, a.kernel_ns, median});
  }
  std::stable_sort(t.loops.begin(), t.loops.end(),
                   [](const LoopTotal& a, const LoopTotal& b) { return a.total_ns > b.total_ns; });
  return t;
}

std::string Profiler::SummaryTable() const {
  const Totals t = ComputeTotals();
  std::string out;
  const int64_t outside = t.run_ns - t.kernel_ns;
  absl::StrAppendFormat(
      &out,
      "profile: %d run%s, %.3f ms; inside kernels %.3f ms (%.1f%%), outside kernels "
      "%.3f ms (%.1f%%)\n",
      t.runs, t.runs == 1 ? "" : "s", Ms(t.run_ns), Ms(t.kernel_ns), Pct(t.kernel_ns, t.run_ns),
      Ms(outside), Pct(outside, t.run_ns));
  absl::StrAppendFormat(&out, "%-44s %-20s %9s %11s %10s %7s\n", "kernel", "op", "calls",
                        "total_ms", "mean_us", "share");
  for (const KernelTotal& k : t.kernels) {
    absl::StrAppendFormat(&out, "%-44s %-20s %9d %11.3f %10.3f %6.1f%%\n", k.kernel->name,
                          k.kernel->op, k.calls, Ms(k.total_ns),
                          Us(k.total_ns) / static_cast<double>(k.calls), Pct(k.total_ns, t.run_ns));
  }
  absl::StrAppendFormat(&out, "%-44s %-20s %9s %11.3f %10s %6.1f%%\n",
                        "(outside kernels: interpreter, profiler)", "", "", Ms(outside), "",
                        Pct(outside, t.run_ns));
  if (!t.loops.empty()) {
    absl::StrAppendFormat(&out, "%-24s %8s %10s %12s %12s %12s %8s %14s\n", "loop (function@pc)",
                          "entries", "iterations", "iter_us", "kernels_us", "outside_us", "outside",
                          "outside_median");
    for (const LoopTotal& l : t.loops) {
      const double n = l.iterations > 0 ? static_cast<double>(l.iterations) : 1.0;
      absl::StrAppendFormat(&out, "%-24s %8d %10d %12.3f %12.3f %12.3f %7.2f%% %11.3f us\n", l.name,
                            l.entries, l.iterations, Us(l.total_ns) / n, Us(l.kernel_ns) / n,
                            Us(l.total_ns - l.kernel_ns) / n,
                            Pct(l.total_ns - l.kernel_ns, l.total_ns), Us(l.median_outside_ns));
    }
  }
  AppendParallelSummary(t, out);
  absl::StrAppendFormat(
      &out,
      "profiler: %d spans, %d clock reads at about %.1f ns each (%.3f ms, counted in the "
      "time outside kernels)\n",
      static_cast<int64_t>(spans_.size()), clock_reads_, clock_read_ns_,
      static_cast<double>(clock_reads_) * clock_read_ns_ / 1e6);
  return out;
}

void Profiler::AppendParallelSummary(const Totals& t, std::string& out) const {
  if (parallel_jobs_.empty()) return;
  absl::StrAppendFormat(&out, "%-44s %7s %9s %7s %10s %12s %9s %12s %7s\n", "parallel kernel",
                        "jobs", "busy_pool", "threads", "job_us", "busy_us/thr", "imbalance",
                        "join_wait_us", "stolen");
  for (const KernelTotal& k : t.kernels) {
    if (k.jobs == 0 && k.busy_pool_jobs == 0) continue;
    if (k.jobs == 0) {
      absl::StrAppendFormat(&out, "%-44s %7d %9d %7s %10s %12s %9s %12s %7s\n", k.kernel->name, 0,
                            k.busy_pool_jobs, "-", "-", "-", "-", "-", "-");
      continue;
    }
    const auto jobs = static_cast<double>(k.jobs);
    absl::StrAppendFormat(&out, "%-44s %7d %9d %7d %10.3f %12.3f %9.2f %12.3f %7d\n",
                          k.kernel->name, k.jobs, k.busy_pool_jobs, k.max_tasks,
                          Us(k.job_ns) / jobs, k.mean_thread_ns / 1e3 / jobs, k.imbalance(),
                          Us(k.join_wait_ns) / jobs, k.stolen);
  }
  absl::StrAppendFormat(&out, "%-24s %9s %9s %11s\n", "parallel thread", "ranges", "stolen",
                        "busy_ms");
  for (const ThreadTotal& th : t.threads) {
    if (th.ranges == 0) continue;
    if (th.thread == 0) {
      absl::StrAppendFormat(&out, "%-24s %9d %9d %11.3f\n", "caller (the VM's thread)", th.ranges,
                            th.stolen, Ms(th.busy_ns));
    } else {
      absl::StrAppendFormat(&out, "%-24s %9d %9s %11.3f\n", absl::StrCat("worker ", th.thread),
                            th.ranges, "-", Ms(th.busy_ns));
    }
  }
}

std::string Profiler::ChromeTraceJson() const {
  std::vector<const Span*> order(spans_.size());
  for (size_t i = 0; i < spans_.size(); ++i) order[i] = &spans_[i];
  // Parents before children: by start, then longest first.
  std::stable_sort(order.begin(), order.end(), [](const Span* a, const Span* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->dur_ns > b->dur_ns;
  });
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out +=
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"dynvm\"}},"
      "\n";
  out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"vm\"}}";
  int32_t workers = 0;  // worker i's ranges go on track (tid) 1 + i
  for (const Range& r : ranges_) workers = std::max(workers, r.thread);
  for (int32_t i = 1; i <= workers; ++i) {
    absl::StrAppend(&out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":", 1 + i,
                    ",\"args\":{\"name\":\"worker ", i, "\"}},\n{\"name\":\"thread_sort_index\",",
                    "\"ph\":\"M\",\"pid\":1,\"tid\":", 1 + i, ",\"args\":{\"sort_index\":", 1 + i,
                    "}}");
  }
  for (const Span* s : order) {
    out += ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":";
    out += Micros(s->start_ns);
    out += ",\"dur\":";
    out += Micros(s->dur_ns);
    switch (s->kind) {
      case SpanKind::kKernel: {
        const KernelInfo& k = kernels_[s->name];
        absl::StrAppend(&out, ",\"cat\":\"kernel\",\"name\":", Quote(k.op),
                        ",\"args\":{\"kernel\":", Quote(k.name), ",\"backend\":", Quote(k.backend),
                        ",\"variant\":", Quote(k.variant), ",\"shapes\":", Quote(ShapesOf(*s)),
                        ",\"site\":", Quote(SiteOf(*s)), "}}");
        AppendParallelEvents(*s, static_cast<int32_t>(s - spans_.data()), out);
        break;
      }
      case SpanKind::kIteration:
        absl::StrAppend(&out, ",\"cat\":\"iteration\",\"name\":\"iteration\",\"args\":{\"loop\":",
                        Quote(names_[s->name]), ",\"i\":", s->arg,
                        ",\"kernel_us\":", Micros(s->kernel_ns), "}}");
        break;
      case SpanKind::kLoop:
        absl::StrAppend(
            &out, ",\"cat\":\"loop\",\"name\":", Quote(absl::StrCat("loop ", names_[s->name])),
            ",\"args\":{\"iterations\":", s->arg, ",\"kernel_us\":", Micros(s->kernel_ns), "}}");
        break;
      case SpanKind::kCall:
        absl::StrAppend(&out, ",\"cat\":\"call\",\"name\":", Quote(names_[s->name]),
                        ",\"args\":{\"kernel_us\":", Micros(s->kernel_ns), "}}");
        break;
      case SpanKind::kRun:
        absl::StrAppend(&out, ",\"cat\":\"run\",\"name\":", Quote(names_[s->name]),
                        ",\"args\":{\"kernel_us\":", Micros(s->kernel_ns), "}}");
        break;
    }
  }
  for (const Counter& c : counters_) {
    absl::StrAppend(&out, ",\n{\"ph\":\"C\",\"pid\":1,\"ts\":", Micros(c.ts_ns), ",\"name\":",
                    c.device ? "\"device pool bytes in use\"" : "\"pool bytes in use\"",
                    ",\"args\":{\"bytes\":", c.bytes, "}}");
  }
  out += "\n]}\n";
  return out;
}

void Profiler::AppendParallelEvents(const Span& s, int32_t span, std::string& out) const {
  auto job = std::lower_bound(parallel_jobs_.begin(), parallel_jobs_.end(), span,
                              [](const ParallelJob& j, int32_t v) { return j.span < v; });
  const KernelInfo& k = kernels_[s.name];
  for (; job != parallel_jobs_.end() && job->span == span; ++job) {
    // The job on the VM's track, inside the kernel's span: fork to join.
    absl::StrAppend(&out, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":", Micros(job->start_ns),
                    ",\"dur\":", Micros(job->dur_ns),
                    ",\"cat\":\"parallel\",\"name\":", Quote(absl::StrCat(k.op, " parallel")),
                    ",\"args\":{\"kernel\":", Quote(k.name), ",\"n\":", job->n,
                    ",\"ranges\":", job->tasks, ",\"join_wait_us\":", Micros(job->join_wait_ns),
                    ",\"pool_busy\":", job->pool_busy ? "true" : "false", "}}");
    // Each range on the track of the thread that ran it.
    for (int32_t i = 0; i < job->tasks; ++i) {
      const Range& r = ranges_[job->first_range + i];
      const std::string thread = r.thread == 0 ? "caller" : absl::StrCat("worker ", r.thread);
      absl::StrAppend(&out, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":", 1 + r.thread,
                      ",\"ts\":", Micros(r.start_ns), ",\"dur\":", Micros(r.dur_ns),
                      ",\"cat\":\"range\",\"name\":", Quote(absl::StrCat(k.op, " range ", r.index)),
                      ",\"args\":{\"kernel\":", Quote(k.name), ",\"range\":", r.index,
                      ",\"of\":", job->tasks, ",\"begin\":", r.begin, ",\"end\":", r.end,
                      ",\"thread\":\"", thread,
                      "\",\"stolen\":", r.thread == 0 && r.index != 0 ? "true" : "false", "}}");
    }
  }
}

absl::Status Profiler::WriteChromeTrace(const std::string& path) const {
  const std::string json = ChromeTraceJson();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  const size_t written = std::fwrite(json.data(), 1, json.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != json.size() || !closed)
    return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace dynvm
