#include "tests/tools/braidrun/etcd_reply_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
  braid::braidrun::etcd::fuzz_etcd_reply(d, n);
  return 0;
}
