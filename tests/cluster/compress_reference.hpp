#pragma once
// The answer a compressed push_pull must give, computed with the test's own instances of the
// same compressors: every worker encodes its partition, the partition's server decodes each
// push with its compressor (compress::for_server of the recipe), sums them as sync_sum does
// (float32: a + b; the order of two cannot matter), encodes the sum with that compressor (its
// error feedback included), and each worker decodes the answer with its own and averages.
#include <byteps/bodies.hpp>
#include <byteps/compress/registry.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace bps::test {

class compress_reference {
 public:
  /// `workers` workers each push a float32 tensor of `count` elements cut as `parts`.
  compress_reference(const std::string& text, int workers, std::vector<partition_range> parts)
      : parts_(std::move(parts)) {
    const auto r = compress::parse(text);
    for (int w = 0; w < workers; ++w) {
      workers_.emplace_back();
      for (std::size_t p = 0; p < parts_.size(); ++p) workers_.back().push_back(compress::make(r));
    }
    for (std::size_t p = 0; p < parts_.size(); ++p)
      servers_.push_back(compress::make(compress::for_server(r)));
  }

  /// What `comm.set_learning_rate(lr)` does on every worker.
  void set_learning_rate(double lr) {
    for (auto& w : workers_)
      for (auto& c : w) c->set_learning_rate(lr);
  }

  /// One round: `inputs[w]` is worker w's tensor; returns each worker's result (averaged over
  /// the workers when `average`).
  std::vector<std::vector<float>> round(const std::vector<std::vector<float>>& inputs,
                                        bool average) {
    const std::size_t workers = workers_.size();
    std::vector<std::vector<float>> out(workers, std::vector<float>(inputs[0].size()));
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      const std::size_t first = parts_[p].offset / 4, n = parts_[p].bytes / 4;
      std::vector<float> sum(n), decoded(n);
      for (std::size_t w = 0; w < workers; ++w) {
        auto in = std::as_bytes(std::span(inputs[w]).subspan(first, n));
        std::vector<std::byte> enc(workers_[w][p]->max_encoded_bytes(in.size(), dtype::float32));
        enc.resize(workers_[w][p]->encode(in, dtype::float32, enc));
        servers_[p]->decode(enc, dtype::float32, std::as_writable_bytes(std::span(decoded)));
        if (w == 0)
          sum = decoded;
        else
          for (std::size_t i = 0; i < n; ++i) sum[i] += decoded[i];
      }
      auto raw = std::as_bytes(std::span(sum));
      std::vector<std::byte> answer(servers_[p]->max_encoded_bytes(raw.size(), dtype::float32));
      answer.resize(servers_[p]->encode(raw, dtype::float32, answer));
      for (std::size_t w = 0; w < workers; ++w) {
        auto dest = std::span(out[w]).subspan(first, n);
        workers_[w][p]->decode(answer, dtype::float32, std::as_writable_bytes(dest));
        if (average)
          reduce::scale(dest.data(), n, dtype::float32, 1.0 / static_cast<double>(workers));
      }
    }
    return out;
  }

 private:
  std::vector<partition_range> parts_;
  std::vector<std::vector<std::unique_ptr<compress::any>>> workers_;  // [worker][partition]
  std::vector<std::unique_ptr<compress::any>> servers_;               // [partition]
};

/// A deterministic, varied input: worker `rank`'s element i in round `round`.
inline float compress_input(int rank, int round, std::size_t i) {
  const auto k = static_cast<int>((i * 37 + static_cast<std::size_t>(rank) * 101 +
                                   static_cast<std::size_t>(round) * 13) % 201) - 100;
  return static_cast<float>(k) * 0.013f + static_cast<float>(rank + 1) * 0.001f;
}

/// Index of the first element whose bits differ, or `a.size()`.
inline std::size_t first_different(std::span<const float> a, std::span<const float> b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

}  // namespace bps::test
