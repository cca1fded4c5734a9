#include "server/persist/file_io.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tdock::persist {

absl::Status IoError(absl::string_view what, absl::string_view path, int error) {
  return absl::UnavailableError(
      absl::StrCat("value log: ", what, " '", path, "': ", std::strerror(error)));
}

absl::Status WriteAll(int fd, std::vector<iovec>& iov, int64_t offset, absl::string_view path) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = pwritev(fd, iov.data() + first, count, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write", path, errno);
    }
    offset += n;
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      iovec& v = iov[first];
      const size_t take = std::min(left, v.iov_len);
      v.iov_base = static_cast<char*>(v.iov_base) + take;
      v.iov_len -= take;
      left -= take;
      if (v.iov_len == 0) ++first;
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
  iov.clear();
  return absl::OkStatus();
}

int CopyFile(int in, int out, int64_t size) {
  loff_t offset = 0;
  while (offset < size) {
    const ssize_t n =
        copy_file_range(in, &offset, out, nullptr, static_cast<size_t>(size - offset), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
      break;  // by hand from `offset` on
    }
    return n == 0 ? EIO : errno;
  }
  std::vector<char> buffer(size_t{1} << 20);
  while (offset < size) {
    const ssize_t n = pread(in, buffer.data(),
                            static_cast<size_t>(std::min<int64_t>(buffer.size(), size - offset)),
                            offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EIO : errno;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = pwrite(out, buffer.data() + done, static_cast<size_t>(n - done),
                               offset + done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w == 0 ? EIO : errno;
      done += w;
    }
    offset += n;
  }
  return 0;
}

}  // namespace tdock::persist
