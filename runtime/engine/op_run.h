// runtime/engine/op_run.h - one operation on the progress thread: the schedule plus its headers.
//
// The executor carries an OpHeader in front of the first message to each peer and hands the
// one in front of each peer's first message here before using its data (Executor::set_headers):
// a mismatch fails the operation before any of that peer's bytes reach a buffer. The caller
// polls the transport and feeds completions in.
// Threading: the thread that runs operations at the time (the connections' owner: the progress
// thread, or a caller running its own blocking call: whoever holds the engine, op_queue.h).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "collectives/runner.h"
#include "runtime/engine/op_header.h"

namespace braid {

class OpRun final : private collectives::HeaderSource {
 public:
  // `prepared` must have an executor.
  OpRun(collectives::PreparedCollective prepared, const collectives::CollectiveArgs& args, int rank,
        uint64_t comm_id, uint64_t issue_seq, uint64_t match_seq, const std::vector<transport::Connection*>& peers);
  // The executor asks this run for its headers (collectives::HeaderSource): it stays where it is.
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;

  // Runs again for a new operation of the same shape (run_cache.h: the cache of finished
  // runs): new buffers, sequence numbers and op id, the same schedule and peers. Only once done()
  // with nothing outstanding.
  [[nodiscard]] Status reuse(const collectives::CollectiveArgs& args, uint64_t comm_id, uint64_t issue_seq,
                             uint64_t match_seq, uint64_t op_id);
  [[nodiscard]] Status start() { return prepared_.executor->progress(); }
  // Feeds one completion; *ours is false when it belongs to another operation.
  [[nodiscard]] Status on_completion(const transport::Completion& c, bool* ours) {
    return prepared_.executor->on_completion(c, ours);
  }
  [[nodiscard]] Status progress() { return prepared_.executor->progress(); }
  bool done() const { return prepared_.executor->done(); }
  bool all_posted() const { return prepared_.executor->all_posted(); }
  size_t outstanding() const { return prepared_.executor->outstanding(); }
  std::string waiting_for() const { return prepared_.executor->waiting_for(); }
  const std::string& name() const { return prepared_.name; }
  collectives::Algo algo() const { return prepared_.algo; }
  // True when a peer's first message was too large to read its header: that peer reads ours
  // (the smaller message) and can describe the mismatch precisely, so it is worth waiting for.
  bool header_unread() const { return header_unread_; }

 private:
  void encode_headers(const collectives::CollectiveArgs& args, uint64_t comm_id, uint64_t issue_seq, uint64_t match_seq);
  // collectives::HeaderSource, for the executor.
  const unsigned char* header_for(int peer) const override { return wire_[static_cast<size_t>(peer)].data(); }
  Status check(int peer, const unsigned char* data, size_t bytes, const Status& status) const override;

  collectives::PreparedCollective prepared_;
  int rank_;
  std::vector<transport::Connection*> peers_;
  std::vector<OpHeader> mine_;                                     // per rank (peers only)
  std::vector<std::array<unsigned char, OpHeader::kBytes>> wire_;  // mine_, encoded
  mutable bool header_unread_ = false;
};

}  // namespace braid
