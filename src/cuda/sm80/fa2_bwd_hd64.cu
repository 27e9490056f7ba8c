// FA2 backward kernels for head_dim 64 (fp16 and bf16); see fa2_bwd_launch.cuh.
#include "cuda/sm80/fa2_bwd_launch.cuh"

FA2_BWD_INSTANTIATE(64)
