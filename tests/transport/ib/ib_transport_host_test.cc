// The ib transport where this build has verbs but the machine may have no RDMA device: the
// registry offers "ib", creating it without a usable port is an error that says what exists and
// what to set (so a caller can fall back to tcp), and failed work completions read as the
// operation's error should (wc_error.h).
#include <gtest/gtest.h>

#include <string>

#include "transport/ib/ib_devices.h"
#include "transport/ib/wc_error.h"
#include "transport/registry.h"

namespace braid::transport::ib {
namespace {

bool has_active_port() {
  auto ports = enumerate_ports();
  if (!ports.is_ok()) return false;
  for (const PortInfo& p : ports.value()) {
    if (p.active) return true;
  }
  return false;
}

TEST(IbTransportHost, RegistryOffersIb) {
  bool found = false;
  for (const TransportEntry& e : transport_registry()) {
    if (e.name == "ib") {
      found = true;
      EXPECT_TRUE(e.available) << e.unavailable_reason;
    }
  }
  EXPECT_TRUE(found);
}

TEST(IbTransportHost, NoUsablePortIsAnErrorSayingWhatToSet) {
  if (has_active_port()) GTEST_SKIP() << "this machine has an active RDMA port";
  TransportOptions o;
  o.listen_host = "127.0.0.1";
  auto t = create_transport("ib", o);
  ASSERT_FALSE(t.is_ok());
  const std::string& m = t.status().message();
  EXPECT_EQ(m.rfind("BRAID_TRANSPORT=ib: ", 0), 0u) << m;
  EXPECT_NE(m.find("BRAID_TRANSPORT=tcp"), std::string::npos) << m;
}

TEST(IbTransportHost, QpsPerConnectionOutOfRangeIsNamed) {
  TransportOptions o;
  o.listen_host = "127.0.0.1";
  o.env.ib_qps_per_connection = 65;
  auto t = create_transport("ib", o);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("BRAID_IB_QPS_PER_CONNECTION=65"), std::string::npos) << t.status().message();
}

ibv_wc failed(ibv_wc_status status) {
  ibv_wc wc{};
  wc.status = status;
  wc.vendor_err = 0x81;
  return wc;
}

TEST(IbTransportHost, RetryExhaustedSaysThePeerStoppedAnsweringAndWhatToRaise) {
  QpSettings s;
  s.timeout = 14;
  s.retry_cnt = 3;
  const std::string m = describe_wc_failure(failed(IBV_WC_RETRY_EXC_ERR), "writing", s);
  EXPECT_EQ(wc_error_code(IBV_WC_RETRY_EXC_ERR), ErrorCode::peer_lost);
  EXPECT_NE(m.find("writing failed: transport retry counter exceeded (verbs status 12, vendor error 0x81)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("BRAID_IB_TIMEOUT (now 14)"), std::string::npos) << m;
  EXPECT_NE(m.find("BRAID_IB_RETRY_CNT (now 3)"), std::string::npos) << m;
}

TEST(IbTransportHost, EveryFailedStatusGetsAStatusStringAndAdvice) {
  for (int st = IBV_WC_LOC_LEN_ERR; st <= IBV_WC_TM_RNDV_INCOMPLETE; ++st) {
    const auto status = static_cast<ibv_wc_status>(st);
    const std::string m = describe_wc_failure(failed(status), "receiving", QpSettings{});
    EXPECT_NE(m.find(ibv_wc_status_str(status)), std::string::npos) << m;
    EXPECT_NE(m.find("; "), std::string::npos) << "no advice: " << m;
    EXPECT_NE(wc_error_code(status), ErrorCode::ok);
  }
  EXPECT_EQ(wc_error_code(IBV_WC_REM_ACCESS_ERR), ErrorCode::protocol);
  EXPECT_NE(describe_wc_failure(failed(IBV_WC_REM_ACCESS_ERR), "writing", QpSettings{}).find("deregister_memory"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::transport::ib
