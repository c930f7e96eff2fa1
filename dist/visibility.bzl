"""Who may depend on which part of dist/: the layering of the core, and the wings above it, enforced by Bazel.

The core (a reader must understand it; tools/line_counts.sh holds its budget):

    store  <-  process_group (gloo/, nccl/)  <-  ddp
    store  <-  launch  ->  worker                (launch knows no process group)
    dist/ (the front door: init, rendezvous) may use every layer of the core; worker/ (a rank's env://
    variables, the job's timeout) is what launchers write and workers read.

The wings (observe/, accel/, parallel/, ladder/, elastic/, engines/) sit above the core, like examples,
bench, tools and tests: they may use any core target, and no core package may use them. They attach
through named seams (process_group/collective_observer.h, the virtual methods of ProcessGroup, DDP's comm
hook, the launcher's JobObserver, the env:// variables the engines translate into). Programs opt into
wings; the launch program is built in //dist/elastic for that reason (//dist/launch:launch only links to it).

A BUILD file under dist/ sets its package's default visibility to one of these lists, so a back-edge (a
process group depending on DDP, the launcher on a process group, the core on a wing) fails to build with a
visibility error; `tools/line_counts.sh --check` queries that no core library can see or use a wing
library. The public API (what a learner's own package builds on: //dist:init, //dist/store,
//dist/process_group, //dist/ddp, the backends) says `visibility = PUBLIC` on its targets.
"""

PUBLIC = ["//visibility:public"]

# The packages of programs (and docs/, whose test runs the commands the docs show), which opt into whatever
# they want.
_PROGRAMS = [
    "//bench:__subpackages__",
    "//docs:__subpackages__",
    "//examples:__subpackages__",
    "//tests:__subpackages__",
    "//tools:__subpackages__",
]

# The wings: each may use the core and the other wings.
_WINGS = [
    "//dist/observe:__subpackages__",
    "//dist/accel:__subpackages__",
    "//dist/parallel:__subpackages__",
    "//dist/ladder:__subpackages__",
    "//dist/elastic:__subpackages__",
    "//dist/engines:__subpackages__",
]

# Everything above one layer of the core that may use it.
_OUTSIDE = _PROGRAMS + _WINGS + [
    "//dist:__pkg__",
    "//dist/testing:__pkg__",
]

DDP_USERS = _OUTSIDE + ["//dist/ddp:__subpackages__"]

PROCESS_GROUP_USERS = DDP_USERS + ["//dist/process_group:__subpackages__"]

LAUNCH_USERS = _OUTSIDE + ["//dist/launch:__subpackages__"]

WORKER_USERS = LAUNCH_USERS + ["//dist/worker:__subpackages__"]

STORE_USERS = PROCESS_GROUP_USERS + LAUNCH_USERS + ["//dist/store:__subpackages__"]

# A wing's targets: programs and other wings (and test helpers), never a package that holds a core library.
WING_USERS = _PROGRAMS + _WINGS + ["//dist/testing:__pkg__"]
