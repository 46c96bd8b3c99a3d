#pragma once
/// @file
/// The `bps::Compressor` concept: how a partition's bytes are encoded before the push and the
/// answer decoded after the pull (the encode and decode stages of the pipeline). A compressor
/// object belongs to one partition of one tensor on one worker, so it may keep state between
/// rounds (error feedback keeps the residual). Chosen per tensor in
/// `push_pull_options::compressor`, made with `compress::use<C>(args...)`.
///
/// Two kinds, by what the servers do with a push (docs/architecture.md, "Encode and decode"):
/// - *Decoded by the servers* (every built-in, and the default): each server decodes every
///   worker's push with its own compressor for the partition, sums, and encodes the sum with it
///   (with its own error feedback) for the answer (server/decoding.hpp). The servers make that
///   compressor from the recipe the worker declares with the tensor (`spec::declared`): a
///   compressor made with `use<C>` is declared by its `name()` with no parameters, so a
///   server built with a `registry` knowing that name (registry.hpp's `add`) can make it.
/// - *Summable*: a compressor with `static constexpr bool summable = true` encodes into values
///   of the tensor's dtype that the servers sum as they are (no server decodes anything, no
///   declare recipe); the answer is the sum of the encodings, decoded by the worker.
///
/// Built in, one header each, with BytePS's algorithms and parameters: `fp16` and `bf16` casts
/// (cast.hpp), `onebit` (onebit.hpp), `topk` (topk.hpp), `randomk` (randomk.hpp), `dithering`
/// (dithering.hpp); the decorators `error_feedback<C>` (error_feedback.hpp) and `nesterov<C>`
/// (nesterov.hpp). Each header states its encoded format. registry.hpp makes any of them from a
/// name and string parameters, as BytePS's `byteps_compressor_type` and friends do.
///
/// `in` and `out` never overlap. `decode` reads bytes that may come off the network (a server
/// decodes each worker's push): whatever they are, it must not read or write out of bounds; the
/// built-ins throw `usage_error` for a malformed stream.
///
/// A compressor may also have `set_learning_rate(double)` (error feedback does): the
/// communicator forwards `comm.set_learning_rate(lr)` to it, through `any` when type-erased.
///
/// @code
/// struct halve {  // sends x/2, gets back the sum of halves, doubles it
///   std::string name() const { return "halve"; }
///   std::size_t max_encoded_bytes(std::size_t bytes, bps::dtype) const { return bytes; }
///   std::size_t encode(std::span<const std::byte> in, bps::dtype t, std::span<std::byte> out);
///   void decode(std::span<const std::byte> in, bps::dtype t, std::span<std::byte> out);
/// };
/// comm.push_pull("w", grad, {.compressor = bps::compress::use<halve>()});
/// @endcode

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "byteps/compress/recipe.hpp"
#include "byteps/core/dtype.hpp"

namespace bps {

template <class C>
concept Compressor = std::move_constructible<C> &&
    requires(C& c, const C& cc, std::span<const std::byte> in, std::span<std::byte> out, dtype type,
             std::size_t bytes) {
  { cc.name() } -> std::convertible_to<std::string>;
  /// The most bytes `encode` writes for `bytes` bytes of `type`.
  { cc.max_encoded_bytes(bytes, type) } -> std::same_as<std::size_t>;
  /// Encodes `in` (a partition) into `out` (max_encoded_bytes long); returns the bytes written.
  { c.encode(in, type, out) } -> std::same_as<std::size_t>;
  /// Decodes `in` (the encoded sum from the server) into `out` (the partition's full size).
  c.decode(in, type, out);
};

namespace compress {

/// No encoding: the bytes go as they are. The default; the pipeline skips both stages for it.
struct identity {
  static constexpr bool is_identity = true;
  std::string name() const { return "none"; }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype) const { return bytes; }
  std::size_t encode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    std::copy(in.begin(), in.end(), out.begin());
    return in.size();
  }
  void decode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    std::copy(in.begin(), in.end(), out.begin());
  }
};

/// A compressor with `set_learning_rate(double)`, which error feedback needs.
template <class C>
concept takes_learning_rate = requires(C& c, double lr) {
  c.set_learning_rate(lr);
};

