// flight_recorder_analyze DIR: the verdict on a stuck or failed job from its ranks' flight records
// (verdict.h). DIR is TINYDDP_FLIGHT_RECORDER_DIR of the job (the launcher prints it
// when a job fails), or the default dump directory of a job started by hand. Works on a live job too:
// a hung job's ring files are current, and `kill -USR1` makes every rank add a dump.
#include <cstdio>
#include <string>

#include "dist/observe/flight_recorder/record.h"
#include "dist/observe/flight_recorder/verdict.h"

int main(int argc, char** argv) {
  const std::string arg = argc > 1 ? argv[1] : "";
  if (argc > 2 || arg == "--help" || arg == "-h") {
    std::printf(
        "usage: flight_recorder_analyze [DIR]\n"
        "Reads the flight recorder files of every rank in DIR (ring files <group>.rank<R>.ring and dumps\n"
        "<group>.rank<R>.json) and prints, per process group, which collective the job stopped at and which\n"
        "ranks never started it, or where the ranks' collectives disagree. DIR defaults to $%s, else %s.\n",
        tinyddp::dist::kFlightRecorderDirEnv, tinyddp::dist::DefaultFlightRecorderDir().c_str());
    return argc > 2 ? 2 : 0;
  }
  std::string dir = arg;
  if (dir.empty()) dir = tinyddp::dist::FlightRecorderDirFromEnvironment();
  if (dir.empty()) dir = tinyddp::dist::DefaultFlightRecorderDir();
  auto verdicts = tinyddp::dist::AnalyzeFlightRecorderDir(dir);
  if (!verdicts.ok()) {
    std::fprintf(stderr, "flight_recorder_analyze: %s\n", std::string(verdicts.status().message()).c_str());
    return 1;
  }
  std::fputs(tinyddp::dist::FormatFlightVerdicts(*verdicts).c_str(), stdout);
  return 0;
}
