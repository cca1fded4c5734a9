// AtomicBitmap on its own: setting, testing, claiming and undoing bits, the
// partial last word, counting and reset; and concurrent claimers, which must
// take every bit exactly once between them (run under ThreadSanitizer too).
#include "server/dock/bitmap.h"

#include <bit>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

TEST(Bitmap, SetReportsTheFirstSetOnly) {
  AtomicBitmap bits(130);
  EXPECT_EQ(bits.bits(), 130);
  EXPECT_EQ(bits.num_words(), 3);
  EXPECT_FALSE(bits.Test(129));
  EXPECT_TRUE(bits.Set(129));
  EXPECT_FALSE(bits.Set(129));
  EXPECT_TRUE(bits.Test(129));
  EXPECT_TRUE(bits.Set(0));
  EXPECT_TRUE(bits.Set(64));
  EXPECT_EQ(bits.Count(), 3);
  EXPECT_EQ(bits.word(1), uint64_t{1});
  EXPECT_EQ(bits.word(2), uint64_t{2});
  bits.Reset();
  EXPECT_EQ(bits.Count(), 0);
  EXPECT_FALSE(bits.Test(129));
}

TEST(Bitmap, ValidMaskCoversOnlyTheBitsThatExist) {
  AtomicBitmap bits(130);
  EXPECT_EQ(bits.valid_mask(0), ~uint64_t{0});
  EXPECT_EQ(bits.valid_mask(1), ~uint64_t{0});
  EXPECT_EQ(bits.valid_mask(2), uint64_t{3});  // bits 128 and 129
  AtomicBitmap whole(128);
  EXPECT_EQ(whole.num_words(), 2);
  EXPECT_EQ(whole.valid_mask(1), ~uint64_t{0});
}

TEST(Bitmap, ClaimReturnsTheBitsThisCallSetAndClearUndoesIt) {
  AtomicBitmap bits(64);
  EXPECT_EQ(bits.Claim(0, 0b0110), uint64_t{0b0110});
  EXPECT_EQ(bits.Claim(0, 0b1111), uint64_t{0b1001});  // 1 and 2 were taken
  EXPECT_EQ(bits.Claim(0, 0b1111), uint64_t{0});
  bits.Clear(0, 0b0010);
  EXPECT_EQ(bits.word(0), uint64_t{0b1101});
  EXPECT_EQ(bits.Claim(0, 0b0011), uint64_t{0b0010});
  EXPECT_EQ(bits.Count(), 4);
}

// Invariant: claimers racing over the same words, each claiming whole words
// and single bits in its own order, take every bit exactly once between
// them: the bits each got are disjoint and together are all of them.
TEST(Bitmap, ConcurrentClaimsTakeEveryBitOnce) {
  constexpr int64_t kBits = 64 * 256 + 17;
  for (int threads : {2, 4, 8}) {
    AtomicBitmap bits(kBits);
    std::vector<std::vector<uint64_t>> got(threads, std::vector<uint64_t>(bits.num_words()));
    std::vector<std::thread> claimers;
    for (int t = 0; t < threads; ++t) {
      claimers.emplace_back([&bits, &got, t, threads] {
        for (int64_t k = 0; k < bits.num_words(); ++k) {
          // Each thread starts at its own word and claims half-words, then
          // what is left of the word.
          const int64_t w = (k + t * bits.num_words() / threads) % bits.num_words();
          const uint64_t valid = bits.valid_mask(w);
          got[t][w] |= bits.Claim(w, valid & (t % 2 == 0 ? 0xFFFFFFFFull : ~0xFFFFFFFFull));
          got[t][w] |= bits.Claim(w, valid);
        }
      });
    }
    for (std::thread& c : claimers) c.join();
    int64_t total = 0;
    for (int64_t w = 0; w < bits.num_words(); ++w) {
      uint64_t seen = 0;
      for (int t = 0; t < threads; ++t) {
        EXPECT_EQ(seen & got[t][w], uint64_t{0}) << "word " << w << " claimed twice";
        seen |= got[t][w];
        total += std::popcount(got[t][w]);
      }
      EXPECT_EQ(seen, bits.valid_mask(w)) << "word " << w;
    }
    EXPECT_EQ(total, kBits) << threads << " threads";
    EXPECT_EQ(bits.Count(), kBits);
  }
}

}  // namespace
}  // namespace tdock::internal
