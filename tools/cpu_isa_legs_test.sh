#!/usr/bin/env bash
# A leg of a test that this CPU cannot run must report a skip that says why, never a pass
# (tools/cpu_isa_legs.bzl, tensor/testing/cpu_isa_leg.cc). On a CPU that has every kernel set that cannot
# happen by itself, so the leg is run pretending the CPU is narrower (TINYDDP_CPU_ISA_LEG_PRETEND).
set -uo pipefail
leg=$1        # e.g. tensor/optim_test_avx512
fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$TEST_TMPDIR/out"; exit 1; }

TINYDDP_CPU_ISA=avx512 TINYDDP_CPU_ISA_LEG_PRETEND=avx2 "$leg" --gtest_output="xml:$TEST_TMPDIR/leg.xml" \
  >"$TEST_TMPDIR/out" 2>&1 || fail "the skipped leg exited with $?"
grep -q '\[  SKIPPED \] CpuIsaLeg.NotOnThisCpu' "$TEST_TMPDIR/out" || fail "no skipped case"
grep -q 'the avx512 leg needs a CPU that runs avx512; this one runs avx2' "$TEST_TMPDIR/out" || fail "no reason"
grep -q '1 test from 1 test suite ran' "$TEST_TMPDIR/out" || fail "the leg's own cases ran"
grep -q 'result="skipped"\|<skipped' "$TEST_TMPDIR/leg.xml" || fail "the XML report does not say skipped"

# And where the CPU has the set, the leg runs its cases and says which kernels.
TINYDDP_CPU_ISA=sse2 "$leg" >"$TEST_TMPDIR/out" 2>&1 || fail "the sse2 leg failed"
grep -q 'CPU kernel leg: CPU kernels: sse2' "$TEST_TMPDIR/out" || fail "the sse2 leg did not name its kernels"
echo "PASS"
