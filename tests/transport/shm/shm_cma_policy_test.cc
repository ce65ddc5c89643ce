// BRAID_SHM_CMA=auto: a message goes single-copy (cross-memory attach) only when it is larger than
// the ring and lies mostly in huge pages, once the sender moved the 2 MiB ranges it touches onto
// them (transport/shm/huge_pages.h and page_collapse.h say why).
// Both ends in this process, so the peer may always read our memory; buffers are mapped here with
// MADV_HUGEPAGE, MADV_NOHUGEPAGE or no advice, so which pages they sit on is known.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/job_secret.h"
#include "tests/transport/transport_link.h"
#include "transport/shm/huge_pages.h"
#include "transport/shm/shm_connection.h"
#include "transport/shm/shm_transport.h"

namespace braid::transport::testing {
namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kRing = size_t{1} << 20;

enum class Pages { huge, small, unadvised };

// An anonymous region of `bytes` starting on a 2 MiB boundary, advised huge (MADV_HUGEPAGE),
// small (MADV_NOHUGEPAGE) or not at all (as malloc leaves memory), touched.
class Region {
 public:
  Region(size_t bytes, Pages pages) : map_bytes_(bytes + kHuge) {
    map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) return;
    const auto at = (reinterpret_cast<uintptr_t>(map_) + kHuge - 1) & ~(kHuge - 1);
    data_ = reinterpret_cast<unsigned char*>(at);
    if (pages != Pages::unadvised) ::madvise(data_, bytes, pages == Pages::huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(data_, 0x5a, bytes);
  }
  ~Region() {
    if (map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
  }
  unsigned char* data() const { return data_; }

 private:
  size_t map_bytes_;
  void* map_ = MAP_FAILED;
  unsigned char* data_ = nullptr;
};

std::string thp_setting() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return s;
}

// Skips unless this kernel can say which pages are huge and gave `r` huge pages.
#define REQUIRE_HUGE(query, region, bytes)                                                                 \
  do {                                                                                                     \
    if (!(query).available()) GTEST_SKIP() << "the kernel lacks PAGEMAP_SCAN (Linux 6.7+)";               \
    if (thp_setting().find("[never]") != std::string::npos) GTEST_SKIP() << "transparent huge pages are off"; \
    if (!(query).all_huge((region).data(), (bytes))) GTEST_SKIP() << "the kernel gave no huge pages (memory fragmented?)"; \
  } while (0)

TEST(HugePageQuery, TellsHugePagesFromSmallOnes) {
  shm::HugePageQuery q;
  Region huge(4 * kHuge, Pages::huge), small(4 * kHuge, Pages::small);
  REQUIRE_HUGE(q, huge, 4 * kHuge);
  EXPECT_TRUE(q.all_huge(huge.data() + 12345, kHuge)) << "a range inside huge pages, not page-aligned";
  EXPECT_FALSE(q.all_huge(small.data(), 4 * kHuge));
  EXPECT_FALSE(q.all_huge(small.data() + kHuge, 4096)) << "one small page";
  EXPECT_FALSE(q.all_huge(huge.data(), 0));
}

TEST(ShmCmaPolicy, EnvSaysAutoByDefault) {
  auto parse = [](const char* value) {
    return Env::parse([&](const char* name) { return std::string(name) == "BRAID_SHM_CMA" ? value : nullptr; });
  };
  EXPECT_TRUE(Env().shm_cma_auto);
  EXPECT_FALSE(Env().shm_cma);
  auto off = parse("0"), on = parse("1"), aut = parse("auto");
  ASSERT_TRUE(off.is_ok() && on.is_ok() && aut.is_ok());
  EXPECT_FALSE(off.value().shm_cma || off.value().shm_cma_auto);
  EXPECT_TRUE(on.value().shm_cma);
  EXPECT_TRUE(aut.value().shm_cma_auto && !aut.value().shm_cma);
}

class ShmCmaPolicyLink : public ::testing::Test {
 protected:
  void join(bool automatic, int spin_us = 50) {
    TransportOptions o;
    o.secret = auth::JobSecret::from_text("shm transport test secret 0123456789", "test").value();
    o.env.shm_ring_bytes = kRing;
    o.env.spin_us = spin_us;
    o.env.shm_cma = false;
    o.env.shm_cma_auto = automatic;
    ASSERT_TRUE(make_link("shm", o, o, link_).is_ok());
    sender_ = dynamic_cast<shm::ShmConnection*>(link_.cb.get());
    ASSERT_NE(sender_, nullptr);
  }
  // Sends `bytes` from `data` to a, received `in_offset` bytes into a buffer, checks every byte
  // arrived (and none around them was written), and says whether it went single-copy.
  bool went_single_copy(unsigned char* data, size_t bytes, size_t in_offset = 0) {
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 7 + i / 4093);
    std::vector<unsigned char> in(bytes + in_offset + 64, 0xee);
    const uint64_t before = sender_->cma_sent();
    EXPECT_TRUE(link_.ca->post_recv(in.data() + in_offset, bytes, 1).is_ok());
    EXPECT_TRUE(link_.cb->post_send(data, bytes, 2).is_ok());
    EXPECT_TRUE(link_.drive([&] { return link_.done_a.size() == 1 && link_.done_b.size() == 1; }));
    EXPECT_TRUE(link_.done_a.size() == 1 && link_.done_a[0].status.is_ok() && link_.done_a[0].bytes == bytes);
    EXPECT_TRUE(link_.done_b.size() == 1 && link_.done_b[0].status.is_ok());
    EXPECT_EQ(std::memcmp(in.data() + in_offset, data, bytes), 0) << bytes << " bytes differ";
    EXPECT_TRUE(std::all_of(in.begin(), in.begin() + in_offset, [](unsigned char c) { return c == 0xee; }));
    EXPECT_TRUE(std::all_of(in.end() - 64, in.end(), [](unsigned char c) { return c == 0xee; })) << "overrun";
    link_.done_a.clear();
    link_.done_b.clear();
    return sender_->cma_sent() > before;
  }
  const shm::PageCollapse& collapse() const {
    return dynamic_cast<shm::ShmTransport&>(*link_.b).page_collapse();
  }

