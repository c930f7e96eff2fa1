// Learning-rate schedules: the learning rate as a pure function of the step number, so every rank
// (and a resumed run) computes the same value without shared state. Apply one before each step:
//   optimizer.set_lr(schedule.LrAt(step));   // step = 0, 1, 2, ...
#ifndef TINYDDP_NN_LR_SCHEDULE_H_
#define TINYDDP_NN_LR_SCHEDULE_H_

#include <cstdint>
#include <memory>
#include <string>

namespace tinyddp::nn {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  /// The learning rate for step `step` (0-based). Precondition: step >= 0.
  virtual double LrAt(int64_t step) const = 0;
  /// "cosine(base=0.1, warmup=100, total=1000, min=0)" for logs.
  virtual std::string ToString() const = 0;
};

/// base, always.
class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base) : base_(base) {}
  double LrAt(int64_t step) const override;
  std::string ToString() const override;

 private:
  double base_;
};

/// torch.optim.lr_scheduler.StepLR: base * gamma^floor(step / step_size). Precondition: step_size > 0.
class StepLr : public LrSchedule {
 public:
  StepLr(double base, int64_t step_size, double gamma);
  double LrAt(int64_t step) const override;
  std::string ToString() const override;

 private:
  double base_;
  int64_t step_size_;
  double gamma_;
};

/// Linear warmup then cosine decay:
///   step <  warmup:          base * (step + 1) / warmup        (reaches base on the last warmup step)
///   warmup <= step < total:  min + (base - min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
///   step >= total:           min
/// Preconditions: 0 <= warmup <= total, total > 0.
class CosineWithWarmupLr : public LrSchedule {
 public:
  CosineWithWarmupLr(double base, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double LrAt(int64_t step) const override;
  std::string ToString() const override;

 private:
  double base_;
  int64_t warmup_, total_;
  double min_;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_LR_SCHEDULE_H_
