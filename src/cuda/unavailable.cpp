// Linked instead of the CUDA backend when the build found no CUDA compiler.
#include "decodebench/backend.h"
#include "decodebench/error.h"

namespace db {

namespace {
[[noreturn]] void no_cuda() {
  fail(
      "this decodebench binary was built without a CUDA backend (no nvcc at build time); "
      "run with --backend cpu, or rebuild where the CUDA Toolkit is installed");
}
}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int) {
  no_cuda();
}
DeviceInfo cuda_device_info(int, bool) {
  no_cuda();
}

}  // namespace db
