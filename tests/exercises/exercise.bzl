"""exercise(): the targets every folder of docs/exercises.md has, from one description.

An exercise is a file the learner writes (SOLUTION.cc, against SOLUTION.h), a check that says when it is
right (check_test.cc), a reference solution (reference/SOLUTION.cc) and a known wrong one (wrong/SOLUTION.cc).
The targets:
  :mine, :reference, :wrong   the three solutions as libraries
  :check                      the check against yours; tagged manual: it fails until the exercise is solved, so
                              `bazel test //...` leaves it out
  :reference_check            the same check against the reference (in CI: the check can pass)
  :rejects_wrong_solution     the check built against wrong/ must fail, for the reason given (in CI: the check
                              can fail; expect_rejected.sh)
  :rejects_FOLDER             the same for each further wrong solution, in FOLDER/SOLUTION.cc (more_wrong)
"""

def exercise(solution, deps, test_deps, rejected_because, size = "medium", check_filter = None, data = [],
             more_wrong = {}):
    """The targets of one exercise folder.

    Args:
      solution: the learner's file without its extension, e.g. "allreduce_by_hand".
      deps: what the solutions build against.
      test_deps: what check_test.cc builds against, besides the solution.
      rejected_because: a line the check must print when it rejects wrong/SOLUTION.cc.
      size: the tests' size.
      check_filter: a --gtest_filter for the rejection run (the test that shows the mistake), or None.
      data: runtime files of the check (every run of it).
      more_wrong: {FOLDER: the line the check must print}: further wrong solutions, each rejected by its own
        :rejects_FOLDER (a mistake learners made that the first wrong solution does not show).
    """
    wrong = [("wrong", "wrong/", "wrong_solution_check", "rejects_wrong_solution", rejected_because)]
    for folder, because in more_wrong.items():
        wrong.append((folder, folder + "/", folder + "_check", "rejects_" + folder, because))
    for library, source in [("mine", ""), ("reference", "reference/")] + [(w[0], w[1]) for w in wrong]:
        native.cc_library(
            name = library,
            srcs = [source + solution + ".cc"],
            hdrs = [solution + ".h"],
            deps = deps,
        )
    native.cc_test(
        name = "check",
        size = size,
        srcs = ["check_test.cc"],
        data = data,
        tags = ["manual"],
        deps = [":mine"] + test_deps,
    )
    native.cc_test(
        name = "reference_check",
        size = size,
        srcs = ["check_test.cc"],
        data = data,
        deps = [":reference"] + test_deps,
    )
    for library, _, binary, test, because in wrong:
        native.cc_binary(
            name = binary,
            testonly = True,
            srcs = ["check_test.cc"],
            deps = [":" + library] + test_deps,
        )
        native.sh_test(
            name = test,
            size = size,
            srcs = ["//tests/exercises:expect_rejected.sh"],
            args = ["$(location :" + binary + ")"] +
                   (["--gtest_filter=" + check_filter] if check_filter else []) +
                   ["--", because],
            data = [":" + binary] + data,
        )
