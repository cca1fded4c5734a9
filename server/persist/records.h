// The records a dock leaves in the store (DESIGN.md §7): their keys and the
// encodings of their values.
//
// What is stored, and under which keys (bytewise ordered; dock names hold no
// NUL, so "\0" ends them; numbers are big-endian):
//   S <dock>                                    the dock's spec (tdock.v1.DockSpec)
//   D <dock> \0 <step:8> b <row:8>              a row's key (its bytes)
//   D <dock> \0 <step:8> c <column:4> <row:8>   a cell's bytes
//   D <dock> \0 <step:8> h <consumer:4> <id:8>  rows handed out by one Get:
//                                               <lease:8> then <unit:8>...
//   D <dock> \0 <step:8> r <consumer:4> <round:8>   a BALANCED round, all shares
//   D <dock> \0 <step:8> d <consumer:4> <round:8> <taker:4>   its delivery to a
//                                               rank (with replicas, to a rank's
//                                               replica: rank x replicas +
//                                               replica): <lease:8>
//   D <dock> \0 <step:8> k <lease:8>            a lease acknowledged
//   D <dock> \0 <step:8> v <row:8> <version:8>  a version a write of the row carried
//                                               (empty; the lowest counts)
//   D <dock> \0 <step:8> p <put id:8>           a Put's answer, kept for a Put sent
//                                               again with its writer's id:
//                                               <fingerprint:8> <rows:8> <bytes:8>
//                                               <assigned row:8>...
//   D <dock> \0 <step:8> R <id:8>               rows reserved before generation:
//                                               <version:8> <deadline unix ms:8> <row:8>...
//   D <dock> \0 <step:8> x <seq:8>              rows dropped (or the step sealed):
//                                               <reason:1> <seal:1> then <row:8>...
//   D <dock> \0 <step:8> C                      rows (dropped as carried) still to be
//                                               written into step + 1, and the units
//                                               of them each consumer took (EncodeCarry);
//                                               deleted by the Put that writes them
//   D <dock> \0 <step:8> o <from:8> <consumer:4>   units of rows carried from step
//                                               `from` that count as done for the
//                                               consumer: <unit:8>...
//   V <dock> \0 <version:8>                     the dock's version (empty; the
//                                               highest counts)
//   T <dock> \0 <step:8>                        the step was released
//   E                                           the server's epoch: <epoch:8>,
//                                               raised at every start
// Releasing a step deletes its D range in one range delete and writes its
// T key, so a record that lands after the release is ignored at recovery.
#ifndef TDOCK_SERVER_PERSIST_RECORDS_H_
#define TDOCK_SERVER_PERSIST_RECORDS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/dock/journal_hook.h"

