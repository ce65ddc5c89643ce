// python/braid/torch/c10d_store.h - torch's c10d::Store seen as a braid::Store.
//
// The store torch hands a backend lives in rank 0 (TCPStore), in a file (FileStore) or in
// torchrun's agent; braid uses it to meet the other ranks and to post failure reports, never for
// data. Each call forwards to the c10d store; its errors become braid::Error (timeout when
// torch says it timed out) so braid's messages can name the store.
#pragma once

#include <braid/store.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

namespace braid::torch_backend {

class C10dStore : public braid::Store {
 public:
  // `name` tells the rendezvous this store apart from those of other groups (torch's group
  // name): braid counts the communicators it builds per store name, and ranks that are not in a
  // subgroup never build its communicator.
  C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string name)
      : store_(std::move(store)), name_(std::move(name)) {}
  using braid::Store::wait;

  void set(const std::string& key, const std::string& value) override {
    call("set", key, [&] { store_->set(key, bytes(value)); });
  }
  std::string get(const std::string& key) override {
    std::string out;
    call("get", key, [&] { out = text(store_->get(key)); });
    return out;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    call("add", key, [&] { out = store_->add(key, delta); });
    return out;
  }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    std::string out;
    call("compare_set", key, [&] { out = text(store_->compareSet(key, bytes(expected), bytes(desired))); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    call("wait", keys.empty() ? "" : keys.front(), [&] { store_->wait(keys, timeout); });
  }
  bool check(const std::vector<std::string>& keys) override {
    bool out = false;
    call("check", keys.empty() ? "" : keys.front(), [&] { out = store_->check(keys); });
    return out;
  }
  bool delete_key(const std::string& key) override {
    bool out = false;
    call("delete_key", key, [&] { out = store_->deleteKey(key); });
    return out;
  }
  int64_t num_keys() override {
    int64_t out = 0;
    call("num_keys", "", [&] { out = store_->getNumKeys(); });
    return out;
  }
  std::chrono::milliseconds timeout() const override { return store_->getTimeout(); }
  void set_timeout(std::chrono::milliseconds timeout) override { store_->setTimeout(timeout); }
  std::string address() const override { return "torch.distributed store, group " + name_; }

 private:
  static std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
  static std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

  template <typename F>
  void call(const char* what, const std::string& key, F&& f) const {
    try {
      f();
    } catch (const braid::Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string message = e.what();
      const bool timed_out = message.find("imeout") != std::string::npos || message.find("timed out") != std::string::npos;
      // A store whose connection drops has lost its host, whose own output holds the cause.
      const bool gone = message.find("reset by peer") != std::string::npos ||
                        message.find("Broken pipe") != std::string::npos ||
                        message.find("Connection refused") != std::string::npos;
      throw braid::Error(timed_out ? braid::ErrorCode::timeout : braid::ErrorCode::system,
                         "torch store " + std::string(what) + "('" + key + "') failed (" + address() +
                             "): " + message.substr(0, message.find('\n')) +
                             (gone ? ". The process serving torch's store (rank 0 for tcp:// and env://, or "
                                     "torchrun's agent) has probably exited; if it failed, its output says why"
                                   : ""));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string name_;
};

}  // namespace braid::torch_backend
