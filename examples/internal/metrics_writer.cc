// MetricsWriter: see metrics_writer.h.
#include "examples/internal/metrics_writer.h"

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "examples/internal/durable_file.h"
#include "examples/internal/svg_plot.h"
#include "nlohmann/json.hpp"

namespace tinyddp::examples {

using json = nlohmann::json;

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path, bool append) {
  std::FILE* file = std::fopen(path.c_str(), append ? "a" : "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_out: cannot open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, file));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsWriter::WriteLine(const std::string& line) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) < 0 || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MetricsWriter::WriteStep(const StepRecord& r) {
  return WriteLine(json{{"type", "step"},
                        {"step", r.step},
                        {"epoch", r.epoch},
                        {"loss", r.loss},
                        {"lr", r.lr},
                        {"samples_per_s", r.samples_per_s}}
                       .dump());
}

absl::Status MetricsWriter::WriteEpoch(const EpochRecord& r) {
  return WriteLine(json{
      {"type", "epoch"},
      {"epoch", r.epoch},
      {"step", r.step},
      {"train_loss", r.train_loss},
      {"test_loss", r.test_loss},
      {"test_accuracy", r.test_accuracy},
      {"time_s",
       r.time_s}}.dump());
}

absl::StatusOr<std::string> MetricsWriter::Finish() {
  if (file_ != nullptr && std::fclose(file_) != 0) {
    file_ = nullptr;
    return absl::InternalError(absl::StrCat("closing ", path_, ": ", std::strerror(errno)));
  }
  file_ = nullptr;
  absl::StatusOr<std::string> text = ReadWholeFile(path_);
  RETURN_IF_ERROR(text);
  const std::string plot_path = PlotPathFor(path_);
  RETURN_IF_ERROR(WriteFileAtomically(plot_path, PlotMetrics(*text)));
  return plot_path;
}

std::string PlotPathFor(const std::string& metrics_path) {
  for (const char* ext : {".jsonl", ".json"}) {
    if (absl::EndsWith(metrics_path, ext)) {
      return absl::StrCat(metrics_path.substr(0, metrics_path.size() - std::strlen(ext)), ".svg");
    }
  }
  return metrics_path + ".svg";
}

std::string PlotMetrics(const std::string& jsonl) {
  // Keyed by step / epoch: a resumed run that logs a step again replaces the earlier record.
  std::map<int64_t, double> train_loss;                // step -> loss
  std::map<int64_t, std::pair<int64_t, double>> test;  // epoch -> (step, test loss)
  std::map<int64_t, double> accuracy;                  // epoch -> accuracy
  for (absl::string_view line : absl::StrSplit(jsonl, '\n', absl::SkipWhitespace())) {
    try {
      const json r = json::parse(line);
      const std::string type = r.at("type").get<std::string>();
      if (type == "step") {
        train_loss[r.at("step").get<int64_t>()] = r.at("loss").get<double>();
      } else if (type == "epoch") {
        const int64_t epoch = r.at("epoch").get<int64_t>();
        test[epoch] = {r.at("step").get<int64_t>(), r.at("test_loss").get<double>()};
        accuracy[epoch] = r.at("test_accuracy").get<double>();
      }
    } catch (const std::exception&) {
      continue;  // a torn last line after a crash, or a foreign line: not a record
    }
  }
  PlotSeries train{"train loss (logged steps)", "#1f77b4", {}, false};
  for (const auto& [step, loss] : train_loss) train.points.emplace_back(step, loss);
  PlotSeries test_loss{"test loss (per epoch)", "#ff7f0e", {}, true};
  for (const auto& [epoch, point] : test) test_loss.points.emplace_back(point.first, point.second);
  PlotSeries acc{"test accuracy", "#2ca02c", {}, true};
  for (const auto& [epoch, a] : accuracy) acc.points.emplace_back(epoch + 1, 100 * a);
  return RenderSvg({{"Loss", "optimizer step", "cross-entropy", {train, test_loss}},
                    {"Test accuracy", "epoch", "accuracy (%)", {acc}}},
                   "ddp_mlp training");
}

}  // namespace tinyddp::examples