namespace tdock::persist::records {

// Appends the low `bytes` bytes of `v`, big-endian.
void PutBe(std::string& out, uint64_t v, int bytes);

// Reads big-endian numbers off the front of a string view.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  bool Read(uint64_t& v, int bytes) {
    if (data_.size() < static_cast<size_t>(bytes)) return false;
    v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(data_[i]);
    data_.remove_prefix(bytes);
    return true;
  }
  bool ReadI64(int64_t& v) {
    uint64_t u = 0;
    if (!Read(u, 8)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool ReadDouble(double& d) {
    uint64_t u = 0;
    if (!Read(u, 8)) return false;
    std::memcpy(&d, &u, sizeof d);
    return true;
  }
  bool Byte(char& c) {
    if (data_.empty()) return false;
    c = data_[0];
    data_.remove_prefix(1);
    return true;
  }
  absl::string_view rest() const { return data_; }
  bool done() const { return data_.empty(); }

 private:
  absl::string_view data_;
};

inline constexpr char kEpochKey[] = "E";
// What the data dir's docks store as a cell (CellFormName): a controller's
// docks hold locations, a standalone server's the bytes. Absent in a data
// dir written before it was kept: bytes.
inline constexpr char kCellFormKey[] = "F";
// Lease ids of epoch e start at e << kEpochShift (below 2^63: hand-outs
// without a lease use the upper half of the ids).
inline constexpr int kEpochShift = 40;
inline constexpr uint64_t kMaxEpoch = (uint64_t{1} << (63 - kEpochShift)) - 1;

std::string SpecKey(absl::string_view dock);
// Every record of the dock's steps starts with it; the step's with StepPrefix.
std::string DockPrefix(absl::string_view dock);
std::string StepPrefix(absl::string_view dock, int64_t step);
// Every release record of the dock starts with it.
std::string TombPrefix(absl::string_view dock);
std::string TombKey(absl::string_view dock, int64_t step);
// The end of the range of keys that start with `prefix`.
std::string PrefixEnd(std::string prefix);

std::string CellKey(absl::string_view dock, int64_t step, int column, int64_t row);
std::string KeyKey(absl::string_view dock, int64_t step, int64_t row);
// The dock's policy version: one key per version set, the highest counts
// (each write removes the lower ones).
std::string DockVersionPrefix(absl::string_view dock);
std::string DockVersionKey(absl::string_view dock, int64_t version);
// A version a write of the row carried (empty value; the row's version is
// the lowest of its records).
std::string VersionKey(absl::string_view dock, int64_t step, int64_t row, int64_t version);
std::string HandOutKey(absl::string_view dock, int64_t step, int consumer, uint64_t id);
std::string RoundKey(absl::string_view dock, int64_t step, int consumer, int64_t round);
std::string DeliveryKey(absl::string_view dock, int64_t step, int consumer, int64_t round,
                        int32_t rank);
std::string AckKey(absl::string_view dock, int64_t step, uint64_t lease);
std::string DropKey(absl::string_view dock, int64_t step, uint64_t seq);
std::string ReservationKey(absl::string_view dock, int64_t step, uint64_t id);
std::string PutIdKey(absl::string_view dock, int64_t step, uint64_t put_id);
std::string CarryKey(absl::string_view dock, int64_t step);
std::string CarriedDoneKey(absl::string_view dock, int64_t step, int64_t from, int consumer);
// A pending carry's value: <rows:8> <row:8>..., then per consumer that took
// some: <consumer:4> <units:8> <unit:8>.... DecodeCarry fills both; false
// if the value does not decode.
std::string EncodeCarry(const std::vector<int64_t>& rows, const std::vector<ConsumerUnits>& taken);
bool DecodeCarry(absl::string_view value, std::vector<int64_t>& rows,
                 std::vector<ConsumerUnits>& taken);
// A list of numbers (rows, units): 8 bytes each. DecodeNumbers appends to
// `out`; false if the value is not whole numbers.
std::string EncodeNumbers(const std::vector<int64_t>& numbers);
bool DecodeNumbers(absl::string_view value, std::vector<int64_t>& out);

// A hand-out's value: its lease, then its units.
std::string EncodeHandOut(const DockJournal::HandOut& h);
// A round's value: last, the stats, then per rank its rows and
// micro-batches. DecodeRound fills the value's fields of `r` (not step,
// consumer, round: those are in the key); false if it does not decode.
std::string EncodeRound(const DockJournal::RoundRecord& r);
bool DecodeRound(absl::string_view value, DockJournal::RoundRecord& r);
// A drop's value: its reason, whether it sealed the step, its rows.
// DecodeDrop fills reason, seal and rows; false if it does not decode.
std::string EncodeDrop(const DockJournal::DropRecord& d);
bool DecodeDrop(absl::string_view value, DockJournal::DropRecord& d);
// A reservation's value: its version, deadline and rows. DecodeReservation
// fills those; false if it does not decode.
std::string EncodeReservation(const DockJournal::ReservationRecord& r);
bool DecodeReservation(absl::string_view value, DockJournal::ReservationRecord& r);
// A Put's answer: its fingerprint, rows, bytes and assigned rows.
// DecodePutAnswer fills those (not step: it is in the key); false if it
// does not decode.
std::string EncodePutAnswer(const PutResult& answer, uint64_t fingerprint);
bool DecodePutAnswer(absl::string_view value, PutResult& answer, uint64_t& fingerprint);

}  // namespace tdock::persist::records

#endif  // TDOCK_SERVER_PERSIST_RECORDS_H_
