// Who may use a store: only clients that prove the job's secret, of the same job; strangers
// cannot read, write or hold on to anything.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "braid/error.h"
#include "braid/store.h"
#include "common/job_secret.h"
#include "runtime/store/store_protocol.h"
#include "tests/runtime/store/store_test_util.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using store::FrameWriter;
using store::Opcode;
using namespace store_test;

const std::string kSecret = "0123456789abcdef-the-jobs-secret";
const std::string kOtherSecret = "fedcba9876543210-another-secret";

std::unique_ptr<TcpStore> client(uint16_t port, const std::string& secret, const std::string& job_id = "") {
  return TcpStore::connect("127.0.0.1", port, {.timeout = 3s, .secret = secret, .job_id = job_id});
}

Error connect_error(uint16_t port, const std::string& secret, const std::string& job_id = "") {
  try {
    client(port, secret, job_id);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "connect must be refused";
  return Error(ErrorCode::ok, "");
}

// The requests an attacker would send on a fresh connection, as the old server answered them.
std::string attack_frames() {
  return FrameWriter().u8(static_cast<uint8_t>(Opcode::get)).bytes("braid/owner/0").i64(0).finish() +
         FrameWriter().u8(static_cast<uint8_t>(Opcode::set)).bytes("braid/c1/abort").bytes("1\n0\nforged").finish() +
         FrameWriter()
             .u8(static_cast<uint8_t>(Opcode::compare_set))
             .bytes("braid/owner/1")
             .bytes("")
             .bytes("attacker:666")
             .finish();
}

TEST(StoreAuth, ClientWithoutTheSecretCannotReadWriteOrClaim) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = kSecret});
  auto good = client(server->port(), kSecret);
  good->set("braid/owner/0", "host:123");

  for (const std::string& secret : {std::string(), kOtherSecret}) {
    Error e = connect_error(server->port(), secret);
    EXPECT_EQ(e.code(), ErrorCode::unauthenticated) << e.what();
    std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(server->port())), std::string::npos) << m;
    EXPECT_NE(m.find(auth::secret_hint()), std::string::npos) << m;
  }
  // Raw requests without a handshake get no answer but an error, and change nothing.
  UniqueFd raw = connect_raw(server->port());
  std::string hello;
  ASSERT_TRUE(read_frame_raw(raw.get(), &hello));
  send_raw(raw.get(), attack_frames());
  bool closed = false;
  std::string got = read_until_eof(raw.get(), 3s, &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.find("host:123"), std::string::npos);
  // With a wrong secret, the same requests after the handshake.
  UniqueFd wrong = connect_authenticated(server->port(), kOtherSecret);
  EXPECT_FALSE(wrong.valid());

  EXPECT_FALSE(good->check({"braid/c1/abort"}));
  EXPECT_FALSE(good->check({"braid/owner/1"}));
  EXPECT_EQ(good->compare_set("braid/owner/1", "", "host:124"), "host:124");
  EXPECT_EQ(server->num_clients(), 1u);
}

TEST(StoreAuth, TheServerMustProveItselfToo) {
  // A client with the secret refuses a store that has none, or another one: it may be a
  // stranger's store collecting the job's addresses.
  for (const std::string& server_secret : {std::string(), kOtherSecret}) {
    auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = server_secret});
    Error e = connect_error(server->port(), kSecret);
    EXPECT_EQ(e.code(), ErrorCode::unauthenticated) << e.what();
  }
}

TEST(StoreAuth, WithoutASecretOnEitherSideEverythingWorks) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = ""});
  auto c = client(server->port(), "");
  c->set("k", "v");
  EXPECT_EQ(c->get("k"), "v");
}

TEST(StoreAuth, AnotherJobOnTheSamePortIsRefusedNamingThePortAndTheJob) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = kSecret, .job_id = "job-A"});
  auto a = client(server->port(), kSecret, "job-A");
  a->set("mine", "A");
  Error e = connect_error(server->port(), kSecret, "job-B");
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  std::string m = e.what();
  EXPECT_NE(m.find(std::to_string(server->port())), std::string::npos) << m;
  EXPECT_NE(m.find("job-A"), std::string::npos) << m;
  // The serving job goes on undisturbed; a client that does not know its job id is let in.
  EXPECT_EQ(a->get("mine"), "A");
  EXPECT_EQ(client(server->port(), kSecret, "")->get("mine"), "A");
  for (int i = 0; i < 200 && server->num_clients() != 1; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server->num_clients(), 1u);
}

TEST(StoreAuth, AHandshakeTooLongIsRefusedAtItsLength) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = kSecret});
  UniqueFd raw = connect_raw(server->port());
  std::string hello;
  ASSERT_TRUE(read_frame_raw(raw.get(), &hello));
  send_raw(raw.get(), std::string("\xff\xff\xff\x03", 4) + std::string(1000, 'x'));
  bool closed = false;
  std::string got = read_until_eof(raw.get(), 3s, &closed);
  EXPECT_TRUE(closed);
  ASSERT_GE(got.size(), 5u);
  EXPECT_EQ(static_cast<store::ReplyKind>(got[4]), store::ReplyKind::error);
  EXPECT_EQ(client(server->port(), kSecret)->num_keys(), 0);
}

TEST(StoreAuth, ASilentConnectionIsClosedAtItsHandshakeDeadline) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = kSecret, .handshake_timeout = 300ms});
  UniqueFd raw = connect_raw(server->port());
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  read_until_eof(raw.get(), 5s, &closed);
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);  // detection bound: deadline + margin
}

TEST(StoreAuth, IdleStrangersBeyondTheCapCannotKeepTheJobOut) {
  raise_fd_limit();
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = kSecret, .max_pending = 16});
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(connect_raw(server->port()));
  for (int i = 0; i < 8; ++i) {
    auto c = client(server->port(), kSecret);
    c->add("n", 1);
  }
  EXPECT_EQ(client(server->port(), kSecret)->get("n"), "8");
}

TEST(StoreAuth, AnAuthenticatedClientsOversizeRequestIsRefusedAtItsLength) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, {.secret = kSecret, .max_frame_bytes = 64 << 10});
  auto good = client(server->port(), kSecret);
  good->set("big-but-allowed", std::string(60 << 10, 'b'));
  UniqueFd raw = connect_authenticated(server->port(), kSecret);
  ASSERT_TRUE(raw.valid());
  send_raw(raw.get(), std::string("\x01\x00\x01\x00", 4) + std::string(1000, 'x'));  // 64 KiB + 1
  bool closed = false;
  std::string got = read_until_eof(raw.get(), 3s, &closed);
  EXPECT_TRUE(closed);
  EXPECT_NE(got.find("BRAID_STORE_MAX_FRAME_BYTES"), std::string::npos) << got;
  EXPECT_EQ(good->get("big-but-allowed").size(), size_t{60 << 10});
}

}  // namespace
}  // namespace braid
