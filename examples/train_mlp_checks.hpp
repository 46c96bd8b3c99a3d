#pragma once
// train_mlp's end-of-run checks (synchronous and async runs alike): each prints "OK what" or
// "FAILED: what", or "SKIPPED: what" when the run cannot show it; a failed one fails the whole
// job, not only this process.

#include <cstdio>
#include <string>
#include <vector>

namespace train_mlp {

class checks {
 public:
  void report(bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "OK" : "FAILED:", what.c_str());
    failures_ += ok ? 0 : 1;
  }

  /// A check this run cannot make: says so, and why; it fails nothing.
  void skip(const std::string& what) { std::printf("SKIPPED: %s\n", what.c_str()); }

  /// The last epoch's mean loss is below the first's. It needs two epochs to compare: with one
  /// it is skipped (the first epoch's loss is the last's).
  void loss_fell(const std::vector<double>& epoch_loss) {
    char buf[160];
    if (epoch_loss.size() < 2) {
      std::snprintf(buf, sizeof buf,
                    "loss fell: it needs at least 2 epochs to compare, and this run trained %zu",
                    epoch_loss.size());
      skip(buf);
      return;
    }
    std::snprintf(buf, sizeof buf, "loss fell from %.4f (epoch 1) to %.4f (epoch %zu)",
                  epoch_loss.front(), epoch_loss.back(), epoch_loss.size());
    report(epoch_loss.back() < epoch_loss.front(), buf);
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
