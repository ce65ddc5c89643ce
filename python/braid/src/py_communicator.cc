#include "py_communicator.h"

#include <stdexcept>
#include <utility>

namespace braid::python {

PyCommunicator::PyCommunicator(Communicator comm) : holder_(std::make_shared<CommHolder>(std::move(comm))) {}

PyCommunicator::~PyCommunicator() { close(); }

Communicator& PyCommunicator::get(const char* op) {
  Communicator* comm = holder_->get();
  if (comm == nullptr) throw py::value_error(std::string(op) + ": the communicator is closed");
  prune();
  return *comm;
}

std::shared_ptr<PyWork> PyCommunicator::track(Work work, HeldBuffers held) {
  if (!work.test()) pending_.push_back(Pending{work, held});
  return std::make_shared<PyWork>(std::move(work), std::move(held), holder_);
}

void PyCommunicator::prune() {
  std::erase_if(pending_, [](const Pending& p) { return p.work.test(); });
}

void PyCommunicator::close() {
  // Only the thread that closes lets go of the buffers, once the operations have ended.
  if (!holder_->begin_close()) return;
  {
    py::gil_scoped_release nogil;
    holder_->finish_close();
  }
  pending_.clear();
}

void PyCommunicator::abort(const std::string& reason) {
  get("abort");
  py::gil_scoped_release nogil;
  CommHolder::Use use(*holder_);
  if (use.comm() != nullptr) use.comm()->abort(reason);
}

namespace {

// A non-member handle (color kNoColor, or a rank left out of new_group) is None in Python.
py::object wrap(Communicator comm) {
  if (!comm.is_member()) return py::none();
  return py::cast(std::make_shared<PyCommunicator>(std::move(comm)));
}

}  // namespace

py::object PyCommunicator::split(int color, std::optional<int> key) {
  int k = key.value_or(get("split").rank());
  Communicator sub = [&] {
    py::gil_scoped_release nogil;
    CommHolder::Use use(*holder_);
    if (use.comm() == nullptr) throw std::invalid_argument("split: the communicator was closed by another thread");
    return use.comm()->split(color < 0 ? Communicator::kNoColor : color, k);
  }();
  return wrap(std::move(sub));
}

py::object PyCommunicator::new_group(const std::vector<int>& ranks) {
  get("new_group");
  Communicator sub = [&] {
    py::gil_scoped_release nogil;
    CommHolder::Use use(*holder_);
    if (use.comm() == nullptr) throw std::invalid_argument("new_group: the communicator was closed by another thread");
    return use.comm()->new_group(ranks);
  }();
  return wrap(std::move(sub));
}

py::object PyCommunicator::shrink(const std::vector<int>& exclude) {
  get("shrink");
  Communicator next = [&] {
    py::gil_scoped_release nogil;
    CommHolder::Use use(*holder_);
    if (use.comm() == nullptr) throw std::invalid_argument("shrink: the communicator was closed by another thread");
    return use.comm()->shrink(exclude);
  }();
  return wrap(std::move(next));
}

void bind_communicator(py::module_& m) {
  py::class_<PyCommunicator, std::shared_ptr<PyCommunicator>> cls(m, "Communicator",
      "A group of ranks and the collectives they run together (braid.init() makes one). Every "
      "rank makes the same calls in the same order.");
  cls.def_property_readonly("rank", [](PyCommunicator& c) { return c.get("rank").rank(); })
      .def_property_readonly("size", [](PyCommunicator& c) { return c.get("size").size(); })
      .def_property_readonly("local_rank", [](PyCommunicator& c) { return c.get("local_rank").local_rank(); })
      .def_property_readonly("local_size", [](PyCommunicator& c) { return c.get("local_size").local_size(); })
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def_property_readonly("state", [](PyCommunicator& c) { return std::string(to_string(c.get("state").state())); },
                             "'ok', 'aborted' or 'failed'")
      .def_property_readonly("error_message", [](PyCommunicator& c) { return c.get("error_message").error_message(); },
                             "The failure that ended the communicator ('' while state is 'ok').")
      .def_property_readonly("last_algorithm", [](PyCommunicator& c) { return c.get("last_algorithm").last_algorithm(); })
      .def("split", &PyCommunicator::split, py::arg("color"), py::arg("key") = py::none(),
           "Every rank calls it; ranks with the same color form a new Communicator, ranked by "
           "(key, rank). A negative color returns None (not a member).")
      .def("new_group", &PyCommunicator::new_group, py::arg("ranks"),
           "Every rank calls it with the same list; listed ranks get a Communicator ranked in list "
           "order, the others None.")
      .def("shrink", &PyCommunicator::shrink, py::arg("exclude") = std::vector<int>{},
           "After a failure, every surviving rank calls it: they agree through the store on who is "
           "alive and get a new Communicator of those ranks, renumbered in their old order. Ranks in "
           "exclude are left out too (a planned exclusion; they need not call it, and get None if "
           "they do). Ends this communicator first. A rank that comes later than "
           "BRAID_SHRINK_TIMEOUT_S after the others raises AbortedError (docs/fault_tolerance.md).")
      .def("group_start", [](PyCommunicator& c) { c.get("group_start").group_start(); },
           "The *_async calls until group_end() run as one unit: send/recv all at once "
           "(batch_isend_irecv), all_reduce calls coalesced. Blocking calls are refused inside.")
      .def("group_end", [](PyCommunicator& c) { return c.track(c.get("group_end").group_end(), {}); },
           "Start the group; returns a braid.Work for all of it (each call's Work completes with it).")
      .def("abort", &PyCommunicator::abort, py::arg("reason") = "abort() called",
           "End every pending operation here and on the other ranks; any thread may call it.")
      .def("close", &PyCommunicator::close, "Wait (bounded) for pending operations, then release the connections.")
      .def("__enter__", [](std::shared_ptr<PyCommunicator> c) { return c; })
      .def("__exit__", [](PyCommunicator& c, py::args) { c.close(); });
  bind_collectives(cls);
}

}  // namespace braid::python
