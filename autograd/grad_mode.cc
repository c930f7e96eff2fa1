// Grad mode (autograd/grad_mode.h): one thread-local flag. Thread-local because a data-loader or
// communication thread must not turn recording off for the thread running the forward pass.
#include "autograd/grad_mode.h"

namespace tinyddp::autograd {
namespace {
thread_local bool grad_mode_enabled = true;
}  // namespace

bool GradModeEnabled() { return grad_mode_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_mode_enabled) { grad_mode_enabled = false; }

NoGradGuard::~NoGradGuard() { grad_mode_enabled = previous_; }

}  // namespace tinyddp::autograd
