// The wait of the staged path: one thread polls the mapped counter the host worker advances
// (sleeping a microsecond between reads, so it costs one warp slot and a PCIe read per
// microsecond), then stops the context if the host job failed.
#include "cuda/kernels/kernels.h"

namespace jaccl::cuda {
namespace {

__global__ void wait_host_kernel(HostSignal* signal, uint64_t number) {
  uint64_t seen;
  while (((seen = signal->done) >> 1) < number) __nanosleep(1000);
  __threadfence_system();
  if (seen & 1) __trap();
}

}  // namespace

cudaError_t launch_wait_host(HostSignal* signal, uint64_t number, cudaStream_t stream) {
  wait_host_kernel<<<1, 1, 0, stream>>>(signal, number);
  return cudaGetLastError();
}

}  // namespace jaccl::cuda
