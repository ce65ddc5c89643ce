// The operations of the braid ProcessGroup: each maps torch's arguments onto one braid call.
#include "process_group.h"

#include <numeric>
#include <stdexcept>

#include "tensor_args.h"

namespace braid::torch_backend {

namespace {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

std::vector<size_t> numels(const std::vector<at::Tensor>& ts) {
  std::vector<size_t> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(elements(t));
  return out;
}

[[noreturn]] void refuse(const std::string& message) { throw std::runtime_error("braid backend: " + message); }

void check_list_size(size_t got, int size, const char* op, const char* what) {
  if (got != static_cast<size_t>(size)) {
    refuse(std::string(op) + ": " + what + " has " + std::to_string(got) + " tensors, expected one per rank (" +
           std::to_string(size) + ")");
  }
}

}  // namespace

WorkPtr BraidProcessGroup::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  check_one(tensors.size(), "broadcast", "tensors");
  auto work = make_work(c10d::OpType::BROADCAST, "broadcast", tensors, opts.timeout);
  at::Tensor buf = usable(tensors[0], *work, true, "broadcast");
  const auto dtype = to_dtype(buf, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  return start(work, [&](braid::Communicator& c) { return c.broadcast_async(buf.data_ptr(), elements(buf), dtype, root); });
}

WorkPtr BraidProcessGroup::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  check_one(tensors.size(), "allreduce", "tensors");
  auto work = make_work(c10d::OpType::ALLREDUCE, "allreduce", tensors, opts.timeout);
  at::Tensor buf = usable(tensors[0], *work, true, "allreduce");
  const auto dtype = to_dtype(buf, "allreduce");
  const auto op = to_op(opts.reduceOp, buf.scalar_type(), "allreduce");
  return start(work, [&](braid::Communicator& c) { return c.all_reduce_async(buf.data_ptr(), elements(buf), dtype, op); });
}

// One all_reduce per tensor inside a braid group, which braid fuses into a single all_reduce.
WorkPtr BraidProcessGroup::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) refuse("allreduce_coalesced: no tensors given");
  check_same_dtype(tensors, tensors[0], "allreduce_coalesced", "tensors");
  auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, opts.timeout);
  std::vector<at::Tensor> bufs;
  for (const auto& t : tensors) bufs.push_back(usable(t, *work, true, "allreduce_coalesced"));
  const auto dtype = to_dtype(bufs[0], "allreduce_coalesced");
  const auto op = to_op(opts.reduceOp, bufs[0].scalar_type(), "allreduce_coalesced");
  return start(work, [&](braid::Communicator& c) {
    c.group_start();
    for (auto& b : bufs) (void)c.all_reduce_async(b.data_ptr(), elements(b), dtype, op);
    return c.group_end();
  });
}

WorkPtr BraidProcessGroup::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_one(tensors.size(), "reduce", "tensors");
  auto work = make_work(c10d::OpType::REDUCE, "reduce", tensors, opts.timeout);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = usable(tensors[0], *work, rank_ == root, "reduce");
  const auto dtype = to_dtype(buf, "reduce");
  const auto op = to_op(opts.reduceOp, buf.scalar_type(), "reduce");
  void* recv = rank_ == root ? buf.data_ptr() : nullptr;
  return start(work, [&](braid::Communicator& c) {
    return c.reduce_async(buf.data_ptr(), recv, elements(buf), dtype, op, root);
  });
}

WorkPtr BraidProcessGroup::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) {
  check_one(inputs.size(), "allgather", "input_tensors");
  check_one(outputs.size(), "allgather", "output_tensors");
  check_list_size(outputs[0].size(), size_, "allgather", "tensor_list");
  check_same_dtype(outputs[0], inputs[0], "allgather", "tensor_list");
  for (const auto& o : outputs[0]) {
    if (o.numel() != inputs[0].numel()) refuse("allgather: every tensor in tensor_list must have the input's numel");
  }
  auto work = make_work(c10d::OpType::ALLGATHER, "allgather", outputs[0], opts.timeout);
  at::Tensor in = usable(inputs[0], *work, false, "allgather");
  at::Tensor out = packed(outputs[0], *work, false, true, "allgather");
  const auto dtype = to_dtype(in, "allgather");
  return start(work, [&](braid::Communicator& c) {
    return c.all_gather_async(in.data_ptr(), out.data_ptr(), elements(in), dtype);
  });
}

WorkPtr BraidProcessGroup::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_same_dtype({output}, input, "_allgather_base", "output_tensor");
  if (output.numel() != input.numel() * size_) {
    refuse("_allgather_base: output_tensor must hold world_size (" + std::to_string(size_) + ") x input's " +
           std::to_string(input.numel()) + " elements, has " + std::to_string(output.numel()));
  }
  auto work = make_work(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, opts.timeout);
  at::Tensor in = usable(input, *work, false, "_allgather_base");
  at::Tensor out = usable(output, *work, true, "_allgather_base");
  const auto dtype = to_dtype(in, "_allgather_base");
  return start(work, [&](braid::Communicator& c) {
    return c.all_gather_async(in.data_ptr(), out.data_ptr(), elements(in), dtype);
  });
}

