// Memory that a caller gives back to the system and maps again at the same address, between two
// operations, on real verbs in the Soft-RoCE guest (elsewhere it skips): two transports of one
// process on rxe0 and rxe1.
//
// A registration pins the pages its range had when it was made. Once the range is unmapped and
// mapped again, the same addresses name other pages: a registration kept from before would let
// the NIC write the message into the old pages (the receiver reads what the new ones hold) or
// read it from them (the receiver gets the previous message). The caller gives no notice of
// either (braid-perf's buffers are vectors per size, a freed heap top goes back to the system),
// so the second operation must land and read the bytes the caller sees now.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "tests/transport/ib/guest_pair.h"
#include "tests/transport/ib/soft_roce_guest.h"

namespace braid::transport::ib {
namespace {

constexpr uint64_t kComm = 0x7e9a;
constexpr auto kBound = std::chrono::seconds(60);
constexpr size_t kBytes = 64 * 1024;  // rendezvous: written straight into the receive buffer

// An anonymous mapping of kBytes, at `at` when given (nullptr when that address cannot be had).
unsigned char* map_at(void* at) {
  const int fixed = at != nullptr ? MAP_FIXED_NOREPLACE : 0;
  void* p = mmap(at, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
  if (p == MAP_FAILED || (at != nullptr && p != at)) return nullptr;
  return static_cast<unsigned char*>(p);
}

std::vector<unsigned char> pattern(unsigned char seed) {
  std::vector<unsigned char> v(kBytes);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(seed + i * 7);
  return v;
}

// One message of kBytes from `from` (rank 0) into `into` (rank 1).
::testing::AssertionResult transfer(guest::Pair& p, const unsigned char* from, unsigned char* into) {
  if (!p.c1->post_recv(into, kBytes, 1).is_ok() || !p.c0->post_send(from, kBytes, 2).is_ok()) {
    return ::testing::AssertionFailure() << "posting failed";
  }
  ::testing::AssertionResult sent = guest::await_completions(*p.t0, 1, kBound);
  if (!sent) return sent;
  return guest::await_completions(*p.t1, 1, kBound);
}

size_t differing(const unsigned char* got, const std::vector<unsigned char>& want) {
  size_t n = 0;
  for (size_t i = 0; i < want.size(); ++i) n += got[i] != want[i];
  return n;
}

TEST(IbRegistrationGuest, AReceiveIntoMemoryMappedAgainGetsItsMessage) {
  SKIP_OUTSIDE_GUEST();
  guest::Pair p;
  ASSERT_TRUE(guest::connect_pair(&p, kComm, kBound));
  const std::vector<unsigned char> first = pattern(1), second = pattern(2);
  unsigned char* buf = map_at(nullptr);
  ASSERT_NE(buf, nullptr);
  ASSERT_TRUE(transfer(p, first.data(), buf));
  EXPECT_EQ(differing(buf, first), 0u);
  ASSERT_EQ(munmap(buf, kBytes), 0);
  if (map_at(buf) == nullptr) GTEST_SKIP() << "the address could not be mapped again";
  ASSERT_TRUE(transfer(p, second.data(), buf));
  EXPECT_EQ(differing(buf, second), 0u) << "bytes of " << kBytes << " differ";
  munmap(buf, kBytes);
}

TEST(IbRegistrationGuest, ASendFromMemoryMappedAgainSendsWhatItHoldsNow) {
  SKIP_OUTSIDE_GUEST();
  guest::Pair p;
  ASSERT_TRUE(guest::connect_pair(&p, kComm, kBound));
  const std::vector<unsigned char> first = pattern(3), second = pattern(4);
  std::vector<unsigned char> in(kBytes);
  unsigned char* buf = map_at(nullptr);
  ASSERT_NE(buf, nullptr);
  std::memcpy(buf, first.data(), kBytes);
  ASSERT_TRUE(transfer(p, buf, in.data()));
  EXPECT_EQ(differing(in.data(), first), 0u);
  ASSERT_EQ(munmap(buf, kBytes), 0);
  if (map_at(buf) == nullptr) GTEST_SKIP() << "the address could not be mapped again";
  std::memcpy(buf, second.data(), kBytes);
  ASSERT_TRUE(transfer(p, buf, in.data()));
  EXPECT_EQ(differing(in.data(), second), 0u) << "bytes of " << kBytes << " differ";
  munmap(buf, kBytes);
}

}  // namespace
}  // namespace braid::transport::ib
