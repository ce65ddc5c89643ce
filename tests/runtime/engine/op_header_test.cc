// Operation headers and settings cards: what one rank sends, the other checks. No processes.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <vector>

#include "runtime/bootstrap/agreed_settings.h"
#include "runtime/engine/op_header.h"
#include "tests/runtime/engine/op_header_fuzz.h"

namespace braid {
namespace {

using collectives::Algo;
using collectives::Kind;

OpHeader all_reduce_header(Algo algo) {
  OpHeader h;
  h.kind = Kind::all_reduce;
  h.dtype = DType::f32;
  h.op = Op::sum;
  h.comm_id = 42;
  h.issue_seq = 5;
  h.match_seq = 5;
  h.count = 1024;
  h.segment = 262144;
  h.ring_depth = 1;
  h.algo = algo;
  return h;
}

TEST(OpHeader, CarriesTheAlgorithm) {
  unsigned char wire[OpHeader::kBytes];
  all_reduce_header(Algo::tree).encode(wire);
  auto back = OpHeader::decode(wire, sizeof wire);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value().algo, Algo::tree);
  EXPECT_EQ(wire[4], OpHeader::kVersion);
  // A header of the version before (no algorithm) is not read as one of this version.
  wire[4] = 2;
  EXPECT_EQ(OpHeader::decode(wire, sizeof wire).status().code(), ErrorCode::protocol);
  // An algorithm this build does not know is a protocol error, not a value cast into the enum.
  all_reduce_header(Algo::ring).encode(wire);
  wire[62] = 200;
  EXPECT_EQ(OpHeader::decode(wire, sizeof wire).status().code(), ErrorCode::protocol);
}

// The same call, run with two different schedules: the old header matched it (the algorithm
// was not in it) and the ranks combined data of different schedules.
TEST(OpHeader, DifferentAlgorithmsAreAMismatchNamingThem) {
  Status s = check_headers(all_reduce_header(Algo::ring), 0, all_reduce_header(Algo::tree), 1, "10.0.0.2:5000");
  ASSERT_EQ(s.code(), ErrorCode::mismatch);
  const std::string& m = s.message();
  EXPECT_EQ(m.rfind("all_reduce #5 on rank 0: rank 1 (10.0.0.2:5000) runs it as tree, this rank as ring", 0), 0u) << m;
  EXPECT_NE(m.find("BRAID_ALGO"), std::string::npos) << m;
  EXPECT_EQ(m.find("count"), std::string::npos) << m;
  EXPECT_TRUE(check_headers(all_reduce_header(Algo::rd), 0, all_reduce_header(Algo::rd), 1, "x").is_ok());
}

// A different call is described as one, whatever algorithms the ranks chose for it.
TEST(OpHeader, ADifferentCallIsNamedBeforeTheAlgorithm) {
  OpHeader theirs = all_reduce_header(Algo::tree);
  theirs.count = 999;
  Status s = check_headers(all_reduce_header(Algo::ring), 0, theirs, 1, "x");
  ASSERT_EQ(s.code(), ErrorCode::mismatch);
  EXPECT_NE(s.message().find("count 999"), std::string::npos) << s.message();
}

// Segments and ring depth are checked like the call (ranks that created the communicator with
// other settings are stopped before, agreed_settings.h; this is the operation's own guard).
TEST(OpHeader, DifferentPipelinesNameTheSettings) {
  OpHeader theirs = all_reduce_header(Algo::ring);
  theirs.segment = 65536;
  theirs.ring_depth = 3;
  Status s = check_headers(all_reduce_header(Algo::ring), 0, theirs, 1, "x");
  ASSERT_EQ(s.code(), ErrorCode::mismatch);
  EXPECT_NE(s.message().find("pipelines in segments of 65536 bytes at ring depth 3, this rank in 262144 bytes at depth 1"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("BRAID_CHUNK_BYTES and BRAID_RING_DEPTH"), std::string::npos) << s.message();
}

// Random bytes and mutated valid headers: every answer a clean error or a header that
// round-trips, every check ok or a mismatch (the fuzzer's checks abort otherwise).
// The byte comparison that spares the usual receive a decode and a field-by-field check says
// yes to a peer's header of the same call (whatever its issue number), and never where
// check_headers would not pass: headers of every kind, each field changed in turn or several
// bytes at random, sent both ways.
TEST(OpHeader, AMirroredHeaderPassesWithoutDecodingAndOnlyWhereTheCheckWould) {
  unsigned char mine_wire[OpHeader::kBytes], theirs_wire[OpHeader::kBytes];
  OpHeader mine = all_reduce_header(Algo::rd);
  OpHeader theirs = mine;
  theirs.issue_seq = 9;  // the peer's own count of its operations
  mine.encode(mine_wire);
  theirs.encode(theirs_wire);
  EXPECT_TRUE(mirrors(mine, mine_wire, theirs_wire, sizeof theirs_wire));
  EXPECT_TRUE(check_headers(mine, 0, theirs, 1, "peer").is_ok());
  EXPECT_FALSE(mirrors(mine, mine_wire, theirs_wire, sizeof theirs_wire - 1)) << "a short header is not one";

  std::mt19937 rng(29);
  size_t yes = 0;
  for (int i = 0; i < 20000; ++i) {
    OpHeader a = all_reduce_header(i % 3 == 0 ? Algo::ring : Algo::rd);
    a.kind = static_cast<Kind>(rng() % (static_cast<unsigned>(Kind::recv) + 1));
    a.root = static_cast<int32_t>(rng() % 2);
    a.flags = rng() % 4 == 0 ? 1u : 0u;
    a.aux = rng() % 4 == 0 ? rng() % 3 : 0;
    a.count = rng() % 4 == 0 ? a.aux : 1024;
    a.encode(mine_wire);
    std::copy(mine_wire, mine_wire + sizeof mine_wire, theirs_wire);
    if ((a.kind == Kind::send || a.kind == Kind::recv) && rng() % 2 == 0) {  // the other side's header
      OpHeader other = a;
      other.kind = a.kind == Kind::send ? Kind::recv : Kind::send;
      other.root = static_cast<int32_t>(rng() % 4);
      other.issue_seq = rng() % 8;
      other.encode(theirs_wire);
    }
    for (int flips = static_cast<int>(rng() % 3); flips > 0; --flips) {
      theirs_wire[rng() % sizeof theirs_wire] ^= static_cast<unsigned char>(1u << (rng() % 8));
    }
    if (!mirrors(a, mine_wire, theirs_wire, sizeof theirs_wire)) continue;
    ++yes;
    auto b = OpHeader::decode(theirs_wire, sizeof theirs_wire);
    ASSERT_TRUE(b.is_ok()) << i;
    EXPECT_TRUE(check_headers(a, 0, b.value(), 1, "peer").is_ok()) << i << " " << a.describe() << " / " << b.value().describe();
  }
  EXPECT_GT(yes, 1000u);
}

// A receive's header and the header of the send it takes are each other's mirror (the kind
// swapped, each root naming the other side), so the usual point-to-point message passes the
// byte comparison; a send meeting a send, another tag, count or message number does not.
TEST(OpHeader, ASendsHeaderMirrorsTheMatchingReceives) {
  collectives::CollectiveArgs send_args;
  send_args.kind = Kind::send;
  send_args.count = 2;
  send_args.dtype = DType::f32;
  send_args.peer = 1;  // rank 0 sends to rank 1
  send_args.tag = 7;
  collectives::CollectiveArgs recv_args = send_args;
  recv_args.kind = Kind::recv;
  recv_args.peer = 0;  // rank 1 receives from rank 0
  auto wire = [](OpHeader h) {
    h.segment = 4096;
    h.algo = Algo::direct;
    std::array<unsigned char, OpHeader::kBytes> w{};
    h.encode(w.data());
    return w;
  };
  OpHeader mine = OpHeader::for_peer(recv_args, 0, 42, 3, 2);
  mine.segment = 4096;
  mine.algo = Algo::direct;
  const auto mine_wire = wire(mine);
  const auto theirs = wire(OpHeader::for_peer(send_args, 1, 42, 17, 2));
  EXPECT_TRUE(mirrors(mine, mine_wire.data(), theirs.data(), theirs.size()));
  auto decoded = OpHeader::decode(theirs.data(), theirs.size());
  ASSERT_TRUE(decoded.is_ok());
  EXPECT_TRUE(check_headers(mine, 1, decoded.value(), 0, "peer").is_ok());

  EXPECT_FALSE(mirrors(mine, mine_wire.data(), mine_wire.data(), mine_wire.size())) << "a receive meeting a receive";
  collectives::CollectiveArgs other = send_args;
  other.tag = 8;
  EXPECT_FALSE(mirrors(mine, mine_wire.data(), wire(OpHeader::for_peer(other, 1, 42, 17, 2)).data(), OpHeader::kBytes));
  other = send_args;
  other.count = 3;
  EXPECT_FALSE(mirrors(mine, mine_wire.data(), wire(OpHeader::for_peer(other, 1, 42, 17, 2)).data(), OpHeader::kBytes));
  EXPECT_FALSE(mirrors(mine, mine_wire.data(), wire(OpHeader::for_peer(send_args, 1, 42, 17, 3)).data(), OpHeader::kBytes))
      << "another message number";
}

// A kept run called again renumbers its encoded headers in place (OpRun::reuse): the bytes must
// be what encoding the new call's header from scratch gives, for collectives and tagged sends.
TEST(OpHeader, RenumberingAnEncodedHeaderGivesTheNewCallsBytes) {
  collectives::CollectiveArgs args;
  args.count = 1000;
  args.dtype = DType::bf16;
  for (Kind kind : {Kind::all_reduce, Kind::broadcast, Kind::send, Kind::recv}) {
    args.kind = kind;
    args.root = 1;
    args.peer = 1;
    args.tag = 7;
    OpHeader kept = OpHeader::for_peer(args, 1, 42, 3, 2);
    kept.segment = 4096;
    kept.algo = Algo::ring;
    unsigned char wire[OpHeader::kBytes], fresh_wire[OpHeader::kBytes];
    kept.encode(wire);
    args.tag = 9;
    kept.renumber(args, 43, 11, 5, wire);
    OpHeader fresh = OpHeader::for_peer(args, 1, 43, 11, 5);
    fresh.segment = 4096;
    fresh.algo = Algo::ring;
    fresh.encode(fresh_wire);
    EXPECT_TRUE(std::equal(wire, wire + sizeof wire, fresh_wire)) << collectives::to_string(kind);
  }
}

TEST(OpHeader, FuzzedBytes) {
  std::mt19937 rng(17);
  unsigned char valid[OpHeader::kBytes];
  all_reduce_header(Algo::ring).encode(valid);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes;
    if (i % 2 == 0) {
      bytes.resize(rng() % 80);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (bytes.size() >= 8 && i % 4 == 0) {  // past the magic and version, into the fields
        std::copy(valid, valid + 5, bytes.begin());
      }
    } else {
      bytes.assign(valid, valid + sizeof valid);
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
        bytes[5 + rng() % (bytes.size() - 5)] = static_cast<uint8_t>(rng());
      }
      if (rng() % 8 == 0) bytes.resize(rng() % 100, 0);
    }
    fuzz_op_header(bytes.data(), bytes.size());
  }
}