/// A compressor of any type, as the worker holds one per partition.
class any {
 public:
  virtual ~any() = default;
  virtual std::string name() const = 0;
  /// Forwarded to the compressor if it takes a learning rate; ignored otherwise.
  virtual void set_learning_rate(double) {}
  virtual std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const = 0;
  virtual std::size_t encode(std::span<const std::byte> in, dtype type,
                             std::span<std::byte> out) = 0;
  virtual void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) = 0;
};

template <Compressor C>
class holder final : public any {
 public:
  explicit holder(C c) : c_(std::move(c)) {}
  std::string name() const override { return c_.name(); }
  void set_learning_rate(double lr) override {
    if constexpr (takes_learning_rate<C>) c_.set_learning_rate(lr);
  }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const override {
    return c_.max_encoded_bytes(bytes, type);
  }
  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) override {
    return c_.encode(in, type, out);
  }
  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) override {
    c_.decode(in, type, out);
  }

 private:
  C c_;
};

/// A `Compressor` over a type-erased one: lets a decorator wrap a compressor chosen at run time
/// (registry.hpp) without a template instance per combination.
class erased {
 public:
  explicit erased(std::unique_ptr<any> c) : c_(std::move(c)) {}
  std::string name() const { return c_->name(); }
  void set_learning_rate(double lr) { c_->set_learning_rate(lr); }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return c_->max_encoded_bytes(bytes, type);
  }
  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    return c_->encode(in, type, out);
  }
  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    c_->decode(in, type, out);
  }

 private:
  std::unique_ptr<any> c_;
};

template <class C>
inline constexpr bool is_identity_v = requires {
  requires C::is_identity;
};

/// Whether the servers sum `C`'s encoding as the dtype (see the file comment).
template <class C>
inline constexpr bool is_summable_v = requires {
  requires C::summable;
};

/// How to make a tensor's compressors: one per partition, made when the tensor is first used.
/// Tensors are matched by `name()`: a tensor keeps the compressor it was first used with.
class spec {
 public:
  virtual ~spec() = default;
  virtual const std::string& name() const = 0;
  virtual std::unique_ptr<any> make() const = 0;
  /// The recipe a worker declares to the servers, which make their compressor from it
  /// (`for_server(*declared())`); none for a summable compressor, whose pushes servers sum.
  virtual std::optional<recipe> declared() const { return recipe{name(), {}}; }
  /// No compression at all (`none()`): overrides `Config::compressor` for one tensor.
  virtual bool is_none() const { return false; }
};

template <Compressor C, class... Args>
class spec_of final : public spec {
 public:
  explicit spec_of(Args... args)
      : args_(std::move(args)...), name_(std::make_from_tuple<C>(args_).name()) {}
  const std::string& name() const override { return name_; }
  std::unique_ptr<any> make() const override {
    return std::make_unique<holder<C>>(std::make_from_tuple<C>(args_));
  }
  std::optional<recipe> declared() const override {
    if constexpr (is_summable_v<C>)
      return std::nullopt;
    else
      return recipe{name_, {}};
  }

 private:
  std::tuple<Args...> args_;
  std::string name_;
};

/// The spec that asks for no compression, even where `Config::compressor` (BYTEPS_COMPRESSOR)
/// gives every tensor one. Broadcasts always use it: their values must arrive exactly.
inline std::shared_ptr<const spec> none() {
  struct none_spec final : spec {
    const std::string& name() const override { return name_; }
    std::unique_ptr<any> make() const override { return nullptr; }
    std::optional<recipe> declared() const override { return std::nullopt; }
    bool is_none() const override { return true; }
    std::string name_ = "none";
  };
  static const auto the = std::make_shared<const none_spec>();
  return the;
}

/// The value of `push_pull_options::compressor` that compresses with `C(args...)`; `none()`
/// for `identity`.
template <Compressor C, class... Args>
std::shared_ptr<const spec> use(Args... args) {
  if constexpr (is_identity_v<C>)
    return none();
  else
    return std::make_shared<const spec_of<C, Args...>>(std::move(args)...);
}

}  // namespace compress
}  // namespace bps
