// A libtorch program outside the tree: built against the installed headers and braid-torch.pc
// only, as one rank. d(sum of outputs)/d(bias) is the batch size for every output, on every
// rank, so the averaged gradient is the batch size too.
#include <braid/braid.h>
#include <braid/ddp/torch.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  braid::Communicator comm = braid::Communicator::from_env();
  torch::nn::Linear model(3, 2);
  braid::ddp::TorchDdp ddp(comm, *model);
  model(torch::ones({4, 3})).sum().backward();
  ddp.synchronize();
  const bool ok = model->bias.grad().eq(4).all().item<bool>();
  std::printf("outside torch program: rank %d of %d, %zu parameters, bias grad %s\n", comm.rank(), comm.size(),
              ddp.num_parameters(), ok ? "4 as expected" : "wrong");
  return ok ? 0 : 1;
}
