// The collectives as Communicator methods. Each is written once, as the function that checks
// its arguments and runs the operation; def_both() binds it twice: `name` (blocking, without
// the GIL) and `name_async` (returns the braid.Work). Blocking calls use the C++ blocking form,
// not async + wait: with nothing else queued it runs on the calling thread, where an async
// operation would wake the progress thread first.
//
// Python spells the C++ overloads with None: all_reduce(send) is in place and
// all_reduce(send, recv) out of place. Element counts come from the buffers, and every buffer
// of a call must hold the same dtype.

#include <numeric>
#include <string>
#include <vector>

#include "py_communicator.h"

namespace braid::python {
namespace {

using Cls = py::class_<PyCommunicator, std::shared_ptr<PyCommunicator>>;
using WorkPtr = std::shared_ptr<PyWork>;

// One call's buffers and checks; every message names the call and the argument.
class Call {
 public:
  enum class Mode { blocking, async };
  Call(PyCommunicator& pc, const char* name, Mode mode)
      : pc_(pc), comm_(pc.get(name)), use_(pc.holder()), name_(name), mode_(mode) {}

  int size() const { return comm_.size(); }
  int rank() const { return comm_.rank(); }

  Buffer& in(py::handle obj, const char* arg) { return take(obj, arg, Access::read); }
  Buffer& out(py::handle obj, const char* arg) { return take(obj, arg, Access::write); }

  void same_dtype(const Buffer& a, const char* a_name, const Buffer& b, const char* b_name) const {
    if (a.dtype() == b.dtype()) return;
    throw py::type_error(std::string(name_) + ": argument '" + b_name + "' holds " + to_string(b.dtype()) +
                         " but '" + a_name + "' holds " + to_string(a.dtype()) + ": both must have one dtype");
  }
  void count_is(const Buffer& b, const char* arg, size_t want, const std::string& rule) const {
    if (b.count() == want) return;
    throw py::value_error(std::string(name_) + ": argument '" + arg + "' holds " + std::to_string(b.count()) +
                          " elements; it must hold " + rule + " = " + std::to_string(want));
  }
  size_t per_rank(const Buffer& b, const char* arg) const {
    size_t n = static_cast<size_t>(size());
    if (b.count() % n != 0) {
      throw py::value_error(std::string(name_) + ": argument '" + arg + "' holds " + std::to_string(b.count()) +
                            " elements, not a multiple of the communicator's size " + std::to_string(n));
    }
    return b.count() / n;
  }
  std::vector<size_t> counts(const std::vector<size_t>& c, const char* arg) const {
    if (c.size() != static_cast<size_t>(size())) {
      throw py::value_error(std::string(name_) + ": argument '" + arg + "' has " + std::to_string(c.size()) +
                            " entries; it needs one per rank (" + std::to_string(size()) + ")");
    }
    return c;
  }
  int peer(int r, const char* arg) const {
    if (r < 0 || r >= size()) {
      throw py::value_error(std::string(name_) + ": " + arg + " " + std::to_string(r) +
                            " is not a rank of this communicator (size " + std::to_string(size()) + ")");
    }
    return r;
  }
  Op op(py::handle obj) const {
    if (py::isinstance<Op>(obj)) return obj.cast<Op>();
    Op o;
    if (py::isinstance<py::str>(obj) && parse_op(obj.cast<std::string>().c_str(), &o)) return o;
    throw py::value_error(std::string(name_) + ": op " + py::repr(obj).cast<std::string>() +
                          " is not one of 'sum', 'prod', 'min', 'max', 'avg', 'band', 'bor', 'bxor' (or braid.Op)");
  }

  // Blocking: runs `blocking` without the GIL and returns nullptr; the buffers stay held
  // until this Call ends. Async: starts `async` and returns its Work, which holds them.
  template <class Blocking, class Async>
  WorkPtr run(Blocking&& blocking, Async&& async) {
    if (mode_ == Mode::async) return pc_.track(async(comm_), std::move(held_));
    py::gil_scoped_release nogil;
    blocking(comm_);
    return nullptr;
  }

