// common/job_secret.h - the job's secret, and the challenge-response that proves knowledge of it.
//
// Who may take part in a job: whoever knows its secret. braidrun makes a random one per job;
// programs started by other launchers read BRAID_SECRET or BRAID_SECRET_FILE (common/env.h).
// Every store connection and every transport connection runs a mutual challenge-response
// before any other byte is trusted:
//
//   A (accepts)                               B (connects)
//   challenge: nonce_a  ------------------->
//             <-------------------  nonce_b, prove(kToAcceptor, nonce_a, nonce_b, transcript)
//   prove(kToConnector, nonce_b, nonce_a, transcript)  ----------------->
//
// Each side's nonce is fresh (libsodium's CSPRNG), so a recorded answer is worthless later, and
// each proof is bound to its direction, to both nonces and to a transcript the caller chooses
// (what the connection is for: the store, or comm_id and the two ranks), so a proof made for one
// connection cannot be replayed on another. The MAC is HMAC-SHA-256 (libsodium) under a key
// derived from the secret with BLAKE2b; no cryptography is written here. Data is not encrypted.
//
// Without a secret the same exchange runs under an all-zero key: the bytes on the wire do not
// depend on whether a job is authenticated, a side without a secret fails to prove itself to a
// side that has one (and is told so clearly), and no job is shielded from anyone.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/env.h"
#include "common/status.h"

namespace braid::auth {

inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

using Nonce = std::array<unsigned char, kNonceBytes>;
using Mac = std::array<unsigned char, kMacBytes>;

// Which way a proof goes; part of what is MACed, so a proof cannot be reflected back.
enum class Direction : uint8_t { to_acceptor = 1, to_connector = 2 };

// A fresh random nonce.
Nonce fresh_nonce();
// n random bytes, as lowercase hex (2n characters): braidrun's secrets and job ids.
std::string random_hex(size_t n);

class JobSecret {
 public:
  // No secret: the all-zero key (see the top).
  JobSecret();
  // From BRAID_SECRET or BRAID_SECRET_FILE; none when neither is set. A file that cannot be read,
  // is empty, or can be read by its group or others is an error naming it and what to do.
  static Result<JobSecret> from_env(const Env& env);
  // From the secret's text itself (at least 16 bytes; surrounding whitespace is not part of it).
  static Result<JobSecret> from_text(std::string_view text, const std::string& source);

  bool present() const { return present_; }
  // Where it came from, for messages: "BRAID_SECRET", "BRAID_SECRET_FILE=/run/...", "none".
  const std::string& source() const { return source_; }

  // The proof for `direction`: MAC(key, direction | their_nonce | my_nonce | transcript).
  Mac prove(Direction direction, const Nonce& their_nonce, const Nonce& my_nonce, std::string_view transcript) const;
  // Whether `mac` is the proof the other side owes us (compared in constant time).
  bool verify(Direction direction, const Nonce& my_nonce, const Nonce& their_nonce, std::string_view transcript,
              const Mac& mac) const;

 private:
  std::array<unsigned char, kKeyBytes> key_{};
  bool present_ = false;
  std::string source_ = "none";
};

// The process's secret from global_env(), read once. A bad BRAID_SECRET_FILE fails every call.
const Result<JobSecret>& process_secret();

// Logs, once per process, that the job runs without a secret and what that means. `where`
// says who noticed ("store server at 127.0.0.1:29500", "rank 3").
void warn_unauthenticated_once(const std::string& where);

// The hint every authentication failure ends with.
std::string secret_hint();

}  // namespace braid::auth
