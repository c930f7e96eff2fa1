"""Who may depend on which layer of dist/: the layering, enforced by Bazel's visibility.

    store  <-  process_group (gloo/, nccl/)  <-  ddp
    store  <-  launch                            (launch knows no process group)
    process_group's flight records  <-  launch   (the launcher reads the workers' files, see below)
    dist/ (the front door: init, rendezvous) may use every layer; examples, bench and tests may too.

A BUILD file under dist/ sets its package's default visibility to one of these lists, so a back-edge (a process
group depending on DDP, the launcher on a process group) fails to build with a visibility error.
"""

# Everything above dist/ that may use any of its layers.
_OUTSIDE = [
    "//bench:__subpackages__",
    "//examples:__subpackages__",
    "//tests:__subpackages__",
    "//dist:__pkg__",
    "//dist/testing:__pkg__",
]

DDP_USERS = _OUTSIDE + ["//dist/ddp:__subpackages__"]

PROCESS_GROUP_USERS = DDP_USERS + ["//dist/process_group:__subpackages__"]

LAUNCH_USERS = _OUTSIDE + ["//dist/launch:__subpackages__"]

STORE_USERS = PROCESS_GROUP_USERS + LAUNCH_USERS + ["//dist/store:__subpackages__"]

# The flight recorder's files and their analyzer (dist/process_group/flight_record, flight_recorder_analysis):
# a pure function of files the workers leave behind, which the launcher runs after a failed job. Nothing
# else of the process groups is visible to launch.
FLIGHT_RECORD_READERS = PROCESS_GROUP_USERS + LAUNCH_USERS
