// SystemReport for a build without the CUDA toolkit (see gpu_report.h).
#include "dist/launch/gpu_report.h"

namespace tinyddp::dist {

std::string SystemReport() {
  return "tinyddp launch --check\n"
         "CPU-only build: tinyddp was compiled without the CUDA toolkit, so it uses no GPU, CUDA or NCCL.\n"
         "  (Install CUDA under /usr/local/cuda or set CUDA_HOME, then rebuild, to train on GPUs.)\n"
         "GPUs: none usable by this build; workers use the Gloo backend on CPU.\n";
}

}  // namespace tinyddp::dist
