// A kernel with a static __shared__ variable, which the emulator refuses to
// compile (cuda_runtime.h): ctest emulated_static_shared_refused passes on
// the compiler's error, which names the fix. Not built into any program.
#include <cuda_runtime.h>

__global__ void static_shared_kernel(float* out) {
  __shared__ float sums[32];
  sums[threadIdx.x & 31] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = sums[0];
}
