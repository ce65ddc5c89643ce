#include "runtime/store/store_handshake.h"

#include "runtime/store/socket_util.h"
#include "runtime/store/store_protocol.h"

namespace braid::store {
namespace {

constexpr uint8_t kHasSecret = 1;

std::string_view as_view(const unsigned char* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

// Job ids are shown in messages: anything unprintable is escaped, and a long one cut.
std::string shown(const std::string& job_id) { return printable_key(job_id); }

std::string error_frame(ErrorCode code, const std::string& message) {
  return FrameWriter().u8(static_cast<uint8_t>(ReplyKind::error)).u8(static_cast<uint8_t>(code)).bytes(message).finish();
}

// Why a proof failed, about the side that made it ("it"), judged by `judge` ("this store").
std::string why_proof_failed(bool prover_has_secret, bool judge_has_secret, const std::string& judge) {
  if (!prover_has_secret && judge_has_secret) return "it has no secret, and " + judge + " requires one";
  if (prover_has_secret && !judge_has_secret) {
    return "it has a secret, but " + judge + " has none (neither BRAID_SECRET nor BRAID_SECRET_FILE is set for it)";
  }
  return "it proved a different secret (another job's, or a stale BRAID_SECRET_FILE)";
}

}  // namespace

std::string handshake_transcript(std::string_view server_job_id, std::string_view client_job_id) {
  std::string t = "braid-store/1";
  t.push_back('\0');
  t.append(server_job_id);
  t.push_back('\0');
  t.append(client_job_id);
  return t;
}

// ---- server ----

ServerHandshake::ServerHandshake(const auth::JobSecret& secret, const std::string& job_id, uint16_t port)
    : secret_(secret), job_id_(job_id), port_(port), nonce_(auth::fresh_nonce()) {}

std::string ServerHandshake::hello_frame() const {
  return FrameWriter()
      .u32(kHandshakeMagic)
      .u16(kProtocolVersion)
      .u8(secret_.present() ? kHasSecret : 0)
      .raw(as_view(nonce_.data(), nonce_.size()))
      .bytes(job_id_)
      .finish();
}

ServerHandshake::Verdict ServerHandshake::on_answer(std::string_view body, const std::string& peer) const {
  FrameReader r(body);
  uint32_t magic = r.u32();
  uint16_t version = r.u16();
  uint8_t flags = r.u8();
  auth::Nonce client_nonce{};
  auth::Mac proof{};
  r.raw(client_nonce.data(), client_nonce.size());
  r.raw(proof.data(), proof.size());
  std::string client_job = r.bytes();
  auto refuse = [&](ErrorCode code, std::string message) {
    return Verdict{error_frame(code, message), Status(code, std::move(message))};
  };
  // The client learns why in its own words: the server's log names the client instead.
  auto refuse_as = [&](ErrorCode code, std::string log_message, const std::string& wire_message) {
    return Verdict{error_frame(code, wire_message), Status(code, std::move(log_message))};
  };
  if (!r.ok() || !r.at_end() || magic != kHandshakeMagic) {
    return refuse(ErrorCode::protocol, "client " + peer + " did not answer with a braid store handshake");
  }
  if (version != kProtocolVersion) {
    return refuse(ErrorCode::protocol, "client " + peer + " speaks store protocol version " + std::to_string(version) +
                                           ", this store " + std::to_string(kProtocolVersion) +
                                           ": run the same braid everywhere");
  }
  if (client_job.size() > kMaxJobIdBytes) {
    return refuse(ErrorCode::protocol, "client " + peer + " sent a job id of " + std::to_string(client_job.size()) +
                                           " bytes (at most " + std::to_string(kMaxJobIdBytes) + ")");
  }
  if (!job_id_.empty() && !client_job.empty() && client_job != job_id_) {
    return refuse(ErrorCode::invalid_argument,
                  "refused a client of job " + shown(client_job) + " from " + peer + ": the store on port " +
                      std::to_string(port_) + " serves job " + shown(job_id_) +
                      " (two jobs were given the same port; give each job its own MASTER_PORT)");
  }
  const std::string transcript = handshake_transcript(job_id_, client_job);
  if (!secret_.verify(auth::Direction::to_acceptor, nonce_, client_nonce, transcript, proof)) {
    const bool client_has_secret = (flags & kHasSecret) != 0;
    return refuse_as(ErrorCode::unauthenticated,
                     "refused client " + peer + ": " + why_proof_failed(client_has_secret, secret_.present(), "this store"),
                     "this process did not prove the job's secret: " +
                         why_proof_failed(client_has_secret, secret_.present(), "the store"));
  }
  auth::Mac mine = secret_.prove(auth::Direction::to_connector, client_nonce, nonce_, transcript);
  return Verdict{FrameWriter().u8(static_cast<uint8_t>(ReplyKind::ok)).raw(as_view(mine.data(), mine.size())).finish(),
                 Status::ok()};
}

// ---- client ----

ClientHandshake::ClientHandshake(const auth::JobSecret& secret, std::string job_id, std::string address,
                                 uint16_t port)
    : secret_(secret),
      job_id_(std::move(job_id)),
      address_(std::move(address)),
      port_(port),
      nonce_(auth::fresh_nonce()) {}

Result<std::string> ClientHandshake::on_hello(std::string_view body) {
  FrameReader r(body);
  uint32_t magic = r.u32();
  uint16_t version = r.u16();
  uint8_t flags = r.u8();
  r.raw(server_nonce_.data(), server_nonce_.size());
  server_job_id_ = r.bytes();
  if (!r.ok() || !r.at_end() || magic != kHandshakeMagic || server_job_id_.size() > kMaxJobIdBytes) {
    return protocol_error("the server at " + address_ +
                          " did not greet with a braid store handshake: is that port really this braid's store "
                          "(an older braid, or another program)?");
  }
  if (version != kProtocolVersion) {
    return protocol_error("the braid store at " + address_ + " speaks protocol version " + std::to_string(version) +
                          ", this process " + std::to_string(kProtocolVersion) + ": run the same braid everywhere");
  }
  server_has_secret_ = (flags & kHasSecret) != 0;
  if (!job_id_.empty() && !server_job_id_.empty() && job_id_ != server_job_id_) {
    refusal_ = invalid_argument("the braid store at " + address_ + " serves job " + shown(server_job_id_) +
                                ", not this job (" + shown(job_id_) + "): two jobs were given the same port " +
                                std::to_string(port_) +
                                ". This process does not join it; give each job its own MASTER_PORT");
  }
  const std::string transcript = handshake_transcript(server_job_id_, job_id_);
  auth::Mac proof = secret_.prove(auth::Direction::to_acceptor, server_nonce_, nonce_, transcript);
  return FrameWriter()
      .u32(kHandshakeMagic)
      .u16(kProtocolVersion)
      .u8(secret_.present() ? kHasSecret : 0)
      .raw(as_view(nonce_.data(), nonce_.size()))
      .raw(as_view(proof.data(), proof.size()))
      .bytes(job_id_)
      .finish();
}

Status ClientHandshake::on_verdict(std::string_view body) const {
  if (!refusal_.is_ok()) return refusal_;
  FrameReader r(body);
  auto kind = static_cast<ReplyKind>(r.u8());
  if (r.ok() && kind == ReplyKind::error) {
    auto code = static_cast<ErrorCode>(r.u8());
    std::string message = r.bytes();
    if (code != ErrorCode::invalid_argument && code != ErrorCode::protocol) code = ErrorCode::unauthenticated;
    std::string hint = code == ErrorCode::unauthenticated ? "; " + auth::secret_hint() : "";
    return Status(code, "the braid store at " + address_ + " refused this process: " + message + hint);
  }
  auth::Mac proof{};
  r.raw(proof.data(), proof.size());
  if (!r.ok() || !r.at_end() || kind != ReplyKind::ok) {
    return protocol_error("the braid store at " + address_ + " sent a malformed handshake verdict");
  }
  const std::string transcript = handshake_transcript(server_job_id_, job_id_);
  if (!secret_.verify(auth::Direction::to_connector, nonce_, server_nonce_, transcript, proof)) {
    return Status(ErrorCode::unauthenticated,
                  "the braid store at " + address_ + " could not prove it belongs to this job: " +
                      why_proof_failed(server_has_secret_, secret_.present(), "this process") + "; " +
                      auth::secret_hint());
  }
  return Status::ok();
}

}  // namespace braid::store
