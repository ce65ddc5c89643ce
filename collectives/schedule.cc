#include "collectives/schedule.h"

#include <algorithm>
#include <sstream>

namespace braid::collectives {

const char* to_string(StepKind k) noexcept {
  switch (k) {
    case StepKind::send: return "send";
    case StepKind::recv: return "recv";
    case StepKind::recv_reduce: return "recv_reduce";
    case StepKind::recv_reduce_send: return "recv_reduce_send";
    case StepKind::recv_copy_send: return "recv_copy_send";
    case StepKind::copy: return "copy";
    case StepKind::scale: return "scale";
  }
  return "?";
}

Span split(Span whole, size_t parts, size_t i, size_t elem_size) {
  if (parts == 0 || elem_size == 0) return Span{whole.offset, 0};
  const size_t elems = whole.bytes / elem_size;
  const size_t base = elems / parts;
  const size_t extra = elems % parts;
  const size_t first = i * base + std::min(i, extra);
  const size_t n = base + (i < extra ? 1 : 0);
  return Span{whole.offset + first * elem_size, n * elem_size};
}

Span block(const std::vector<size_t>& counts, size_t count, size_t i, size_t elem_size) {
  if (counts.empty()) return Span{i * count * elem_size, count * elem_size};
  size_t before = 0;
  for (size_t j = 0; j < i; ++j) before += counts[j];
  return Span{before * elem_size, counts[i] * elem_size};
}

size_t total_bytes(const std::vector<size_t>& counts, size_t count, size_t n, size_t elem_size) {
  if (counts.empty()) return n * count * elem_size;
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total * elem_size;
}

size_t segments_for(size_t bytes, size_t segment_bytes) {
  if (bytes == 0) return 0;
  if (segment_bytes == 0) return 1;
  return (bytes + segment_bytes - 1) / segment_bytes;
}

namespace {
const char* buf_name(Buf b) {
  switch (b) {
    case Buf::send: return "send";
    case Buf::recv: return "recv";
    case Buf::scratch: return "scratch";
  }
  return "?";
}
void put(std::ostringstream& o, const Range& r) {
  o << buf_name(r.buf) << "[" << r.offset << "+" << r.bytes << "]";
}
}  // namespace

std::string describe(const Schedule& s) {
  std::ostringstream o;
  o << "scratch " << s.scratch_bytes << " B, window " << s.window << "\n";
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& st = s.steps[i];
    o << "  " << i << ": " << to_string(st.kind);
    if (st.has_recv()) o << " from " << st.recv_peer;
    if (st.has_send()) o << " to " << st.send_peer;
    o << " dst ";
    put(o, st.dst);
    if (st.src.bytes != 0) {
      o << " src ";
      put(o, st.src);
    }
    if (st.factor != 1.0) o << " x" << st.factor;
    o << "\n";
  }
  return o.str();
}

}  // namespace braid::collectives
