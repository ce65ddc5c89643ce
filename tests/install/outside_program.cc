// A program outside the tree: built against the installed headers and braid.pc only.
#include <braid/braid.h>

#include <cstdio>
#include <vector>

int main() {
  braid::Communicator comm = braid::Communicator::from_env();
  std::vector<float> v(1000, 2.0f);
  comm.all_reduce(v.data(), v.size(), braid::DType::f32, braid::Op::sum);
  std::printf("outside program: rank %d of %d, v[0] = %g\n", comm.rank(), comm.size(), static_cast<double>(v[0]));
  return v[999] == 2.0f * static_cast<float>(comm.size()) ? 0 : 1;
}
