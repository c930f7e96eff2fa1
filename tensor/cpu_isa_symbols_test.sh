#!/usr/bin/env bash
# Checks that each instruction-set variant of the CPU kernels (tensor/BUILD: cpu_isa_sse2, _avx2,
# _avx512) defines no global or weak symbol outside its own namespaces, tinyddp::cpu::<variant> and
# eigen_<variant> (tensor/internal/cpu_isa_kernels.h explains why: the linker keeps one copy of each
# weak symbol, so a shared one could run AVX-512 code on a CPU without it), and that the sse2 variant
# uses no 256- or 512-bit register.
# Arguments: the variants' static archives (libcpu_isa_<variant>.a).
set -euo pipefail

checked=0
for archive in "$@"; do
  case "$archive" in *.a) ;; *) continue ;; esac  # a cc_library may also list a .so
  variant=$(basename "$archive")
  variant=${variant#libcpu_isa_}
  variant=${variant%%.*}
  # Mangled names: tinyddp::cpu::avx2::X is _ZN7tinyddp3cpu4avx2..., eigen_avx2 is 10eigen_avx2.
  # DW.ref.__gxx_personality_v0 is the one exception: a data word holding the address of the C++
  # exception-handling routine, the same in every object file, so whichever copy the linker keeps is right.
  own="3cpu${#variant}${variant}|eigen_${variant}|^DW\.ref\.__gxx_personality_v0\$"
  # nm: upper-case types are global (T, D, B, R) or weak (W, V, u); lower-case are local to their object.
  shared=$(nm --defined-only "$archive" | awk '$2 ~ /^[A-Zu]$/ {print $3}' | grep -Ev "$own" || true)
  count=$(nm --defined-only "$archive" | awk '$2 ~ /^[A-Zu]$/' | wc -l)
  if [[ -n $shared ]]; then
    echo "FAIL: $variant defines symbols another variant or the portable code could share:" >&2
    echo "$shared" | c++filt | sed 's/^/  /' >&2
    echo "hint: keep Tensor and other shared inline code out of tensor/internal/cpu_isa_*.cc" >&2
    exit 1
  fi
  echo "ok: $variant: all $count global or weak symbols are its own ($own)"
  if [[ $variant == sse2 ]]; then
    # The portable variant must stay portable: no 256- or 512-bit register anywhere in its code.
    wide=$(objdump -d "$archive" | grep -cE '%[yz]mm' || true)
    if (( wide != 0 )); then
      echo "FAIL: sse2 uses $wide instructions on ymm/zmm registers; it must run on every x86-64 CPU" >&2
      exit 1
    fi
    echo "ok: sse2 uses no ymm/zmm register"
  fi
  checked=$((checked + 1))
done
if (( checked != 3 )); then
  echo "FAIL: expected the archives of 3 variants (sse2, avx2, avx512), got $checked from: $*" >&2
  exit 1
fi
