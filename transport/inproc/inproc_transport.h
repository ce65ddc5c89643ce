// transport/inproc/inproc_transport.h - ranks as threads of one process.
//
// For fast unit tests of everything above transport/: every rank of a test makes its own
// InprocTransport on one shared Fabric and drives it from its own thread, exactly as a rank
// process drives tcp. Messages are copied straight from the sender's buffer into the posted
// receive buffer (or held until a receive is posted). Fault hooks let tests kill a "peer".
#pragma once

#include <memory>

#include "transport/transport.h"

namespace braid::transport::inproc {

// The in-process "network": owned by the test, shared by every rank's transport. Thread-safe.
class Fabric {
 public:
  Fabric();
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Makes every connection to or from `rank` fail (ErrorCode::peer_lost) as a dead peer would.
  void kill(int rank);

  struct Impl;
  Impl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// A transport for one rank on `fabric`. listen() returns "inproc:<n>".
std::unique_ptr<Transport> create_inproc_transport(Fabric& fabric);

}  // namespace braid::transport::inproc
