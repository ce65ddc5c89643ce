// bench/transport/ib_raw_exchange_bench.cc - the floor under braid's 8-byte latency over ib,
// without braid: plain libibverbs, perftest's technique (an inline RDMA WRITE, signaled only
// every kSignalEvery-th time, and the receiver polling the last byte of its buffer, never a
// CQ), between two devices of one process (rxe0 and rxe1 in the Soft-RoCE guest), one thread
// per end.
//
// Two verbs choices of braid's own can be switched on, to price them here: --signal-all (every
// write signaled, and an iteration waits for its own write's completion too, as braid's sends
// complete) and --imm (RDMA WRITE WITH IMMEDIATE into posted receives, the receiver polling its
// CQ instead of the buffer, as braid's eager messages arrive).
//
// Two patterns: --pingpong (one end writes, the other answers once it sees the write: half a
// round trip is what ib_write_lat reports as its latency, so this checks the tool against
// perftest) and the default exchange (both ends write at once each iteration and wait for the
// other's write: what the two ranks of a 2-rank sendrecv or all_reduce do). It answers whether
// an exchange can be as fast as ib_write_lat's one-way figure on this machine at all, whatever
// the library above.
//
//   ib_raw_exchange_bench [--pingpong] [--signal-all] [--imm] [--iters 2000] [--warmup 100] [--bytes 8]
//                         [--devices rxe0,rxe1] [--gid-index 1]
//
// Output: a readable line, then "RESULT<TAB>median_us<TAB>p10<TAB>p90" (per iteration for an
// exchange, half a round trip for a ping-pong).
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSignalEvery = 64;  // a signaled write now and then, so the send queue drains
constexpr int kQueueDepth = 128;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "ib_raw_exchange_bench: %s\n", why.c_str());
  std::exit(1);
}

// One end: a device, a PD, a CQ, an RC QP and a registered buffer the peer writes into. The
// buffer's first `bytes` are the message; its last byte carries the iteration's number (low 8
// bits), written last by the peer, which is what the receiver polls (as perftest does).
struct End {
  bool signal_all = false, imm = false;
  bool send_pending = false;  // --signal-all: this iteration's write has not completed yet
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<unsigned char> in, out;
  ibv_gid gid{};
  uint8_t port = 1;
  ibv_mtu mtu = IBV_MTU_1024;
  int gid_index = 1;

  void open(const std::string& name, size_t bytes) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    for (int i = 0; list != nullptr && i < n; ++i) {
      if (name == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
    }
    if (list != nullptr) ibv_free_device_list(list);
    if (ctx == nullptr) die("no device " + name);
    ibv_port_attr pa{};
    if (ibv_query_port(ctx, port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) die(name + " port 1 is not active");
    mtu = pa.active_mtu;
    if (ibv_query_gid(ctx, port, gid_index, &gid) != 0) die(name + ": no GID at index " + std::to_string(gid_index));
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, kQueueDepth, nullptr, nullptr, 0);
    recv_cq = ibv_create_cq(ctx, kQueueDepth, nullptr, nullptr, 0);
    if (pd == nullptr || cq == nullptr || recv_cq == nullptr) die(name + ": PD or CQ");
    ibv_qp_init_attr qa{};
    qa.send_cq = cq;
    qa.recv_cq = recv_cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = kQueueDepth;
    qa.cap.max_recv_wr = kQueueDepth;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = static_cast<uint32_t>(bytes);
    qp = ibv_create_qp(pd, &qa);
    if (qp == nullptr) die(name + ": QP (inline " + std::to_string(bytes) + " bytes)");
    in.assign(bytes, 0);
    out.assign(bytes, 0);
    mr = ibv_reg_mr(pd, in.data(), bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == nullptr) die(name + ": ibv_reg_mr");
  }

