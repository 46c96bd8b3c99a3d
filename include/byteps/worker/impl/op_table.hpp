#pragma once
/// @file
/// The bodies of worker/op_table.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::worker {

std::vector<std::byte> op_table::declaration_of(const std::string& what, const std::string& name,
                                                const compress::spec* codec) {
  if (name.size() > wire::max_tensor_name_bytes)
    throw usage_error(fmt::format("{}: the tensor name is {} bytes long; at most {} are allowed",
                                  what, name.size(), wire::max_tensor_name_bytes));
  wire::declaration d{name, {}};
  if (auto r = codec != nullptr ? codec->declared() : std::nullopt) {
    d.recipe = compress::serialise(*r);
    if (d.recipe.size() > wire::max_recipe_bytes)
      throw usage_error(
          fmt::format("{}: compressor '{}' has a recipe of {} bytes; at most {} "
                      "are allowed",
                      what, compress::to_string(*r), d.recipe.size(), wire::max_recipe_bytes));
  }
  return wire::encode_declare(d);
}

void op_table::answered(key_id id, const op_ptr& op) {
  auto it = pending_.find(id);
  if (it != pending_.end() && it->second.op == op) {
    if (op->next.part_answered) op->next.part_answered(it->second.index);
    if (auto* t = find_tensor(id.key); t != nullptr) {
      // The answer may come before the transport's on_sent for the push (a gathered write
      // completes after the server already answered): the sending then ended by now, and
      // the answer took no time after it. Each partition counts once either way.
      const auto now = clock::now();
      if (it->second.sent_at == clock::time_point{}) {
        if (it->second.dispatched_at != clock::time_point{})
          t->timing.stages.add(stage::push,
                               stats_recorder::seconds(now - it->second.dispatched_at));
        t->timing.stages.add(stage::pull, 0);
      } else {
        t->timing.stages.add(stage::pull, stats_recorder::seconds(now - it->second.sent_at));
      }
    }
    pending_.erase(it);
    --op->unanswered;
  }
  release_if_done(op);
}

std::vector<std::size_t> op_table::unanswered_by_server(const detail::op_state& op,
                                                        std::size_t servers) const {
  std::vector<std::size_t> n(servers, 0);
  for (const auto& [id, p] : pending_)
    if (p.op.get() == &op && p.queued) ++n[static_cast<std::size_t>(p.server)];
  return n;
}

std::vector<op_ptr> op_table::active() const {
  std::vector<op_ptr> ops;
  for (const auto& [op, keys] : tensors_of_) ops.push_back(tensors_.at(keys.front()).active);
  return ops;
}

void op_table::fail(op_ptr op, std::exception_ptr e) {
  if (op->failure || op->released) return;
  op->failure = std::move(e);
  std::erase_if(pending_, [&](const auto& kv) { return kv.second.op == op; });
  release_if_done(op);
}

void op_table::release_if_done(op_ptr op) {
  if (op->released || op->in_transport != 0 || op->receiving != 0) return;
  if (op->unanswered != 0 && !op->failure) return;
  op->released = true;
  if (auto node = tensors_of_.extract(op.get())) {
    for (const auto key : node.mapped()) {
      tensor& t = tensors_.at(key);
      if (!op->failure) stats_.operation(t.name, t.bytes, t.timing);
      if (t.active == op) t.active = nullptr;
      ++t.round;
    }
  }
  if (op->next.network_done)
    op->next.network_done(op->failure);
  else
    op->finish(op->failure);
}

}  // namespace bps::worker
