// Reading whole files with errors that name the file.
#ifndef TDOCK_COMMON_FILES_H_
#define TDOCK_COMMON_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace tdock {

// The bytes of the file at `path`. NOT_FOUND "cannot open '<path>': <reason>"
// if it cannot be opened; INVALID_ARGUMENT if reading fails.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace tdock

#endif  // TDOCK_COMMON_FILES_H_
