// DeviceLr: a learning-rate schedule (nn/lr_schedule.h) whose current value lives in device memory and is
// advanced by the training step itself, on the GPU. What lets a step recorded into a CUDA graph
// (tensor/cuda_graph.h, dist/accel/graph/graphed_step.h) follow a cosine schedule: a replay repeats the launches
// with the arguments they were recorded with, so the optimizer must read its learning rate from memory
// (Optimizer::UseDeviceLr) and something inside the graph must move it.
//
//   DeviceLr lr(schedule, total_steps, device);   // schedule.LrAt(0 .. total_steps-1), on the device
//   optimizer.UseDeviceLr(lr.lr());
//   step:  lr.Advance(); ZeroGrad(); forward; Backward(loss); optimizer.Step();   // captured or not
//
// The values are the schedule's own, computed once on the host (the doubles set_lr would receive) and
// copied into a table; Advance is one one-thread kernel, lr = table[step], step += 1 (ops::LookupAndAdvance).
// A table instead of computing cos() on the GPU keeps a graphed run bit for bit equal to an eager one
// that calls set_lr(schedule.LrAt(step)): CUDA's cos is not the host's. It costs 8 bytes per step.
// After the last step of the table the last value is held.
#ifndef TINYDDP_NN_DEVICE_LR_H_
#define TINYDDP_NN_DEVICE_LR_H_

#include <cstdint>

#include "nn/lr_schedule.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace tinyddp::nn {

class DeviceLr {
 public:
  /// Tabulates schedule.LrAt(0), ..., LrAt(num_steps - 1) onto `device`; the next Advance selects step 0.
  /// Precondition: num_steps >= 1.
  DeviceLr(const LrSchedule& schedule, int64_t num_steps, Device device);

  /// Enqueues (on the current stream of the device): lr = LrAt(min(step, num_steps - 1)); step += 1.
  /// Never waits for the GPU, so it may be part of a captured step.
  void Advance();
  /// The value the last Advance selected: float64, one element, on the device (what optimizers read).
  const Tensor& lr() const { return lr_; }
  /// Makes the next Advance select `step` (a resumed run). A host-to-device copy: not inside a capture.
  void SetStep(int64_t step);
  /// The step the next Advance selects (reads the device: waits for the GPU; for tests and logs).
  int64_t NextStep() const;
  int64_t num_steps() const { return table_.numel(); }

 private:
  Tensor table_;  // float64 [num_steps]
  Tensor step_;   // int64 [1]: the step the next Advance selects
  Tensor lr_;     // float64 [1]
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_DEVICE_LR_H_
