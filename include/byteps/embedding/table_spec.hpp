#pragma once
/// @file
/// `bps::table_spec`: an embedding table as a trainer declares it (`Communicator::declare_table`)
/// and as its declaration travels to every server: its name, its shape, the type its rows are
/// stored and exchanged in, the optimizer the servers apply to pushed gradients, and how its
/// rows start. Every worker declares the same table; a server that holds it refuses a worker
/// whose declaration differs, naming the field.

#include <fmt/core.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"

namespace bps {

/// An embedding table held by the servers, each row on one of them.
struct table_spec {
  std::string name;
  std::uint64_t rows = 0;  ///< ids 0 .. rows-1
  std::uint32_t dim = 0;   ///< elements per row
  /// How rows are stored on the servers and pulled and pushed: float32, float16 or bfloat16.
  /// The optimizer computes in float32 whatever the storage.
  dtype type = dtype::float32;
  /// The optimizer the servers apply to a row's summed gradient (table/optimizer.hpp):
  /// "sgd:lr=0.01", "adagrad:lr=0.01,eps=1e-8", "adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8".
  std::string optimizer = "sgd:lr=0.01";
  /// Each element starts uniform in [-init_scale, init_scale), drawn from `seed`, the row id and
  /// the column alone: the same on every server and in every run, whatever the order rows are
  /// first touched in.
  double init_scale = 0.01;
  std::uint64_t seed = 0;

  friend bool operator==(const table_spec&, const table_spec&) = default;
};

namespace embedding {

/// The most elements a row may have, and the longest name and optimizer recipe.
inline constexpr std::uint32_t max_dim = 1u << 16;
inline constexpr std::size_t max_name_bytes = 4096;
inline constexpr std::size_t max_optimizer_bytes = 1024;

/// Throws `usage_error` naming the table and the field for a declaration no server could hold.
/// The optimizer's recipe is checked where it is read (table/optimizer.hpp).
inline void check_spec(const table_spec& s) {
  if (s.name.empty() || s.name.size() > max_name_bytes)
    throw usage_error(fmt::format("declare_table: a table's name must have 1 to {} bytes (got {})",
                                  max_name_bytes, s.name.size()));
  if (s.rows == 0)
    throw usage_error(fmt::format("declare_table of '{}': the table has no rows (rows = 0)", s.name));
  if (s.dim == 0 || s.dim > max_dim)
    throw usage_error(fmt::format("declare_table of '{}': dim must be 1 to {} (got {})", s.name,
                                  max_dim, s.dim));
  if (s.type != dtype::float32 && s.type != dtype::float16 && s.type != dtype::bfloat16)
    throw usage_error(fmt::format(
        "declare_table of '{}': rows are stored as float32, float16 or bfloat16, not {}", s.name,
        dtype_name(s.type)));
  if (!(s.init_scale >= 0) || !std::isfinite(s.init_scale))
    throw usage_error(fmt::format(
        "declare_table of '{}': init_scale must be finite and not negative (got {})", s.name,
        s.init_scale));
  if (s.optimizer.size() > max_optimizer_bytes)
    throw usage_error(fmt::format("declare_table of '{}': the optimizer recipe has {} bytes (at "
                                  "most {})",
                                  s.name, s.optimizer.size(), max_optimizer_bytes));
}

/// The first field in which `a` and `b` differ, as "dim 16 against 32"; empty when equal.
inline std::string first_difference(const table_spec& a, const table_spec& b) {
  if (a.rows != b.rows) return fmt::format("rows {} against {}", a.rows, b.rows);
  if (a.dim != b.dim) return fmt::format("dim {} against {}", a.dim, b.dim);
  if (a.type != b.type)
    return fmt::format("type {} against {}", dtype_name(a.type), dtype_name(b.type));
  if (a.optimizer != b.optimizer)
    return fmt::format("optimizer '{}' against '{}'", a.optimizer, b.optimizer);
  if (a.init_scale != b.init_scale)
    return fmt::format("init_scale {} against {}", a.init_scale, b.init_scale);
  if (a.seed != b.seed) return fmt::format("seed {} against {}", a.seed, b.seed);
  if (a.name != b.name) return fmt::format("name '{}' against '{}'", a.name, b.name);
  return {};
}

}  // namespace embedding
}  // namespace bps