Env with(const std::string& algo, size_t chunk = 0, const std::string& transport = "auto") {
  Env e;
  e.algo = algo;
  e.chunk_bytes = chunk;
  e.transport = transport;
  return e;
}

TEST(AgreedSettings, EqualSettingsAgree) {
  EXPECT_TRUE(check_settings({settings_card(with("ring")), settings_card(with("ring"))}).is_ok());
  EXPECT_TRUE(check_settings({settings_card(Env{})}).is_ok());
  // One wire protocol: tcp over io_uring, over epoll, or whichever works.
  EXPECT_TRUE(check_settings({settings_card(with("auto", 0, "tcp")), settings_card(with("auto", 0, "tcp-poll")),
                              settings_card(with("auto", 0, "auto"))})
                  .is_ok());
}

TEST(AgreedSettings, ADifferenceNamesTheSettingTheValuesAndTheRanks) {
  Status s = check_settings({settings_card(with("ring")), settings_card(with("tree")), settings_card(with("ring")),
                             settings_card(with("ring"))});
  ASSERT_EQ(s.code(), ErrorCode::mismatch);
  EXPECT_EQ(s.message(), "BRAID_ALGO differs between ranks: ranks 0, 2, 3 have 'ring', rank 1 has 'tree'; "
                         "set it the same on every rank (or leave it unset)");
  s = check_settings({settings_card(with("auto", 0, "inproc")), settings_card(with("auto", 65536, "tcp"))});
  ASSERT_EQ(s.code(), ErrorCode::mismatch);
  EXPECT_NE(s.message().find("BRAID_CHUNK_BYTES differs between ranks: rank 0 has '0' (automatic), rank 1 has '65536'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("BRAID_TRANSPORT differs between ranks: rank 0 has 'inproc', rank 1 has 'tcp'"),
            std::string::npos)
      << s.message();
}

TEST(AgreedSettings, TheRingOrderMustAgree) {
  Env rank_order;
  rank_order.ring_order = "rank";
  const Status s = check_settings({settings_card(Env{}), settings_card(rank_order)});
  ASSERT_EQ(s.code(), ErrorCode::mismatch);
  EXPECT_NE(s.message().find("BRAID_RING_ORDER differs between ranks: rank 0 has 'host', rank 1 has 'rank'"),
            std::string::npos)
      << s.message();
}

TEST(AgreedSettings, LongRankListsAreCut) {
  std::vector<std::string> cards(40, settings_card(with("ring")));
  cards[39] = settings_card(with("tree"));
  Status s = check_settings(cards);
  EXPECT_NE(s.message().find("ranks 0, 1, 2, 3, 4, 5, 6, 7, ... (39 ranks) have 'ring', rank 39 has 'tree'"),
            std::string::npos)
      << s.message();
}

TEST(AgreedSettings, AnUnreadableCardNamesItsRank) {
  Status s = check_settings({settings_card(Env{}), "hello"});
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_NE(s.message().find("rank 1 published settings this build cannot read"), std::string::npos) << s.message();
}

TEST(AgreedSettings, FuzzedCards) {
  std::mt19937 rng(23);
  const std::string valid = settings_card(with("tree", 8192));
  for (int i = 0; i < 10000; ++i) {
    std::string card = valid;
    if (i % 3 == 0) {
      card.resize(rng() % 200);
      for (auto& c : card) c = static_cast<char>(rng() % 4 == 0 ? '\t' : rng() % 4 == 0 ? '\n' : rng());
    } else {
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
        card[rng() % card.size()] = "\t\n0a'x"[rng() % 6];
      }
      if (rng() % 4 == 0) card.resize(rng() % card.size());
    }
    fuzz_settings_card(reinterpret_cast<const uint8_t*>(card.data()), card.size());
  }
}

}  // namespace
}  // namespace braid
