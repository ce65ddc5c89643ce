#include "common/job_secret.h"

#include <sodium.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/log.h"

namespace braid::auth {
namespace {

void init_sodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    // sodium_init() fails only when the system's random source cannot be opened: nothing braid
    // could then do safely.
    if (sodium_init() < 0) std::abort();
  });
}

// Both ends must derive the same key from the same text; the context keeps this key apart from
// any other use of the same secret.
constexpr std::string_view kKeyContext = "braid job secret v1";

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

Nonce fresh_nonce() {
  init_sodium();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

std::string random_hex(size_t n) {
  init_sodium();
  std::string raw(n, '\0');
  randombytes_buf(raw.data(), n);
  std::string hex(2 * n + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), reinterpret_cast<const unsigned char*>(raw.data()), n);
  hex.pop_back();
  return hex;
}

JobSecret::JobSecret() = default;

Result<JobSecret> JobSecret::from_text(std::string_view text, const std::string& source) {
  std::string t = trim(text);
  if (t.size() < 16) {
    return invalid_argument(source + " holds " + std::to_string(t.size()) +
                            " characters: a job's secret needs at least 16 (e.g. from `openssl rand -hex 32`)");
  }
  init_sodium();
  JobSecret s;
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, s.key_.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kKeyContext.data()), kKeyContext.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(t.data()), t.size());
  crypto_generichash_final(&st, s.key_.data(), s.key_.size());
  s.present_ = true;
  s.source_ = source;
  return s;
}

Result<JobSecret> JobSecret::from_env(const Env& env) {
  if (!env.secret.empty()) return from_text(env.secret, "BRAID_SECRET");
  if (env.secret_file.empty()) return JobSecret();
  const std::string source = "BRAID_SECRET_FILE=" + env.secret_file;
  struct stat st{};
  if (::stat(env.secret_file.c_str(), &st) != 0) {
    return invalid_argument(source + ": cannot read it (" + std::string(std::strerror(errno)) +
                            "). Point it at the job's secret file, or unset it");
  }
  if ((st.st_mode & 077) != 0) {
    std::ostringstream mode;
    mode << std::oct << (st.st_mode & 0777);
    return invalid_argument(source + " can be read by others (mode " + mode.str() +
                            "): a secret must be readable by its owner only; run `chmod 600 " + env.secret_file +
                            "`");
  }
  std::ifstream in(env.secret_file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return invalid_argument(source + ": cannot read it");
  return from_text(text.str(), source);
}

Mac JobSecret::prove(Direction direction, const Nonce& their_nonce, const Nonce& my_nonce,
                     std::string_view transcript) const {
  init_sodium();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key_.data(), key_.size());
  const auto d = static_cast<unsigned char>(direction);
  crypto_auth_hmacsha256_update(&st, &d, 1);
  crypto_auth_hmacsha256_update(&st, their_nonce.data(), their_nonce.size());
  crypto_auth_hmacsha256_update(&st, my_nonce.data(), my_nonce.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(transcript.data()), transcript.size());
  Mac mac;
  crypto_auth_hmacsha256_final(&st, mac.data());
  return mac;
}

bool JobSecret::verify(Direction direction, const Nonce& my_nonce, const Nonce& their_nonce,
                       std::string_view transcript, const Mac& mac) const {
  // The other side computed prove(direction, my_nonce, their_nonce, ...) from its point of view.
  Mac expected = prove(direction, my_nonce, their_nonce, transcript);
  return crypto_verify_32(expected.data(), mac.data()) == 0;
}

const Result<JobSecret>& process_secret() {
  static std::once_flag once;
  static Result<JobSecret>* secret = nullptr;
  std::call_once(once, [] {
    const Result<Env>& env = global_env();
    secret = new Result<JobSecret>(env.is_ok() ? JobSecret::from_env(env.value()) : Result<JobSecret>(env.status()));
  });
  return *secret;
}

void warn_unauthenticated_once(const std::string& where) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  BRAID_LOG(warn) << where
                  << ": this job has no secret, so anyone who can reach its ports can join it or read its "
                     "addresses. braidrun sets one for its ranks; under other launchers set BRAID_SECRET_FILE "
                     "(a file only you can read) or BRAID_SECRET to the same value on every rank";
}

std::string secret_hint() {
  return "every rank, and the process serving the store, must have the same secret: braidrun gives its ranks "
         "one; under other launchers set BRAID_SECRET or BRAID_SECRET_FILE identically everywhere (or on none)";
}

}  // namespace braid::auth