  Link link_;
  shm::ShmConnection* sender_ = nullptr;
};

TEST_F(ShmCmaPolicyLink, AutoTakesSingleCopyOnlyForHugePagesLargerThanTheRing) {
  shm::HugePageQuery q;
  Region huge(4 * kHuge, Pages::huge), small(4 * kHuge, Pages::small);
  REQUIRE_HUGE(q, huge, 4 * kHuge);
  join(true);
  EXPECT_NE(link_.b->describe().find("single-copy (cross-memory attach) when larger than the ring and in huge pages"),
            std::string::npos)
      << link_.b->describe();
  EXPECT_TRUE(went_single_copy(huge.data(), 4 * kHuge));
  EXPECT_TRUE(went_single_copy(huge.data() + 100, kRing + 1)) << "just above the ring, not page-aligned";
  EXPECT_FALSE(went_single_copy(huge.data(), kRing)) << "no larger than the ring";
  EXPECT_FALSE(went_single_copy(small.data(), 4 * kHuge)) << "4 KiB pages the program keeps small (MADV_NOHUGEPAGE)";
  EXPECT_EQ(collapse().refused(), 4u) << "the kernel refused to collapse them";
  EXPECT_EQ(collapse().collapsed(), 0u);
}

// Skips unless this kernel can say which pages are huge and `r` still sits on 4 KiB pages.
#define REQUIRE_SMALL(query, region, bytes)                                                                 \
  do {                                                                                                     \
    if (!(query).available()) GTEST_SKIP() << "the kernel lacks PAGEMAP_SCAN (Linux 6.7+)";               \
    if (thp_setting().find("[never]") != std::string::npos) GTEST_SKIP() << "transparent huge pages are off"; \
    if ((query).all_huge((region).data() + kHuge, kHuge)) GTEST_SKIP() << "THP 'always' gave huge pages already"; \
  } while (0)

