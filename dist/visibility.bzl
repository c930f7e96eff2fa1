"""Who may depend on which part of dist/: the layering of the core, and the wings above it, enforced by Bazel.

The core (a reader must understand it; tools/line_counts.sh holds its budget):

    store  <-  process_group (gloo/, nccl/)  <-  ddp
    store  <-  launch                            (launch knows no process group)
    dist/ (the front door: init, rendezvous) may use every layer of the core.

The wings (observe/, accel/, parallel/, ladder/) sit above the core, like examples, bench and tests: they
may use any core target, and no core library may use them. They attach through named seams
(process_group/collective_observer.h, the virtual methods of ProcessGroup, DDP's comm hook, the
launcher's JobObserver). The one core package that names a wing is dist/launch, and only for its binary:
//dist/launch:launch attaches the flight recorder (a program's choice, as ddp_mlp's); its libraries do not.

A BUILD file under dist/ sets its package's default visibility to one of these lists, so a back-edge (a
process group depending on DDP, the launcher on a process group, the core on a wing) fails to build with a
visibility error. The public API (what a learner's own package builds on: //dist:init, //dist/store,
//dist/process_group, //dist/ddp, the backends) says `visibility = PUBLIC` on its targets.
"""

PUBLIC = ["//visibility:public"]

# Everything above the core that may use any of its layers.
_OUTSIDE = [
    "//bench:__subpackages__",
    "//examples:__subpackages__",
    "//tests:__subpackages__",
    "//tools:__subpackages__",
    "//dist:__pkg__",
    "//dist/testing:__pkg__",
    "//dist/observe:__subpackages__",
    "//dist/accel:__subpackages__",
    "//dist/parallel:__subpackages__",
    "//dist/ladder:__subpackages__",
]

DDP_USERS = _OUTSIDE + ["//dist/ddp:__subpackages__"]

PROCESS_GROUP_USERS = DDP_USERS + ["//dist/process_group:__subpackages__"]

LAUNCH_USERS = _OUTSIDE + ["//dist/launch:__subpackages__"]

STORE_USERS = PROCESS_GROUP_USERS + LAUNCH_USERS + ["//dist/store:__subpackages__"]

# A wing's targets: whatever sits above the core (examples, bench, tests, other wings) may use them, and the
# launch binary (//dist/launch:launch, see above) may use the flight recorder's.
WING_USERS = _OUTSIDE + ["//dist/launch:__pkg__"]
