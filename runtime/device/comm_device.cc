#include "runtime/device/comm_device.h"

#include <string>

#include "braid/error.h"

namespace braid {

std::unique_ptr<DeviceStaging> CommDevice::stage_on(DeviceApi* api, collectives::CollectiveArgs& args,
                                                    const std::shared_ptr<detail::WorkState>& work,
                                                    FunctionRef<bool()> group_open) {
  const auto what = [&] { return std::string(collectives::to_string(args.kind)) + " on rank " + std::to_string(cfg_.rank) + ": "; };
  auto staged = DeviceStaging::stage(api, args, cfg_.rank, cfg_.size, stream(), [this] {
    std::call_once(staging_once_, [this] { staging_pool_ = std::make_shared<StagingPool>(cfg_.env.cuda_staging_bytes, cfg_.env.cuda_reduce); });
    return staging_pool_;
  });
  if (!staged.is_ok()) raise_if_error(staged.status().with_context(what()));
  std::unique_ptr<DeviceStaging> device = std::move(staged).value();
  if (!device) return device;  // host buffers: the common case costs a pointer lookup or two
  if (group_open()) {
    raise_if_error(invalid_argument(what() + "GPU buffers inside group_start()/group_end() are not supported yet: "
                                             "issue the call outside the group"));
  }
  // The stream's hold outlasts the operation's own timeout by a margin: the Work ends by then.
  Status held = device->hold_stream(work, cfg_.env.timeout_s + 60);
  if (!held.is_ok()) raise_if_error(held.with_context(what()));
  return device;
}

}  // namespace braid
