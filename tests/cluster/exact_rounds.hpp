#pragma once
// One round of push_pulls whose every result must be the exact sum, for the tests that check
// sums over many dtypes and sizes (in process and in real processes).
#include <fmt/format.h>

#include <byteps/core/dtype.hpp>
#include <byteps/core/handle.hpp>
#include <cstddef>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "values.hpp"

namespace bps::test {

/// Waits for every handle, then rethrows the first failure: each buffer must outlive its
/// handle, also when another operation failed.
inline void wait_all(std::vector<handle>& handles) {
  std::exception_ptr failed;
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

/// Runs `issue()`, which push_pulls and appends to `handles`, then waits for every handle it
/// issued, also when `issue` threw part way (a communicator that died refuses later calls): the
/// buffers of the calls already made are still in use until their handles finish. Rethrows the
/// first failure.
template <class Issue>
void issue_then_wait_all(std::vector<handle>& handles, Issue&& issue) {
  std::exception_ptr failed;
  try {
    issue();
  } catch (...) {
    failed = std::current_exception();
  }
  try {
    wait_all(handles);
  } catch (...) {
    if (!failed) failed = std::current_exception();
  }
  if (failed) std::rethrow_exception(failed);
}

/// Round `round` on `comm`: every dtype at each of `sizes`, all in flight at once (tensor
/// "<dtype>.<n>", priorities 0..2), then each result compared with the exact sum over
/// `processes`. Throws naming `context`, the tensor, the round and the first wrong element.
template <class Comm>
void exact_round_every_dtype(Comm& comm, std::span<const std::size_t> sizes, int round,
                             int processes, const std::string& context) {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::pair<dtype, std::size_t>> what;
  std::vector<handle> handles;
  for (dtype t : all_dtypes)
    for (std::size_t n : sizes) {
      buffers.push_back(fill(t, n, comm.rank(), round));
      what.emplace_back(t, n);
    }
  issue_then_wait_all(handles, [&] {
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      auto [t, n] = what[k];
      handles.push_back(comm.push_pull(fmt::format("{}.{}", dtype_name(t), n), buffers[k].data(),
                                       n, t, {.priority = static_cast<int>(k % 3)}));
    }
  });
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    auto [t, n] = what[k];
    if (auto wrong = first_wrong(t, buffers[k], n, processes, round); wrong != n)
      throw std::runtime_error(fmt::format("{}{} x {} round {} rank {}: element {} is not the sum",
                                           context, dtype_name(t), n, round, comm.rank(), wrong));
  }
}

}  // namespace bps::test
