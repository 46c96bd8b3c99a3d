#pragma once
// An in-process emulation of verbs and rdma_cm semantics, as a `bps::RdmaVerbs` policy, so that
// `transport::basic_rdma` runs in CI where no machine has an RDMA NIC (and the kernel has no
// soft-RoCE). What it models:
//
// - devices with one port (MTU, RoCE GID table: index 0 RoCE v1, index 1 RoCE v2), protection
//   domains, memory regions with an lkey and an rkey (drawn from disjoint ranges, so one used as
//   the other names no region), their access flags taken exactly as asked, bounds checks,
//   RLIMIT_MEMLOCK;
// - the RC queue pair's states (INIT at create, RTS once established, ERR on disconnect, flush
//   or a failed work request), its send and receive depths, per-QP ordering;
// - completion queues with their capacity, armed notification through a completion channel
//   (one event per arm), channels and event channels with pollable descriptors (eventfd);
// - SEND consuming the peer's next posted receive, WRITE WITH IMMEDIATE placing bytes in the
//   peer's region and consuming a receive for the immediate;
// - rdma_cm: listen, resolve address and route, connect request, accept, reject, established,
//   disconnected, each as an event on the id's channel.
//
// Work requests run asynchronously, as on a NIC: posting checks the request and queues it; the
// fabric's progress thread carries it out a random time later (`timing`), so the caller's
// thread and the "wire" really overlap. Within a queue pair requests run and complete in the
// order posted (RC guarantees it); across queue pairs they overtake one another. Completions
// are what the transport sees, on its own thread, as with a NIC. Until its completion is reaped
// by `poll_cq`, a work request owns its buffer: a send buffer is checksummed at the post and
// checked when the NIC reads it and when its completion is reaped (a peer's WRITE landing there
// after the NIC read it is the NIC's doing, not the caller's, and is not counted: no
// retransmission is modelled that would read it again); a receive buffer is poisoned (0xa5) at
// the post, so a caller that reads a slot it re-posted reads garbage.
//
// Strict: breaking a verbs rule is a bug of the caller. Posting past a queue's depth, an sge
// outside its region or under a key that is not an lkey, a WRITE outside the rkey's region,
// under a key that is not an rkey or without remote write, a receive into a region without
// local write, a SEND with no receive posted or larger than it, registering remote write
// without local write, destroying what is still in use, deregistering a region that posted
// work still uses (EBUSY): each is caught at the call, recorded (`violations()`) and thrown
// as `emu::violation`, so a test fails loudly even when the transport swallows the exception.
// What only shows later (a completion queue overrun, a send buffer changed before its
// completion was reaped, a region deregistered under a WRITE in flight) is recorded when it
// happens; the work request then fails (its queue pair goes to the error state) or, for a
// changed buffer found at reaping, `poll_cq` throws.
//
// Faults, injected per connection end (`end`: the listener's port and which side):
// a failed completion, a flushed queue pair, a rejected or unreachable connect, a disconnect
// after n sends (mid-transfer), a slow peer (its completions become visible late).

#include <byteps/transport/rdma/verbs.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bps::test::emu {

namespace verbs = bps::transport::verbs;

/// A verbs rule broken by the caller.
class violation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

enum class side { active, passive };  ///< the connecting end, or the accepting one

/// One end of the connections made to listener port `port`: of every one, or (connection >= 0)
/// of the connection-th, counted from 0 in the order connects reached the port.
struct end {
  std::uint16_t port = 0;
  side which = side::active;
  int connection = -1;
};

struct state;  // emulated_state.hpp

/// The emulated network and its devices. Shared by every policy object that names it; all
/// calls are thread-safe (one lock).
class fabric {
 public:
  fabric();
  ~fabric();
  fabric(const fabric&) = delete;
  fabric& operator=(const fabric&) = delete;

  /// The fabric of policies built without one (a cluster whose nodes get no options).
  static std::shared_ptr<fabric> shared_default();

  // Settings.
  void set_devices(std::vector<std::string> names);  ///< default {"emu0"}; {} = no device
  void set_memlock_limit(std::optional<std::size_t> bytes);  ///< default unlimited
  void set_mtu(std::uint32_t bytes);                           ///< default 4096

  /// When the emulated NIC carries out a posted work request: a delay drawn uniformly from
  /// [min, max] after the post (but never before the requests posted before it on its queue
  /// pair), from a generator seeded with `seed`.
  struct timing {
    std::chrono::microseconds min{0};
    std::chrono::microseconds max{200};
    std::uint64_t seed = 1;
  };
  void set_timing(timing t);  ///< default {0, 200 us, 1}

