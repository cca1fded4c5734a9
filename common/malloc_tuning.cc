#include "common/malloc_tuning.h"

#include <malloc.h>

#include <cstdint>

namespace tdock {

void TuneMallocForLargeMessages() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit (half its
  // per-thread heap size); setting it also turns the adaptive one off.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace tdock
