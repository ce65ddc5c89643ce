#include "transport/inproc/inproc_link.h"

#include <cstring>
#include <utility>

namespace braid::transport::inproc {

void CompletionQueue::push(Completion c) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    items_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void CompletionQueue::drain(std::vector<Completion>& out, std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (items_.empty() && !woken_ && timeout.count() > 0) {
    cv_.wait_for(lk, timeout, [this] { return !items_.empty() || woken_; });
  }
  // A wake() that raced ahead of this poll is consumed here, as an eventfd would be.
  woken_ = false;
  for (Completion& c : items_) out.push_back(std::move(c));
  items_.clear();
}

void CompletionQueue::wake() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

Link::Link(uint64_t comm_id, LinkSide connector, LinkSide acceptor) : comm_id_(comm_id) {
  sides_[0] = std::move(connector);
  sides_[1] = std::move(acceptor);
}

void Link::attach(int side, std::shared_ptr<CompletionQueue> cq, Connection* connection) {
  std::lock_guard<std::mutex> lk(mu_);
  sides_[side].cq = std::move(cq);
  sides_[side].connection = connection;
}

Status Link::op_error(int side, bool is_send) const {
  const LinkSide& peer = sides_[1 - side];
  return broken_.with_context(std::string("inproc ") + (is_send ? "send" : "receive") + " on rank " +
                              std::to_string(sides_[side].rank) + " with rank " + std::to_string(peer.rank) +
                              " (" + peer.address + "): ");
}

void Link::complete(int side, const PendingOp& op, bool is_send, size_t bytes, Status status) {
  LinkSide& s = sides_[side];
  if (!s.open || s.cq == nullptr) return;  // closed sides get nothing more, by contract
  s.cq->push(Completion{s.connection, op.cookie, is_send, bytes, std::move(status)});
}

void Link::deliver(int send_side, const PendingOp& send, const PendingOp& recv) {
  const int recv_side = 1 - send_side;
  if (send.bytes > recv.bytes) {
    // The receive fails and the message is dropped, as a stream transport would have consumed
    // it; the sender sees success because its bytes did leave.
    complete(recv_side, recv, false, send.bytes,
             protocol_error("inproc: a message of " + std::to_string(send.bytes) + " bytes from rank " +
                            std::to_string(sides_[send_side].rank) + " (" + sides_[send_side].address +
                            ") does not fit the receive buffer of " + std::to_string(recv.bytes) +
                            " bytes on rank " + std::to_string(sides_[recv_side].rank) +
                            "; the sender and receiver disagree on message sizes"));
  } else {
    if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
    complete(recv_side, recv, false, send.bytes, Status::ok());
  }
  complete(send_side, send, true, send.bytes, Status::ok());
}

void Link::post_send(int side, const void* data, size_t bytes, uint64_t cookie) {
  std::lock_guard<std::mutex> lk(mu_);
  PendingOp op{const_cast<void*>(data), bytes, cookie};
  if (!broken_.is_ok()) {
    complete(side, op, true, 0, op_error(side, true));
    return;
  }
  std::deque<PendingOp>& peer_recvs = sides_[1 - side].recvs;
  if (peer_recvs.empty()) {
    sides_[side].sends.push_back(op);
    return;
  }
  PendingOp recv = peer_recvs.front();
  peer_recvs.pop_front();
  deliver(side, op, recv);
}

void Link::post_recv(int side, void* data, size_t capacity, uint64_t cookie) {
  std::lock_guard<std::mutex> lk(mu_);
  PendingOp op{data, capacity, cookie};
  if (!broken_.is_ok()) {
    complete(side, op, false, 0, op_error(side, false));
    return;
  }
  std::deque<PendingOp>& peer_sends = sides_[1 - side].sends;
  if (peer_sends.empty()) {
    sides_[side].recvs.push_back(op);
    return;
  }
  PendingOp send = peer_sends.front();
  peer_sends.pop_front();
  deliver(1 - side, send, op);
}

void Link::fail_side(int side, const Status& why) {
  LinkSide& s = sides_[side];
  for (const PendingOp& op : s.sends) {
    complete(side, op, true, 0,
             why.with_context("inproc send on rank " + std::to_string(s.rank) + " to rank " +
                                     std::to_string(sides_[1 - side].rank) + " (" + sides_[1 - side].address + "): "));
  }
  for (const PendingOp& op : s.recvs) {
    complete(side, op, false, 0,
             why.with_context("inproc receive on rank " + std::to_string(s.rank) + " from rank " +
                              std::to_string(sides_[1 - side].rank) + " (" + sides_[1 - side].address + "): "));
  }
  s.sends.clear();
  s.recvs.clear();
}

void Link::close(int side) {
  std::lock_guard<std::mutex> lk(mu_);
  LinkSide& s = sides_[side];
  if (!s.open) return;
  fail_side(side, Status(ErrorCode::aborted, "the connection was closed with this operation outstanding"));
  s.open = false;
  if (broken_.is_ok()) {
    broken_ = peer_lost("rank " + std::to_string(s.rank) + " (" + s.address + ") closed the connection");
    fail_side(1 - side, broken_);
  }
}

void Link::fail(const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!broken_.is_ok()) return;  // nothing pending: whoever broke it first drained both sides
  broken_ = why;
  fail_side(0, why);
  fail_side(1, why);
}

}  // namespace braid::transport::inproc
