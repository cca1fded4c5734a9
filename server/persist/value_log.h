// ValueLog: where the RocksDB store keeps large values (cells), so that each
// is written to disk once. RocksDB would write a value twice, into its WAL
// and again into an SST file when the memtable is flushed, and copy it into
// a WriteBatch and a memtable on the way; a cell of token data written here
// costs one pwritev from the dock's arena into the page cache and its share
// of one fdatasync per group commit, and RocksDB holds only a small pointer.
//
// The log is a directory of fixed-size segment files, <id>.vlog, allocated
// in full (fallocate) when created. Each value belongs to a group (the
// store's: a dock), and each group appends to a segment of its own (a value
// never spans two), a piece at a time with its writeback started at once:
// one dock's long-lived step cannot keep segments full of other docks'
// released cells from being reused. A segment none of whose values is referenced any more is
// recycled: its file is written over from the start, which costs the disk
// less than a fresh file. Up to Options::spare_segments such files are
// kept; more are removed.
//
// Who references what is the caller's to say (the store's index of pointer
// keys): Live(ref) when a pointer is stored, Dead(ref) when it is deleted or
// overwritten, Durable() once those deletions are durable. A segment is
// reused only after Durable(), so a pointer that may survive a crash never
// points into bytes written over.
//
// Append makes its values durable (fdatasync) before it returns, always: the
// store writes the pointers afterwards, so no stored pointer, synced or not,
// can refer to bytes that a crash lost.
//
// Thread safety: none; the store calls it under its own lock.
#ifndef TDOCK_SERVER_PERSIST_VALUE_LOG_H_
#define TDOCK_SERVER_PERSIST_VALUE_LOG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tdock::persist {

// Where a value is: segment, byte offset, length, and the CRC-32C of its
// bytes (checked when it is read back). Encoded as 28 bytes.
struct ValueRef {
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc = 0;

  static constexpr size_t kEncodedBytes = 28;
  void EncodeTo(char out[kEncodedBytes]) const;
  static bool Decode(absl::string_view bytes, ValueRef& ref);
};

class ValueLog {
 public:
  static constexpr int64_t kMaxSegmentBytes = int64_t{1} << 30;  // CRC lengths are int
  struct Options {
    int64_t segment_bytes = int64_t{64} << 20;
    int spare_segments = 16;  // recycled files kept at most (1 GiB)
  };

  // Opens (creating it if missing) the log in `dir`; every *.vlog file in
  // it is a segment whose values may be referenced. Until FinishRecovery
  // nothing is recycled.
  static absl::StatusOr<std::unique_ptr<ValueLog>> Open(const std::string& dir, Options options);
  ~ValueLog();
  ValueLog(const ValueLog&) = delete;
  ValueLog& operator=(const ValueLog&) = delete;

  struct Value {
    absl::string_view group;  // values of a group share segments
    absl::string_view bytes;
  };
  // Writes `values` (each at most options.segment_bytes) and fdatasyncs them;
  // returns where each went, in order.
  absl::StatusOr<std::vector<ValueRef>> Append(const std::vector<Value>& values);
  // Reads a value into `out`. DATA_LOSS naming the segment when the value
  // is not there (a missing or short segment file) or its bytes do not match
  // their checksum.
  absl::Status Read(const ValueRef& ref, std::string& out) const;

  // `group`: the value's group, when known (the recovery scan). After
  // FinishRecovery each group appends after its last live value again.
  void Live(const ValueRef& ref, absl::string_view group = {});
  void Dead(const ValueRef& ref);
  // The deletions reported so far are durable: segments without a live
  // value become spare, and a group with no live value starts its segment
  // over.
  void Durable();
  // Every key of the groups within [begin, end) was deleted (a dock): they
  // give up their segments (reused once nothing live is left in them).
  void DropGroups(absl::string_view begin, absl::string_view end);
  // After a recovery scan reported every live value: all other segments
  // become spare, and each group whose live values the scan named appends
  // right after the last of them, in the newest segment holding its values
  // and no other group's (bytes after the last live value belong to no
  // stored pointer), so restarts do not leave a segment each behind. Other
  // groups append to a new segment.
  void FinishRecovery();

  // Copies every segment holding a live value into `dir` (created).
  absl::Status CopyTo(const std::string& dir) const;

  struct Stats {
    int64_t segments = 0;  // files
    int64_t spare = 0;     // of which recycled, waiting to be written over
    int64_t live_bytes = 0;
    int64_t recycled = 0;  // times a spare file was written over
  };
  Stats stats() const;

 private:
  struct Segment {
    int fd = -1;
    int64_t size = 0;        // of the file
    int64_t live_bytes = 0;  // referenced by stored pointers
    int64_t live_values = 0;
    bool spare = false;
    bool active = false;  // a group appends to it
    std::string group;    // which, while active
    // Recovery: the end of its last live value, and the group of its live
    // values ("" if not known or several).
    int64_t tail = 0;
    std::string recovered_group;
    bool mixed = false;
  };
  struct Active {
    uint64_t segment = 0;
    int64_t offset = 0;  // where the group's next value goes
  };
  ValueLog(std::string dir, int dir_fd, Options options);
  std::string PathOf(uint64_t id) const;
  // Gives `group` its next segment: a spare one, or a new file.
  absl::Status Roll(const std::string& group);
  // The segment's group appends elsewhere from now on.
  void Deactivate(uint64_t id);
  void MaybeRetire(uint64_t id);

  const std::string dir_;
  const int dir_fd_;
  const Options options_;
  std::map<uint64_t, Segment> segments_;
  uint64_t next_id_ = 1;
  std::map<std::string, Active> groups_;
  bool recovering_ = true;
  std::vector<uint64_t> maybe_free_;  // live count reached 0, not yet durable
  int64_t recycled_ = 0;
};

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_VALUE_LOG_H_
