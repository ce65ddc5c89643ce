// BRAID_SHM_CMA=auto: a message goes single-copy (cross-memory attach) only when it is larger than
// the ring and its buffer lies wholly in huge pages (transport/shm/huge_pages.h says why). Both
// ends in this process, so the peer may always read our memory; buffers are mapped here with
// MADV_HUGEPAGE or MADV_NOHUGEPAGE so which pages they sit on is known.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <fstream>
#include <string>

#include "common/env.h"
#include "common/job_secret.h"
#include "tests/transport/transport_link.h"
#include "transport/shm/huge_pages.h"
#include "transport/shm/shm_connection.h"

namespace braid::transport::testing {
namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kRing = size_t{1} << 20;

// An anonymous region of `bytes` starting on a 2 MiB boundary, advised huge or not, touched.
class Region {
 public:
  Region(size_t bytes, bool huge) : map_bytes_(bytes + kHuge) {
    map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) return;
    const auto at = (reinterpret_cast<uintptr_t>(map_) + kHuge - 1) & ~(kHuge - 1);
    data_ = reinterpret_cast<unsigned char*>(at);
    ::madvise(data_, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
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
  Region huge(4 * kHuge, true), small(4 * kHuge, false);
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
  void join(bool automatic) {
    TransportOptions o;
    o.secret = auth::JobSecret::from_text("shm transport test secret 0123456789", "test").value();
    o.env.shm_ring_bytes = kRing;
    o.env.shm_cma = false;
    o.env.shm_cma_auto = automatic;
    ASSERT_TRUE(make_link("shm", o, o, link_).is_ok());
    sender_ = dynamic_cast<shm::ShmConnection*>(link_.cb.get());
    ASSERT_NE(sender_, nullptr);
  }
  // Sends `bytes` from `data` to a, checks they arrived, and says whether it went single-copy.
  bool went_single_copy(unsigned char* data, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 4093) data[i] = static_cast<unsigned char>(i / 4093);
    std::vector<unsigned char> in(bytes);
    const uint64_t before = sender_->cma_sent();
    EXPECT_TRUE(link_.ca->post_recv(in.data(), in.size(), 1).is_ok());
    EXPECT_TRUE(link_.cb->post_send(data, bytes, 2).is_ok());
    EXPECT_TRUE(link_.drive([&] { return link_.done_a.size() == 1 && link_.done_b.size() == 1; }));
    EXPECT_TRUE(link_.done_a.size() == 1 && link_.done_a[0].status.is_ok());
    EXPECT_EQ(std::memcmp(in.data(), data, bytes), 0) << bytes << " bytes differ";
    link_.done_a.clear();
    link_.done_b.clear();
    return sender_->cma_sent() > before;
  }

  Link link_;
  shm::ShmConnection* sender_ = nullptr;
};

TEST_F(ShmCmaPolicyLink, AutoTakesSingleCopyOnlyForHugePagesLargerThanTheRing) {
  shm::HugePageQuery q;
  Region huge(4 * kHuge, true), small(4 * kHuge, false);
  REQUIRE_HUGE(q, huge, 4 * kHuge);
  join(true);
  EXPECT_NE(link_.b->describe().find("single-copy (cross-memory attach) when larger than the ring and in huge pages"),
            std::string::npos)
      << link_.b->describe();
  EXPECT_TRUE(went_single_copy(huge.data(), 4 * kHuge));
  EXPECT_TRUE(went_single_copy(huge.data() + 100, kRing + 1)) << "just above the ring, not page-aligned";
  EXPECT_FALSE(went_single_copy(huge.data(), kRing)) << "no larger than the ring";
  EXPECT_FALSE(went_single_copy(small.data(), 4 * kHuge)) << "4 KiB pages";
}

TEST_F(ShmCmaPolicyLink, OffNeverTakesSingleCopy) {
  shm::HugePageQuery q;
  Region huge(4 * kHuge, true);
  REQUIRE_HUGE(q, huge, 4 * kHuge);
  join(false);
  EXPECT_NE(link_.b->describe().find("two-copy ring (BRAID_SHM_CMA=1"), std::string::npos) << link_.b->describe();
  EXPECT_FALSE(went_single_copy(huge.data(), 4 * kHuge));
}

}  // namespace
}  // namespace braid::transport::testing
