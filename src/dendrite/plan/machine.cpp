// Machine files: strict JSON (unknown keys and missing fields are errors, so a
// typo never silently falls back to a default), and the lookups the
// performance model makes into them.
#include "dendrite/plan/machine.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "dendrite/core/check.h"

namespace dendrite {

using nlohmann::json;

namespace {

const char* const kKinds[] = {"all_reduce", "all_gather", "reduce_scatter"};

void check_keys(const json& j, const std::string& where, const std::set<std::string>& allowed) {
  DENDRITE_CHECK(j.is_object(), "machine: ", where, " must be a JSON object, got ", j.dump());
  for (auto& [key, value] : j.items()) {
    (void)value;
    if (allowed.count(key)) continue;
    std::string list;
    for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail("machine: unknown key \"", key, "\" in ", where, "; allowed keys: ", list);
  }
}

double number(const json& j, const std::string& where, const std::string& key, bool positive) {
  DENDRITE_CHECK(j.contains(key), "machine: missing field \"", key, "\" in ", where);
  const json& v = j.at(key);
  DENDRITE_CHECK(v.is_number(), "machine: \"", key, "\" in ", where, " must be a number, got ",
                 v.dump());
  const double x = v.get<double>();
  DENDRITE_CHECK(std::isfinite(x) && (positive ? x > 0 : x >= 0), "machine: \"", key, "\" in ",
                 where, " must be ", positive ? "positive" : "non-negative", ", got ", v.dump());
  return x;
}

LinkCost link_from_json(const json& j, const std::string& where) {
  check_keys(j, where, {"bandwidth", "latency", "points", "group"});
  LinkCost l;
  l.bandwidth = number(j, where, "bandwidth", true);
  l.latency = number(j, where, "latency", false);
  if (!j.contains("points")) return l;
  const json& p = j.at("points");
  DENDRITE_CHECK(p.is_array() && !p.empty(), "machine: \"points\" in ", where,
                 " must be a non-empty array of [bytes, seconds] pairs");
  for (size_t i = 0; i < p.size(); ++i) {
    const json& q = p[i];
    DENDRITE_CHECK(q.is_array() && q.size() == 2 && q[0].is_number() && q[1].is_number(),
                   "machine: points[", i, "] in ", where, " must be [bytes, seconds], got ",
                   q.dump());
    const double b = q[0].get<double>(), t = q[1].get<double>();
    DENDRITE_CHECK(std::isfinite(b) && std::isfinite(t) && b > 0 && t > 0 &&
                       (l.points.empty() || b > l.points.back().first),
                   "machine: points[", i, "] in ", where,
                   " must have positive bytes and seconds, bytes ascending; got ", q.dump());
    l.points.push_back({b, t});
  }
  l.group = int(number(j, where, "group", true));
  DENDRITE_CHECK(l.group >= 2, "machine: \"group\" in ", where,
                 " (ranks the points were measured over) must be at least 2");
  return l;
}

json link_to_json(const LinkCost& l) {
  json j = {{"bandwidth", l.bandwidth}, {"latency", l.latency}};
  if (!l.points.empty()) {
    json p = json::array();
    for (auto [b, t] : l.points) p.push_back({b, t});
    j["points"] = p;
    j["group"] = l.group;
  }
  return j;
}

// A JSON key that names a group size ("2", "8"): the size, or 0 when the key
// is not a plain number of 2 or more.
int group_size_key(const std::string& key) {
  int g = 0;
  try {
    g = std::stoi(key);
  } catch (const std::exception&) {
    return 0;
  }
  return g >= 2 && str(g) == key ? g : 0;
}

LevelCost level_from_json(const json& j, const std::string& where) {
  check_keys(j, where, {"bandwidth", "latency", "points", "group", "all_reduce", "all_gather",
                        "reduce_scatter", "groups"});
  LevelCost level;
  json own = json::object();  // the level's default link: its own keys
  for (const char* key : {"bandwidth", "latency", "points", "group"})
    if (j.contains(key)) own[key] = j.at(key);
  level.all = link_from_json(own, where);
  for (const char* kind : kKinds)
    if (j.contains(kind)) level.by_kind[kind] = link_from_json(j.at(kind), where + "." + kind);
  if (j.contains("groups")) {  // {"2": {"all_reduce": {...}, ...}, ...}
    const json& groups = j.at("groups");
    DENDRITE_CHECK(groups.is_object(), "machine: \"groups\" in ", where,
                   " must be an object of group size to collectives");
    for (auto& [key, kinds] : groups.items()) {
      const std::string at = where + ".groups." + key;
      const int g = group_size_key(key);
      DENDRITE_CHECK(g > 0 && kinds.is_object(), "machine: ", at,
                     ": the key must be a group size of 2 or more and the value an object of "
                     "collectives");
      check_keys(kinds, at, {"all_reduce", "all_gather", "reduce_scatter"});
      for (auto& [kind, link] : kinds.items()) {
        LinkCost c = link_from_json(link, at + "." + kind);
        DENDRITE_CHECK(c.points.empty() || c.group == g, "machine: ", at, ".", kind,
                       ": \"group\" is ", c.group, ", not ", g);
        level.by_group[g][kind] = c;
      }
    }
  }
  return level;
}

json level_to_json(const LevelCost& l) {
  json j = link_to_json(l.all);
  for (auto& [kind, cost] : l.by_kind) j[kind] = link_to_json(cost);
  for (auto& [g, kinds] : l.by_group)
    for (auto& [kind, cost] : kinds) j["groups"][str(g)][kind] = link_to_json(cost);
  return j;
}

GemmRate gemm_from_json(const json& j, const std::string& where) {
  check_keys(j, where, {"m", "n", "k", "gflops"});
  GemmRate g;
  g.m = int64_t(number(j, where, "m", true));
  g.n = int64_t(number(j, where, "n", true));
  g.k = int64_t(number(j, where, "k", true));
  g.gflops = number(j, where, "gflops", true);
  return g;
}

}  // namespace

double LinkCost::seconds(double bytes, int g, double f) const {
  if (g <= 1) return 0;
  const double share = (g - 1.0) / g;
  if (points.empty()) return latency + f * share * bytes / bandwidth;
  // The bytes a call over `group` ranks would move to put as much on each link.
  const double b = bytes * share / ((group - 1.0) / group);
  if (b <= points.front().first) return points.front().second;
  for (size_t i = 1; i < points.size(); ++i) {
    auto [b0, t0] = points[i - 1];
    auto [b1, t1] = points[i];
    if (b <= b1) return t0 + (t1 - t0) * (b - b0) / (b1 - b0);
  }
  const double gshare = (group - 1.0) / group;
  return points.back().second + f * gshare * (b - points.back().first) / bandwidth;
}

const LinkCost& LevelCost::get(const std::string& kind) const {
  auto it = by_kind.find(kind);
  return it == by_kind.end() ? all : it->second;
}

const LinkCost& LevelCost::get(const std::string& kind, int g) const {
  auto group = by_group.find(g);
  if (group != by_group.end()) {
    auto it = group->second.find(kind);
    if (it != group->second.end()) return it->second;
  }
  return get(kind);
}

double Machine::gemm_gflops(int64_t m, int64_t n, int64_t k, Precision p) const {
  const std::vector<GemmRate>& table = p == Precision::kBF16 && !gemm_bf16.empty() ? gemm_bf16 : gemm;
  if (table.empty()) return peak_gflops * gemm_efficiency;
  const GemmRate* best = nullptr;
  double best_d = std::numeric_limits<double>::infinity();
  for (const GemmRate& g : table) {
    const double a = std::log(double(m) / g.m), b = std::log(double(n) / g.n),
                 c = std::log(double(k) / g.k);
    const double d = a * a + b * b + c * c;
    if (d < best_d) best_d = d, best = &g;
  }
  // Below the smallest measured size of a dimension the rate falls with it.
  int64_t min_m = best->m, min_n = best->n, min_k = best->k;
  for (const GemmRate& g : table)
    min_m = std::min(min_m, g.m), min_n = std::min(min_n, g.n), min_k = std::min(min_k, g.k);
  double scale = 1.0;
  for (auto [asked, smallest] : {std::pair{m, min_m}, {n, min_n}, {k, min_k}})
    if (asked < smallest) scale *= double(asked) / smallest;
  return best->gflops * scale;
}

int Machine::node_span() const {
  return simulated_ranks_per_node > 0 ? std::min(simulated_ranks_per_node, ranks_per_node)
                                      : ranks_per_node;
}

const LinkCost& Machine::link(const std::string& kind, int stride, int g) const {
  const bool in_node = int64_t(stride) * g <= node_span();
  return (in_node ? node : network).get(kind, g);
}

bool Machine::uses_shm(int stride, int g, bool shared) const {
  return shared && has_shm && g > 1 && int64_t(stride) * g <= node_span();
}

const LinkCost& Machine::link(const std::string& kind, int stride, int g, bool shared,
                              bool shared_memory) const {
  if (shared_memory && uses_shm(stride, g, shared)) return shm.get(kind, g);
  const bool in_node = int64_t(stride) * g <= node_span();
  if (in_node && !shared_memory && has_messages) return messages.get(kind, g);
  return link(kind, stride, g);
}

double Machine::peer_wait(int g) const {
  if (peer_wait_fraction.empty() || g < 2) return 0.0;
  auto it = peer_wait_fraction.upper_bound(g);  // first size above g
  return it == peer_wait_fraction.begin() ? it->second : std::prev(it)->second;
}

double Machine::oversubscription() const {
  if (cores_per_node <= 0) return 1.0;
  return std::max(1.0, double(ranks_per_node) * threads_per_rank / cores_per_node);
}

void Machine::validate() const {
  DENDRITE_CHECK(ranks_per_node >= 1 && threads_per_rank >= 1 && cores_per_node >= 0,
                 "machine ", name, ": ranks_per_node and threads_per_rank must be at least 1, got ",
                 ranks_per_node, " and ", threads_per_rank);
  DENDRITE_CHECK(peak_gflops > 0 && memory_bandwidth > 0 && memory_per_rank_bytes > 0, "machine ",
                 name, ": peak_gflops, memory_bandwidth and memory_per_rank_bytes must be positive");
  DENDRITE_CHECK(oversubscribed_call_penalty_s >= 0, "machine ", name,
                 ": oversubscribed_call_penalty_s must be non-negative, got ",
                 oversubscribed_call_penalty_s);
  DENDRITE_CHECK(gemm_efficiency > 0 && gemm_efficiency <= 1, "machine ", name,
                 ": gemm_efficiency must be in (0, 1], got ", gemm_efficiency);
}

Machine generic_machine(int ranks_per_node, int threads_per_rank, int cores_per_node,
                        double memory_bytes) {
  Machine m;
  m.name = "generic";
  m.notes = "built-in generic node (no --machine file): nominal rates, not measured";
  m.ranks_per_node = std::max(1, ranks_per_node);
  m.threads_per_rank = std::max(1, threads_per_rank);
  m.cores_per_node = std::max(0, cores_per_node);
  m.memory_per_rank_bytes = std::max(1e9, memory_bytes / m.ranks_per_node);
  m.peak_gflops = 8.0 * m.threads_per_rank;
  m.gemm_efficiency = 0.5;
  m.memory_bandwidth = 5e9;
  m.oversubscribed_call_penalty_s = 5e-3;
  m.node.all = {2e9, 20e-6};
  m.network = m.node;
  m.validate();
  return m;
}

Machine machine_from_json(const json& j) {
  check_keys(j, "the machine file",
             {"name", "notes", "ranks_per_node", "threads_per_rank", "cores_per_node",
              "memory_per_rank_bytes", "device", "peak_gflops", "memory_bandwidth", "gemm",
              "gemm_bf16", "optimizer_seconds_per_param", "oversubscribed_call_penalty_s",
              "peer_wait_fraction", "peer_wait_interval_s", "gemm_efficiency", "collectives"});
  Machine m;
  const std::string top = "the machine file";
  DENDRITE_CHECK(j.contains("name") && j.at("name").is_string(),
                 "machine: missing field \"name\" (a string) in ", top);
  m.name = j.at("name").get<std::string>();
  if (j.contains("notes")) {
    DENDRITE_CHECK(j.at("notes").is_string(), "machine: \"notes\" must be a string");
    m.notes = j.at("notes").get<std::string>();
  }
  m.ranks_per_node = int(number(j, top, "ranks_per_node", true));
  m.threads_per_rank = int(number(j, top, "threads_per_rank", true));
  if (j.contains("cores_per_node")) m.cores_per_node = int(number(j, top, "cores_per_node", false));
  m.memory_per_rank_bytes = number(j, top, "memory_per_rank_bytes", true);
  if (j.contains("device")) {  // files written before it are CPU nodes
    const json& d = j.at("device");
    DENDRITE_CHECK(d.is_string() && (d == "cpu" || d == "gpu"), "machine: \"device\" must be ",
                   "\"cpu\" or \"gpu\" (what each rank computes on), got ", d.dump());
    m.gpu = d == "gpu";
  }
  m.peak_gflops = number(j, top, "peak_gflops", true);
  m.memory_bandwidth = number(j, top, "memory_bandwidth", true);
  if (j.contains("optimizer_seconds_per_param"))
    m.optimizer_seconds_per_param = number(j, top, "optimizer_seconds_per_param", false);
  if (j.contains("oversubscribed_call_penalty_s"))
    m.oversubscribed_call_penalty_s = number(j, top, "oversubscribed_call_penalty_s", false);
  if (j.contains("gemm_efficiency")) m.gemm_efficiency = number(j, top, "gemm_efficiency", true);
  if (j.contains("peer_wait_interval_s"))
    m.peer_wait_interval_s = number(j, top, "peer_wait_interval_s", false);
  if (j.contains("peer_wait_fraction")) {
    const json& w = j.at("peer_wait_fraction");
    DENDRITE_CHECK(w.is_object(), "machine: \"peer_wait_fraction\" must be an object of group "
                   "size to fraction, e.g. {\"2\": 0.05}");
    for (auto& [key, value] : w.items()) {
      const int g = group_size_key(key);
      DENDRITE_CHECK(g > 0, "machine: peer_wait_fraction key \"", key,
                     "\" is not a group size of 2 or more");
      const double f = number(w, "peer_wait_fraction", key.c_str(), false);
      DENDRITE_CHECK(f < 10, "machine: peer_wait_fraction[", key, "] = ", f,
                     " is not a fraction of the compute (expected 0 to 10)");
      m.peer_wait_fraction[g] = f;
    }
  }
  for (const char* key : {"gemm", "gemm_bf16"}) {
    if (!j.contains(key)) continue;
    DENDRITE_CHECK(j.at(key).is_array(), "machine: \"", key,
                   "\" must be an array of {m, n, k, gflops}");
    std::vector<GemmRate>& table = std::string(key) == "gemm" ? m.gemm : m.gemm_bf16;
    for (size_t i = 0; i < j.at(key).size(); ++i)
      table.push_back(gemm_from_json(j.at(key)[i], str(key, "[", i, "]")));
  }
  DENDRITE_CHECK(j.contains("collectives"), "machine: missing field \"collectives\" in ", top,
                 " (an object with \"node\" and \"network\" levels)");
  const json& c = j.at("collectives");
  check_keys(c, "collectives", {"node", "network", "shm", "messages"});
  DENDRITE_CHECK(c.contains("node") && c.contains("network"),
                 "machine: \"collectives\" needs both a \"node\" and a \"network\" level");
  m.node = level_from_json(c.at("node"), "collectives.node");
  m.network = level_from_json(c.at("network"), "collectives.network");
  m.has_shm = c.contains("shm");  // optional: files written before it still load
  if (m.has_shm) m.shm = level_from_json(c.at("shm"), "collectives.shm");
  m.has_messages = c.contains("messages");
  if (m.has_messages) m.messages = level_from_json(c.at("messages"), "collectives.messages");
  m.validate();
  return m;
}

json to_json(const Machine& m) {
  auto rates = [](const std::vector<GemmRate>& table) {
    json a = json::array();
    for (const GemmRate& g : table)
      a.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"gflops", g.gflops}});
    return a;
  };
  const json gemm = rates(m.gemm);
  json j = {
      {"name", m.name},
      {"ranks_per_node", m.ranks_per_node},
      {"threads_per_rank", m.threads_per_rank},
      {"cores_per_node", m.cores_per_node},
      {"memory_per_rank_bytes", m.memory_per_rank_bytes},
      {"device", m.gpu ? "gpu" : "cpu"},
      {"peak_gflops", m.peak_gflops},
      {"memory_bandwidth", m.memory_bandwidth},
      {"gemm_efficiency", m.gemm_efficiency},
      {"optimizer_seconds_per_param", m.optimizer_seconds_per_param},
      {"oversubscribed_call_penalty_s", m.oversubscribed_call_penalty_s},
      {"gemm", gemm},
      {"collectives", {{"node", level_to_json(m.node)}, {"network", level_to_json(m.network)}}}};
  if (!m.peer_wait_fraction.empty()) {
    json w = json::object();
    for (auto [g, f] : m.peer_wait_fraction) w[str(g)] = f;
    j["peer_wait_fraction"] = w;
    j["peer_wait_interval_s"] = m.peer_wait_interval_s;
  }
  if (m.has_shm) j["collectives"]["shm"] = level_to_json(m.shm);
  if (m.has_messages) j["collectives"]["messages"] = level_to_json(m.messages);
  if (!m.gemm_bf16.empty()) j["gemm_bf16"] = rates(m.gemm_bf16);
  if (!m.notes.empty()) j["notes"] = m.notes;
  return j;
}

Machine load_machine(const std::string& path) {
  std::ifstream in(path);
  DENDRITE_CHECK(in.good(), "machine: cannot open ", path,
                 "; write one with `dendrite calibrate --out ", path, "` or use machines/*.json");
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    fail("machine: ", path, " is not valid JSON: ", e.what());
  }
  try {
    return machine_from_json(j);
  } catch (const Error& e) {
    fail(e.what(), " (file ", path, ")");
  }
}

void save_machine(const Machine& m, const std::string& path) {
  m.validate();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    DENDRITE_CHECK(out.good(), "machine: cannot write ", tmp, "; check the folder exists");
    out << to_json(m).dump(2) << "\n";
    DENDRITE_CHECK(out.good(), "machine: writing ", tmp, " failed");
  }
  DENDRITE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "machine: cannot rename ", tmp,
                 " to ", path);
}

}  // namespace dendrite