 private:
  Buffer& take(py::handle obj, const char* arg, Access access) {
    held_.push_back(Buffer::acquire(obj, name_, arg, access));
    return *held_.back();
  }

  PyCommunicator& pc_;
  Communicator& comm_;
  CommHolder::Use use_;  // close() on another thread waits for this call
  const char* name_;
  Mode mode_;
  HeldBuffers held_;
};

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

WorkPtr all_reduce(Call& c, py::object send, py::object recv, py::object op) {
  Op o = c.op(op);
  if (recv.is_none()) {
    Buffer& b = c.out(send, "send");
    return c.run([&](Communicator& m) { m.all_reduce(b.data(), b.count(), b.dtype(), o); },
               [&](Communicator& m) { return m.all_reduce_async(b.data(), b.count(), b.dtype(), o); });
  }
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(r, "recv", s.count(), "as many as 'send'");
  return c.run([&](Communicator& m) { m.all_reduce(s.data(), r.data(), s.count(), s.dtype(), o); },
               [&](Communicator& m) { return m.all_reduce_async(s.data(), r.data(), s.count(), s.dtype(), o); });
}

WorkPtr broadcast(Call& c, py::object send, py::object recv, int root) {
  c.peer(root, "root");
  if (recv.is_none()) {
    Buffer& b = c.out(send, "send");
    return c.run([&](Communicator& m) { m.broadcast(b.data(), b.count(), b.dtype(), root); },
               [&](Communicator& m) { return m.broadcast_async(b.data(), b.count(), b.dtype(), root); });
  }
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(s, "send", r.count(), "as many as 'recv'");
  return c.run([&](Communicator& m) { m.broadcast(s.data(), r.data(), r.count(), r.dtype(), root); },
               [&](Communicator& m) { return m.broadcast_async(s.data(), r.data(), r.count(), r.dtype(), root); });
}

WorkPtr reduce(Call& c, py::object send, py::object recv, py::object op, int root) {
  Op o = c.op(op);
  c.peer(root, "root");
  bool is_root = c.rank() == root;
  if (recv.is_none()) {  // in place: the result lands in root's send
    Buffer& s = is_root ? c.out(send, "send") : c.in(send, "send");
    return c.run([&](Communicator& m) { m.reduce(s.data(), is_root ? s.data() : nullptr, s.count(), s.dtype(), o, root); },
               [&](Communicator& m) { return m.reduce_async(s.data(), is_root ? s.data() : nullptr, s.count(), s.dtype(), o, root); });
  }
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(r, "recv", s.count(), "as many as 'send'");
  return c.run([&](Communicator& m) { m.reduce(s.data(), r.data(), s.count(), s.dtype(), o, root); },
               [&](Communicator& m) { return m.reduce_async(s.data(), r.data(), s.count(), s.dtype(), o, root); });
}

WorkPtr all_gather(Call& c, py::object send, py::object recv) {
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(r, "recv", s.count() * c.size(), "size * len(send)");
  return c.run([&](Communicator& m) { m.all_gather(s.data(), r.data(), s.count(), s.dtype()); },
               [&](Communicator& m) { return m.all_gather_async(s.data(), r.data(), s.count(), s.dtype()); });
}

WorkPtr all_gatherv(Call& c, py::object send, py::object recv, std::vector<size_t> counts) {
  counts = c.counts(counts, "counts");
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(s, "send", counts[c.rank()], "counts[rank]");
  c.count_is(r, "recv", sum(counts), "sum(counts)");
  return c.run([&](Communicator& m) { m.all_gatherv(s.data(), r.data(), counts, s.dtype()); },
               [&](Communicator& m) { return m.all_gatherv_async(s.data(), r.data(), counts, s.dtype()); });
}

WorkPtr reduce_scatter(Call& c, py::object send, py::object recv, py::object op) {
  Op o = c.op(op);
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(s, "send", r.count() * c.size(), "size * len(recv)");
  return c.run([&](Communicator& m) { m.reduce_scatter(s.data(), r.data(), r.count(), r.dtype(), o); },
               [&](Communicator& m) { return m.reduce_scatter_async(s.data(), r.data(), r.count(), r.dtype(), o); });
}

WorkPtr reduce_scatterv(Call& c, py::object send, py::object recv, std::vector<size_t> counts,
                        py::object op) {
  Op o = c.op(op);
  counts = c.counts(counts, "counts");
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(s, "send", sum(counts), "sum(counts)");
  c.count_is(r, "recv", counts[c.rank()], "counts[rank]");
  return c.run([&](Communicator& m) { m.reduce_scatterv(s.data(), r.data(), counts, r.dtype(), o); },
               [&](Communicator& m) { return m.reduce_scatterv_async(s.data(), r.data(), counts, r.dtype(), o); });
}

WorkPtr gather(Call& c, py::object send, py::object recv, int root) {
  c.peer(root, "root");
  Buffer& s = c.in(send, "send");
  void* r_data = nullptr;
  if (c.rank() == root) {  // recv matters at root only
    Buffer& r = c.out(recv, "recv");
    c.same_dtype(s, "send", r, "recv");
    c.count_is(r, "recv", s.count() * c.size(), "size * len(send)");
    r_data = r.data();
  }
  return c.run([&](Communicator& m) { m.gather(s.data(), r_data, s.count(), s.dtype(), root); },
               [&](Communicator& m) { return m.gather_async(s.data(), r_data, s.count(), s.dtype(), root); });
}

WorkPtr scatter(Call& c, py::object send, py::object recv, int root) {
  c.peer(root, "root");
  Buffer& r = c.out(recv, "recv");
  const void* s_data = nullptr;
  if (c.rank() == root) {  // send matters at root only
    Buffer& s = c.in(send, "send");
    c.same_dtype(r, "recv", s, "send");
    c.count_is(s, "send", r.count() * c.size(), "size * len(recv)");
    s_data = s.data();
  }
  return c.run([&](Communicator& m) { m.scatter(s_data, r.data(), r.count(), r.dtype(), root); },
               [&](Communicator& m) { return m.scatter_async(s_data, r.data(), r.count(), r.dtype(), root); });
}

WorkPtr all_to_all(Call& c, py::object send, py::object recv) {
  if (recv.is_none()) {
    Buffer& b = c.out(send, "send");
    size_t n = c.per_rank(b, "send");
    return c.run([&](Communicator& m) { m.all_to_all(b.data(), b.data(), n, b.dtype()); },
               [&](Communicator& m) { return m.all_to_all_async(b.data(), b.data(), n, b.dtype()); });
  }
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  size_t n = c.per_rank(s, "send");
  c.count_is(r, "recv", s.count(), "as many as 'send'");
  return c.run([&](Communicator& m) { m.all_to_all(s.data(), r.data(), n, s.dtype()); },
               [&](Communicator& m) { return m.all_to_all_async(s.data(), r.data(), n, s.dtype()); });
}

WorkPtr all_to_allv(Call& c, py::object send, std::vector<size_t> send_counts, py::object recv,
                    std::vector<size_t> recv_counts) {
  send_counts = c.counts(send_counts, "send_counts");
  recv_counts = c.counts(recv_counts, "recv_counts");
  Buffer& s = c.in(send, "send");
  Buffer& r = c.out(recv, "recv");
  c.same_dtype(s, "send", r, "recv");
  c.count_is(s, "send", sum(send_counts), "sum(send_counts)");
  c.count_is(r, "recv", sum(recv_counts), "sum(recv_counts)");
  return c.run([&](Communicator& m) { m.all_to_allv(s.data(), send_counts, r.data(), recv_counts, s.dtype()); },
               [&](Communicator& m) { return m.all_to_allv_async(s.data(), send_counts, r.data(), recv_counts, s.dtype()); });
}

WorkPtr barrier(Call& c) {
  return c.run([&](Communicator& m) { m.barrier(); },
               [&](Communicator& m) { return m.barrier_async(); });
}

WorkPtr send(Call& c, py::object buf, int peer, uint64_t tag) {
  c.peer(peer, "peer");
  Buffer& b = c.in(buf, "buf");
  return c.run([&](Communicator& m) { m.send(b.data(), b.count(), b.dtype(), peer, tag); },
               [&](Communicator& m) { return m.send_async(b.data(), b.count(), b.dtype(), peer, tag); });
}

WorkPtr recv(Call& c, py::object buf, int peer, uint64_t tag) {
  c.peer(peer, "peer");
  Buffer& b = c.out(buf, "buf");
  return c.run([&](Communicator& m) { m.recv(b.data(), b.count(), b.dtype(), peer, tag); },
               [&](Communicator& m) { return m.recv_async(b.data(), b.count(), b.dtype(), peer, tag); });
}

// `name` must be a string literal (the bound functions keep the pointer for their messages).
template <class... A, class... Extra>
void def_both(Cls& cls, const char* name, WorkPtr (*f)(Call&, A...), const char* doc, const Extra&... extra) {
  cls.def(name, [f, name](PyCommunicator& pc, A... a) {
    Call c(pc, name, Call::Mode::blocking);
    f(c, std::move(a)...);
  }, doc, extra...);
  std::string async_doc = std::string("Like ") + name + "(), but returns a braid.Work at once.";
  cls.def((std::string(name) + "_async").c_str(), [f, name](PyCommunicator& pc, A... a) {
    Call c(pc, name, Call::Mode::async);
    return f(c, std::move(a)...);
  }, async_doc.c_str(), extra...);
}

}  // namespace

void bind_collectives(Cls& cls) {
  using py::arg;
  py::object none = py::none();
  def_both(cls, "all_reduce", &all_reduce,
           "Reduce `send` over all ranks into `recv` (None: in place, into `send`).",
           arg("send"), arg("recv") = none, arg("op") = "sum");
  def_both(cls, "broadcast", &broadcast,
           "Root's `send` to every rank's `recv` (None: in place, into `send`).",
           arg("send"), arg("recv") = none, arg("root") = 0);
  def_both(cls, "reduce", &reduce,
           "Reduce `send` over all ranks into root's `recv` (None: into root's `send`).",
           arg("send"), arg("recv") = none, arg("op") = "sum", arg("root") = 0);
  def_both(cls, "all_gather", &all_gather, "Every rank's `send`, in rank order, into `recv` (size * len(send)).",
           arg("send"), arg("recv"));
  def_both(cls, "all_gatherv", &all_gatherv,
           "Rank r's counts[r] elements, packed in rank order, into `recv` (sum(counts)).",
           arg("send"), arg("recv"), arg("counts"));
  def_both(cls, "reduce_scatter", &reduce_scatter,
           "Reduce `send` (size * len(recv)) over all ranks; rank r gets block r in `recv`.",
           arg("send"), arg("recv"), arg("op") = "sum");
  def_both(cls, "reduce_scatterv", &reduce_scatterv,
           "Reduce `send` (sum(counts)) over all ranks; rank r gets its counts[r] elements in `recv`.",
           arg("send"), arg("recv"), arg("counts"), arg("op") = "sum");
  def_both(cls, "gather", &gather, "Every rank's `send`, in rank order, into root's `recv` (others: None).",
           arg("send"), arg("recv") = none, arg("root") = 0);
  def_both(cls, "scatter", &scatter, "Block r of root's `send` (others: None) into rank r's `recv`.",
           arg("send"), arg("recv"), arg("root") = 0);
  def_both(cls, "all_to_all", &all_to_all,
           "Block r of `send` goes to rank r; block r of `recv` (None: in place) comes from rank r.",
           arg("send"), arg("recv") = none);
  def_both(cls, "all_to_allv", &all_to_allv,
           "send_counts[r] elements to rank r, recv_counts[r] from it, packed in rank order.",
           arg("send"), arg("send_counts"), arg("recv"), arg("recv_counts"));
  def_both(cls, "barrier", &barrier, "Return once every rank has entered the barrier.");
  def_both(cls, "send", &send, "Send `buf` to rank `peer`; matched in order with its recv, tag checked.",
           arg("buf"), arg("peer"), arg("tag") = 0);
  def_both(cls, "recv", &recv, "Receive `buf` from rank `peer` (same count, dtype and tag as its send).",
           arg("buf"), arg("peer"), arg("tag") = 0);
}

}  // namespace braid::python
