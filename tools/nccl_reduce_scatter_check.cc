// nccl_reduce_scatter_check: does the NCCL library this process loads write every element of a one-rank,
// out-of-place AVG reduction? A diagnostic for one GPU that uses NCCL alone (no tinyddp code), so that
// running it against two NCCL builds says whose bug a wrong result is:
//
//   nccl_reduce_scatter_check                                   # the NCCL the loader finds (system's)
//   LD_LIBRARY_PATH=/dir/with/other/libnccl.so.2 nccl_reduce_scatter_check
//
// It prints which libnccl it loaded (path and version), then one line per case: ncclReduceScatter and
// ncclAllReduce on a one-rank communicator, out of place, float32/float64/bfloat16, AVG and SUM, sizes
// that are and are not a multiple of NCCL's block count. The output buffer starts as NaN (all bits set);
// on one rank every op is the identity, so each output element must equal its input bit for bit.
// NCCL releases before 2.29.7 run one-rank AVG through a kernel that splits the elements over up to 32
// blocks rounding down and so leave the last (n mod blocks) unwritten (NVIDIA/nccl issue 1950);
// tinyddp's ProcessGroupNCCL asks for SUM on one rank, which NCCL turns into a plain copy.
// Exit status: 0 every element written, 1 some left unwritten, 2 no GPU or a CUDA/NCCL error.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct DTypeCase {
  const char* name;
  ncclDataType_t nccl;
  size_t bytes;
};

// Element i of the input, a small integer (exact in every dtype), stored as `dtype` at `out`.
void StoreInput(const DTypeCase& dtype, int64_t i, unsigned char* out) {
  const float v = static_cast<float>(static_cast<int>((i * 7919) % 17) - 8);
  if (dtype.bytes == 4) {
    std::memcpy(out, &v, 4);
  } else if (dtype.bytes == 8) {
    const double d = v;
    std::memcpy(out, &d, 8);
  } else {  // bfloat16: the top half of the float32 (exact for small integers)
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const uint16_t top = static_cast<uint16_t>(bits >> 16);
    std::memcpy(out, &top, 2);
  }
}

bool CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "nccl_reduce_scatter_check: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

bool NcclOk(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "nccl_reduce_scatter_check: %s: %s\n", what, ncclGetErrorString(r));
  return false;
}

// Runs one case; returns the number of output elements that differ from the input (-1 on an error).
int64_t RunCase(ncclComm_t comm, cudaStream_t stream, bool reduce_scatter, const DTypeCase& dtype, ncclRedOp_t op,
                int64_t n, int64_t* first_bad) {
  const size_t bytes = static_cast<size_t>(n) * dtype.bytes;
  std::vector<unsigned char> in(bytes), out(bytes);
  for (int64_t i = 0; i < n; ++i) StoreInput(dtype, i, &in[static_cast<size_t>(i) * dtype.bytes]);
  void* d_in = nullptr;
  void* d_out = nullptr;
  if (!CudaOk(cudaMalloc(&d_in, bytes), "cudaMalloc") || !CudaOk(cudaMalloc(&d_out, bytes), "cudaMalloc")) return -1;
  bool ok = CudaOk(cudaMemcpy(d_in, in.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy") &&
            CudaOk(cudaMemset(d_out, 0xFF, bytes), "cudaMemset");
  if (ok) {
    ok = reduce_scatter ? NcclOk(ncclReduceScatter(d_in, d_out, n, dtype.nccl, op, comm, stream), "ncclReduceScatter")
                        : NcclOk(ncclAllReduce(d_in, d_out, n, dtype.nccl, op, comm, stream), "ncclAllReduce");
  }
  ok = ok && CudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize") &&
       CudaOk(cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d_in);
  cudaFree(d_out);
  if (!ok) return -1;
  int64_t bad = 0;
  *first_bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    const size_t at = static_cast<size_t>(i) * dtype.bytes;
    if (std::memcmp(&in[at], &out[at], dtype.bytes) != 0) {
      if (bad++ == 0) *first_bad = i;
    }
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--device=", 9) == 0) {
      device = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--device=N]   (pick the NCCL to test with LD_LIBRARY_PATH)\n", argv[0]);
      return 2;
    }
  }
  int version = 0;
  ncclGetVersion(&version);
  Dl_info where{};
  dladdr(reinterpret_cast<void*>(&ncclGetVersion), &where);
  std::printf("NCCL %d.%d.%d from %s (compiled against %d.%d.%d)\n", version / 10000, version / 100 % 100,
              version % 100, where.dli_fname != nullptr ? where.dli_fname : "?", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);

  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::fprintf(stderr, "nccl_reduce_scatter_check: no CUDA device is visible\n");
    return 2;
  }
  if (!CudaOk(cudaSetDevice(device), "cudaSetDevice")) return 2;
  ncclComm_t comm;
  if (!NcclOk(ncclCommInitAll(&comm, 1, &device), "ncclCommInitAll (one rank)")) return 2;
  cudaStream_t stream;
  if (!CudaOk(cudaStreamCreate(&stream), "cudaStreamCreate")) return 2;

  const DTypeCase dtypes[] = {{"float32", ncclFloat32, 4}, {"float64", ncclFloat64, 8}, {"bfloat16", ncclBfloat16, 2}};
  const struct {
    const char* name;
    ncclRedOp_t op;
  } ops[] = {{"avg", ncclAvg}, {"sum", ncclSum}};
  const int64_t sizes[] = {(int64_t{1} << 20) + 3, (int64_t{1} << 20) + 31, 100003, 65543, int64_t{1} << 20};
  int64_t cases_bad = 0;
  for (bool reduce_scatter : {true, false}) {
    for (const DTypeCase& dtype : dtypes) {
      for (const auto& op : ops) {
        for (int64_t n : sizes) {
          int64_t first = -1;
          const int64_t bad = RunCase(comm, stream, reduce_scatter, dtype, op.op, n, &first);
          if (bad < 0) return 2;
          std::printf("%-13s %-8s %-4s [%7lld]: %s", reduce_scatter ? "ReduceScatter" : "AllReduce", dtype.name,
                      op.name, static_cast<long long>(n), bad == 0 ? "every element written\n" : "");
          if (bad > 0) std::printf("%lld element(s) unwritten, the first at %lld\n", static_cast<long long>(bad),
                                   static_cast<long long>(first));
          cases_bad += bad > 0;
        }
      }
    }
  }
  ncclCommDestroy(comm);
  if (cases_bad > 0) {
    std::printf("verdict: this NCCL leaves elements unwritten in %lld case(s): its bug (NVIDIA/nccl issue 1950, "
                "fixed in 2.29.7), not the caller's\n", static_cast<long long>(cases_bad));
    return 1;
  }
  std::printf("verdict: this NCCL writes every element in every case\n");
  return 0;
}
