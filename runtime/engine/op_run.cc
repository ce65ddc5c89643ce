#include "runtime/engine/op_run.h"

#include <algorithm>

namespace braid {

OpRun::OpRun(collectives::PreparedCollective prepared, const collectives::CollectiveArgs& args, int rank,
             uint64_t comm_id, uint64_t issue_seq, uint64_t match_seq,
             const std::vector<transport::Connection*>& peers)
    : prepared_(std::move(prepared)), rank_(rank), peers_(peers), mine_(peers.size()), wire_(peers.size()) {
  encode_headers(args, comm_id, issue_seq, match_seq);
  prepared_.executor->set_headers(OpHeader::kBytes, *this,
                                  /*reverse=*/args.kind != collectives::Kind::send && args.kind != collectives::Kind::recv);
}

void OpRun::encode_headers(const collectives::CollectiveArgs& args, uint64_t comm_id, uint64_t issue_seq,
                           uint64_t match_seq) {
  for (int peer : prepared_.peers) {
    const auto p = static_cast<size_t>(peer);
    mine_[p] = OpHeader::for_peer(args, peer, comm_id, issue_seq, match_seq);
    mine_[p].segment = static_cast<uint32_t>(prepared_.segment_bytes);
    mine_[p].ring_depth = static_cast<uint16_t>(prepared_.ring_depth);
    mine_[p].algo = prepared_.algo;
    mine_[p].encode(wire_[p].data());
  }
}

Status OpRun::reuse(const collectives::CollectiveArgs& args, uint64_t comm_id, uint64_t issue_seq, uint64_t match_seq,
                    uint64_t op_id) {
  RETURN_IF_ERROR(prepared_.executor->rebind(args.send, args.recv, op_id));
  for (int peer : prepared_.peers) {  // the same shape: only the numbers change (and a tag)
    const auto p = static_cast<size_t>(peer);
    mine_[p].renumber(args, comm_id, issue_seq, match_seq, wire_[p].data());
  }
  header_unread_ = false;
  return Status::ok();
}

Status OpRun::check(int peer, const unsigned char* data, size_t bytes, const Status& status) const {
  const OpHeader& mine = mine_[static_cast<size_t>(peer)];
  if (data != nullptr && mirrors(mine, wire_[static_cast<size_t>(peer)].data(), data, std::min(bytes, OpHeader::kBytes))) {
    return Status::ok();
  }
  transport::Connection* conn = peers_[static_cast<size_t>(peer)];
  auto theirs = data == nullptr ? Result<OpHeader>(status)
                                : OpHeader::decode(data, std::min(bytes, OpHeader::kBytes));
  if (!theirs.is_ok()) {
    header_unread_ = true;
    // No header where one must be: the peer is running something else entirely.
    return Status(ErrorCode::mismatch, prepared_.name + " on rank " + std::to_string(rank_) + ": mismatch with rank " +
                                           std::to_string(peer) + " (" + conn->peer_address() +
                                           "), which sent a message that does not start with an operation header "
                                           "where this rank expected the first message of " + mine.describe() + " (" +
                                           theirs.status().message() +
                                           "). The ranks called different collectives or counts");
  }
  return check_headers(mine, rank_, theirs.value(), peer, conn->peer_address());
}

}  // namespace braid
