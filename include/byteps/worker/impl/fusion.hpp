#pragma once
/// @file
/// The bodies of worker/fusion.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::worker {

std::shared_ptr<fused_pushes> push_fusion::fuse(const std::vector<held_push>& pushes, int machine) {
  wire::batch_writer w;
  auto out = std::make_shared<fused_pushes>();
  out->members.reserve(pushes.size());
  for (const auto& p : pushes) {
    w.add(p.head, p.payload);
    out->members.push_back(p.member);
  }
  out->head = w.frame(wire::msg::push_batch, static_cast<std::uint32_t>(machine));
  out->bytes = w.take();
  return out;
}

}  // namespace bps::worker
