#include "server/dock/dock.h"

#include <future>
#include <utility>

#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock {

int64_t Batch::payload_bytes() const {
  int64_t bytes = 0;
  for (const PackedColumn& column : columns) bytes += column.data_bytes();
  return bytes;
}

absl::StatusOr<std::unique_ptr<Dock>> Dock::Create(DockSpec spec, DockLimits limits,
                                                   std::shared_ptr<DockJournal> journal) {
  TDOCK_ASSIGN_OR_RETURN(DockRecovery empty, DockRecovery::Start(std::move(spec), limits));
  return std::move(empty).Finish(std::move(journal));
}

absl::StatusOr<DockRecovery> DockRecovery::Start(DockSpec spec, DockLimits limits) {
  TDOCK_ASSIGN_OR_RETURN(auto impl, internal::DockImpl::Create(std::move(spec), limits));
  return DockRecovery(std::move(impl));
}

DockRecovery::DockRecovery(std::shared_ptr<internal::DockImpl> impl) : impl_(std::move(impl)) {}
DockRecovery::DockRecovery(DockRecovery&&) noexcept = default;
DockRecovery& DockRecovery::operator=(DockRecovery&&) noexcept = default;
DockRecovery::~DockRecovery() {
  if (impl_ != nullptr) impl_->Stop();
}

DockSpec DockRecovery::spec() const { return impl_->spec(); }
CellForm DockRecovery::cell_form() const { return impl_->cell_form(); }
absl::Status DockRecovery::Released(int64_t step) { return impl_->RecoverReleased(step); }
void DockRecovery::DockVersion(int64_t version) { impl_->AdvanceVersion(version); }

absl::Status DockRecovery::Put(PutInput input) {
  input.wait = absl::ZeroDuration();
  std::promise<absl::Status> done;
  impl_->Put(std::move(input), [&done](absl::StatusOr<PutResult> r) { done.set_value(r.status()); });
  return done.get_future().get();
}

absl::Status DockRecovery::Round(const DockJournal::RoundRecord& record) {
  return impl_->RecoverRound(record);
}
absl::Status DockRecovery::Delivery(int64_t step, int consumer, int64_t round, int32_t taker,
                                    uint64_t lease_id) {
  return impl_->RecoverDelivery(step, consumer, round, taker, lease_id);
}
absl::Status DockRecovery::HandOut(const DockJournal::HandOut& handout) {
  return impl_->RecoverHandOut(handout);
}
void DockRecovery::Acknowledged(uint64_t lease_id) { impl_->RecoverAcknowledged(lease_id); }
absl::Status DockRecovery::Key(int64_t step, int64_t row, const std::string& key) {
  return impl_->RecoverKey(step, row, key);
}
absl::Status DockRecovery::Version(int64_t step, int64_t row, int64_t version) {
  return impl_->RecoverVersion(step, row, version);
}

void DockRecovery::PutAnswer(uint64_t put_id, const PutResult& answer, uint64_t fingerprint) {
  impl_->RecoverPutAnswer(put_id, answer, fingerprint);
}

absl::Status DockRecovery::Reserved(const DockJournal::ReservationRecord& record) {
  return impl_->RecoverReservation(record);
}

absl::Status DockRecovery::CarriedDone(int64_t step, int consumer,
                                       const std::vector<int64_t>& units) {
  return impl_->RecoverCarriedDone(step, consumer, units);
}

absl::Status DockRecovery::Carry(int64_t step, std::vector<int64_t> rows,
                                 std::vector<ConsumerUnits> taken) {
  return impl_->RecoverCarry(step, std::move(rows), std::move(taken));
}

absl::Status DockRecovery::Dropped(const DockJournal::DropRecord& record) {
  return impl_->RecoverDrop(record);
}

std::unique_ptr<Dock> DockRecovery::Finish(std::shared_ptr<DockJournal> journal) && {
  std::shared_ptr<internal::DockImpl> impl = std::move(impl_);
  impl->AttachJournal(std::move(journal));
  impl->FinishRecovery();
  return std::unique_ptr<Dock>(new Dock(std::move(impl)));
}

Dock::Dock(std::shared_ptr<internal::DockImpl> impl) : impl_(std::move(impl)) {}
Dock::~Dock() { impl_->Stop(); }

const std::string& Dock::name() const { return impl_->name(); }
DockSpec Dock::spec() const { return impl_->spec(); }
void Dock::Put(PutInput input, PutCallback done) {
  impl_->Put(std::move(input), std::move(done));
}
uint64_t Dock::Get(GetInput input, GetCallback done) {
  return impl_->Get(std::move(input), std::move(done));
}
void Dock::Cancel(uint64_t id) { impl_->Cancel(id); }
void Dock::Ack(const std::string& consumer, uint64_t lease_id, RowsCallback done) {
  impl_->EndLease(consumer, lease_id, internal::LeaseTable::End::kAcked, std::move(done));
}
void Dock::Nack(const std::string& consumer, uint64_t lease_id, RowsCallback done) {
  impl_->EndLease(consumer, lease_id, internal::LeaseTable::End::kNacked, std::move(done));
}

absl::StatusOr<std::vector<LeaseInfo>> Dock::ListLeases(const std::string& consumer) const {
  return impl_->ListLeases(consumer);
}