// Each input is gathered into its own list; the lists are all_gathered one after the other.
WorkPtr BraidProcessGroup::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  if (inputs.empty() || outputs.size() != inputs.size()) {
    refuse("allgather_coalesced: output_tensor_lists must have one list per input tensor");
  }
  std::vector<at::Tensor> all_outputs;
  for (auto& list : outputs) all_outputs.insert(all_outputs.end(), list.begin(), list.end());
  auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all_outputs, opts.timeout);
  std::vector<at::Tensor> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_list_size(outputs[i].size(), size_, "allgather_coalesced", "an output list");
    check_same_dtype(outputs[i], inputs[i], "allgather_coalesced", "an output list");
    ins.push_back(usable(inputs[i], *work, false, "allgather_coalesced"));
    outs.push_back(packed(outputs[i], *work, false, true, "allgather_coalesced"));
  }
  return start(work, [&](braid::Communicator& c) {
    c.group_start();
    for (size_t i = 0; i < ins.size(); ++i) {
      (void)c.all_gather_async(ins[i].data_ptr(), outs[i].data_ptr(), elements(ins[i]), to_dtype(ins[i], "allgather"));
    }
    return c.group_end();
  });
}

WorkPtr BraidProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::GatherOptions& opts) {
  check_one(inputs.size(), "gather", "input_tensors");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> results;
  if (rank_ == root) {
    check_one(outputs.size(), "gather", "output_tensors");
    check_list_size(outputs[0].size(), size_, "gather", "gather_list");
    check_same_dtype(outputs[0], inputs[0], "gather", "gather_list");
    results = outputs[0];
  } else if (!outputs.empty() && !outputs[0].empty()) {
    refuse("gather: gather_list must be empty on non-root rank " + std::to_string(rank_));
  }
  auto work = make_work(c10d::OpType::GATHER, "gather", results, opts.timeout);
  at::Tensor in = usable(inputs[0], *work, false, "gather");
  at::Tensor out = rank_ == root ? packed(results, *work, false, true, "gather") : at::Tensor();
  const auto dtype = to_dtype(in, "gather");
  void* recv = out.defined() ? out.data_ptr() : nullptr;
  return start(work, [&](braid::Communicator& c) { return c.gather_async(in.data_ptr(), recv, elements(in), dtype, root); });
}

WorkPtr BraidProcessGroup::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ScatterOptions& opts) {
  check_one(outputs.size(), "scatter", "output_tensors");
  const int root = static_cast<int>(opts.rootRank);
  auto work = make_work(c10d::OpType::SCATTER, "scatter", outputs, opts.timeout);
  at::Tensor in;
  if (rank_ == root) {
    check_one(inputs.size(), "scatter", "input_tensors");
    check_list_size(inputs[0].size(), size_, "scatter", "scatter_list");
    check_same_dtype(inputs[0], outputs[0], "scatter", "scatter_list");
    in = packed(inputs[0], *work, true, false, "scatter");
  } else if (!inputs.empty() && !inputs[0].empty()) {
    refuse("scatter: scatter_list must be empty on non-root rank " + std::to_string(rank_));
  }
  at::Tensor out = usable(outputs[0], *work, true, "scatter");
  const auto dtype = to_dtype(out, "scatter");
  const void* send = in.defined() ? in.data_ptr() : nullptr;
  return start(work, [&](braid::Communicator& c) {
    return c.scatter_async(send, out.data_ptr(), elements(out), dtype, root);
  });
}

WorkPtr BraidProcessGroup::reduce_scatter(std::vector<at::Tensor>& outputs,
                                          std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ReduceScatterOptions& opts) {
  check_one(outputs.size(), "reduce_scatter", "output_tensors");
  check_one(inputs.size(), "reduce_scatter", "input_tensors");
  check_list_size(inputs[0].size(), size_, "reduce_scatter", "input_list");
  check_same_dtype(inputs[0], outputs[0], "reduce_scatter", "input_list");
  if (inputs[0][rank_].numel() != outputs[0].numel()) {
    refuse("reduce_scatter: input_list[" + std::to_string(rank_) + "] has " +
           std::to_string(inputs[0][rank_].numel()) + " elements but the output has " +
           std::to_string(outputs[0].numel()));
  }
  auto work = make_work(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, opts.timeout);
  at::Tensor in = packed(inputs[0], *work, true, false, "reduce_scatter");
  at::Tensor out = usable(outputs[0], *work, true, "reduce_scatter");
  const auto dtype = to_dtype(out, "reduce_scatter");
  const auto op = to_op(opts.reduceOp, out.scalar_type(), "reduce_scatter");
  const auto counts = numels(inputs[0]);
  return start(work, [&](braid::Communicator& c) {
    return c.reduce_scatterv_async(in.data_ptr(), out.data_ptr(), counts, dtype, op);
  });
}

