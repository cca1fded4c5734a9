#include "server/persist/value_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "isa-l/crc.h"
#include "server/persist/file_io.h"
#include "common/status.h"

namespace tdock::persist {
namespace {

constexpr absl::string_view kSuffix = ".vlog";
constexpr int64_t kWritePiece = int64_t{1} << 20;  // written, then its writeback started

void PutU64(char* out, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
}
uint64_t GetU64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

// CRC-32C (Castagnoli, as iSCSI and ext4 use it) of `data`, by Intel's
// ISA-L, which picks the fastest instructions the CPU has (tens of GB/s;
// Debian's RocksDB carries only a portable one, ~1 GB/s). Values are at
// most a segment (<= 1 GiB), so `int` lengths do.
uint32_t Crc32c(absl::string_view data) {
  return crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data())),
                     static_cast<int>(data.size()), 0xffffffffu) ^
         0xffffffffu;
}

}  // namespace

void ValueRef::EncodeTo(char out[kEncodedBytes]) const {
  PutU64(out, segment);
  PutU64(out + 8, offset);
  PutU64(out + 16, length);
  for (int i = 0; i < 4; ++i) out[24 + i] = static_cast<char>((crc >> (8 * (3 - i))) & 0xff);
}

bool ValueRef::Decode(absl::string_view bytes, ValueRef& ref) {
  if (bytes.size() != kEncodedBytes) return false;
  ref.segment = GetU64(bytes.data());
  ref.offset = GetU64(bytes.data() + 8);
  ref.length = GetU64(bytes.data() + 16);
  ref.crc = 0;
  for (int i = 0; i < 4; ++i) ref.crc = (ref.crc << 8) | static_cast<unsigned char>(bytes[24 + i]);
  return true;
}

absl::StatusOr<std::unique_ptr<ValueLog>> ValueLog::Open(const std::string& dir,
                                                         Options options) {
  if (options.segment_bytes <= 0 || options.segment_bytes > kMaxSegmentBytes ||
      options.spare_segments < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value log: segment_bytes must be 1..", kMaxSegmentBytes,
        " and spare_segments not negative, got ",
        options.segment_bytes, " and ", options.spare_segments));
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("cannot create the directory", dir, errno);
  }
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return IoError("cannot open the directory", dir, errno);
  std::unique_ptr<ValueLog> log(new ValueLog(dir, dir_fd, options));
  const int listing_fd = dup(dir_fd);
  DIR* listing = listing_fd < 0 ? nullptr : fdopendir(listing_fd);
  if (listing == nullptr) {
    const int error = errno;
    if (listing_fd >= 0) close(listing_fd);
    return IoError("cannot list", dir, error);
  }
  std::vector<uint64_t> ids;
  while (const dirent* entry = readdir(listing)) {
    absl::string_view name = entry->d_name;
    uint64_t id = 0;
    if (absl::ConsumeSuffix(&name, kSuffix) && name.size() == 16 &&
        absl::SimpleHexAtoi(name, &id) && id != 0) {
      ids.push_back(id);
    }
  }
  closedir(listing);
  for (uint64_t id : ids) {
    const std::string path = log->PathOf(id);
    Segment segment;
    segment.fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (segment.fd < 0) return IoError("cannot open", path, errno);
    struct stat st;
    if (fstat(segment.fd, &st) != 0) {
      const int error = errno;
      close(segment.fd);
      return IoError("cannot stat", path, error);
    }
    segment.size = st.st_size;
    log->segments_.emplace(id, segment);
    log->next_id_ = std::max(log->next_id_, id + 1);
  }
  return log;
}

ValueLog::ValueLog(std::string dir, int dir_fd, Options options)
    : dir_(std::move(dir)), dir_fd_(dir_fd), options_(options) {}

ValueLog::~ValueLog() {
  for (auto& [id, segment] : segments_) close(segment.fd);
  close(dir_fd_);
}

std::string ValueLog::PathOf(uint64_t id) const {
  return absl::StrFormat("%s/%016x%s", dir_, id, kSuffix);
}

absl::Status ValueLog::Roll(const std::string& group) {
  if (const auto it = groups_.find(group); it != groups_.end()) Deactivate(it->second.segment);
  uint64_t id = 0;
  for (auto& [candidate, segment] : segments_) {
    if (segment.spare) {
      segment.spare = false;
      id = candidate;
      ++recycled_;
      break;
    }
  }
  if (id == 0) {
    id = next_id_;
    const std::string path = PathOf(id);
    Segment segment;
    segment.fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (segment.fd < 0) return IoError("cannot create", path, errno);
    // The whole size at once, and the file's existence, made durable now:
    // later fdatasyncs then carry data and extent conversions only.
    int error = posix_fallocate(segment.fd, 0, options_.segment_bytes);
    if (error == 0 && fsync(segment.fd) != 0) error = errno;
    if (error == 0 && fsync(dir_fd_) != 0) error = errno;
    if (error != 0) {
      close(segment.fd);
      unlink(path.c_str());
      return IoError("cannot allocate", path, error);
    }
    segment.size = options_.segment_bytes;
    ++next_id_;
    segments_.emplace(id, segment);
  }
  Segment& segment = segments_.at(id);
  segment.group = group;
  segment.active = true;
  groups_[group] = {id, 0};
  return absl::OkStatus();
}

