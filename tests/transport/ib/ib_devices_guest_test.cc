// The ib transport's parts on real verbs, in the Soft-RoCE guest (scripts/rdma_guest.sh): two
// rxe devices, rxe0 on 10.99.0.1 and rxe1 on 10.99.0.2. Outside the guest it skips.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "transport/ib/gdr.h"
#include "transport/ib/gid_sysfs.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/reg_cache_verbs.h"

namespace braid::transport::ib {
namespace {

const char* const kAddress[] = {"10.99.0.1", "10.99.0.2"};

std::vector<PortInfo> ports_or_skip() {
  auto r = enumerate_ports();
  if (!r.is_ok()) return {};
  return r.value();
}

const PortInfo* find(const std::vector<PortInfo>& ports, const std::string& device) {
  for (const PortInfo& p : ports) {
    if (p.device == device && p.port == 1) return &p;
  }
  return nullptr;
}

#define SKIP_OUTSIDE_GUEST(ports)                                                                  \
  if (find(ports, "rxe0") == nullptr || find(ports, "rxe1") == nullptr)                            \
  GTEST_SKIP() << "no Soft-RoCE devices rxe0 and rxe1 here: this test runs inside scripts/rdma_guest.sh"

TEST(IbDevicesGuest, BothRxeDevicesAreActiveWithARoceV2GidOfTheirAddress) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  std::vector<std::string> holders;
  for (const char* address : kAddress) {
    const Gid want = gid_of_address(address).value();
    for (const char* device : {"rxe0", "rxe1"}) {
      const PortInfo* p = find(ports, device);
      EXPECT_TRUE(p->active) << describe_port(*p);
      EXPECT_TRUE(p->ethernet) << describe_port(*p);
      EXPECT_GE(p->active_mtu_bytes, 256) << describe_port(*p);
      for (const GidInfo& g : p->gids) {
        if (g.roce_v2 && g.gid == want) holders.push_back(std::string(device) + " " + address);
      }
    }
  }
  ASSERT_EQ(holders.size(), 2u) << "each address is a RoCE v2 GID of exactly one device";
  EXPECT_NE(holders[0].substr(0, 4), holders[1].substr(0, 4)) << "on different devices";
  for (const PortInfo& p : ports) std::printf("%s\n", describe_port(p).c_str());
}

TEST(IbDevicesGuest, ChoosePortPicksTheGidOfTheBootstrapAddress) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  std::vector<std::string> chosen;
  for (const char* address : kAddress) {
    auto c = choose_port(ports, HcaSpec{}, std::nullopt, address);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->gid, gid_of_address(address).value()) << c->why;
    const PortInfo* p = find(ports, c->device);
    ASSERT_NE(p, nullptr);
    bool index_holds_it = false;
    for (const GidInfo& g : p->gids) index_holds_it |= g.index == c->gid_index && g.gid == c->gid && g.roce_v2;
    EXPECT_TRUE(index_holds_it) << c->why;
    EXPECT_EQ(c->mtu_bytes, p->active_mtu_bytes);
    chosen.push_back(c->device);
    std::printf("bootstrap %s: %s\n", address, c->why.c_str());
  }
  EXPECT_NE(chosen[0], chosen[1]);
}

TEST(IbDevicesGuest, BadHcaAndGidIndexErrorsListWhatExists) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  auto none = choose_port(ports, parse_hca_spec("mlx5_0").value(), std::nullopt, kAddress[0]);
  ASSERT_FALSE(none.is_ok());
  const std::string& m = none.status().message();
  EXPECT_NE(m.find("rxe0 port 1 ACTIVE"), std::string::npos) << m;
  EXPECT_NE(m.find("rxe1 port 1 ACTIVE"), std::string::npos) << m;
  auto far = choose_port(ports, parse_hca_spec("rxe0").value(), 100000, kAddress[0]);
  ASSERT_FALSE(far.is_ok());
  EXPECT_NE(far.status().message().find("BRAID_IB_GID_INDEX=100000"), std::string::npos) << far.status().message();
}

