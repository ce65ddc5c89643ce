// GPUDirect RDMA's choice: BRAID_GDR (auto, 0, 1) against what the probe found.
#include "transport/ib/gdr.h"

#include <gtest/gtest.h>

namespace braid::transport::ib {
namespace {

const GdrProbe kWorks{true, true, true, ""};
// Each way a probe can fail, as probe_gdr reports it.
const GdrProbe kNoCudaBuild{false, false, false, "braid was built without CUDA"};
const GdrProbe kNoDevice{true, false, false, "no CUDA device is visible to this process"};
const GdrProbe kNicRefuses{true, true, false, "the NIC's driver refused a dma-buf registration (ibv_reg_dmabuf_mr: Operation not supported)"};

bool has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

TEST(Gdr, AutoUsesItWhenTheProbeSucceeded) {
  GdrDecision d = decide_gdr(GdrSetting::automatic, kWorks);
  EXPECT_TRUE(d.use_dmabuf);
  EXPECT_FALSE(d.error);
  EXPECT_TRUE(has(d.line, "GPUDirect RDMA on")) << d.line;
}

TEST(Gdr, AutoStagesAndSaysWhyWhenTheProbeFailed) {
  for (const GdrProbe& p : {kNoCudaBuild, kNoDevice, kNicRefuses}) {
    GdrDecision d = decide_gdr(GdrSetting::automatic, p);
    EXPECT_FALSE(d.use_dmabuf) << p.why_not;
    EXPECT_FALSE(d.error) << p.why_not;
    EXPECT_TRUE(has(d.line, "GPUDirect RDMA off: " + p.why_not)) << d.line;
    EXPECT_TRUE(has(d.line, "staged through pinned host memory")) << d.line;
  }
}

TEST(Gdr, OffNeverUsesIt) {
  for (const GdrProbe& p : {kWorks, kNoCudaBuild, kNicRefuses}) {
    GdrDecision d = decide_gdr(GdrSetting::off, p);
    EXPECT_FALSE(d.use_dmabuf);
    EXPECT_FALSE(d.error);
    EXPECT_TRUE(has(d.line, "BRAID_GDR=0")) << d.line;
  }
}

TEST(Gdr, OnUsesItWhenTheProbeSucceeded) {
  GdrDecision d = decide_gdr(GdrSetting::on, kWorks);
  EXPECT_TRUE(d.use_dmabuf);
  EXPECT_FALSE(d.error);
}

TEST(Gdr, OnWhereItCannotWorkIsAnErrorSayingWhyAndWhatToSet) {
  for (const GdrProbe& p : {kNoCudaBuild, kNoDevice, kNicRefuses}) {
    GdrDecision d = decide_gdr(GdrSetting::on, p);
    EXPECT_FALSE(d.use_dmabuf);
    EXPECT_TRUE(d.error);
    EXPECT_TRUE(has(d.line, "BRAID_GDR=1")) << d.line;
    EXPECT_TRUE(has(d.line, p.why_not)) << d.line;
    EXPECT_TRUE(has(d.line, "BRAID_GDR=auto")) << d.line;
  }
}

// A probe that claims dma-buf without having seen device memory is not trusted.
TEST(Gdr, EveryStepOfTheProbeMustHaveSucceeded) {
  EXPECT_FALSE(decide_gdr(GdrSetting::automatic, {false, true, true, ""}).use_dmabuf);
  EXPECT_FALSE(decide_gdr(GdrSetting::automatic, {true, false, true, ""}).use_dmabuf);
  GdrDecision d = decide_gdr(GdrSetting::on, {true, true, false, ""});
  EXPECT_TRUE(d.error);
  EXPECT_FALSE(d.line.empty());
}

TEST(Gdr, SettingFromBraidGdr) {
  EXPECT_EQ(parse_gdr_setting("auto").value(), GdrSetting::automatic);
  EXPECT_EQ(parse_gdr_setting("0").value(), GdrSetting::off);
  EXPECT_EQ(parse_gdr_setting("1").value(), GdrSetting::on);
  auto bad = parse_gdr_setting("yes");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(has(bad.status().message(), "BRAID_GDR='yes'")) << bad.status().message();
}

}  // namespace
}  // namespace braid::transport::ib