void ValueLog::Deactivate(uint64_t id) {
  Segment& segment = segments_.at(id);
  groups_.erase(segment.group);
  segment.active = false;
  segment.group.clear();
  maybe_free_.push_back(id);  // reused once its deletions are durable
}

absl::StatusOr<std::vector<ValueRef>> ValueLog::Append(const std::vector<Value>& values) {
  std::vector<ValueRef> refs;
  refs.reserve(values.size());
  std::set<uint64_t> written;
  // The run being gathered: values going one after another into one segment.
  std::vector<iovec> iov;
  uint64_t run_segment = 0;
  int64_t run_offset = 0;
  int64_t run_end = 0;
  // Writes the run and starts its writeback at once, so the disk writes one
  // piece while the next is copied and fdatasync waits only for the last.
  auto flush = [&]() -> absl::Status {
    if (iov.empty()) return absl::OkStatus();
    written.insert(run_segment);
    const int fd = segments_.at(run_segment).fd;
    TDOCK_RETURN_IF_ERROR(WriteAll(fd, iov, run_offset, PathOf(run_segment)));
    // Only a hint: file systems without it (EINVAL, ENOSYS) are synced by
    // the fdatasync below all the same.
    if (sync_file_range(fd, run_offset, run_end - run_offset, SYNC_FILE_RANGE_WRITE) != 0 &&
        errno != EINVAL && errno != ENOSYS && errno != ESPIPE) {
      return IoError("cannot start writing back", PathOf(run_segment), errno);
    }
    run_offset = run_end;
    return absl::OkStatus();
  };
  for (const Value& value : values) {
    const int64_t size = static_cast<int64_t>(value.bytes.size());
    if (size > options_.segment_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("value log: a value of ", size,
                                                     " bytes is larger than a segment (",
                                                     options_.segment_bytes, ")"));
    }
    const std::string group(value.group);
    auto it = groups_.find(group);
    if (it == groups_.end() || it->second.offset + size > segments_.at(it->second.segment).size) {
      TDOCK_RETURN_IF_ERROR(Roll(group));
      it = groups_.find(group);
    }
    Active& active = it->second;
    if (active.segment != run_segment || active.offset != run_end) {
      TDOCK_RETURN_IF_ERROR(flush());
      run_segment = active.segment;
      run_offset = run_end = active.offset;
    }
    iov.push_back({const_cast<char*>(value.bytes.data()), value.bytes.size()});
    refs.push_back({active.segment, static_cast<uint64_t>(active.offset),
                    static_cast<uint64_t>(size), Crc32c(value.bytes)});
    active.offset += size;
    run_end = active.offset;
    if (run_end - run_offset >= kWritePiece) TDOCK_RETURN_IF_ERROR(flush());
  }
  TDOCK_RETURN_IF_ERROR(flush());
  for (uint64_t id : written) {
    if (fdatasync(segments_.at(id).fd) != 0) return IoError("cannot sync", PathOf(id), errno);
  }
  return refs;
}

absl::Status ValueLog::Read(const ValueRef& ref, std::string& out) const {
  const auto it = segments_.find(ref.segment);
  if (it == segments_.end()) {
    return absl::DataLossError(
        absl::StrCat("value log: segment ", PathOf(ref.segment), " is missing"));
  }
  if (ref.offset > static_cast<uint64_t>(it->second.size) ||
      ref.length > static_cast<uint64_t>(it->second.size) - ref.offset) {
    return absl::DataLossError(absl::StrCat("value log: a value of ", ref.length, " bytes at ",
                                            ref.offset, " is past the end of ",
                                            PathOf(ref.segment), " (", it->second.size,
                                            " bytes)"));
  }
  out.resize(ref.length);
  for (uint64_t done = 0; done < ref.length;) {
    const ssize_t n =
        pread(it->second.fd, out.data() + done, ref.length - done, ref.offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return n == 0 ? absl::DataLossError(absl::StrCat("value log: ", PathOf(ref.segment),
                                                       " ends early"))
                    : IoError("cannot read", PathOf(ref.segment), errno);
    }
    done += static_cast<uint64_t>(n);
  }
  if (Crc32c(out) != ref.crc) {
    return absl::DataLossError(absl::StrCat("value log: a value of ", ref.length, " bytes at ",
                                            ref.offset, " in ", PathOf(ref.segment),
                                            " does not match its checksum"));
  }
  return absl::OkStatus();
}

