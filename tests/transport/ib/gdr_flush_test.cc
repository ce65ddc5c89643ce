// When the GPUDirect flush is due (gdr_flush.h): through the GPUDirect seam - the probe's answer
// and BRAID_GDR decide whether dma-buf is used (decide_gdr), then the receive's memory, how its
// bytes arrived and its length decide whether that receive is flushed.
#include "transport/ib/gdr_flush.h"

#include <gtest/gtest.h>

#include "transport/ib/gdr.h"

namespace braid::transport::ib {
namespace {

const GdrProbe kWorks{true, true, true, ""};
const GdrProbe kNicRefuses{true, true, false, "the NIC's driver refused a dma-buf registration"};
const GdrProbe kNoCudaBuild{false, false, false, "braid was built without CUDA"};

// What a rendezvous receive of `bytes` into `memory` needs on a transport whose GPUDirect choice
// came from `setting` and `probe`.
bool flushed(GdrSetting setting, const GdrProbe& probe, MemoryKind memory, bool written_by_nic = true,
             size_t bytes = 4096, FlushTestMode mode = FlushTestMode::off) {
  const GdrDecision d = decide_gdr(setting, probe);
  return needs_gdr_flush(FlushCase{d.use_dmabuf, memory, written_by_nic, bytes}, mode);
}

TEST(GdrFlush, DeviceMemoryIsFlushedWhereverGpuDirectIsOn) {
  EXPECT_TRUE(flushed(GdrSetting::automatic, kWorks, MemoryKind::cuda));
  EXPECT_TRUE(flushed(GdrSetting::on, kWorks, MemoryKind::cuda));
}

TEST(GdrFlush, HostMemoryIsNeverFlushed) {
  for (GdrSetting s : {GdrSetting::automatic, GdrSetting::on, GdrSetting::off}) {
    for (const GdrProbe& p : {kWorks, kNicRefuses, kNoCudaBuild}) {
      EXPECT_FALSE(flushed(s, p, MemoryKind::host)) << static_cast<int>(s) << " " << p.why_not;
    }
  }
}

// BRAID_GDR=0, or a probe that failed: CUDA buffers are staged through host memory, and no
// receive is flushed, whatever kind a registration claims.
TEST(GdrFlush, NoFlushWithoutGpuDirect) {
  EXPECT_FALSE(flushed(GdrSetting::off, kWorks, MemoryKind::cuda));
  for (GdrSetting s : {GdrSetting::automatic, GdrSetting::on, GdrSetting::off}) {
    EXPECT_FALSE(flushed(s, kNicRefuses, MemoryKind::cuda));
    EXPECT_FALSE(flushed(s, kNoCudaBuild, MemoryKind::cuda));
  }
}

// Eager messages are copied by the CPU out of a host slot, and an empty message wrote nothing:
// the NIC has no writes of theirs in flight to the buffer.
TEST(GdrFlush, OnlyWhatTheNicWroteAndOnlyWhenNotEmpty) {
  EXPECT_FALSE(flushed(GdrSetting::on, kWorks, MemoryKind::cuda, /*written_by_nic=*/false));
  EXPECT_FALSE(flushed(GdrSetting::on, kWorks, MemoryKind::cuda, true, /*bytes=*/0));
  EXPECT_TRUE(flushed(GdrSetting::on, kWorks, MemoryKind::cuda, true, 1));
}

// The test switch flushes host memory too (so Soft-RoCE runs the READ), under the same rules
// for eager and empty messages; wrong_rkey is the same with a READ that must fail.
TEST(GdrFlush, TestModesFlushHostMemory) {
  for (FlushTestMode m : {FlushTestMode::host_memory, FlushTestMode::wrong_rkey}) {
    EXPECT_TRUE(flushed(GdrSetting::automatic, kNicRefuses, MemoryKind::host, true, 4096, m));
    EXPECT_TRUE(flushed(GdrSetting::off, kWorks, MemoryKind::host, true, 4096, m));
    EXPECT_FALSE(flushed(GdrSetting::automatic, kNicRefuses, MemoryKind::host, false, 4096, m));
    EXPECT_FALSE(flushed(GdrSetting::automatic, kNicRefuses, MemoryKind::host, true, 0, m));
  }
}

TEST(GdrFlush, AFlusherExistsOnlyWhereAFlushCanBeDue) {
  EXPECT_FALSE(wants_flusher(false, FlushTestMode::off));
  EXPECT_TRUE(wants_flusher(true, FlushTestMode::off));
  EXPECT_TRUE(wants_flusher(false, FlushTestMode::host_memory));
  EXPECT_TRUE(wants_flusher(false, FlushTestMode::wrong_rkey));
  set_flush_test_mode(FlushTestMode::host_memory);
  EXPECT_EQ(flush_test_mode(), FlushTestMode::host_memory);
  set_flush_test_mode(FlushTestMode::off);
  EXPECT_EQ(flush_test_mode(), FlushTestMode::off);
}

}  // namespace
}  // namespace braid::transport::ib
