"""A test run once per CPU kernel set (tensor/cpu_isa.h: sse2, avx2, avx512).

Results that are claimed bit for bit (a resumed run equals an uninterrupted one) or that depend on the
kernels (a GEMM's rounding) must hold on every CPU a user has, not only on the one CI happens to run on.
cpu_isa_legs(name = "foo_test", srcs = [...], ...) compiles the sources once and defines one test per
kernel set, each with TINYDDP_CPU_ISA set (inherited by every process the test starts):

    foo_test_sse2   foo_test_avx2   foo_test_avx512     and the suite foo_test (all three)

A leg the CPU cannot run reports one skipped case saying why (tensor/testing/cpu_isa_leg.cc, which is the
legs' main(): list gtest, not gtest_main, among the deps); run it on a CPU that has it, e.g. the GPU
machine's host through tools/gpu_bundle.sh.
"""

CPU_ISA_LEGS = ["sse2", "avx2", "avx512"]

def cpu_isa_legs(name, srcs, deps = [], data = [], size = "medium", tags = [], **kwargs):
    native.cc_library(
        name = name + "_cases",
        testonly = True,
        srcs = srcs,
        deps = [d for d in deps if d != "@gtest//:gtest_main"] + ["@gtest", "//tensor/testing:cpu_isa_leg"],
        alwayslink = True,
    )
    legs = []
    for isa in CPU_ISA_LEGS:
        native.cc_test(
            name = name + "_" + isa,
            size = size,
            data = data,
            env = {"TINYDDP_CPU_ISA": isa},
            tags = tags,
            deps = [":" + name + "_cases"],
            **kwargs
        )
        legs.append(":" + name + "_" + isa)
    native.test_suite(name = name, tests = legs, tags = tags)
