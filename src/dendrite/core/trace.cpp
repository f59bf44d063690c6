#include "dendrite/core/trace.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>

namespace dendrite::trace {

namespace detail {
std::atomic<bool> recording{false};
}

namespace {
std::mutex mutex;
std::vector<Span> recorded;
double origin = 0;
}  // namespace

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start(double zero) {
  std::lock_guard<std::mutex> lock(mutex);
  recorded.clear();
  origin = zero;
  detail::recording.store(true, std::memory_order_relaxed);
}

void stop() { detail::recording.store(false, std::memory_order_relaxed); }

void add(Span s) {
  if (!on()) return;
  std::lock_guard<std::mutex> lock(mutex);
  recorded.push_back(std::move(s));
}

std::vector<Span> spans() {
  std::lock_guard<std::mutex> lock(mutex);
  return recorded;
}

double zero() {
  std::lock_guard<std::mutex> lock(mutex);
  return origin;
}

std::string events_json(int rank, const std::string& process) {
  std::vector<Span> all = spans();
  const double z = zero();
  std::string out;
  auto append = [&](const nlohmann::json& e) {
    if (!out.empty()) out += ",\n";
    out += e.dump();
  };
  for (const Span& s : all) {
    nlohmann::json e = {{"name", s.name},
                        {"cat", s.category},
                        {"ph", "X"},
                        {"pid", rank},
                        {"tid", static_cast<int>(s.lane)},
                        {"ts", (s.begin - z) * 1e6},
                        {"dur", (s.end - s.begin) * 1e6}};
    nlohmann::json args = nlohmann::json::object();
    if (s.bytes >= 0) args["bytes"] = s.bytes;
    if (s.peer_wait_ms >= 0) args["peer_wait_ms"] = s.peer_wait_ms;
    if (s.queued_ms >= 0) args["queued_ms"] = s.queued_ms;
    if (!args.empty()) e["args"] = args;
    append(e);
  }
  append({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", process}}}});
  append({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  append({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
          {"args", {{"name", "rank"}}}});
  append({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 1},
          {"args", {{"name", "progress engine"}}}});
  if (std::any_of(all.begin(), all.end(), [](const Span& s) { return s.lane == Lane::kDevice; }))
    append({{"name", "thread_name"},
            {"ph", "M"},
            {"pid", rank},
            {"tid", 2},
            {"args", {{"name", "device (its kernels, copies and memsets)"}}}});
  return out;
}

std::string file_json(const std::vector<std::string>& pieces) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const std::string& p : pieces) {
    if (p.empty()) continue;
    if (!first) out += ",\n";
    out += p;
    first = false;
  }
  out += "\n]}\n";
  return out;
}

Scope::Scope(const char* category, std::string name) : category_(category) {
  if (!on()) return;
  name_ = std::move(name);
  begin_ = now();
}

Scope::Scope(const char* category, int layer, const char* what) : category_(category) {
  if (!on()) return;
  name_ = "layer " + std::to_string(layer) + " " + what;
  begin_ = now();
}

Scope::~Scope() {
  if (begin_ < 0) return;
  add({category_, std::move(name_), begin_, now(), Lane::kRank, -1, -1, -1});
}

}  // namespace dendrite::trace