void Dock::NackAll(const std::string& consumer, std::optional<int32_t> rank,
                   NackAllCallback done) {
  impl_->NackAll(consumer, rank, std::move(done));
}
absl::StatusOr<Batch> Dock::Read(int64_t step, const std::vector<int64_t>& rows,
                                 const std::vector<std::string>& columns) {
  return impl_->Read(step, rows, columns);
}
absl::StatusOr<Batch> Dock::ReadKeys(const std::vector<std::string>& keys,
                                     const std::vector<std::string>& columns) {
  return impl_->ReadKeys(keys, columns);
}
absl::StatusOr<RowListing> Dock::ListRows(int64_t step,
                                          absl::Span<const std::string> columns) const {
  return impl_->ListRows(step, columns);
}
void Dock::RemoveConsumer(const std::string& consumer, ConsumerCallback done) {
  impl_->RemoveConsumer(consumer, std::move(done));
}

void Dock::AddColumn(ColumnSpec column, ColumnCallback done) {
  impl_->AddColumn(std::move(column), std::move(done));
}

void Dock::AddConsumer(ConsumerSpec consumer, ConsumerCallback done) {
  impl_->AddConsumer(std::move(consumer), std::move(done));
}
void Dock::ReleaseStep(int64_t step, StatusCallback done) {
  impl_->ReleaseStep(step, std::move(done));
}
void Dock::SetVersion(int64_t version, StatusCallback done) {
  impl_->SetVersion(version, std::move(done));
}
uint64_t Dock::Reserve(ReserveInput input, ReserveCallback done) {
  return impl_->Reserve(std::move(input), std::move(done));
}
void Dock::Drop(DropInput input, RowsCallback done) {
  impl_->Drop(std::move(input), std::move(done));
}
void Dock::DropLost(uint64_t shard, uint32_t incarnation, RowsCallback done) {
  impl_->DropLost(shard, incarnation, std::move(done));
}
void Dock::HoldShards(std::vector<ShardIncarnation> away) { impl_->HoldShards(std::move(away)); }
std::vector<ShardIncarnation> Dock::ShardsOfLiveRows() const { return impl_->ShardsOfLiveRows(); }
void Dock::DropLostExtents(uint64_t shard, std::vector<uint64_t> extents, RowsCallback done) {
  impl_->DropLostExtents(shard, std::move(extents), std::move(done));
}
std::vector<StoredExtent> Dock::ExtentsOnShard(uint64_t shard, uint32_t incarnation,
                                               uint64_t below) const {
  return impl_->ExtentsOnShard(shard, incarnation, below);
}
void Dock::Seal(SealInput input, RowsCallback done) {
  impl_->Seal(std::move(input), std::move(done));
}

namespace {

// Runs `call(done)` and waits for `done`'s result.
template <typename R, typename Call>
R Await(Call call) {
  std::promise<R> result;
  call([&result](R r) { result.set_value(std::move(r)); });
  return result.get_future().get();
}

}  // namespace

absl::StatusOr<int64_t> Dock::Ack(const std::string& consumer, uint64_t lease_id) {
  return Await<absl::StatusOr<int64_t>>(
      [&](RowsCallback done) { Ack(consumer, lease_id, std::move(done)); });
}
absl::StatusOr<int64_t> Dock::Nack(const std::string& consumer, uint64_t lease_id) {
  return Await<absl::StatusOr<int64_t>>(
      [&](RowsCallback done) { Nack(consumer, lease_id, std::move(done)); });
}
absl::StatusOr<NackAllResult> Dock::NackAll(const std::string& consumer,
                                            std::optional<int32_t> rank) {
  return Await<absl::StatusOr<NackAllResult>>(
      [&](NackAllCallback done) { NackAll(consumer, rank, std::move(done)); });
}
absl::StatusOr<ColumnSpec> Dock::AddColumn(ColumnSpec column) {
  return Await<absl::StatusOr<ColumnSpec>>(
      [&](ColumnCallback done) { AddColumn(std::move(column), std::move(done)); });
}

absl::StatusOr<ConsumerSpec> Dock::RemoveConsumer(const std::string& consumer) {
  return Await<absl::StatusOr<ConsumerSpec>>(
      [&](ConsumerCallback done) { RemoveConsumer(consumer, std::move(done)); });
}

absl::StatusOr<ConsumerSpec> Dock::AddConsumer(ConsumerSpec consumer) {
  return Await<absl::StatusOr<ConsumerSpec>>(
      [&](ConsumerCallback done) { AddConsumer(std::move(consumer), std::move(done)); });
}
absl::Status Dock::ReleaseStep(int64_t step) {
  return Await<absl::Status>([&](StatusCallback done) { ReleaseStep(step, std::move(done)); });
}
int64_t Dock::version() const { return impl_->version(); }
absl::Status Dock::SetVersion(int64_t version) {
  return Await<absl::Status>([&](StatusCallback done) { SetVersion(version, std::move(done)); });
}
absl::StatusOr<Reservation> Dock::Reserve(ReserveInput input) {
  return Await<absl::StatusOr<Reservation>>(
      [&](ReserveCallback done) { Reserve(std::move(input), std::move(done)); });
}
absl::StatusOr<int64_t> Dock::Drop(DropInput input) {
  return Await<absl::StatusOr<int64_t>>(
      [&](RowsCallback done) { Drop(std::move(input), std::move(done)); });
}
absl::StatusOr<int64_t> Dock::Seal(SealInput input) {
  return Await<absl::StatusOr<int64_t>>(
      [&](RowsCallback done) { Seal(std::move(input), std::move(done)); });
}
DockStats Dock::Stats() const { return impl_->Stats(); }
StepWindow Dock::Window() const { return impl_->Window(); }
void Dock::Shutdown() { impl_->Shutdown(); }

}  // namespace tdock
