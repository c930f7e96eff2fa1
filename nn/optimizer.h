// Optimizer: the base of SGD and Adam/AdamW (nn/sgd.h, nn/adam.h). Holds the parameters (the same
// Variables the model holds), the learning rate, and per-parameter state exposed by name for
// checkpoints. Updates run through the fused ops::SgdStep / ops::AdamStep: on CUDA one launch updates
// every parameter, and a steady-state Step() allocates nothing (state buffers are made on the first).
//
// Typical step:  ZeroGrad(); Backward(loss); optimizer.set_lr(schedule.LrAt(step)); optimizer.Step();
// Inside a CUDA graph the learning rate comes from device memory instead (UseDeviceLr, nn/device_lr.h).
//
// Mixed precision (nn/precision.h): SetComputeCopies(model.ComputeCopies()) makes every Step also write
// each parameter's bfloat16 compute copy, in the same pass as the float32 update (the kernels' bf16_copies),
// so the next forward computes with the new weights and no cast pass runs. State stays float32.
#ifndef TINYDDP_NN_OPTIMIZER_H_
#define TINYDDP_NN_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "autograd/variable.h"
#include "nn/tensor_map.h"
#include "tensor/tensor.h"

namespace tinyddp::nn {

using autograd::Variable;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter whose grad is defined; parameters without a gradient are skipped
  /// and their state left alone, as in PyTorch. Runs on the parameters' device (all on one device).
  virtual void Step() = 0;
  /// Clears the gradients of the parameters (autograd::ZeroGrad).
  void ZeroGrad(bool set_to_none = true);

  /// Mixed precision: from now on each Step also writes bf16(p_new) into the compute copy of every
  /// parameter that appears in `copies` (Module::ComputeCopies(); matched by Variable identity, entries
  /// for other parameters are ignored), in the same pass. Parameters without a copy are stepped as
  /// before. Call it again when the copies are new tensors (after Module::SetPrecision or To).
  /// Precondition: each copy is bfloat16, of its float32 parameter's shape and device.
  void SetComputeCopies(const std::vector<std::pair<Variable, Tensor>>& copies);
  /// The compute copy Step writes for parameter i; undefined when none.
  const Tensor& compute_copy(size_t i) const { return compute_copies_.at(i); }

  double lr() const { return lr_; }
  /// Precondition: lr >= 0.
  void set_lr(double lr);
  /// CUDA graphs (tensor/cuda_graph.h): from now on every Step reads its learning rate from `lr` when its
  /// kernel runs, not lr() when Step is called, so a step recorded into a graph follows a schedule that
  /// moves on the device (nn/device_lr.h: DeviceLr::lr()). The updates are bit for bit those set_lr with
  /// the same values gives. Adam also keeps its step count on the device from here on. An undefined
  /// tensor goes back to lr(). Precondition: a float64 one-element tensor on the parameters' device.
  virtual void UseDeviceLr(const Tensor& lr);
  /// The device learning rate Step reads; undefined when it reads lr().
  const Tensor& device_lr() const { return device_lr_; }
  /// "" when Step, recorded once into a CUDA graph, does at every replay what a call would do (given a
  /// learning rate that does not move on the host); otherwise why not and what to change. Adam answers
  /// that its step count is passed by value until UseDeviceLr.
  virtual std::string WhyStepNotCapturable() const { return ""; }
  const std::vector<Variable>& params() const { return params_; }

  /// The state, named like the "state" part of PyTorch's optimizer state_dict flattened with dots:
  /// "state.<parameter index>.<field>" ("state.0.momentum_buffer", "state.3.exp_avg", "state.3.step").
  /// Buffers are the live tensors (on the parameters' device), not copies; `step` is a float32 scalar
  /// on the CPU, as in PyTorch. Parameters that have not been stepped yet have no entries.
  virtual TensorMap StateTensors() const = 0;
  /// Restores state saved by StateTensors (values are copied to the parameters' device). Returns
  /// InvalidArgument, changing nothing, on an unknown name, a parameter index out of range, or a
  /// shape/dtype that does not match the parameter.
  virtual absl::Status LoadStateTensors(const TensorMap& state) = 0;

 protected:
  Optimizer(std::vector<Variable> params, double lr, const char* name);
  /// Indices of the parameters whose grad is defined, in order (reuses one vector: no allocation in
  /// the steady state).
  const std::vector<size_t>& ParamsWithGrad();
  /// Splits "state.<i>.<field>" into (i, field); InvalidArgument when malformed or i is out of range.
  absl::Status ParseStateName(const std::string& name, size_t* index, std::string* field) const;
  /// InvalidArgument unless `t` has parameter i's shape and dtype.
  absl::Status CheckLike(const std::string& name, const Tensor& t, size_t i) const;

  std::vector<Variable> params_;
  std::vector<Tensor> compute_copies_;  // by parameter index; undefined: none (SetComputeCopies)
  double lr_;
  Tensor device_lr_;  // UseDeviceLr; undefined: Step uses lr_
  const char* name_;

 private:
  std::vector<size_t> with_grad_;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_OPTIMIZER_H_
