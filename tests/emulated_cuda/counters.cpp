// The emulated GPU's counters (counters.h). Events are kept with the host
// time they were issued at and the op that issued them; stop() names each
// op's part of the step from the trace spans recorded meanwhile (the
// innermost "step" span open when the op began) and sums the events by
// part, op and the op's sizes.
//
// The anatomy stop() returns:
//   "parts": the parts in the order they began ("layer 0 forward", ...;
//     "step N" is "step"; work outside every span is "outside the step");
//   "ops": one entry per part, op and sizes: "part", "op", "args" (the op's
//     sizes), "calls", "kernels" ({name: launches}), "matmuls" ([{m, n, k,
//     a, b, d, aux (bytes per element; aux 0 without an epilogue buffer),
//     accumulate, count}]), "syncs" ({call:
//     count}), "allocations", "allocation_bytes", "frees", "free_bytes",
//     "copies" ({"h2d"|"d2h"|"d2d"|"h2h": {count, bytes}}), "memsets"
//     ({count, bytes}); work outside every op (a collective's own copies, say)
//     is the op "outside the Backend";
//   "by_part" and "total": the same counts summed (launches = kernels +
//     matmuls, each product one launch).
#include "counters.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <tuple>

#include "dendrite/core/trace.h"
#include "emulator.h"
#include "race_check.h"

