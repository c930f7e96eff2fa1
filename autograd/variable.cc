// Variable (autograd/variable.h): accessors with the checks that turn misuse into one clear message.
#include "autograd/variable.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "autograd/node.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", ShapeToString(t.shape()), " on ", t.device().ToString());
}

std::string Label(const internal::VariableState& s) {
  return s.name.empty() ? std::string("a variable") : absl::StrCat("variable '", s.name, "'");
}

}  // namespace

Variable::Variable(Tensor data, bool requires_grad, std::string name)
    : state_(std::make_shared<internal::VariableState>()) {
  TINYDDP_CHECK_OP(data.defined(), "Variable", "data is an undefined tensor; hint: create the tensor first");
  TINYDDP_CHECK_OP(!requires_grad || IsFloatingPoint(data.dtype()), "Variable",
                   "only floating-point variables can require grad, got ", Describe(data));
  state_->data = std::move(data);
  state_->requires_grad = requires_grad;
  state_->name = std::move(name);
}

internal::VariableState& Variable::checked_state(const char* what) const {
  TINYDDP_CHECK_OP(state_ != nullptr, what, "the variable is undefined (default-constructed)");
  return *state_;
}

const Tensor& Variable::data() const { return checked_state("Variable::data").data; }

void Variable::set_data(Tensor data) const {
  internal::VariableState& s = checked_state("Variable::set_data");
  TINYDDP_CHECK_OP(s.grad_fn == nullptr, "Variable::set_data", Label(s),
                   " is the result of an op; hint: only leaves (parameters, inputs) can get new data");
  TINYDDP_CHECK_OP(data.defined(), "Variable::set_data", "new data is undefined");
  if (!s.accumulator.expired()) {
    TINYDDP_CHECK_OP(data.shape() == s.data.shape() && data.dtype() == s.data.dtype() &&
                         data.device() == s.data.device(),
                     "Variable::set_data", Label(s), " is used by a recorded graph, so its data must stay ",
                     Describe(s.data), ", got ", Describe(data), "; hint: run or drop the graph first");
  }
  if (s.grad.defined() && s.grad.device() != data.device()) s.grad = s.grad.To(data.device());
  s.data = std::move(data);
}

bool Variable::requires_grad() const { return checked_state("Variable::requires_grad").requires_grad; }

void Variable::set_requires_grad(bool on) const {
  internal::VariableState& s = checked_state("Variable::set_requires_grad");
  TINYDDP_CHECK_OP(s.grad_fn == nullptr, "Variable::set_requires_grad", Label(s),
                   " is the result of an op, its requires_grad follows its inputs; hint: use Detach()");
  TINYDDP_CHECK_OP(!on || IsFloatingPoint(s.data.dtype()), "Variable::set_requires_grad",
                   "only floating-point variables can require grad, ", Label(s), " is ", Describe(s.data));
  s.requires_grad = on;
}

bool Variable::is_leaf() const { return checked_state("Variable::is_leaf").grad_fn == nullptr; }

const std::shared_ptr<Node>& Variable::grad_fn() const { return checked_state("Variable::grad_fn").grad_fn; }

const std::string& Variable::name() const { return checked_state("Variable::name").name; }

void Variable::set_name(std::string name) const { checked_state("Variable::set_name").name = std::move(name); }

const Tensor& Variable::grad() const { return checked_state("Variable::grad").grad; }

void Variable::set_grad(Tensor grad) const {
  internal::VariableState& s = checked_state("Variable::set_grad");
  if (!grad.defined()) {
    s.grad = Tensor();
    return;
  }
  TINYDDP_CHECK_OP(s.requires_grad, "Variable::set_grad", Label(s),
                   " does not require grad, so it can have no gradient; hint: set_requires_grad(true) first");
  TINYDDP_CHECK_OP(grad.shape() == s.data.shape() && grad.dtype() == s.data.dtype() &&
                       grad.device() == s.data.device(),
                   "Variable::set_grad", "gradient ", Describe(grad), " does not match the data of ", Label(s), ", ",
                   Describe(s.data), "; hint: a gradient has its variable's shape, dtype and device");
  s.grad = std::move(grad);
}

void Variable::set_grad_destination(Tensor destination) const {
  internal::VariableState& s = checked_state("Variable::set_grad_destination");
  if (destination.defined()) {
    TINYDDP_CHECK_OP(s.requires_grad, "Variable::set_grad_destination", Label(s),
                     " does not require grad, so it gets no gradient; hint: set_requires_grad(true) first");
    TINYDDP_CHECK_OP(destination.shape() == s.data.shape() && destination.dtype() == s.data.dtype() &&
                         destination.device() == s.data.device(),
                     "Variable::set_grad_destination", "destination ", Describe(destination),
                     " does not match the data of ", Label(s), ", ", Describe(s.data),
                     "; hint: a gradient has its variable's shape, dtype and device");
  }
  s.grad_destination = std::move(destination);
}

HookHandle Variable::RegisterPostAccumulateGradHook(PostAccumulateGradHook hook) const {
  internal::VariableState& s = checked_state("Variable::RegisterPostAccumulateGradHook");
  TINYDDP_CHECK_OP(s.grad_fn == nullptr && s.requires_grad, "Variable::RegisterPostAccumulateGradHook",
                   Label(s), (s.grad_fn ? " is not a leaf" : " does not require grad"),
                   "; hint: post-accumulate-grad hooks belong to leaves that require grad (parameters)");
  TINYDDP_CHECK_OP(hook != nullptr, "Variable::RegisterPostAccumulateGradHook", "empty hook for ", Label(s));
  const HookHandle handle = s.next_hook++;
  s.hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::RemovePostAccumulateGradHook(HookHandle handle) const {
  auto& hooks = checked_state("Variable::RemovePostAccumulateGradHook").hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [handle](const auto& h) { return h.first == handle; }),
              hooks.end());
}

Variable Variable::Detach() const { return Variable(data(), /*requires_grad=*/false, name()); }

void ZeroGrad(absl::Span<const Variable> variables, bool set_to_none) {
  for (const Variable& v : variables) {
    if (!v.grad().defined()) continue;
    if (set_to_none) {
      v.set_grad(Tensor());
    } else {
      Tensor g = v.grad();
      ops::Fill(g, 0.0);
    }
  }
}

}  // namespace tinyddp::autograd
