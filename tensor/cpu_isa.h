// Which instruction set the CPU kernels run with. One portable binary carries the hot CPU kernels (GEMM,
// elementwise, optimizer steps) built three times, for three x86-64 levels; the first CPU kernel call asks
// the processor (cpuid) which levels it runs and takes the widest, unless TINYDDP_CPU_ISA caps it.
// The kernels themselves are in tensor/internal/cpu_isa_*.cc; this header only names and chooses.
//
//   variant  built with              vector width  needs (cpuid, and the OS saving the registers)
//   sse2     the x86-64 baseline     128 bits      nothing: every x86-64 CPU
//   avx2     -march=x86-64-v3        256 bits      AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE
//   avx512   -march=x86-64-v4        512 bits      the above and AVX-512 F, BW, CD, DQ, VL
//
// TINYDDP_CPU_ISA=sse2|avx2|avx512 caps the choice (never raises it above what the CPU runs): to compare
// the variants, or to run the portable path on purpose. Programs print CpuIsaSummary() so a user sees
// which path runs. Results: elementwise kernels and optimizer steps give bit-identical results in every
// variant; a GEMM differs by rounding only (wider vectors and FMA sum in a different order).
#ifndef TINYDDP_TENSOR_CPU_ISA_H_
#define TINYDDP_TENSOR_CPU_ISA_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp {

/// Ordered: a later variant runs everything an earlier one does.
enum class CpuIsa { kSse2 = 0, kAvx2 = 1, kAvx512 = 2 };

/// "sse2", "avx2" or "avx512".
const char* CpuIsaName(CpuIsa isa);

/// "sse2" / "avx2" / "avx512" (as TINYDDP_CPU_ISA spells them) -> the variant; anything else is
/// InvalidArgument naming the three choices.
absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name);

/// The widest variant this processor (and its OS) runs, from cpuid. Cheap after the first call.
CpuIsa DetectedCpuIsa();

/// The variant chosen for `detected` with the cap `env_value` (the value of TINYDDP_CPU_ISA, or nullptr
/// when unset): min(detected, cap). A malformed cap is InvalidArgument. Pure; ActiveCpuIsa() applies it.
absl::StatusOr<CpuIsa> ChooseCpuIsa(CpuIsa detected, const char* env_value);

/// The variant the CPU kernels of this process run: ChooseCpuIsa(DetectedCpuIsa(), $TINYDDP_CPU_ISA),
/// decided once, on the first call, and fixed for the life of the process. A malformed TINYDDP_CPU_ISA
/// ends the program with a message saying what the accepted values are (exit code 2).
CpuIsa ActiveCpuIsa();

/// One line for a program's banner, e.g. "CPU kernels: avx2 (x86-64-v3; this CPU runs avx2)" or
/// "CPU kernels: sse2 (x86-64 baseline; this CPU runs avx2; capped by TINYDDP_CPU_ISA=sse2)".
std::string CpuIsaSummary();

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_CPU_ISA_H_