namespace emu::counters {
namespace {

enum class Kind { kLaunch, kMatmul, kSync, kAlloc, kFree, kCopy, kMemset };

struct Event {
  Kind kind;
  const char* name;              // kernel or call
  uint64_t a = 0, b = 0, c = 0;  // m, n, k; or bytes in a
  int elem[4] = {};              // a matmul's bytes per element of A, B, D and the aux
  bool accumulate = false;
  Copy copy = Copy::kHostToDevice;
  int op = -1;  // index in State::ops
  double t = 0;
};

struct Op {
  const char* name;
  OpArgs args;
  double t;
};

struct State {
  std::mutex mu;
  std::vector<Event> events;
  std::vector<Op> ops;
};
State& state() {
  static State& s = *new State;  // never destroyed: the emulator may count at exit
  return s;
}
std::atomic<bool> recording{false}, counting_only{false};
constexpr const char* kOutside = "outside the Backend";
thread_local int t_op = -1;  // the op this thread is issuing

void add(Event e) {
  if (!recording.load(std::memory_order_relaxed)) return;
  e.t = dendrite::trace::now();
  e.op = t_op;
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  s.events.push_back(e);
}

// Adds `count` copies of `bytes` to copies[kind].
void add_copies(nlohmann::json& copies, const std::string& kind, int64_t count, uint64_t bytes) {
  if (!copies.contains(kind)) copies[kind] = {{"count", 0}, {"bytes", 0}};
  copies[kind]["count"] = copies[kind]["count"].get<int64_t>() + count;
  copies[kind]["bytes"] = copies[kind]["bytes"].get<uint64_t>() + bytes;
}

const char* copy_name(Copy c) {
  switch (c) {
    case Copy::kHostToDevice:
      return "h2d";
    case Copy::kDeviceToHost:
      return "d2h";
    case Copy::kDeviceToDevice:
      return "d2d";
    default:
      return "h2h";
  }
}

// The part of the step at time t: the innermost "step" span around it.
std::string part_at(const std::vector<dendrite::trace::Span>& spans, double t) {
  const dendrite::trace::Span* best = nullptr;
  for (const auto& s : spans)
    if (std::string(s.category) == "step" && s.begin <= t && t <= s.end &&
        (!best || s.begin >= best->begin))
      best = &s;
  if (!best) return "outside the step";
  if (best->name.rfind("step ", 0) == 0) return "step";
  return best->name;
}

void add_event(nlohmann::json& j, const Event& e) {
  switch (e.kind) {
    case Kind::kLaunch:
      j["kernels"][e.name] = j["kernels"].value(e.name, 0) + 1;
      break;
    case Kind::kMatmul: {
      nlohmann::json& list = j["matmuls"];
      const nlohmann::json key = {
          {"m", e.a},       {"n", e.b},       {"k", e.c},         {"a", e.elem[0]},
          {"b", e.elem[1]}, {"d", e.elem[2]}, {"aux", e.elem[3]}, {"accumulate", e.accumulate}};
      bool found = false;
      for (auto& m : list) {
        nlohmann::json bare = m;
        bare.erase("count");
        if (bare == key) m["count"] = m["count"].get<int64_t>() + 1, found = true;
      }
      if (!found) {
        nlohmann::json m = key;
        m["count"] = 1;
        list.push_back(m);
      }
      break;
    }
    case Kind::kSync:
      j["syncs"][e.name] = j["syncs"].value(e.name, 0) + 1;
      break;
    case Kind::kAlloc:
      j["allocations"] = j["allocations"].get<int64_t>() + 1;
      j["allocation_bytes"] = j["allocation_bytes"].get<uint64_t>() + e.a;
      break;
    case Kind::kFree:
      j["frees"] = j["frees"].get<int64_t>() + 1;
      j["free_bytes"] = j["free_bytes"].get<uint64_t>() + e.a;
      break;
    case Kind::kCopy: add_copies(j["copies"], copy_name(e.copy), 1, e.a); break;
    case Kind::kMemset:
      j["memsets"]["count"] = j["memsets"]["count"].get<int64_t>() + 1;
      j["memsets"]["bytes"] = j["memsets"]["bytes"].get<uint64_t>() + e.a;
      break;
  }
}

nlohmann::json empty_counts() {
  return {{"kernels", nlohmann::json::object()},
          {"matmuls", nlohmann::json::array()},
          {"syncs", nlohmann::json::object()},
          {"allocations", 0},
          {"allocation_bytes", 0},
          {"frees", 0},
          {"free_bytes", 0},
          {"copies", nlohmann::json::object()},
          {"memsets", {{"count", 0}, {"bytes", 0}}}};
}

// The totals of a list of op entries: launches, syncs, allocations, copies.
nlohmann::json totals(const nlohmann::json& entries) {
  int64_t kernels = 0, matmuls = 0, syncs = 0, allocs = 0, frees = 0, memsets = 0;
  uint64_t alloc_bytes = 0, free_bytes = 0;
  nlohmann::json copies = nlohmann::json::object();
  for (const auto& e : entries) {
    for (const auto& [k, n] : e["kernels"].items()) kernels += n.get<int64_t>();
    for (const auto& m : e["matmuls"]) matmuls += m["count"].get<int64_t>();
    for (const auto& [k, n] : e["syncs"].items()) syncs += n.get<int64_t>();
    allocs += e["allocations"].get<int64_t>(), frees += e["frees"].get<int64_t>();
    alloc_bytes += e["allocation_bytes"].get<uint64_t>();
    free_bytes += e["free_bytes"].get<uint64_t>();
    memsets += e["memsets"]["count"].get<int64_t>();
    for (const auto& [kind, c] : e["copies"].items())
      add_copies(copies, kind, c["count"].get<int64_t>(), c["bytes"].get<uint64_t>());
  }
  return {{"launches", kernels + matmuls},
          {"kernels", kernels},
          {"matmuls", matmuls},
          {"syncs", syncs},
          {"allocations", allocs},
          {"allocation_bytes", alloc_bytes},
          {"frees", frees},
          {"free_bytes", free_bytes},
          {"copies", copies},
          {"memsets", memsets}};
}

}  // namespace

void launch(const char* kernel, const dim3&, const dim3&) { add({Kind::kLaunch, kernel}); }
void matmul(uint64_t m, uint64_t n, uint64_t k, int a_bytes, int b_bytes, int d_bytes,
            bool accumulate, int aux_bytes) {
  Event e{Kind::kMatmul, "cublasLtMatmul", m, n, k};
  e.elem[0] = a_bytes, e.elem[1] = b_bytes, e.elem[2] = d_bytes, e.elem[3] = aux_bytes;
  e.accumulate = accumulate;
  add(e);
}
void sync(const char* call) { add({Kind::kSync, call}); }
void allocation(size_t bytes) { add({Kind::kAlloc, "cudaMalloc", bytes}); }
void free(size_t bytes) { add({Kind::kFree, "cudaFree", bytes}); }
void copy(Copy kind, size_t bytes) {
  Event e{Kind::kCopy, "cudaMemcpyAsync", bytes};
  e.copy = kind;
  add(e);
}
void memset(size_t bytes) { add({Kind::kMemset, "cudaMemsetAsync", bytes}); }

void set_count_only(bool on) { counting_only.store(on); }
bool count_only() { return counting_only.load(std::memory_order_relaxed); }

OpScope::OpScope(const char* op, OpArgs args) {
  if (t_op >= 0 || !recording.load(std::memory_order_relaxed)) return;
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  s.ops.push_back({op, std::move(args), dendrite::trace::now()});
  t_op = int(s.ops.size()) - 1;
  outermost_ = true;
}
OpScope::~OpScope() {
  if (outermost_) t_op = -1;
}

void start() {
  State& s = state();
  {
    emu::race::QuietLock<std::mutex> lock(s.mu);
    s.events.clear();
    s.ops.clear();
  }
  dendrite::trace::start(dendrite::trace::now());
  recording.store(true);
}

std::string stop() {
  recording.store(false);
  dendrite::trace::stop();
  const std::vector<dendrite::trace::Span> spans = dendrite::trace::spans();
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  // Entries keyed by (part, op, args), in the order they first appear.
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  nlohmann::json entries = nlohmann::json::array(), parts = nlohmann::json::array();
  auto entry = [&](const std::string& part, const char* op, const OpArgs* args) -> nlohmann::json& {
    nlohmann::json a = nlohmann::json::object();
    if (args)
      for (const auto& [name, v] : *args) a[name] = v;
    const auto key = std::make_tuple(part, std::string(op), a.dump());
    auto [it, fresh] = index.emplace(key, entries.size());
    if (fresh) {
      nlohmann::json e = {{"part", part}, {"op", op}, {"args", a}, {"calls", 0}};
      e.update(empty_counts());
      entries.push_back(e);
      if (std::find(parts.begin(), parts.end(), part) == parts.end()) parts.push_back(part);
    }
    return entries[it->second];
  };
  std::vector<std::string> op_part(s.ops.size());
  for (size_t i = 0; i < s.ops.size(); ++i) {
    op_part[i] = part_at(spans, s.ops[i].t);
    nlohmann::json& e = entry(op_part[i], s.ops[i].name, &s.ops[i].args);
    e["calls"] = e["calls"].get<int64_t>() + 1;
  }
  for (const Event& ev : s.events) {
    if (ev.op >= 0)
      add_event(
          entry(op_part[size_t(ev.op)], s.ops[size_t(ev.op)].name, &s.ops[size_t(ev.op)].args), ev);
    else
      add_event(entry(part_at(spans, ev.t), kOutside, nullptr), ev);
  }
  nlohmann::json by_part = nlohmann::json::object();
  for (const auto& p : parts) {
    nlohmann::json mine = nlohmann::json::array();
    for (const auto& e : entries)
      if (e["part"] == p) mine.push_back(e);
    by_part[p.get<std::string>()] = totals(mine);
  }
  const nlohmann::json out = {{"parts", parts},
                              {"ops", entries},
                              {"by_part", by_part},
                              {"total", totals(entries)},
                              {"count_only", count_only()}};
  return out.dump();
}

}  // namespace emu::counters
