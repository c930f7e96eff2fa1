// Internal: how the host heap (glibc's malloc) treats the tensors a training step frees, so that
// the next step reuses their memory instead of asking the kernel for fresh pages. Called by
// tensor/storage.cc before the first host allocation.
#ifndef TINYDDP_TENSOR_INTERNAL_HOST_HEAP_H_
#define TINYDDP_TENSOR_INTERNAL_HOST_HEAP_H_

namespace tinyddp::internal {

/// Keeps freed host memory mapped in this process, once per process (later calls do nothing).
///
/// Why: by default glibc serves a block of 128 KiB or more (one [64, 512] float32 activation is exactly
/// 128 KiB) with a fresh mmap() and unmaps it on free, and hands the top of its heap back to the kernel
/// once more than a few hundred KiB there are free. A training step allocates and frees the same sizes
/// every iteration, so each step page-faulted its activations, gradients and Eigen's GEMM scratch in
/// again, each page zeroed by the kernel: a third of a CPU step's time on the tiny MLP. With blocks up
/// to 32 MiB (glibc's largest setting) served from the heap and the heap never trimmed, the second step
/// finds every block it needs already mapped. The cost: the process keeps its peak heap.
/// MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ in the environment, if set, win over this.
void KeepFreedHostMemoryMapped();

}  // namespace tinyddp::internal

#endif  // TINYDDP_TENSOR_INTERNAL_HOST_HEAP_H_
