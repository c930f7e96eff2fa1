// TwoHosts: two emulated machines on this one, for tests of what a network does to a job: two network
// namespaces joined by a veth pair, 10.x addresses on each end, made with `ip` (iproute2) and removed when
// the object goes. Processes run "on" a host through `ip netns exec`; CutLink() takes one end down, as
// pulling a cable does (no reset reaches either side: the peers just stop hearing each other).
// Needs root (CAP_NET_ADMIN) and iproute2; Create() says why not otherwise, for GTEST_SKIP.
#ifndef TINYDDP_TESTS_FAULTS_NETNS_H_
#define TINYDDP_TESTS_FAULTS_NETNS_H_

#include <memory>
#include <string>
#include <vector>

namespace tinyddp::testing {

class TwoHosts {
 public:
  /// Null, with the reason in `*why_not`, when namespaces cannot be made here.
  static std::unique_ptr<TwoHosts> Create(std::string* why_not);
  /// Removes both namespaces (and with them the veth pair).
  ~TwoHosts();
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  /// Host `node`'s (0 or 1) address on the link, e.g. "10.200.17.1".
  const std::string& address(int node) const { return address_[node]; }
  /// `argv` run on host `node`, with GLOO_SOCKET_IFNAME set to that host's end of the link.
  std::vector<std::string> Exec(int node, const std::vector<std::string>& argv) const;
  /// Takes host 1's end of the link down. False if `ip` failed.
  bool CutLink();

 private:
  TwoHosts() = default;
  std::string ip_;            // the ip binary
  std::string ns_[2], veth_[2], address_[2];
};

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_FAULTS_NETNS_H_