  // Faults. Each applies to connections made after or before it alike, while it lasts.
  /// The `after`+1-th next send work request on `e` completes with `status` and the queue pair
  /// goes to the error state (what follows is flushed).
  void fail_send(end e, verbs::wc_status status, int after = 0);
  /// Moves the queue pairs of `e` to the error state now: posted receives complete flushed.
  void flush(end e);
  /// The next `count` connects to `port` are rejected (REJECTED, status 28).
  void reject_connects(std::uint16_t port, int count);
  /// Connects to `host` fail address resolution (ADDR_ERROR) `count` times.
  void unreachable(const std::string& host, int count);
  /// After `sends` more send work requests on `e`, that end disconnects (mid-transfer): its
  /// queue pair goes to the error state and both ids get DISCONNECTED.
  void disconnect_after(end e, int sends);
  /// Completions of `e`'s queue pairs become visible `delay` after their work was done.
  void slow(end e, std::chrono::milliseconds delay);

  // What happened.
  std::vector<std::string> violations() const;
  std::size_t pinned_bytes() const;      ///< registered now
  std::size_t live_objects() const;      ///< ids, queue pairs, queues, regions, channels, devices
  std::uint64_t sends_posted(end e) const;
  std::uint64_t writes_posted(end e) const;
  /// Work requests posted and not yet carried out by the NIC, on every queue pair.
  std::size_t work_in_flight() const;
  /// One registered region, as `ibv_reg_mr` returned it.
  struct region_info {
    const std::byte* addr = nullptr;
    std::size_t length = 0;
    unsigned access = 0;  ///< verbs::access flags, exactly as registered
    std::uint32_t lkey = 0, rkey = 0;
  };
  std::vector<region_info> regions() const;  ///< the regions registered now, by address

  state& impl() { return *state_; }

 private:
  std::unique_ptr<state> state_;
};

/// The `bps::RdmaVerbs` policy over a `fabric`.
class emulated_verbs {
 public:
  static constexpr std::string_view name = "emulated verbs";
  struct options {
    std::shared_ptr<fabric> net;  ///< null: fabric::shared_default()
    std::string host = "127.0.0.1";  ///< this node's address, as peers see it
  };
  struct device;
  struct mr;
  struct comp_channel;
  struct cq;
  struct event_channel;
  struct cm_id;

  explicit emulated_verbs(const options& opts);

  std::vector<std::string> device_names();
  std::optional<std::size_t> memlock_limit();
  device* open_device(std::string_view name, int port, int gid_index);
  verbs::port_info port(device* d);
  void close_device(device* d);
  mr* reg_mr(device* d, std::span<std::byte> memory, unsigned access);
  std::uint32_t lkey(mr* m);
  std::uint32_t rkey(mr* m);
  void dereg_mr(mr* m);
  comp_channel* create_comp_channel(device* d);
  int fd(comp_channel* c);
  void destroy_comp_channel(comp_channel* c);
  cq* create_cq(device* d, comp_channel* c, int depth);
  void destroy_cq(cq* q);
  void req_notify_cq(cq* q);
  cq* get_cq_event(comp_channel* c);
  int poll_cq(cq* q, std::span<verbs::work_completion> out);
  event_channel* create_event_channel();
  int fd(event_channel* c);
  void destroy_event_channel(event_channel* c);
  cm_id* create_id(event_channel* c, void* context);
  void* context(cm_id* id);
  void set_context(cm_id* id, void* context);
  void destroy_id(cm_id* id);
  std::uint16_t listen(cm_id* id, const std::string& host, std::uint16_t port);
  void resolve_addr(cm_id* id, const std::string& host, std::uint16_t port,
                    std::chrono::milliseconds timeout);
  void resolve_route(cm_id* id, std::chrono::milliseconds timeout);
  void create_qp(cm_id* id, device* d, cq* q, verbs::qp_caps caps);
  void destroy_qp(cm_id* id);
  void connect(cm_id* id, std::span<const std::byte> private_data);
  void accept(cm_id* id, std::span<const std::byte> private_data);
  void reject(cm_id* id, std::span<const std::byte> private_data);
  void disconnect(cm_id* id);
  std::optional<verbs::cm_event<cm_id>> get_cm_event(event_channel* c);
  void post_send(cm_id* id, const verbs::send_wr& wr);
  void post_recv(cm_id* id, const verbs::recv_wr& wr);
  std::string peer_address(cm_id* id);
  std::string local_host(cm_id* id);

  fabric& net() { return *net_; }

 private:
  std::shared_ptr<fabric> net_;
  std::string host_;
};

static_assert(bps::RdmaVerbs<emulated_verbs>);

}  // namespace bps::test::emu