TEST_F(ShmCmaPolicyLink, AutoMovesASmallPageBufferOntoHugePagesOnceThenSendsSingleCopy) {
  shm::HugePageQuery q;
  Region r(10 * kHuge, Pages::unadvised);
  REQUIRE_SMALL(q, r, 10 * kHuge);
  join(true);
  // From 100 bytes in to 100 bytes past 16 MiB: nine 2 MiB ranges.
  const bool single = went_single_copy(r.data() + 100, 8 * kHuge);
  if (collapse().refused() != 0) GTEST_SKIP() << "the kernel found no free huge pages (memory fragmented?)";
  EXPECT_TRUE(single);
  EXPECT_EQ(collapse().collapsed(), 9u);
  EXPECT_TRUE(q.all_huge(r.data(), 9 * kHuge)) << "every 2 MiB range the message touched, edges too";
  EXPECT_FALSE(q.all_huge(r.data() + 9 * kHuge, kHuge)) << "the rest of the buffer is left alone";
  EXPECT_TRUE(went_single_copy(r.data() + 100, 8 * kHuge, 3)) << "again, into an odd address";
  EXPECT_EQ(collapse().collapsed(), 9u) << "once per buffer";

  // The program frees the buffer and gets fresh 4 KiB pages at the same address, again and
  // again: collapsed each time up to the cap, then the ring carries it.
  auto fresh_pages = [&] {
    void* again = ::mmap(r.data(), 10 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ASSERT_EQ(again, static_cast<void*>(r.data()));
    std::memset(r.data(), 1, 10 * kHuge);
    ASSERT_FALSE(q.all_huge(r.data() + kHuge, kHuge));
  };
  for (unsigned times = 2; times <= shm::PageCollapse::kMaxCollapses; ++times) {
    fresh_pages();
    EXPECT_TRUE(went_single_copy(r.data() + 100, 8 * kHuge)) << "collapse number " << times;
    EXPECT_EQ(collapse().collapsed(), 9u * times);
  }
  fresh_pages();
  EXPECT_FALSE(went_single_copy(r.data() + 100, 8 * kHuge)) << "past the cap";
  EXPECT_EQ(collapse().collapsed(), 9u * shm::PageCollapse::kMaxCollapses);
  EXPECT_EQ(collapse().refused(), 0u);
}

// A mapping of `bytes` that starts `before` bytes ahead of a 2 MiB boundary, as malloc's own
// mappings start anywhere: the 2 MiB range it starts in lies partly outside it, so the kernel
// cannot collapse that one.
class EdgeMapping {
 public:
  EdgeMapping(size_t bytes, size_t before) : reserved_bytes_(bytes + 3 * kHuge) {
    reserved_ = ::mmap(nullptr, reserved_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved_ == MAP_FAILED) return;
    const auto boundary = (reinterpret_cast<uintptr_t>(reserved_) + 2 * kHuge - 1) & ~(kHuge - 1);
    void* at = reinterpret_cast<void*>(boundary - before);
    if (::mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != at) return;
    data_ = static_cast<unsigned char*>(at);
    std::memset(data_, 0x5a, bytes);
  }
  ~EdgeMapping() {
    if (reserved_ != MAP_FAILED) ::munmap(reserved_, reserved_bytes_);
  }
  unsigned char* data() const { return data_; }

 private:
  size_t reserved_bytes_;
  void* reserved_ = MAP_FAILED;
  unsigned char* data_ = nullptr;
};

TEST_F(ShmCmaPolicyLink, AutoCarriesExactBytesAroundItsThresholds) {
  shm::HugePageQuery q;
  {
    Region probe(2 * kHuge, Pages::unadvised);
    REQUIRE_SMALL(q, probe, 2 * kHuge);
  }
  join(true);
  struct Case {
    size_t offset, bytes;
    bool single;  // the path it must take when the kernel collapses what is asked
  };
  const Case cases[] = {
      {0, kRing - 1, false}, {0, kRing, false},         {1, kRing + 1, true},  // the ring holds up to its size
      {0, kHuge, true},      {1, kHuge + 1, true},      {4095, 3 * kHuge + 7, true},
      {63, 32 * kHuge - 1, true},
  };
  // All kept until the end, so that no two share an address.
  std::vector<std::unique_ptr<Region>> regions;
  for (const Case& c : cases) {
    SCOPED_TRACE("offset " + std::to_string(c.offset) + ", " + std::to_string(c.bytes) + " bytes");
    Region& r = *regions.emplace_back(std::make_unique<Region>(c.offset + c.bytes + kHuge, Pages::unadvised));
    const uint64_t refused = collapse().refused();
    const bool single = went_single_copy(r.data() + c.offset, c.bytes, c.offset % 7);
    if (collapse().refused() == refused) {
      EXPECT_EQ(single, c.single);
    }
  }
  // A buffer that starts 1 MiB before a 2 MiB boundary: its first MiB cannot go onto a huge page.
  // Two thirds of a 1.5 MiB message stay small, so the ring carries it; of 5 MiB, a fifth.
  EdgeMapping edge(6 * kHuge, kHuge / 2);
  ASSERT_NE(edge.data(), nullptr);
  const uint64_t refused = collapse().refused(), collapsed = collapse().collapsed();
  EXPECT_FALSE(went_single_copy(edge.data(), 3 * kHuge / 4 + 1)) << "mostly on 4 KiB pages";
  EXPECT_EQ(collapse().refused(), refused + 1) << "the range reaching outside the mapping";
  EXPECT_FALSE(q.all_huge(edge.data(), kHuge / 2));
  const bool single = went_single_copy(edge.data(), 5 * kHuge / 2);
  if (collapse().collapsed() == collapsed + 2) {
    EXPECT_TRUE(single) << "a fifth on 4 KiB pages";
  }
}

TEST_F(ShmCmaPolicyLink, AutoReadsALargeMessageInPiecesAndFailsATooSmallReceiveAsTheRingDoes) {
  shm::HugePageQuery q;
  Region r(9 * kHuge, Pages::unadvised);
  REQUIRE_SMALL(q, r, 9 * kHuge);
  join(true);
  std::vector<unsigned char> in(8 * kHuge), small(kRing), next(64);
  for (size_t i = 0; i < in.size(); ++i) r.data()[i] = static_cast<unsigned char>(i % 251);
  auto* receiver = dynamic_cast<shm::ShmConnection*>(link_.ca.get());
  ASSERT_NE(receiver, nullptr);
  ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 1).is_ok());
  ASSERT_TRUE(link_.cb->post_send(r.data(), in.size(), 2).is_ok());
  if (collapse().refused() != 0) GTEST_SKIP() << "the kernel found no free huge pages (memory fragmented?)";
  ASSERT_EQ(sender_->cma_sent(), 1u);
  receiver->progress();
  EXPECT_TRUE(receiver->mid_message()) << "one piece of " << shm::kCmaPieceBytes << " bytes per progress()";
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 1 && link_.done_b.size() == 1; }));
  EXPECT_FALSE(receiver->mid_message());
  ASSERT_TRUE(link_.done_a[0].status.is_ok()) << link_.done_a[0].status.message();
  EXPECT_EQ(std::memcmp(in.data(), r.data(), in.size()), 0);
  link_.done_a.clear();
  link_.done_b.clear();

  // A receive smaller than the message: ErrorCode::protocol naming the size, nothing written,
  // the send completes, and the next message arrives.
  ASSERT_TRUE(link_.ca->post_recv(small.data(), small.size(), 3).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(next.data(), next.size(), 4).is_ok());
  ASSERT_TRUE(link_.cb->post_send(r.data(), in.size(), 5).is_ok());
  ASSERT_TRUE(link_.cb->post_send(r.data(), next.size(), 6).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2 && link_.done_b.size() == 2; }));
  EXPECT_EQ(sender_->cma_sent(), 2u);
  EXPECT_EQ(link_.done_a[0].status.code(), ErrorCode::protocol) << link_.done_a[0].status.message();
  EXPECT_NE(link_.done_a[0].status.message().find(std::to_string(in.size()) + " bytes arrived for a buffer of " +
                                                  std::to_string(small.size())),
            std::string::npos)
      << link_.done_a[0].status.message();
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](unsigned char c) { return c == 0; })) << "no overrun";
  EXPECT_TRUE(link_.done_b[0].status.is_ok());
  ASSERT_TRUE(link_.done_a[1].status.is_ok()) << link_.done_a[1].status.message();
  EXPECT_EQ(std::memcmp(next.data(), r.data(), next.size()), 0);
}

