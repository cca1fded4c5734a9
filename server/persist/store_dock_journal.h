// One dock's DockJournal over the journal: each change the dock reports
// becomes a StoreBatch of the records in records.h, submitted to the
// journal, whose `done` the dock waits for before acknowledging.
//
// Thread safety: every method may be called from any thread.
#ifndef TDOCK_SERVER_PERSIST_STORE_DOCK_JOURNAL_H_
#define TDOCK_SERVER_PERSIST_STORE_DOCK_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "server/dock/journal_hook.h"
#include "server/persist/journal.h"

namespace tdock::persist {

// `journal` is borrowed and must outlive the dock. Hand-outs without a lease
// are numbered from `next_handout` (recovery passes one past the highest
// stored).
std::shared_ptr<DockJournal> NewStoreDockJournal(Journal* journal, std::string dock,
                                                 uint64_t next_handout);

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_STORE_DOCK_JOURNAL_H_
