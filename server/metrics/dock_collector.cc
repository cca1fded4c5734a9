#include "server/metrics/dock_collector.h"

#include <cstddef>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace tdock {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// The families of one scrape, in README order.
struct Families {
  MetricFamily docks{"tdock_docks", "Docks on the server.", MetricType::Gauge, {}};
  MetricFamily rows_per_step{"tdock_dock_rows_per_step",
                             "Rows of one step (num_prompts x n_samples_per_prompt).",
                             MetricType::Gauge, {}};
  MetricFamily steps_live{"tdock_steps_live",
                          "Steps written to and not yet released.",
                          MetricType::Gauge, {}};
  MetricFamily oldest_step{"tdock_oldest_live_step",
                           "The oldest live step (absent when none is live).",
                           MetricType::Gauge, {}};
  MetricFamily ready{"tdock_rows_ready",
                     "Rows of a live step whose cell of the column is written.",
                     MetricType::Gauge, {}};
  MetricFamily consumed{"tdock_rows_consumed",
                        "Rows of a live step handed out to the consumer.",
                        MetricType::Gauge, {}};
  MetricFamily available{
      "tdock_rows_available",
      "Rows of a live step with every column the consumer needs ready and "
      "not yet taken by it.",
      MetricType::Gauge, {}};
  MetricFamily written_total{"tdock_rows_written_total",
                             "Cells written since the dock was created.",
                             MetricType::Counter, {}};
  MetricFamily handed_out_total{"tdock_rows_handed_out_total",
                                "Rows handed out since the dock was created.",
                                MetricType::Counter, {}};
  MetricFamily dropped_total{"tdock_rows_dropped_total",
                             "Rows dropped since the dock was created, by reason (filtered, "
                             "failed, stale, sealed, expired, surplus, other, unused).",
                             MetricType::Counter, {}};
  MetricFamily steps_sealed{"tdock_steps_sealed", "Live steps that are sealed.",
                            MetricType::Gauge, {}};
  MetricFamily arena_used{"tdock_arena_bytes_used",
                          "Payload bytes held by live steps.", MetricType::Gauge, {}};
  MetricFamily arena_reserved{"tdock_arena_bytes_reserved",
                              "Bytes of arena chunks the dock's pool holds.",
                              MetricType::Gauge, {}};
  MetricFamily memory_limit{"tdock_memory_limit_bytes",
                            "The dock's memory limit (0: unlimited).",
                            MetricType::Gauge, {}};
  MetricFamily parked_gets{"tdock_parked_gets", "Gets waiting for rows.",
                           MetricType::Gauge, {}};
  MetricFamily parked_puts{"tdock_parked_puts",
                           "Puts waiting for a free partition or memory.",
                           MetricType::Gauge, {}};
  MetricFamily version{"tdock_dock_version",
                       "The dock's current policy version (set by the trainer).",
                       MetricType::Gauge, {}};
  MetricFamily staleness{"tdock_handed_out_staleness",
                         "Staleness (the dock's version minus the row's, when claimed) of the "
                         "rows with a version handed to the consumer.",
                         MetricType::Histogram, {}};
  MetricFamily stale_total{"tdock_rows_stale_total",
                           "Rows past the consumer's max_staleness: passed over (stale: leave) "
                           "or dropped (stale: drop).",
                           MetricType::Counter, {}};
  MetricFamily reservations{"tdock_reservations_live",
                            "Reservations granted and not yet past their deadline.",
                            MetricType::Gauge, {}};
  MetricFamily parked_reservations{"tdock_parked_reservations",
                                   "Reservations waiting for admission (producers held back).",
                                   MetricType::Gauge, {}};
  MetricFamily admission_waits{"tdock_admission_waits_total",
                               "Reservations granted after waiting for admission.",
                               MetricType::Counter, {}};
  MetricFamily admission_wait_seconds{"tdock_admission_wait_seconds_total",
                                      "Seconds reservations waited for admission.",
                                      MetricType::Counter, {}};
  // Consumers with leases only.
  MetricFamily leases{"tdock_leases_in_flight",
                      "Leases handed out and not yet acknowledged.",
                      MetricType::Gauge, {}};
  MetricFamily rows_in_flight{"tdock_rows_in_flight",
                              "Rows handed out under a lease and not yet acknowledged.",
                              MetricType::Gauge, {}};
  MetricFamily expiries{"tdock_lease_expiries_total",
                        "Leases that expired unacknowledged (their rows were "
                        "handed out again).",
                        MetricType::Counter, {}};
  MetricFamily nacks{"tdock_lease_nacks_total", "Leases handed back by Nack.",
                     MetricType::Counter, {}};
  MetricFamily returned{"tdock_rows_returned_total",
                        "Rows handed back by expired or nacked leases, to be "
                        "handed out again.",
                        MetricType::Counter, {}};
};

void Add(MetricFamily& family, std::vector<ClientMetric::Label> labels,
         double value) {
  ClientMetric& metric = family.metric.emplace_back();
  metric.label = std::move(labels);
  if (family.type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
}

// Per-name values (columns or consumers), one sample each.
void AddPer(MetricFamily& family, const std::string& dock, const char* key,
            const std::vector<std::string>& names,
            const std::vector<int64_t>& values, const std::string* step) {
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    std::vector<ClientMetric::Label> labels{{"dock", dock}};
    if (step != nullptr) labels.push_back({"step", *step});
    labels.push_back({key, names[i]});
    Add(family, std::move(labels), static_cast<double>(values[i]));
  }
}

