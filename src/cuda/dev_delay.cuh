// Lab builds only (-DDECODEBENCH_DEV=ON; src/cuda/dev_delay.cu is not compiled otherwise): with
// DECODEBENCH_DEV_DELAY_US=N in the environment, Engine::enqueue_step ends every decode step
// with a kernel that spins for N microseconds, a known slowdown for checking that compare flags
// one (results/lab/measurement-2026-12-01/validate.sh slowdown). Without it, nothing is enqueued.
#pragma once

#include <cuda_runtime.h>

namespace db::cuda {

void enqueue_dev_delay(cudaStream_t s);

}  // namespace db::cuda
