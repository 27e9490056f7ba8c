#include "cuda/common/workspace_pool.h"

#include <map>
#include <mutex>

#include "cuda/common/cuda_check.h"

namespace flashattn::cuda {

Status workspace_pool(int device, cudaMemPool_t* pool) {
  static std::mutex mutex;
  // Never destroyed: the CUDA context may be gone at static destruction.
  static auto* pools = new std::map<int, cudaMemPool_t>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = pools->find(device);
  if (it == pools->end()) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t created = nullptr;
    FA_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&created, &props));
    uint64_t keep = kWorkspacePoolKeepBytes;
    const cudaError_t set = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep);
    if (set != cudaSuccess) {
      cudaMemPoolDestroy(created);
      return cuda_status(set, "cudaMemPoolSetAttribute(release threshold)");
    }
    it = pools->emplace(device, created).first;
  }
  *pool = it->second;
  return Status::Ok();
}

}  // namespace flashattn::cuda
