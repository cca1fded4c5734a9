// Helpers shared by the store and value-log tests: temporary directories,
// the value log's files, and deterministic values.
#ifndef TDOCK_TESTS_PERSIST_PERSIST_TEST_UTIL_H_
#define TDOCK_TESTS_PERSIST_PERSIST_TEST_UTIL_H_

#include <dirent.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tdock::persist {

// A new directory under the test's temporary directory.
inline std::string TempDir(const std::string& name) {
  std::string pattern = ::testing::TempDir() + "/tdock_" + name + "_XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

inline void RemoveDir(const std::string& dir) {
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

// The value log's segment files in `dir`.
inline std::vector<std::string> SegmentFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* listing = opendir(dir.c_str())) {
    while (const dirent* entry = readdir(listing)) {
      if (absl::EndsWith(entry->d_name, ".vlog")) files.push_back(dir + "/" + entry->d_name);
    }
    closedir(listing);
  }
  return files;
}

// A value of `size` bytes that differs with `seed`.
inline std::string Value(int64_t size, int seed) {
  std::string v(size, '\0');
  for (int64_t i = 0; i < size; ++i) v[i] = static_cast<char>((i * 131 + seed * 7919) & 0xff);
  return v;
}

}  // namespace tdock::persist

#endif  // TDOCK_TESTS_PERSIST_PERSIST_TEST_UTIL_H_
