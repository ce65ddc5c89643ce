// The sysfs fallback for a port's GID table, on a tree shaped like /sys/class/infiniband/DEV/ports/N.
#include "transport/ib/gid_sysfs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace braid::transport::ib {
namespace {

namespace fs = std::filesystem;

class GidSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid_gid_sysfs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "gids");
    fs::create_directories(dir_ / "gid_attrs/types");
    fs::create_directories(dir_ / "gid_attrs/ndevs");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void entry(int index, const std::string& gid, const std::string& type, const std::string& ndev) {
    const std::string i = std::to_string(index);
    std::ofstream(dir_ / "gids" / i) << gid << "\n";
    if (!type.empty()) std::ofstream(dir_ / "gid_attrs/types" / i) << type << "\n";
    if (!ndev.empty()) std::ofstream(dir_ / "gid_attrs/ndevs" / i) << ndev << "\n";
  }

  fs::path dir_;
};

TEST_F(GidSysfs, ReadsValidEntriesWithTypeAndInterface) {
  entry(0, "fe80:0000:0000:0000:0211:22ff:fe33:4455", "IB/RoCE v1", "veth0");
  entry(1, "fe80:0000:0000:0000:0211:22ff:fe33:4455", "RoCE v2", "veth0");
  entry(2, "0000:0000:0000:0000:0000:0000:0000:0000", "", "");  // an empty slot
  entry(3, "0000:0000:0000:0000:0000:ffff:0a63:0001", "RoCE v2", "veth0");
  entry(4, "not a gid", "RoCE v2", "veth0");
  // index 5 has no file at all
  std::vector<GidInfo> gids = read_gids_sysfs(dir_.string(), 6);
  ASSERT_EQ(gids.size(), 3u);
  EXPECT_EQ(gids[0].index, 0);
  EXPECT_FALSE(gids[0].roce_v2);
  EXPECT_EQ(format_gid(gids[0].gid), "fe80::211:22ff:fe33:4455");
  EXPECT_EQ(gids[1].index, 1);
  EXPECT_TRUE(gids[1].roce_v2);
  EXPECT_EQ(gids[2].index, 3);
  EXPECT_TRUE(gids[2].roce_v2);
  EXPECT_EQ(gids[2].netdev, "veth0");
  EXPECT_EQ(format_gid(gids[2].gid), "::ffff:10.99.0.1");
}

TEST_F(GidSysfs, MissingDirectoryGivesNothing) {
  EXPECT_TRUE(read_gids_sysfs((dir_ / "absent").string(), 4).empty());
}

}  // namespace
}  // namespace braid::transport::ib