  // --imm: a receive work request for each write with immediate to come (no buffer: the data
  // goes where the write says, the receive only takes the immediate).
  void post_recv() {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(qp, &wr, &bad) != 0) die("ibv_post_recv");
  }

  // RESET -> INIT -> RTR -> RTS towards `peer`.
  void connect(const End& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) die("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = std::min(mtu, peer.mtu);
    a.dest_qp_num = peer.qp->qp_num;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer.gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = port;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
      die("RTR");
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
      die("RTS");
    }
    if (imm) {
      for (int i = 0; i < kQueueDepth; ++i) post_recv();
    }
  }

  // Writes `out` (its last byte = the iteration's mark) into the peer's buffer.
  void write(const End& peer, uint64_t iteration) {
    out.back() = static_cast<unsigned char>(iteration);
    ibv_sge sge{reinterpret_cast<uint64_t>(out.data()), static_cast<uint32_t>(out.size()), 0};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = static_cast<uint32_t>(iteration);
    wr.send_flags = IBV_SEND_INLINE;
    const bool signaled = signal_all || iteration % kSignalEvery == 0;
    if (signaled) wr.send_flags |= IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(peer.in.data());
    wr.wr.rdma.rkey = peer.mr->rkey;
    if (ibv_post_send(qp, &wr, &bad) != 0) die("ibv_post_send");
    if (signal_all) {
      send_pending = true;  // await() takes its completion
    } else if (signaled) {
      // The signaled write's completion retires it and every unsignaled one before it.
      ibv_wc wc{};
      const auto limit = Clock::now() + std::chrono::seconds(5);
      int n = 0;
      while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
        if (Clock::now() > limit) die("no completion for a signaled write within 5 s");
      }
      if (n < 0 || wc.status != IBV_WC_SUCCESS) die(std::string("write failed: ") + ibv_wc_status_str(wc.status));
    }
  }

  // Waits (bounded) until the peer's write of `iteration` has landed (and, with --signal-all,
  // this end's own write has completed). In an exchange the peer may already have written the
  // next one over it (it saw ours and went on): that counts too.
  void await(uint64_t iteration) {
    const auto mark = static_cast<unsigned char>(iteration);
    const volatile unsigned char* last = &in.back();
    const auto limit = Clock::now() + std::chrono::seconds(5);
    bool arrived = false;
    while (!arrived || send_pending) {
      if (Clock::now() > limit) die("the peer's write (or this end's completion) did not come within 5 s");
      ibv_wc wc{};
      if (send_pending) {
        const int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) die(std::string("write failed: ") + ibv_wc_status_str(wc.status));
        if (n == 1) send_pending = false;
      }
      if (arrived) continue;
      if (!imm) {
        arrived = static_cast<unsigned char>(*last - mark) <= 1;
        continue;
      }
      const int n = ibv_poll_cq(recv_cq, 1, &wc);
      if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) die(std::string("receive failed: ") + ibv_wc_status_str(wc.status));
      if (n == 1) {
        // The peer is at most one ahead, and each of its writes takes one receive: the first
        // completion not yet taken is this iteration's.
        post_recv();
        arrived = true;
      }
    }
  }

  ~End() {
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (recv_cq != nullptr) ibv_destroy_cq(recv_cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000, warmup = 100;
  size_t bytes = 8;
  bool pingpong = false, signal_all = false, imm = false;
  std::string dev0 = "rxe0", dev1 = "rxe1";
  int gid_index = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--pingpong" || k == "--signal-all" || k == "--imm") {
      (k == "--pingpong" ? pingpong : k == "--imm" ? imm : signal_all) = true;
      continue;
    }
    if (i + 1 >= argc) die("option " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--iters") iters = std::atoi(v.c_str());
    else if (k == "--warmup") warmup = std::atoi(v.c_str());
    else if (k == "--bytes") bytes = static_cast<size_t>(std::atoll(v.c_str()));
    else if (k == "--gid-index") gid_index = std::atoi(v.c_str());
    else if (k == "--devices" && v.find(',') != std::string::npos) {
      dev0 = v.substr(0, v.find(','));
      dev1 = v.substr(v.find(',') + 1);
    } else die("unknown option " + k + " (options: --pingpong --signal-all --imm --iters --warmup --bytes --devices --gid-index)");
  }
  if (iters < 1 || warmup < 0 || bytes < 1 || bytes > 256) die("--iters >= 1, --warmup >= 0, --bytes 1..256");

  End a, b;
  a.gid_index = b.gid_index = gid_index;
  a.signal_all = b.signal_all = signal_all;
  a.imm = b.imm = imm;
  a.open(dev0, bytes);
  b.open(dev1, bytes);
  a.connect(b);
  b.connect(a);

  const int total = warmup + iters;
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iters));
  // Iterations count from 1 so that a buffer's initial zero is never mistaken for a write.
  std::thread other([&] {
    for (int i = 1; i <= total; ++i) {
      if (pingpong) {
        b.await(static_cast<uint64_t>(i));
        b.write(a, static_cast<uint64_t>(i));
      } else {
        b.write(a, static_cast<uint64_t>(i));
        b.await(static_cast<uint64_t>(i));
      }
    }
  });
  for (int i = 1; i <= total; ++i) {
    const auto t0 = Clock::now();
    a.write(b, static_cast<uint64_t>(i));
    a.await(static_cast<uint64_t>(i));
    const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i > warmup) us.push_back(pingpong ? t / 2 : t);
  }
  other.join();
  std::sort(us.begin(), us.end());
  const auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  std::printf("raw verbs %s %zu B (%s <-> %s, inline RDMA WRITE%s, %s, %s), %d iterations: %s median "
              "%.2f us (p10 %.2f, p90 %.2f)\n",
              pingpong ? "ping-pong" : "exchange", bytes, dev0.c_str(), dev1.c_str(), imm ? " WITH IMMEDIATE" : "",
              imm ? "the receiver polling its CQ" : "the receiver polling the buffer",
              signal_all ? "every write signaled and awaited" : "signaled every 64th", iters,
              pingpong ? "half round trip" : "iteration", at(0.5), at(0.1), at(0.9));
  std::printf("RESULT\t%.2f\t%.2f\t%.2f\n", at(0.5), at(0.1), at(0.9));
  return 0;
}
