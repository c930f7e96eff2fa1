"""cuda_library: compiles .cu files with nvcc and links them like a cc_library.

    load("//tools:cuda.bzl", "cuda_library")
    cuda_library(name = "kernels", srcs = ["kernels.cu"], hdrs = ["kernels.h"], deps = [...])

Each .cu becomes one position-independent object (nvcc -O3 -std=c++17 -Xcompiler -fPIC -lineinfo)
with SASS for every architecture in --//tools:cuda_archs (default "80,90": A100 and H100/H200) plus PTX
for the newest, so newer GPUs can JIT it. The headers of `hdrs` and of every dep are inputs of the nvcc
action, so editing any of them recompiles the kernels. The objects are wrapped in a cc_library
that also depends on the CUDA runtime.

When the repository rule found no CUDA toolkit (@local_cuda//:defs.bzl, CUDA_AVAILABLE = False),
cuda_library, gpu_cc_test and gpu_cc_binary define nothing: BUILD files reference them through if_cuda().
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

CudaArchsInfo = provider(fields = ["archs"])

def _cuda_archs_impl(ctx):
    return [CudaArchsInfo(archs = [a.strip() for a in ctx.build_setting_value.split(",") if a.strip()])]

cuda_archs_setting = rule(
    implementation = _cuda_archs_impl,
    build_setting = config.string(flag = True),
)

def _cuda_objects_impl(ctx):
    archs = ctx.attr._archs[CudaArchsInfo].archs
    headers = depset(ctx.files.hdrs, transitive = [
        d[CcInfo].compilation_context.headers
        for d in ctx.attr.deps
    ])
    args = [
        "-O3",
        "-std=c++17",
        "-Xcompiler",
        "-fPIC",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "-I.",
        "-I" + ctx.bin_dir.path,
    ]
    for a in archs:
        args.append("-gencode=arch=compute_{a},code=sm_{a}".format(a = a))
    if archs:
        args.append("-gencode=arch=compute_{a},code=compute_{a}".format(a = archs[-1]))
    for d in ctx.attr.deps:
        cc = d[CcInfo].compilation_context
        args += ["-I" + i for i in cc.includes.to_list() + cc.quote_includes.to_list()]
        args += ["-isystem=" + i for i in cc.system_includes.to_list()]
        args += ["-D" + x for x in cc.defines.to_list()]
    args += ctx.attr.copts
    outs = []
    for src in ctx.files.srcs:
        out = ctx.actions.declare_file("_objs/{}/{}.pic.o".format(ctx.attr.name, src.basename[:-len(".cu")]))
        ctx.actions.run_shell(
            outputs = [out],
            inputs = depset([src], transitive = [headers]),
            command = '"{}" "$@"'.format(NVCC),
            arguments = args + ["-c", src.path, "-o", out.path],
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "_archs": attr.label(default = "//tools:cuda_archs"),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], visibility = None, **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc. Defines nothing without CUDA."""
    if not CUDA_AVAILABLE:
        return
    _cuda_objects(
        name = name + "_objs",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = copts,
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_objs"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        visibility = visibility,
        **kwargs
    )

def gpu_cc_test(name, tags = [], **kwargs):
    """A cc_test for GPU code: tagged "gpu", and defined only when the CUDA toolkit is present.

    Such a test must GTEST_SKIP() with a reason when no CUDA device is visible, so it passes in CI
    (which has the toolkit but no GPU) and really runs on the GPU machine.
    """
    if not CUDA_AVAILABLE:
        return
    native.cc_test(name = name, tags = tags + ["gpu"], **kwargs)

def gpu_cc_binary(name, **kwargs):
    """A cc_binary that needs the CUDA toolkit to build (a GPU diagnostic): defined only when it is present."""
    if not CUDA_AVAILABLE:
        return
    native.cc_binary(name = name, **kwargs)
