// How many thread block clusters of 1..16 CTAs fit on the device at once, for a CTA of 256 threads and
// 209 KB of dynamic shared memory (one per SM, as the wide decode kernel): the GPCs' SM counts decide it.
#include <cstdio>

#include <cuda_runtime.h>

__global__ void one_cta_per_sm() { extern __shared__ unsigned char smem[]; smem[threadIdx.x] = 0; }

int main() {
  const int smem = 209 * 1024;
  cudaFuncSetAttribute(one_cta_per_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(one_cta_per_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::printf("SMs %d\n", sms);
  for (int c = 1; c <= 16; ++c) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = c;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(c);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, one_cta_per_sm, &cfg);
    std::printf("cluster %2d: %3d clusters, %3d CTAs%s%s\n", c, n, n * c, e == cudaSuccess ? "" : " error ",
                e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  return 0;
}