// The verbs GID query and the sysfs fallback read the same table.
TEST(IbDevicesGuest, SysfsGidTableAgreesWithVerbs) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  for (const char* device : {"rxe0", "rxe1"}) {
    const std::string dir = std::string("/sys/class/infiniband/") + device + "/ports/1";
    int table = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/gids", ec)) table += e.is_regular_file() ? 1 : 0;
    ASSERT_GT(table, 0) << dir;
    std::vector<GidInfo> sysfs = read_gids_sysfs(dir, table);
    const PortInfo* p = find(ports, device);
    ASSERT_EQ(sysfs.size(), p->gids.size()) << describe_port(*p);
    for (size_t i = 0; i < sysfs.size(); ++i) {
      EXPECT_EQ(sysfs[i].index, p->gids[i].index);
      EXPECT_EQ(sysfs[i].gid, p->gids[i].gid);
      EXPECT_EQ(sysfs[i].roce_v2, p->gids[i].roce_v2);
      EXPECT_EQ(sysfs[i].netdev, p->gids[i].netdev);
    }
  }
}

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  explicit Verbs(const char* name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    for (int i = 0; list != nullptr && i < n; ++i) {
      if (std::string(ibv_get_device_name(list[i])) == name) ctx = ibv_open_device(list[i]);
    }
    if (list != nullptr) ibv_free_device_list(list);
    if (ctx != nullptr) pd = ibv_alloc_pd(ctx);
  }
  ~Verbs() {
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

TEST(IbDevicesGuest, RegistrationCacheOnRealVerbs) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  Verbs v("rxe0");
  ASSERT_NE(v.pd, nullptr);
  std::vector<char> buffer(size_t{4} << 20);
  RegCache cache(verbs_registrar(v.pd, "rxe0", false), size_t{64} << 20, 64);
  for (int op = 0; op < 100; ++op) {
    auto mr = cache.acquire(buffer.data() + 4096, buffer.size() - 8192, MemoryKind::host);
    ASSERT_TRUE(mr.is_ok()) << mr.status().message();
    EXPECT_NE(mr->handle, nullptr);
    EXPECT_EQ(mr->rkey, static_cast<ibv_mr*>(mr->handle)->rkey);
    cache.release(mr.value());
  }
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().hits, 99u);
  cache.invalidate(buffer.data(), buffer.size());
  EXPECT_EQ(cache.stats().regions, 0u);
}

// What the kernel's registration says under a low RLIMIT_MEMLOCK, once root's CAP_IPC_LOCK
// (which ignores the limit) is dropped: run in a child, so the test process keeps both.
void register_under_low_memlock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  if (syscall(SYS_capget, &header, caps) != 0) std::exit(3);
  caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  caps[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  if (syscall(SYS_capset, &header, caps) != 0) std::exit(4);
  rlimit low{64 * 1024, 64 * 1024};
  if (setrlimit(RLIMIT_MEMLOCK, &low) != 0) std::exit(5);
  Verbs v("rxe0");
  if (v.pd == nullptr) std::exit(6);
  std::vector<char> buffer(size_t{4} << 20);
  RegCache cache(verbs_registrar(v.pd, "rxe0", false), size_t{64} << 20, 64);
  auto mr = cache.acquire(buffer.data(), buffer.size(), MemoryKind::host);
  std::fprintf(stderr, "%s\n", mr.is_ok() ? "registered despite the limit" : mr.status().message().c_str());
  std::exit(mr.is_ok() ? 1 : 0);
}

TEST(IbDevicesGuest, LowMemlockIsAnErrorNamingTheLimitAndTheFix) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(register_under_low_memlock(), ::testing::ExitedWithCode(0),
              "registering [0-9]+ bytes of memory with rxe0 failed: Cannot allocate memory; the locked-memory "
              "limit \\(RLIMIT_MEMLOCK, `ulimit -l`\\) is 64 KiB.*ulimit -l unlimited");
}

TEST(IbDevicesGuest, GpuDirectProbeOnSoftRoceSaysWhyNot) {
  const std::vector<PortInfo> ports = ports_or_skip();
  SKIP_OUTSIDE_GUEST(ports);
  Verbs v("rxe0");
  ASSERT_NE(v.pd, nullptr);
  GdrProbe probe = probe_gdr(v.pd);
  EXPECT_FALSE(probe.dmabuf_supported) << "Soft-RoCE has no dma-buf support, and the guest no GPU";
  EXPECT_FALSE(probe.why_not.empty());
  GdrDecision d = decide_gdr(GdrSetting::automatic, probe);
  EXPECT_FALSE(d.use_dmabuf);
  EXPECT_FALSE(d.error);
  std::printf("%s\n", d.line.c_str());
  EXPECT_TRUE(decide_gdr(GdrSetting::on, probe).error);
}

}  // namespace
}  // namespace braid::transport::ib
