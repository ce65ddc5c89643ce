// The rule that decides whether a tcp peer competes with us for one CPU, without sockets.
#include "transport/tcp/host_identity.h"

#include <pthread.h>
#include <sched.h>

#include <gtest/gtest.h>

#include <thread>

namespace braid::transport::tcp {
namespace {

const BootId kHostA = *parse_boot_id("5e1c0a3e-0c8b-4f43-9d7e-1f2a3b4c5d6e");
const BootId kHostB = *parse_boot_id("5e1c0a3e-0c8b-4f43-9d7e-1f2a3b4c5d6f");

HostIdentity on(const BootId& host, std::initializer_list<size_t> cpus) { return {host, cpu_mask_of(cpus)}; }

// Both orders, so a rule that only one end of a connection applies would show.
bool shares(const HostIdentity& a, const HostIdentity& b) {
  bool ab = shares_single_cpu(a, b), ba = shares_single_cpu(b, a);
  EXPECT_EQ(ab, ba) << "the rule must be symmetric";
  return ab;
}

TEST(HostIdentity, SameHostConfinedToTheSameCpuShares) {
  EXPECT_TRUE(shares(on(kHostA, {0}), on(kHostA, {0})));
  EXPECT_TRUE(shares(on(kHostA, {7}), on(kHostA, {7})));
  EXPECT_TRUE(shares(on(kHostA, {1023}), on(kHostA, {1023})));  // the last CPU of the bitmap
}

TEST(HostIdentity, OtherHostsNeverShare) {
  EXPECT_FALSE(shares(on(kHostA, {0}), on(kHostB, {0})));
  // An unreadable boot id is unknown, not a host of its own that two processes could share.
  EXPECT_FALSE(shares(on(BootId{}, {0}), on(BootId{}, {0})));
  EXPECT_FALSE(shares(on(kHostA, {0}), on(BootId{}, {0})));
}

TEST(HostIdentity, DifferentOrWiderMasksDoNotShare) {
  EXPECT_FALSE(shares(on(kHostA, {0}), on(kHostA, {1})));         // disjoint single CPUs
  EXPECT_FALSE(shares(on(kHostA, {63}), on(kHostA, {64})));       // across a word of the bitmap
  EXPECT_FALSE(shares(on(kHostA, {0}), on(kHostA, {0, 1})));      // the peer may run on CPU 1
  EXPECT_FALSE(shares(on(kHostA, {0, 1}), on(kHostA, {0, 1})));   // two CPUs for two spinners
  EXPECT_FALSE(shares(on(kHostA, {2, 3}), on(kHostA, {0, 1})));
}

TEST(HostIdentity, AnUnknownMaskNeverShares) {
  EXPECT_FALSE(shares(on(kHostA, {}), on(kHostA, {0})));
  EXPECT_FALSE(shares(on(kHostA, {}), on(kHostA, {})));
  EXPECT_FALSE(shares(on(kHostA, {5000}), on(kHostA, {5000})));  // beyond the bitmap: dropped
}

TEST(HostIdentity, BootIdsParseAsTheKernelPrintsThem) {
  auto id = parse_boot_id("00112233-4455-6677-8899-aabbccddeeff\n");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(*id, (BootId{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}));
  EXPECT_EQ(parse_boot_id("00112233-4455-6677-8899-AABBCCDDEEFF"), id);
  EXPECT_FALSE(parse_boot_id(""));
  EXPECT_FALSE(parse_boot_id("00112233-4455-6677-8899-aabbccddeef"));    // short
  EXPECT_FALSE(parse_boot_id("00112233-4455-6677-8899-aabbccddeefg"));   // not hex
  EXPECT_FALSE(parse_boot_id("0011223304455-6677-8899-aabbccddeeff"));   // dash missing
}

TEST(HostIdentity, MasksDescribeThemselves) {
  EXPECT_EQ(describe_cpus(cpu_mask_of({0})), "0");
  EXPECT_EQ(describe_cpus(cpu_mask_of({0, 1, 2, 3, 8, 63, 64})), "0-3,8,63-64");
  EXPECT_EQ(describe_cpus(CpuMask{}), "unknown");
  EXPECT_EQ(cpu_count(cpu_mask_of({1, 64, 1023})), 3u);
}

TEST(HostIdentity, LocalIdentityIsThisKernelAndThisThreadsCpus) {
  HostIdentity self = local_host_identity();
  EXPECT_NE(self.boot_id, BootId{}) << "/proc/sys/kernel/random/boot_id could not be read";
  EXPECT_EQ(local_host_identity().boot_id, self.boot_id);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(cpu_count(self.cpus), static_cast<size_t>(CPU_COUNT(&set)));
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
    HostIdentity pinned = local_host_identity();
    EXPECT_EQ(pinned.cpus, cpu_mask_of({0}));
    EXPECT_TRUE(shares_single_cpu(pinned, local_host_identity()));
  }).join();
}

}  // namespace
}  // namespace braid::transport::tcp
