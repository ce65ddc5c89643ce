// A rank process that runs every operation once or twice on small counts and checks the
// results: the collectives (in place and out of place), their v forms, send/recv, barrier,
// group calls, asynchronous forms, a kept run run again, split and new_group. valgrind_test
// runs two of them under memcheck. Prints "every operation done, N wrong"; exit 0 when N is 0.
#include <braid/braid.h>

#include <cstdio>
#include <numeric>
#include <vector>

namespace {

using braid::DType;
using braid::Op;

int run_all(braid::Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  const int32_t tri = n * (n - 1) / 2;
  int wrong = 0;
  for (size_t count : {size_t{1}, size_t{300}, size_t{100000}}) {  // the last: several segments
    std::vector<int32_t> a(count, r), b(count, -1);
    for (int again = 0; again < 2; ++again) {  // the second call runs the kept run again
      std::fill(a.begin(), a.end(), r);
      comm.all_reduce(a.data(), count, DType::i32, Op::sum);
      wrong += a[count - 1] != tri;
    }
    std::vector<float> f(count, 1.5f), g(count, 0.0f);
    comm.all_reduce(f.data(), g.data(), count, DType::f32, Op::max);
    wrong += g[0] != 1.5f;
    std::fill(a.begin(), a.end(), r == 0 ? 77 : -1);
    comm.broadcast(a.data(), count, DType::i32, 0);
    wrong += a[count - 1] != 77;
    std::fill(a.begin(), a.end(), r == n - 1 ? 5 : -1);
    comm.broadcast(a.data(), b.data(), count, DType::i32, n - 1);
    wrong += b[0] != 5;
    std::fill(a.begin(), a.end(), r + 1);
    std::fill(b.begin(), b.end(), -1);
    comm.reduce(a.data(), r == 0 ? b.data() : nullptr, count, DType::i32, Op::sum, 0);
    if (r == 0) wrong += b[count - 1] != tri + n;

    std::vector<int32_t> all(count * static_cast<size_t>(n), -1), mine(count, r);
    comm.all_gather(mine.data(), all.data(), count, DType::i32);
    for (int q = 0; q < n; ++q) wrong += all[static_cast<size_t>(q) * count] != q;
    std::vector<int32_t> blocks(count * static_cast<size_t>(n), 1);
    comm.reduce_scatter(blocks.data(), b.data(), count, DType::i32, Op::sum);
    wrong += b[0] != n;
    std::fill(all.begin(), all.end(), -1);
    comm.gather(mine.data(), r == 1 % n ? all.data() : nullptr, count, DType::i32, 1 % n);
    if (r == 1 % n) wrong += all[all.size() - 1] != n - 1;
    std::iota(blocks.begin(), blocks.end(), 0);
    comm.scatter(r == 0 ? blocks.data() : nullptr, b.data(), count, DType::i32, 0);
    wrong += b[0] != static_cast<int32_t>(static_cast<size_t>(r) * count);
    std::fill(blocks.begin(), blocks.end(), r);
    comm.all_to_all(blocks.data(), all.data(), count, DType::i32);
    for (int q = 0; q < n; ++q) wrong += all[static_cast<size_t>(q) * count] != q;

    // v forms: rank q brings q + count elements.
    std::vector<size_t> counts(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) counts[static_cast<size_t>(q)] = count + static_cast<size_t>(q);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<int32_t> vmine(counts[static_cast<size_t>(r)], r), vall(total, -1), vin(total, 2),
        vout(counts[static_cast<size_t>(r)], -1);
    comm.all_gatherv(vmine.data(), vall.data(), counts, DType::i32);
    wrong += vall[0] != 0 || vall[total - 1] != n - 1;
    comm.reduce_scatterv(vin.data(), vout.data(), counts, DType::i32, Op::sum);
    wrong += vout[vout.size() - 1] != 2 * n;
    std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      sc[static_cast<size_t>(q)] = static_cast<size_t>(r + q + 1);  // to q
      rc[static_cast<size_t>(q)] = static_cast<size_t>(q + r + 1);  // from q (what q sends to us)
    }
    std::vector<int32_t> ain(std::accumulate(sc.begin(), sc.end(), size_t{0}), r),
        aout(std::accumulate(rc.begin(), rc.end(), size_t{0}), -1);
    comm.all_to_allv(ain.data(), sc, aout.data(), rc, DType::i32);
    wrong += aout[0] != 0 || aout[aout.size() - 1] != n - 1;
  }
  comm.barrier();
  comm.barrier();  // a kept barrier, run again
  if (n > 1) {
    std::vector<int64_t> msg(17, r == 0 ? 1234 : 0);
    if (r == 0) comm.send(msg.data(), msg.size(), DType::i64, 1, 3);
    if (r == 1) comm.recv(msg.data(), msg.size(), DType::i64, 0, 3);
    if (r == 1) wrong += msg[16] != 1234;
    // A group: both directions at once, then a coalesced pair of all_reduces.
    std::vector<int32_t> out(9, r), in(9, -1), x(5, 1), y(7, 2);
    const int peer = r ^ 1;
    if (peer < n) {
      comm.group_start();
      comm.send_async(out.data(), out.size(), DType::i32, peer);
      comm.recv_async(in.data(), in.size(), DType::i32, peer);
      comm.group_end().wait();
      wrong += in[8] != peer;
    }
    comm.group_start();
    comm.all_reduce_async(x.data(), x.size(), DType::i32, Op::sum);
    comm.all_reduce_async(y.data(), y.size(), DType::i32, Op::sum);
    comm.group_end().wait();
    wrong += x[4] != n || y[6] != 2 * n;
  }
  std::vector<double> d(100, 1.0);
  braid::Work w1 = comm.all_reduce_async(d.data(), d.size(), DType::f64, Op::sum);
  braid::Work w2 = comm.barrier_async();
  w1.wait();
  w2.wait();
  wrong += d[99] != n;
  return wrong;
}

}  // namespace

int main() {
  try {
    braid::Communicator comm = braid::Communicator::from_env();
    int wrong = run_all(comm);
    {
      braid::Communicator sub = comm.split(0, -comm.rank());  // every rank, in reverse order
      wrong += run_all(sub);
      std::vector<int> everyone(static_cast<size_t>(comm.size()));
      std::iota(everyone.begin(), everyone.end(), 0);
      braid::Communicator group = comm.new_group(everyone);
      std::vector<int32_t> v(3, 1);
      group.all_reduce(v.data(), v.size(), DType::i32, Op::sum);
      wrong += v[2] != comm.size();
    }
    std::printf("rank %d: every operation done, %d wrong\n", comm.rank(), wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "every_op_rank: %s\n", e.what());
    return 2;
  }
}
