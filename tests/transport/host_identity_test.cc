// Which host a process is on (the per-peer transport choice), and the rule that decides whether
// a tcp peer competes with us for one CPU, without sockets.
#include "transport/common/host_identity.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace braid::transport {
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

TEST(HostKey, LabelIsTheKernelTheNetworkNamespaceAndTheShmMount) {
  const HostKey key = local_host_key();
  EXPECT_NE(key.boot_id, BootId{});
  EXPECT_NE(key.net_ns, 0u) << "/proc/thread-self/ns/net could not be read";
  EXPECT_NE(key.shm_device, 0u) << "/dev/shm could not be read";
  const std::string label = local_host_label();
  EXPECT_EQ(label, local_host_label());
  EXPECT_EQ(label.rfind("unknown", 0), std::string::npos) << label;
  // Equal keys, equal labels; any part different, a different label.
  for (HostKey other : {key, key, key}) {
    EXPECT_EQ(host_label(other), label);
  }
  HostKey ns = key;
  ns.net_ns += 1;
  HostKey shm = key;
  shm.shm_device += 1;
  HostKey boot = key;
  boot.boot_id[15] ^= 1;
  for (const HostKey& k : {ns, shm, boot}) EXPECT_NE(host_label(k), label);
  // An unknown part never matches another process's label.
  HostKey unknown = key;
  unknown.net_ns = 0;
  EXPECT_EQ(host_label(unknown).rfind("unknown/pid:" + std::to_string(::getpid()), 0), 0u) << host_label(unknown);
}

// A thread that enters a network namespace of its own is on another "host" (as the ranks of the
// netns tests are), though the kernel is the same.
TEST(HostKey, AnotherNetworkNamespaceIsAnotherHost) {
  if (::geteuid() != 0) GTEST_SKIP() << "unshare(CLONE_NEWNET) needs root";
  const std::string here = local_host_label();
  std::string there;
  int err = 0;
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    there = local_host_label();
  }).join();
  if (there.empty()) GTEST_SKIP() << "unshare(CLONE_NEWNET) failed here: " << std::strerror(err);
  EXPECT_NE(there, here);
  EXPECT_EQ(there.substr(0, 36), here.substr(0, 36)) << "same kernel, same boot id";
}

}  // namespace
}  // namespace braid::transport
