// Which CPU kernel variant runs: cpuid, the TINYDDP_CPU_ISA cap, and the banner line.
#include "tensor/cpu_isa.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tinyddp {
namespace {

// The compiler flags each variant is built with (tensor/BUILD), for the banner.
const char* BuildLevel(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kSse2: return "x86-64 baseline";
    case CpuIsa::kAvx2: return "x86-64-v3";
    case CpuIsa::kAvx512: return "x86-64-v4";
  }
  return "?";
}

CpuIsa Detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  // GCC's runtime (libgcc) reads cpuid and also checks, through xgetbv, that the OS saves the AVX and
  // AVX-512 registers on a context switch: a CPU with AVX-512 under an OS that does not save them must
  // not run AVX-512 code. The level names are the same psABI levels the variants are compiled for.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return CpuIsa::kAvx512;
  if (__builtin_cpu_supports("x86-64-v3")) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kSse2;
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kSse2: return "sse2";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name) {
  for (CpuIsa isa : {CpuIsa::kSse2, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU instruction set '", name, "'; the choices are sse2, avx2 and avx512"));
}

CpuIsa DetectedCpuIsa() {
  static const CpuIsa detected = Detect();
  return detected;
}

absl::StatusOr<CpuIsa> ChooseCpuIsa(CpuIsa detected, const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return detected;
  absl::StatusOr<CpuIsa> cap = ParseCpuIsa(env_value);
  if (!cap.ok()) return absl::InvalidArgumentError(absl::StrCat("TINYDDP_CPU_ISA: ", cap.status().message()));
  return *cap < detected ? *cap : detected;
}

CpuIsa ActiveCpuIsa() {
  static const CpuIsa active = [] {
    absl::StatusOr<CpuIsa> chosen = ChooseCpuIsa(DetectedCpuIsa(), std::getenv("TINYDDP_CPU_ISA"));
    if (!chosen.ok()) {
      // Called from inside a kernel, with no Status to return: a clear message and a clean exit.
      std::fprintf(stderr, "tinyddp: %s (unset it to use the widest this CPU runs)\n",
                   std::string(chosen.status().message()).c_str());
      std::exit(2);
    }
    return *chosen;
  }();
  return active;
}

std::string CpuIsaSummary() {
  const CpuIsa active = ActiveCpuIsa(), detected = DetectedCpuIsa();
  std::string line = absl::StrCat("CPU kernels: ", CpuIsaName(active), " (", BuildLevel(active),
                                  "; this CPU runs ", CpuIsaName(detected));
  const char* cap = std::getenv("TINYDDP_CPU_ISA");
  if (active != detected) {
    absl::StrAppend(&line, "; capped by TINYDDP_CPU_ISA=", cap);
  } else if (cap != nullptr && *cap != '\0' && std::string(cap) != CpuIsaName(active)) {
    absl::StrAppend(&line, "; TINYDDP_CPU_ISA=", cap, " is more than this CPU runs");
  }
  return line + ")";
}

}  // namespace tinyddp
