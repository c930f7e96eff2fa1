// trace_svg: the SVG timeline of any tinyddp trace file (dist/ddp/timeline/timeline_svg.h), for traces
// made elsewhere (the GPU machine, docs/traces/) or with other settings than the program's own.
//
//   bazel-bin/tools/timeline/trace_svg docs/traces/ddp_medium_2xh200_ce.json /tmp/medium.svg --steps=2
//   bazel-bin/tools/timeline/trace_svg run.json --bucket_bytes=1050664,1613864
//   flags: --steps=N (the last N steps, default 2)  --bucket_bytes=B0,B1,...  --title=TEXT  --source=TEXT
//
// The output defaults to the trace's name with .svg. Prints the path it wrote.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "dist/ddp/timeline/timeline_svg.h"

int main(int argc, char** argv) {
  tinyddp::dist::TraceSvgOptions options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::vector<std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    bool ok = true;
    if (kv[0] == "--steps" && kv.size() == 2) {
      ok = absl::SimpleAtoi(kv[1], &options.last_steps) && options.last_steps > 0;
    } else if (kv[0] == "--bucket_bytes" && kv.size() == 2) {
      for (absl::string_view b : absl::StrSplit(kv[1], ',')) {
        int64_t bytes = 0;
        ok = ok && absl::SimpleAtoi(b, &bytes) && bytes > 0;
        options.bucket_bytes.push_back(bytes);
      }
    } else if (kv[0] == "--title" && kv.size() == 2) {
      options.title = kv[1];
    } else if (kv[0] == "--source" && kv.size() == 2) {
      options.source = kv[1];
    } else if (absl::StartsWith(arg, "--")) {
      ok = false;
    } else {
      files.push_back(arg);
    }
    if (!ok) {
      std::fprintf(stderr, "trace_svg: bad argument '%s' (see the header of tools/timeline/trace_svg.cc)\n",
                   arg.c_str());
      return 2;
    }
  }
  if (files.empty() || files.size() > 2) {
    std::fprintf(stderr, "usage: trace_svg TRACE.json [OUT.svg] [--steps=N] [--bucket_bytes=B0,B1,...]\n");
    return 2;
  }
  if (files.size() == 2) options.svg_path = files[1];
  absl::StatusOr<std::string> svg = tinyddp::dist::WriteTimelineSvg(files[0], options);
  if (!svg.ok()) {
    std::fprintf(stderr, "trace_svg: %s\n", std::string(svg.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", svg->c_str());
  return 0;
}
