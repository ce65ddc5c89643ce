#include "braid/store.h"

#include "braid/error.h"

namespace braid {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (base_ == nullptr) throw Error(ErrorCode::invalid_argument, "PrefixStore '" + prefix_ + "': base store is null");
}

void PrefixStore::set(const std::string& key, const std::string& value) { base_->set(full(key), value); }
std::string PrefixStore::get(const std::string& key) { return base_->get(full(key)); }
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(full(key), delta); }
std::string PrefixStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return base_->compare_set(full(key), expected, desired);
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& k : keys) full_keys.push_back(full(k));
  base_->wait(full_keys, timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& k : keys) full_keys.push_back(full(k));
  return base_->check(full_keys);
}
bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full(key)); }
int64_t PrefixStore::num_keys() { return base_->num_keys(); }
std::chrono::milliseconds PrefixStore::timeout() const { return base_->timeout(); }
void PrefixStore::set_timeout(std::chrono::milliseconds timeout) { base_->set_timeout(timeout); }
std::string PrefixStore::address() const { return base_->address(); }

}  // namespace braid
