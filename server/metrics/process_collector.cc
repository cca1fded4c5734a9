#include "server/metrics/process_collector.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"

namespace tdock {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily One(std::string name, std::string help, MetricType type,
                 double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return MetricFamily{std::move(name), std::move(help), type, {metric}};
}

// Fields of /proc/self/stat after the command name, numbered as in proc(5):
// fields[0] is field 3 (state).
std::optional<std::vector<std::string>> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t close = line.rfind(')');  // the command may hold spaces
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  return std::vector<std::string>(std::istream_iterator<std::string>(rest), {});
}

double Num(const std::string& field) {
  double value = 0;
  return absl::SimpleAtod(field, &value) ? value : 0;
}

std::optional<double> BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::nullopt;
}

void AddProcStat(std::vector<MetricFamily>& out) {
  const std::optional<std::vector<std::string>> f = StatFields();
  // utime = field 14, stime = 15, starttime = 22, rss = 24 (pages).
  if (!f.has_value() || f->size() < 22) return;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double cpu = (Num((*f)[11]) + Num((*f)[12])) / ticks;
  out.push_back(One("tdock_process_cpu_seconds_total",
                    "User and system CPU time of the server.",
                    MetricType::Counter, cpu));
  const double rss = Num((*f)[21]) * static_cast<double>(sysconf(_SC_PAGESIZE));
  out.push_back(One("tdock_process_resident_memory_bytes",
                    "Resident set size of the server.", MetricType::Gauge, rss));
  if (const std::optional<double> boot = BootTimeSeconds()) {
    out.push_back(One("tdock_process_start_time_seconds",
                      "Start time of the server, seconds since the epoch.",
                      MetricType::Gauge, *boot + Num((*f)[19]) / ticks));
  }
}

}  // namespace

std::vector<MetricFamily> ProcessCollector::Collect() const {
  std::vector<MetricFamily> out;
  AddProcStat(out);
  std::error_code error;
  std::filesystem::directory_iterator fds("/proc/self/fd", error);
  if (!error) {
    const auto open = std::distance(fds, std::filesystem::directory_iterator());
    out.push_back(One("tdock_process_open_fds", "Open file descriptors.",
                      MetricType::Gauge, static_cast<double>(open)));
  }
  out.push_back(One("tdock_uptime_seconds", "Seconds since the server started.",
                    MetricType::Gauge,
                    absl::ToDoubleSeconds(absl::Now() - started_)));
  out.push_back(One("tdock_build_info", "Always 1; the server's version.",
                    MetricType::Gauge, 1, {{"version", version_}}));
  return out;
}

}  // namespace tdock
