// Minimal leveled logging to stderr, thread-safe per line.
//
//   TDOCK_LOG(INFO) << "listening on " << address;
//   TDOCK_LOG(ERROR) << status;
//
// The level threshold is set once at start-up (SetLogLevel); messages below it
// cost one branch. FATAL aborts after printing.
#ifndef TDOCK_COMMON_LOGGING_H_
#define TDOCK_COMMON_LOGGING_H_

#include <sstream>
#include <string_view>

namespace tdock {

enum class LogLevel { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3, FATAL = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

namespace internal {

class LogMessage final {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line; aborts for FATAL
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace internal
}  // namespace tdock

#define TDOCK_LOG(level)                                                  \
  if (::tdock::LogLevel::level < ::tdock::GetLogLevel()) {                \
  } else                                                                  \
    ::tdock::internal::LogMessage(::tdock::LogLevel::level, __FILE__,     \
                                  __LINE__)                               \
        .stream()

#define TDOCK_CHECK(cond) \
  if (cond) {             \
  } else                  \
    TDOCK_LOG(FATAL) << "Check failed: " #cond " "

#endif  // TDOCK_COMMON_LOGGING_H_
