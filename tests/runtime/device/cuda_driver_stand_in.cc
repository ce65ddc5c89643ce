// An empty library built as libcuda.so: device_staging_test loads it to stand in for the CUDA
// driver, which braid recognises by that name (runtime/device/cuda_device_api.cc).
extern "C" int braid_cuda_driver_stand_in() { return 0; }
