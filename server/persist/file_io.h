// File helpers of the value log: errors that name the file, writes and
// copies that go on after short transfers.
#ifndef TDOCK_SERVER_PERSIST_FILE_IO_H_
#define TDOCK_SERVER_PERSIST_FILE_IO_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tdock::persist {

// A failed system call on `path`: UNAVAILABLE (disk full, I/O error, ...),
// naming the file, what was done and the reason.
absl::Status IoError(absl::string_view what, absl::string_view path, int error);

// Writes all of `iov` at `offset` of `fd`, going on after short writes;
// `iov` is consumed (left empty on success). Errors name `path`.
absl::Status WriteAll(int fd, std::vector<iovec>& iov, int64_t offset, absl::string_view path);

// Copies the first `size` bytes of `in` to `out`: in the kernel where it can
// (copy_file_range; reflinks on file systems that share blocks), else
// through a buffer (another file system, an old kernel). 0 or an errno.
int CopyFile(int in, int out, int64_t size);

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_FILE_IO_H_
