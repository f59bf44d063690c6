#include "dendrite/core/device_profile.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>

namespace dendrite {

namespace {

// The position of the first `open` at angle-bracket depth 0 at or after `from`.
size_t find_at_depth0(const std::string& s, char open, size_t from = 0) {
  int depth = 0;
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (depth == 0 && s[i] == open) return i;
  }
  return std::string::npos;
}

}  // namespace

std::string short_kernel_name(const std::string& name) {
  std::string s = name;
  if (s.rfind("_Z", 0) == 0) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(
        abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status), std::free);
    if (status == 0 && d) s = d.get();
  }
  if (s.find_first_of("(<:") == std::string::npos) return s;  // no C++: kept whole
  for (size_t p; (p = s.find("(anonymous namespace)::")) != std::string::npos;)
    s.erase(p, std::string("(anonymous namespace)::").size());
  if (size_t p = find_at_depth0(s, '('); p != std::string::npos) s.resize(p);  // parameters
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (!s.empty() && s.back() == '>') {  // template arguments
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == '>') ++depth;
      if (s[i] == '<' && --depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  if (size_t p = s.rfind(' '); p != std::string::npos) s.erase(0, p + 1);   // return type
  if (size_t p = s.rfind("::"); p != std::string::npos) s.erase(0, p + 2);  // namespaces
  return s.empty() ? name : s;
}

std::string step_part(const std::vector<trace::Span>& spans, double issued) {
  if (issued < 0) return "outside the step";
  const trace::Span* inner = nullptr;
  for (const trace::Span& s : spans) {
    if (s.lane != trace::Lane::kRank || std::string(s.category) != "step") continue;
    if (s.begin <= issued && issued < s.end && (!inner || s.begin >= inner->begin)) inner = &s;
  }
  if (!inner) return "outside the step";
  static const std::regex layer(R"(layer \d+ (forward|backward))"), step(R"(step \d+)");
  std::smatch m;
  if (std::regex_match(inner->name, m, layer)) return "layers " + m[1].str();
  if (std::regex_match(inner->name, step)) return "step";
  return inner->name;
}