void AddDock(const DockStats& stats, Families& f) {
  const std::string& dock = stats.name;
  Add(f.rows_per_step, {{"dock", dock}}, static_cast<double>(stats.rows_per_step));
  Add(f.steps_live, {{"dock", dock}}, static_cast<double>(stats.steps.size()));
  if (!stats.steps.empty()) {  // oldest first
    Add(f.oldest_step, {{"dock", dock}}, static_cast<double>(stats.steps[0].step));
  }
  for (const StepStats& step : stats.steps) {
    const std::string s = absl::StrCat(step.step);
    AddPer(f.ready, dock, "column", stats.columns, step.ready_rows, &s);
    AddPer(f.consumed, dock, "consumer", stats.consumers, step.consumed_rows, &s);
    AddPer(f.available, dock, "consumer", stats.consumers, step.available_rows, &s);
  }
  AddPer(f.written_total, dock, "column", stats.columns, stats.rows_written_total,
         nullptr);
  AddPer(f.handed_out_total, dock, "consumer", stats.consumers,
         stats.rows_handed_out_total, nullptr);
  // Every reason, zero or not: a rate over a counter needs its series from
  // the start.
  for (DropReason reason : AllDropReasons()) {
    Add(f.dropped_total, {{"dock", dock}, {"reason", std::string(DropReasonName(reason))}},
        static_cast<double>(stats.rows_dropped_total[static_cast<int>(reason)]));
  }
  int64_t sealed = 0;
  for (const StepStats& step : stats.steps) sealed += step.sealed;
  Add(f.steps_sealed, {{"dock", dock}}, static_cast<double>(sealed));
  Add(f.arena_used, {{"dock", dock}}, static_cast<double>(stats.arena_bytes_used));
  Add(f.arena_reserved, {{"dock", dock}},
      static_cast<double>(stats.arena_bytes_reserved));
  Add(f.memory_limit, {{"dock", dock}},
      static_cast<double>(stats.memory_limit_bytes));
  AddPer(f.parked_gets, dock, "consumer", stats.consumers, stats.waiters, nullptr);
  Add(f.parked_puts, {{"dock", dock}}, static_cast<double>(stats.parked_puts));
  Add(f.version, {{"dock", dock}}, static_cast<double>(stats.version));
  Add(f.reservations, {{"dock", dock}}, static_cast<double>(stats.reservations_live));
  Add(f.parked_reservations, {{"dock", dock}}, static_cast<double>(stats.reservations_parked));
  Add(f.admission_waits, {{"dock", dock}}, static_cast<double>(stats.admission_waits_total));
  Add(f.admission_wait_seconds, {{"dock", dock}}, stats.admission_wait_seconds_total);
  for (size_t k = 0; k < stats.consumers.size() && k < stats.staleness.size(); ++k) {
    const StalenessStats& staleness = stats.staleness[k];
    const std::vector<ClientMetric::Label> labels{{"dock", dock},
                                                  {"consumer", stats.consumers[k]}};
    ClientMetric& metric = f.staleness.metric.emplace_back();
    metric.label = labels;
    metric.histogram.sample_count = static_cast<uint64_t>(staleness.count);
    metric.histogram.sample_sum = static_cast<double>(staleness.sum);
    uint64_t cumulative = 0;
    for (size_t b = 0; b < staleness.buckets.size(); ++b) {
      cumulative += static_cast<uint64_t>(staleness.buckets[b]);
      ClientMetric::Bucket& bucket = metric.histogram.bucket.emplace_back();
      bucket.cumulative_count = cumulative;
      bucket.upper_bound = b < kStalenessBounds.size()
                               ? static_cast<double>(kStalenessBounds[b])
                               : std::numeric_limits<double>::infinity();
    }
    Add(f.stale_total, labels, static_cast<double>(staleness.stale_rows));
  }
  for (size_t k = 0; k < stats.consumers.size() && k < stats.lease_ms.size(); ++k) {
    if (stats.lease_ms[k] == 0) continue;
    const std::vector<ClientMetric::Label> labels{{"dock", dock},
                                                  {"consumer", stats.consumers[k]}};
    Add(f.leases, labels, static_cast<double>(stats.leases_in_flight[k]));
    Add(f.rows_in_flight, labels, static_cast<double>(stats.rows_in_flight[k]));
    Add(f.expiries, labels, static_cast<double>(stats.lease_expiries_total[k]));
    Add(f.nacks, labels, static_cast<double>(stats.lease_nacks_total[k]));
    Add(f.returned, labels, static_cast<double>(stats.rows_returned_total[k]));
  }
}

}  // namespace

std::vector<MetricFamily> DockCollector::Collect() const {
  const std::vector<DockStats> docks = source_();
  Families f;
  Add(f.docks, {}, static_cast<double>(docks.size()));
  for (const DockStats& stats : docks) AddDock(stats, f);
  return {std::move(f.docks),         std::move(f.rows_per_step),
          std::move(f.steps_live),    std::move(f.oldest_step),
          std::move(f.ready),         std::move(f.consumed),
          std::move(f.available),     std::move(f.written_total),
          std::move(f.handed_out_total), std::move(f.dropped_total),
          std::move(f.steps_sealed),  std::move(f.arena_used),
          std::move(f.arena_reserved),   std::move(f.memory_limit),
          std::move(f.parked_gets),   std::move(f.parked_puts),
          std::move(f.version),       std::move(f.staleness),
          std::move(f.stale_total),   std::move(f.reservations),
          std::move(f.parked_reservations), std::move(f.admission_waits),
          std::move(f.admission_wait_seconds),
          std::move(f.leases),        std::move(f.rows_in_flight),
          std::move(f.expiries),      std::move(f.nacks),
          std::move(f.returned)};
}

DockCollector::Source RegistrySource(DockRegistry* registry) {
  return [registry] {
    std::vector<DockStats> out;
    for (const std::shared_ptr<Dock>& dock : registry->List()) {
      out.push_back(dock->Stats());
    }
    return out;
  };
}

}  // namespace tdock