// A waiter that may not spin (ranks sharing CPUs: BRAID_SPIN_US 0) must not go to sleep with a
// single-copy message half read: nobody would wake it, the sender waits for the read.
TEST_F(ShmCmaPolicyLink, AWaiterThatMayNotSpinDoesNotSleepHalfwayThroughAMessage) {
  shm::HugePageQuery q;
  Region r(9 * kHuge, Pages::unadvised);
  REQUIRE_SMALL(q, r, 9 * kHuge);
  join(true, /*spin_us=*/0);
  std::vector<unsigned char> in(8 * kHuge);
  ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 1).is_ok());
  ASSERT_TRUE(link_.cb->post_send(r.data(), in.size(), 2).is_ok());
  if (collapse().refused() != 0) GTEST_SKIP() << "the kernel found no free huge pages (memory fragmented?)";
  ASSERT_EQ(sender_->cma_sent(), 1u);
  // Only the receiver polls, each time allowing 10 s of sleep; the message is 8 pieces.
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0; link_.done_a.empty() && polls < 20; ++polls) {
    ASSERT_TRUE(link_.a->poll(link_.done_a, std::chrono::seconds(10)).is_ok());
  }
  ASSERT_EQ(link_.done_a.size(), 1u);
  EXPECT_TRUE(link_.done_a[0].status.is_ok()) << link_.done_a[0].status.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "it slept mid-message";
  EXPECT_EQ(std::memcmp(in.data(), r.data(), in.size()), 0);
  ASSERT_TRUE(link_.drive([&] { return link_.done_b.size() == 1; }));
}

TEST_F(ShmCmaPolicyLink, OffNeverTakesSingleCopy) {
  shm::HugePageQuery q;
  Region huge(4 * kHuge, Pages::huge);
  REQUIRE_HUGE(q, huge, 4 * kHuge);
  join(false);
  EXPECT_NE(link_.b->describe().find("two-copy ring (BRAID_SHM_CMA=1"), std::string::npos) << link_.b->describe();
  EXPECT_FALSE(went_single_copy(huge.data(), 4 * kHuge));
}

}  // namespace
}  // namespace braid::transport::testing
