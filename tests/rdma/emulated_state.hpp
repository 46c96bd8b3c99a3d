#pragma once
// The emulation's state (emulated_verbs.hpp says what it models): the objects behind the
// policy's handles and the fabric's tables, all guarded by `state::mu`. Shared by
// emulated_fabric.cpp (work requests, the progress thread, completions, faults) and
// emulated_cm.cpp (devices, regions, channels, the connection manager).

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_verbs.hpp"

namespace bps::test::emu {

using clock = std::chrono::steady_clock;
using ev = emulated_verbs;

struct queue_pair;

struct ev::device {
  std::string name;
  int port = 1;
  int gid_index = 1;
  int regions = 0;  // registered regions not yet deregistered
};

struct ev::mr {
  device* dev = nullptr;
  std::byte* addr = nullptr;
  std::size_t length = 0;
  unsigned access = 0;     // exactly as registered
  std::uint32_t lkey = 0;  // from a range no rkey is drawn from, and the other way round
  std::uint32_t rkey = 0;
  int in_use = 0;          // posted work requests whose sge is here, until reaped or discarded
};

struct ev::comp_channel {
  int efd = -1;
  std::deque<cq*> events;
  int queues = 0;
};

// What a posted work request keeps until its completion is reaped: the region its sge uses
// (deregistering it meanwhile is EBUSY) and, for a send, its buffer's checksum at the post.
struct buffer_hold {
  ev::mr* region = nullptr;  // null: no bytes (a zero-length send)
  const std::byte* addr = nullptr;
  std::size_t length = 0;
  std::uint64_t sum = 0;
  bool checked = false;  // a send: the checksum is checked when reaped
  bool peer_wrote = false;  // a peer's WRITE landed in it before the NIC read it
};

struct completion_entry {
  verbs::work_completion wc;
  clock::time_point visible;
  queue_pair* qp = nullptr;  // whose send slot the entry frees when polled; null once destroyed
  bool is_send = false;
  buffer_hold hold;
};

// A send work request posted and not yet carried out.
struct pending_send {
  verbs::send_wr wr;
  clock::time_point due;  // when the NIC may carry it out, once those before it are done
  buffer_hold hold;
};

struct ev::cq {
  comp_channel* channel = nullptr;
  std::size_t capacity = 0;
  std::deque<completion_entry> entries;
  bool armed = false;
  int qps = 0;
};

struct ev::event_channel {
  int efd = -1;
  std::deque<verbs::cm_event<cm_id>> events;
  int ids = 0;
};

struct ev::cm_id {
  event_channel* ch = nullptr;
  void* context = nullptr;
  std::string host;          // this end's address
  std::uint16_t port = 0;    // bound (listener) or source (active) port
  std::string dest_host;     // active: resolved destination
  std::uint16_t dest_port = 0;
  bool addr_resolved = false;
  bool route_resolved = false;
  bool listening = false;
  bool connected = false;
  cm_id* peer = nullptr;     // the other end of a requested or established connection
  queue_pair* qp = nullptr;
  end where;                 // which fault target this end is
};

struct queue_pair {
  enum class qp_state { init, rts, error };
  ev::cm_id* id = nullptr;
  ev::cq* cq = nullptr;
  ev::device* dev = nullptr;
  verbs::qp_caps caps;
  qp_state st = qp_state::init;
  std::deque<std::pair<verbs::recv_wr, buffer_hold>> recvs;
  std::deque<pending_send> sends;  // posted, not yet carried out: run in this order
  std::uint32_t sq_used = 0;  // send work requests whose completion was not polled yet
};

struct send_fault { end e; verbs::wc_status status; int after; };
struct cut_fault { end e; int sends; };
struct slow_fault { end e; std::chrono::milliseconds delay; };

struct state {
  mutable std::mutex mu;
  std::vector<std::string> devices{"emu0"};
  std::optional<std::size_t> memlock;
  std::uint32_t mtu = 4096;

  std::map<std::uint16_t, ev::cm_id*> listeners;
  std::uint16_t next_port = 40000;
  std::map<std::uint32_t, ev::mr*> lkeys, rkeys;
  // Disjoint ranges: a transport that sends its lkey as the rkey names no region.
  std::uint32_t next_lkey = 0x1000, next_rkey = 0x80001000;
  std::size_t pinned = 0;
  std::size_t live = 0;
  std::set<ev::cq*> cqs;
  std::set<queue_pair*> qps;
  std::vector<std::string> violations;

  std::vector<send_fault> send_faults;
  std::vector<cut_fault> cuts;
  std::vector<slow_fault> slows;
  std::map<std::uint16_t, int> rejects;
  std::map<std::uint16_t, int> connections;  // connects that reached each listener
  std::map<std::string, int> unreachable;
  std::map<std::pair<std::uint16_t, int>, std::pair<std::uint64_t, std::uint64_t>> counts;

  // The NIC: carries out posted sends when due, and wakes armed queues whose delayed
  // completions became visible (slow peers). Started with the fabric.
  fabric::timing timing;
  std::mt19937_64 random{1};
  std::thread engine;
  std::condition_variable engine_cv;
  bool stopping = false;

  // Records a broken rule and throws it. Called with `mu` held (the throw releases it).
  [[noreturn]] void violate(const std::string& what);
  static bool matches(const end& e, const ev::cm_id* id) {
    return id && id->where.port == e.port && id->where.which == e.which && e.port != 0 &&
           (e.connection < 0 || e.connection == id->where.connection);
  }
  void push_event(ev::event_channel* ch, verbs::cm_event<ev::cm_id> e);
  // Never throws: an overrun is recorded, the entry dropped and the pair put in error.
  void push_completion(queue_pair* qp, verbs::work_completion wc, bool is_send,
                       buffer_hold hold = {});
  void notify(ev::cq* q);
  void to_error(queue_pair* qp);    // flushes the posted receives and the sends not yet run
  void tear_down(ev::cm_id* id);    // both ends to error, both get DISCONNECTED
  void run_engine();                // the progress thread's loop
  void carry_out(queue_pair* qp);   // the oldest posted send of qp, now due
  void release(buffer_hold& h);     // the region is no longer in use by that request
  void landed(const std::byte* p, std::size_t n);  // a peer's bytes were placed there
  std::string describe(const ev::cm_id* id) const;
};

std::uint64_t checksum(const std::byte* p, std::size_t n);

void signal_fd(int efd);
void drain_fd(int efd);

}  // namespace bps::test::emu
