// TwoHosts: `ip netns`, `ip link`, `ip addr`, each run as a process and checked.
#include "tests/faults/netns.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/testing/process_test_util.h"

namespace tinyddp::testing {
namespace {

namespace t = ::tinyddp::dist::testing;

std::string FindIp() {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
    const std::string path = absl::StrCat(dir, "/ip");
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// Runs `ip ARGS`; "" on success, else what it printed.
std::string Ip(const std::string& ip, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = t::MakeTempDir() + "/ip.txt";
  const pid_t pid = t::StartProcess(argv, {}, {}, out, out);
  const std::optional<int> status = t::WaitFor(pid, std::chrono::seconds(30));
  if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return "";
  const std::string said = t::ReadFile(out);
  return absl::StrCat("`", absl::StrJoin(argv, " "), "` failed", said.empty() ? "" : ": ", said);
}

}  // namespace

std::unique_ptr<TwoHosts> TwoHosts::Create(std::string* why_not) {
  if (::geteuid() != 0) {
    *why_not = "network namespaces need root (CAP_NET_ADMIN); run the test as root to measure a cut link";
    return nullptr;
  }
  std::unique_ptr<TwoHosts> h(new TwoHosts());
  h->ip_ = FindIp();
  if (h->ip_.empty()) {
    *why_not = "no `ip` binary (iproute2; ./bazelw installs it)";
    return nullptr;
  }
  // Names and a /24 of our own, so that parallel tests (and leftovers of a crashed one) do not collide.
  const int id = static_cast<int>(::getpid());
  const std::string subnet = absl::StrCat("10.200.", id % 250, ".");
  for (int node = 0; node < 2; ++node) {
    const char* side = node == 0 ? "a" : "b";
    h->ns_[node] = absl::StrCat("tdf", id, side);
    h->veth_[node] = absl::StrCat("tdv", id, side);  // at most 15 characters (IFNAMSIZ)
    h->address_[node] = absl::StrCat(subnet, node + 1);
    (void)Ip(h->ip_, {"netns", "del", h->ns_[node]});  // a leftover of an earlier run with this pid
  }
  std::vector<std::vector<std::string>> steps = {
      {"netns", "add", h->ns_[0]},
      {"netns", "add", h->ns_[1]},
      {"link", "add", h->veth_[0], "type", "veth", "peer", "name", h->veth_[1]},
  };
  for (int node = 0; node < 2; ++node) {
    const std::string& ns = h->ns_[node];
    steps.push_back({"link", "set", h->veth_[node], "netns", ns});
    steps.push_back({"-n", ns, "addr", "add", h->address_[node] + "/24", "dev", h->veth_[node]});
    steps.push_back({"-n", ns, "link", "set", h->veth_[node], "up"});
    steps.push_back({"-n", ns, "link", "set", "lo", "up"});
  }
  for (const auto& step : steps) {
    if (std::string error = Ip(h->ip_, step); !error.empty()) {
      *why_not = error;
      return nullptr;  // the destructor removes what was made
    }
  }
  return h;
}

TwoHosts::~TwoHosts() {
  for (const std::string& ns : ns_) {
    if (!ns.empty()) (void)Ip(ip_, {"netns", "del", ns});
  }
}

std::vector<std::string> TwoHosts::Exec(int node, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ip_, "netns", "exec", ns_[node], "/usr/bin/env",
                                  "GLOO_SOCKET_IFNAME=" + veth_[node]};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool TwoHosts::CutLink() { return Ip(ip_, {"-n", ns_[1], "link", "set", veth_[1], "down"}).empty(); }

}  // namespace tinyddp::testing
