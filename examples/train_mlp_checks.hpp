#pragma once
// train_mlp's end-of-run checks (synchronous and async runs alike): each prints "OK what" or
// "FAILED: what"; a failed one fails the whole job, not only this process.

#include <cstdio>
#include <string>

namespace train_mlp {

class checks {
 public:
  void report(bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "OK" : "FAILED:", what.c_str());
    failures_ += ok ? 0 : 1;
  }

  /// The exit status. After a failed check the bye says so, and the scheduler and servers exit
  /// non-zero too, so byteps-launch, Slurm or Kubernetes see a failed job.
  template <class Comm>
  int finish(Comm& comm) {
    if (failures_ == 0) return 0;
    comm.shutdown(std::to_string(failures_) + " of train_mlp's checks failed");
    return 1;
  }

 private:
  int failures_ = 0;
};

}  // namespace train_mlp
