#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tdock {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::INFO)};

const char* LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::DEBUG: return "D";
    case LogLevel::INFO: return "I";
    case LogLevel::WARNING: return "W";
    case LogLevel::ERROR: return "E";
    case LogLevel::FATAL: return "F";
  }
  return "?";
}

}  // namespace

// relaxed: the level is a setting, not a synchronization point.
void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
LogLevel GetLogLevel() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << LevelLetter(level) << ' '
          << absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(),
                              absl::UTCTimeZone())
          << ' ' << (base ? base + 1 : file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One fwrite per line keeps lines whole across threads.
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (level_ == LogLevel::FATAL) {
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace internal
}  // namespace tdock