nlohmann::json device_profile_report(const std::vector<DeviceActivity>& activities,
                                     const std::vector<trace::Span>& spans, int steps,
                                     double step_seconds) {
  const double per = 1e3 / std::max(1, steps);  // seconds in total -> ms per step
  struct Sum {
    int64_t launches = 0, copies = 0, memsets = 0;
    double seconds = 0;
  };
  std::map<std::string, Sum> kernels;
  std::vector<std::string> order;  // parts in the order first issued
  std::map<std::string, Sum> parts;
  std::map<std::string, std::map<std::string, int64_t>> part_kernels;
  double kernel_s = 0, copy_s = 0, memset_s = 0;
  std::vector<std::pair<double, double>> spans_run;
  std::vector<const DeviceActivity*> by_issue;
  for (const DeviceActivity& a : activities) by_issue.push_back(&a);
  std::stable_sort(
      by_issue.begin(), by_issue.end(),
      [](const DeviceActivity* x, const DeviceActivity* y) { return x->issued < y->issued; });
  for (const DeviceActivity* a : by_issue) {
    const double d = std::max(0.0, a->end - a->begin);
    spans_run.emplace_back(a->begin, a->end);
    const std::string part = step_part(spans, a->issued);
    if (!parts.count(part)) order.push_back(part);
    Sum& p = parts[part];
    p.seconds += d;
    if (a->kind == DeviceActivity::Kind::kKernel) {
      const std::string name = short_kernel_name(a->name);
      kernels[name].launches++, kernels[name].seconds += d;
      p.launches++;
      part_kernels[part][name]++;
      kernel_s += d;
    } else if (a->kind == DeviceActivity::Kind::kCopy) {
      p.copies++;
      copy_s += d;
    } else {
      p.memsets++;
      memset_s += d;
    }
  }
  // The union of the activities' intervals: the time the device was busy.
  std::sort(spans_run.begin(), spans_run.end());
  double busy = 0, until = -1e300;
  for (auto [b, e] : spans_run) {
    if (e <= until) continue;
    busy += e - std::max(b, until);
    until = e;
  }
  nlohmann::json k = nlohmann::json::array();
  std::vector<std::pair<std::string, Sum>> ks(kernels.begin(), kernels.end());
  std::stable_sort(ks.begin(), ks.end(), [](const auto& x, const auto& y) {
    return x.second.seconds > y.second.seconds;
  });
  for (const auto& [name, s] : ks)
    k.push_back({{"name", name},
                 {"launches", double(s.launches) / std::max(1, steps)},
                 {"ms", s.seconds * per},
                 {"mean_us", s.seconds * 1e6 / double(s.launches)},
                 {"share", kernel_s > 0 ? s.seconds / kernel_s : 0.0}});
  nlohmann::json p = nlohmann::json::array();
  for (const std::string& name : order) {
    nlohmann::json pk = nlohmann::json::object();
    for (const auto& [kernel, n] : part_kernels[name]) pk[kernel] = double(n) / std::max(1, steps);
    const double n = std::max(1, steps);
    p.push_back({{"part", name},
                 {"launches", double(parts[name].launches) / n},
                 {"copies", double(parts[name].copies) / n},
                 {"memsets", double(parts[name].memsets) / n},
                 {"ms", parts[name].seconds * per},
                 {"kernels", pk}});
  }
  const double step_ms = step_seconds * 1e3;
  return {{"steps", steps},
          {"step_ms", step_ms},
          {"device_busy_ms", busy * per},
          {"device_idle_ms", step_ms - busy * per},
          {"kernel_ms", kernel_s * per},
          {"copy_ms", copy_s * per},
          {"memset_ms", memset_s * per},
          {"kernels", k},
          {"parts", p}};
}

std::string device_profile_table(const nlohmann::json& r, int top) {
  std::string out;
  char line[512];
  const double step = r["step_ms"].get<double>(), busy = r["device_busy_ms"].get<double>();
  std::snprintf(line, sizeof line,
                "device profile, per step: the step %.2f ms, the device busy %.2f ms (%.1f%%; idle "
                "%.2f ms), kernels %.2f ms, copies %.2f ms, memsets %.2f ms\n",
                step, busy, step > 0 ? 100 * busy / step : 0.0, r["device_idle_ms"].get<double>(),
                r["kernel_ms"].get<double>(), r["copy_ms"].get<double>(),
                r["memset_ms"].get<double>());
  out += line;
  std::snprintf(line, sizeof line, "  %-58s %9s %9s %9s %6s\n", "kernel", "launches", "ms",
                "mean us", "%");
  out += line;
  int shown = 0;
  for (const auto& k : r["kernels"]) {
    if (shown++ == top) break;
    std::string name = k["name"].get<std::string>();
    if (name.size() > 58) name = name.substr(0, 55) + "...";
    std::snprintf(line, sizeof line, "  %-58s %9.1f %9.3f %9.1f %6.1f\n", name.c_str(),
                  k["launches"].get<double>(), k["ms"].get<double>(), k["mean_us"].get<double>(),
                  100 * k["share"].get<double>());
    out += line;
  }
  if (int(r["kernels"].size()) > top) {
    std::snprintf(line, sizeof line, "  (%d more kernels)\n", int(r["kernels"].size()) - top);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-58s %9s %9s\n", "part", "launches", "ms");
  out += line;
  for (const auto& p : r["parts"]) {
    std::snprintf(line, sizeof line, "  %-58s %9.1f %9.3f\n", p["part"].get<std::string>().c_str(),
                  p["launches"].get<double>(), p["ms"].get<double>());
    out += line;
  }
  return out;
}

}  // namespace dendrite