void ValueLog::Live(const ValueRef& ref, absl::string_view group) {
  // A pointer into a missing segment (Read reports it) keeps its id from
  // being given to a new segment.
  next_id_ = std::max(next_id_, ref.segment + 1);
  const auto it = segments_.find(ref.segment);
  if (it == segments_.end()) return;  // Read reports it
  Segment& segment = it->second;
  segment.live_bytes += static_cast<int64_t>(ref.length);
  ++segment.live_values;
  if (!recovering_) return;
  segment.tail = std::max(segment.tail, static_cast<int64_t>(ref.offset + ref.length));
  if (group.empty() || (segment.live_values > 1 && segment.recovered_group != group)) {
    segment.mixed = true;
  }
  segment.recovered_group = std::string(group);
}

void ValueLog::Dead(const ValueRef& ref) {
  const auto it = segments_.find(ref.segment);
  if (it == segments_.end()) return;
  it->second.live_bytes -= static_cast<int64_t>(ref.length);
  // An active segment that empties is rewound in Durable instead.
  if (--it->second.live_values == 0 && !it->second.active) maybe_free_.push_back(ref.segment);
}

void ValueLog::Durable() {
  std::vector<uint64_t> ids;
  ids.swap(maybe_free_);
  for (uint64_t id : ids) MaybeRetire(id);
  // A group whose values are all dead, durably, starts its segment over:
  // a dock that releases each step before writing the next keeps one file.
  for (auto& [group, active] : groups_) {
    if (segments_.at(active.segment).live_values == 0) active.offset = 0;
  }
}

void ValueLog::DropGroups(absl::string_view begin, absl::string_view end) {
  std::vector<uint64_t> dropped;
  for (auto it = groups_.lower_bound(std::string(begin));
       it != groups_.end() && it->first < end; ++it) {
    // Every key of the group is in [begin, end): it writes no more.
    std::string group_end = it->first;
    while (!group_end.empty() && static_cast<unsigned char>(group_end.back()) == 0xff) {
      group_end.pop_back();
    }
    if (group_end.empty()) continue;  // the unnamed group: never dropped
    group_end.back() = static_cast<char>(group_end.back() + 1);
    if (group_end <= end) dropped.push_back(it->second.segment);
  }
  for (uint64_t id : dropped) Deactivate(id);
}

void ValueLog::FinishRecovery() {
  recovering_ = false;
  std::vector<uint64_t> ids;
  for (auto& [id, segment] : segments_) {
    ids.push_back(id);
    // Ids ascend: a group's newest segment comes last and wins.
    if (segment.live_values > 0 && !segment.mixed && segment.tail < segment.size) {
      if (const auto it = groups_.find(segment.recovered_group); it != groups_.end()) {
        Segment& older = segments_.at(it->second.segment);
        older.active = false;
        older.group.clear();
      }
      segment.active = true;
      segment.group = segment.recovered_group;
      groups_[segment.group] = {id, segment.tail};
    }
    segment.recovered_group.clear();
  }
  for (uint64_t id : ids) MaybeRetire(id);
}

void ValueLog::MaybeRetire(uint64_t id) {
  const auto it = segments_.find(id);
  if (recovering_ || it == segments_.end() || it->second.active || it->second.spare ||
      it->second.live_values != 0) {
    return;
  }
  const int64_t spares = std::count_if(segments_.begin(), segments_.end(),
                                       [](const auto& s) { return s.second.spare; });
  if (spares < options_.spare_segments && it->second.size == options_.segment_bytes) {
    it->second.spare = true;
    return;
  }
  close(it->second.fd);
  unlink(PathOf(id).c_str());  // if it stays after a crash, it is spare then
  segments_.erase(it);
}

absl::Status ValueLog::CopyTo(const std::string& dir) const {
  if (mkdir(dir.c_str(), 0755) != 0) return IoError("cannot create the directory", dir, errno);
  for (const auto& [id, segment] : segments_) {
    if (segment.live_values == 0) continue;
    const std::string path = absl::StrFormat("%s/%016x%s", dir, id, kSuffix);
    const int out = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) return IoError("cannot create", path, errno);
    int error = CopyFile(segment.fd, out, segment.size);
    if (error == 0 && fsync(out) != 0) error = errno;
    close(out);
    if (error != 0) return IoError("cannot copy to", path, error);
  }
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return IoError("cannot open the directory", dir, errno);
  const int error = fsync(dir_fd) != 0 ? errno : 0;
  close(dir_fd);
  return error != 0 ? IoError("cannot sync the directory", dir, error) : absl::OkStatus();
}

ValueLog::Stats ValueLog::stats() const {
  Stats stats;
  for (const auto& [id, segment] : segments_) {
    ++stats.segments;
    stats.spare += segment.spare;
    stats.live_bytes += segment.live_bytes;
  }
  stats.recycled = recycled_;
  return stats;
}

}  // namespace tdock::persist
