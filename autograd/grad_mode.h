// Grad mode: whether autograd ops record a graph on this thread. NoGradGuard turns recording off for a
// scope (evaluation, optimizer updates, the numeric half of gradcheck), exactly like torch.no_grad().
// Sits at the bottom of autograd/: the ops in functions.h ask GradModeEnabled() before recording.
#ifndef TINYDDP_AUTOGRAD_GRAD_MODE_H_
#define TINYDDP_AUTOGRAD_GRAD_MODE_H_

namespace tinyddp::autograd {

/// True unless a NoGradGuard is alive on the calling thread. Each thread starts enabled.
bool GradModeEnabled();

/// While alive, ops on this thread compute values only: their results have no grad_fn and
/// requires_grad() == false. Guards nest; each restores the mode it found. Not movable or copyable.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_GRAD_MODE_H_