WorkPtr BraidProcessGroup::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts) {
  check_same_dtype({input}, output, "_reduce_scatter_base", "input_tensor");
  if (input.numel() != output.numel() * size_) {
    refuse("_reduce_scatter_base: input_tensor must hold world_size (" + std::to_string(size_) + ") x output's " +
           std::to_string(output.numel()) + " elements, has " + std::to_string(input.numel()));
  }
  auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, opts.timeout);
  at::Tensor in = usable(input, *work, false, "_reduce_scatter_base");
  at::Tensor out = usable(output, *work, true, "_reduce_scatter_base");
  const auto dtype = to_dtype(out, "_reduce_scatter_base");
  const auto op = to_op(opts.reduceOp, out.scalar_type(), "_reduce_scatter_base");
  return start(work, [&](braid::Communicator& c) {
    return c.reduce_scatter_async(in.data_ptr(), out.data_ptr(), elements(out), dtype, op);
  });
}

// Split sizes count rows of dim 0; empty means equal shares.
WorkPtr BraidProcessGroup::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                         std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_same_dtype({input}, output, "alltoall_base", "input");
  const auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t row = rows == 0 ? 0 : elements(t) / static_cast<size_t>(rows);
    std::vector<size_t> out(static_cast<size_t>(size_));
    if (splits.empty()) {
      if (rows % size_ != 0) {
        refuse(std::string("alltoall_base: ") + what + " has " + std::to_string(rows) +
               " rows, not divisible by world_size " + std::to_string(size_) + "; pass split sizes");
      }
      for (auto& c : out) c = static_cast<size_t>(rows / size_) * row;
      return out;
    }
    check_list_size(splits.size(), size_, "alltoall_base", what);
    if (std::accumulate(splits.begin(), splits.end(), int64_t{0}) != rows) {
      refuse(std::string("alltoall_base: the ") + what + " split sizes do not add up to its " +
             std::to_string(rows) + " rows");
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<size_t>(splits[i]) * row;
    return out;
  };
  const auto send_counts = counts(input, input_splits, "input");
  const auto recv_counts = counts(output, output_splits, "output");
  auto work = make_work(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, opts.timeout);
  at::Tensor in = usable(input, *work, false, "alltoall_base");
  at::Tensor out = usable(output, *work, true, "alltoall_base");
  const auto dtype = to_dtype(out, "alltoall_base");
  return start(work, [&](braid::Communicator& c) {
    return c.all_to_allv_async(in.data_ptr(), send_counts, out.data_ptr(), recv_counts, dtype);
  });
}

WorkPtr BraidProcessGroup::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions& opts) {
  check_list_size(inputs.size(), size_, "alltoall", "input_tensor_list");
  check_list_size(outputs.size(), size_, "alltoall", "output_tensor_list");
  check_same_dtype(inputs, outputs[0], "alltoall", "input_tensor_list");
  check_same_dtype(outputs, outputs[0], "alltoall", "output_tensor_list");
  auto work = make_work(c10d::OpType::ALLTOALL, "alltoall", outputs, opts.timeout);
  at::Tensor in = packed(inputs, *work, true, false, "alltoall");
  at::Tensor out = packed(outputs, *work, false, true, "alltoall");
  const auto dtype = to_dtype(out, "alltoall");
  const auto send_counts = numels(inputs);
  const auto recv_counts = numels(outputs);
  return start(work, [&](braid::Communicator& c) {
    return c.all_to_allv_async(in.data_ptr(), send_counts, out.data_ptr(), recv_counts, dtype);
  });
}

WorkPtr BraidProcessGroup::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_one(tensors.size(), "send", "tensors");
  auto work = make_work(c10d::OpType::SEND, "send", tensors, c10d::kUnsetTimeout);
  at::Tensor buf = usable(tensors[0], *work, false, "send");
  const auto dtype = to_dtype(buf, "send");
  const auto t = static_cast<uint64_t>(static_cast<uint32_t>(tag));
  return start(work, [&](braid::Communicator& c) { return c.send_async(buf.data_ptr(), elements(buf), dtype, dst, t); });
}

WorkPtr BraidProcessGroup::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_one(tensors.size(), "recv", "tensors");
  auto work = make_work(c10d::OpType::RECV, "recv", tensors, c10d::kUnsetTimeout);
  at::Tensor buf = usable(tensors[0], *work, true, "recv");
  const auto dtype = to_dtype(buf, "recv");
  const auto t = static_cast<uint64_t>(static_cast<uint32_t>(tag));
  return start(work, [&](braid::Communicator& c) { return c.recv_async(buf.data_ptr(), elements(buf), dtype, src, t); });
}

WorkPtr BraidProcessGroup::recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) {
  refuse("recv without src (recvAnysource) is not supported: braid matches messages by sender; pass src=");
}

WorkPtr BraidProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  auto work = make_work(c10d::OpType::BARRIER, "barrier", {}, opts.timeout);
  return start(work, [&](braid::Communicator& c) { return c.barrier_async(); });
}

}  // namespace braid::torch_backend
