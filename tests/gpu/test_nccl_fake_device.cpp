// bps::local::nccl's whole pipeline on machines with no GPU: the real header, linked against
// the CPU model of the CUDA runtime and NCCL (fake_cuda.cpp, fake_nccl.cpp) instead of
// libcudart and libnccl. Local ranks are threads, each with its own communicator, its own "device" (its
// local rank) and its own stream; servers and the scheduler run in-process over loopback.
// Every result is compared with the exact reference sum. This shows the stage thread, the
// order board, the events, the slices through the servers and the failure paths; it cannot
// show real kernels, device memory or NCCL itself (the GPU process tests do, where there is a
// GPU).
#include <byteps/local/nccl.hpp>
#include <byteps/transport/faulty/faulty.hpp>

#include <unistd.h>

#include "../cluster/cluster.hpp"
#include "../cluster/values.hpp"
#include "fake_device.hpp"
#include "trace/trace_job.hpp"

#include <catch2/catch.hpp>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <numeric>

using namespace bps;
using bps::test::cluster;

namespace {

using nccl_comm_t =
    Communicator<transport::tcp, local::nccl, partition::by_bytes, schedule::priority>;

void cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + " failed");
}

int shm_files_of(std::uint64_t job_id) {
  const auto prefix = fmt::format("bps-{:016x}-", job_id);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with(prefix)) ++n;
  return n;
}

struct device_buffer {
  explicit device_buffer(std::size_t bytes) : p(fake_device::device_alloc(bytes)) {}
  ~device_buffer() { fake_device::device_free(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* p;
};

// The calling thread's "device" is its local rank, as the policy picks it; and a stream.
template <class Comm>
cudaStream_t use_device(const Comm& comm) {
  cuda(cudaSetDevice(comm.local_rank()), "cudaSetDevice");
  cudaStream_t s = nullptr;
  cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}

// Every dtype at odd sizes for several rounds on machines with these local sizes.
void every_dtype(const std::vector<int>& local_sizes, int servers, int rounds) {
  fake_device::set_device_count(4);
  auto cfg = test::base_config(static_cast<int>(local_sizes.size()), servers);
  cfg.partition_bytes = 8192;
  cluster c(cfg);
  const int processes = std::accumulate(local_sizes.begin(), local_sizes.end(), 0);
  const std::size_t sizes[] = {1, 2, 3, 7, 1023, 4097, 20011};
  std::mutex mu;
  std::uint64_t job = 0;
  c.run_local<nccl_comm_t>(local_sizes, [&](nccl_comm_t& comm) {
    {
      std::lock_guard lock(mu);
      job = comm.job_id();
    }
    cudaStream_t stream = use_device(comm);
    for (int round = 0; round < rounds; ++round) {
      struct item {
        dtype t;
        std::size_t n;
        std::vector<std::byte> host;
        std::unique_ptr<device_buffer> dev;
        handle h;
      };
      std::vector<item> items;
      for (dtype t : all_dtypes)
        for (std::size_t n : sizes) {
          item it{t, n, test::fill(t, n, comm.rank(), round),
                  std::make_unique<device_buffer>(n * dtype_size(t)), {}};
          cuda(cudaMemcpyAsync(it.dev->p, it.host.data(), it.host.size(), cudaMemcpyHostToDevice,
                               stream),
               "cudaMemcpyAsync");
          items.push_back(std::move(it));
        }
      for (std::size_t k = 0; k < items.size(); ++k)
        items[k].h = comm.push_pull(fmt::format("{}.{}", dtype_name(items[k].t), items[k].n),
                                    items[k].dev->p, items[k].n, items[k].t,
                                    {.priority = static_cast<int>(k % 3), .stream = stream});
      std::exception_ptr failed;
      for (std::size_t k = 0; k < items.size(); ++k) {
        auto& it = items[k];
        try {
          if (k % 2 == 0) {
            it.h.wait();
          } else {  // on the stream, as a trainer would
            cuda(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(it.h.device_event()), 0),
                 "cudaStreamWaitEvent");
          }
          cuda(cudaMemcpyAsync(it.host.data(), it.dev->p, it.host.size(), cudaMemcpyDeviceToHost,
                               stream),
               "cudaMemcpyAsync");
        } catch (...) {
          if (!failed) failed = std::current_exception();
        }
      }
      for (auto& it : items) {
        try {
          it.h.wait();
        } catch (...) {
          if (!failed) failed = std::current_exception();
        }
      }
      // The fake stream runs its copies in order: an event recorded last marks them all.
      cudaEvent_t done = nullptr;
      cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      cuda(cudaEventRecord(done, stream), "cudaEventRecord");
      while (cudaEventQuery(done) == cudaErrorNotReady) std::this_thread::yield();
      cudaEventDestroy(done);
      if (failed) std::rethrow_exception(failed);
      for (auto& it : items) {
        auto wrong = test::first_wrong(it.t, it.host, it.n, processes, round);
        BPS_EXPECT(wrong == it.n, "{} x {} round {} rank {}: element {} is not the sum",
                   dtype_name(it.t), it.n, round, comm.rank(), wrong);
      }
    }
    comm.barrier();
    cudaStreamDestroy(stream);
  });
  CHECK(job != 0);
  CHECK(shm_files_of(job) == 0);
  CHECK(fake_device::live_comms() == 0);
  CHECK(fake_device::live_streams() == 0);
}

}  // namespace

TEST_CASE("nccl (fake device): 2 machines x 2 local ranks - every dtype - odd sizes",
          "[nccl][fake]") {
  const long before = fake_device::collectives(2);
  every_dtype({2, 2}, 2, 3);
  CHECK(fake_device::collectives(2) > before);  // the reduces and broadcasts went through NCCL
}

TEST_CASE("nccl (fake device): machines with 1 and 3 local ranks agree on slices",
          "[nccl][fake]") {
  every_dtype({1, 3}, 2, 2);
}

TEST_CASE("nccl (fake device): 2 machines x 1 local rank (one GPU each)", "[nccl][fake]") {
  // One local rank has nothing to reduce or broadcast: no NCCL collective is issued (each
  // would cost a kernel launch and NCCL's queueing for nothing), and the sums are exact.
  const long before = fake_device::collectives(1);
  every_dtype({1, 1}, 1, 2);
  CHECK(fake_device::collectives(1) == before);
}

TEST_CASE("nccl (fake device): broadcast, average and an empty tensor", "[nccl][fake]") {
  fake_device::set_device_count(4);
  cluster c(test::base_config(2, 1));
  c.run_local<nccl_comm_t>({2, 3}, [](nccl_comm_t& comm) {
    cudaStream_t stream = use_device(comm);
    std::vector<double> v(10001, static_cast<double>(comm.rank()));
    device_buffer dv(v.size() * sizeof(double));
    cuda(cudaMemcpyAsync(dv.p, v.data(), v.size() * sizeof(double), cudaMemcpyHostToDevice,
                         stream),
         "cudaMemcpyAsync");
    comm.push_pull("mean", dv.p, v.size(), dtype::float64, {.average = true, .stream = stream})
        .wait();
    std::memcpy(v.data(), dv.p, v.size() * sizeof(double));
    for (std::size_t i = 0; i < v.size(); ++i)
      BPS_EXPECT(v[i] == 2.0, "element {} is {}, the mean of ranks 0..4 is 2", i, v[i]);

    std::vector<float> b(777);
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = comm.rank() == 3 ? static_cast<float>(i) - 0.5f : 99.0f;
    device_buffer db(b.size() * sizeof(float));
    std::memcpy(db.p, b.data(), b.size() * sizeof(float));
    comm.broadcast("weights", db.p, b.size(), dtype::float32, 3).wait();
    std::memcpy(b.data(), db.p, b.size() * sizeof(float));
    for (std::size_t i = 0; i < b.size(); ++i)
      BPS_EXPECT(b[i] == static_cast<float>(i) - 0.5f, "element {} is {}", i, b[i]);

    auto h = comm.push_pull("empty", dv.p, 0, dtype::float64, {.stream = stream});
    h.wait();
    BPS_EXPECT(h.device_event() != nullptr, "an empty tensor's handle has no device event");
    comm.barrier();
    cudaStreamDestroy(stream);
  });
}

TEST_CASE("nccl (fake device): misuse is refused at the call", "[nccl][fake]") {
  fake_device::set_device_count(4);
  cluster c(test::base_config(1, 1));
  c.run_local<nccl_comm_t>({2}, [](nccl_comm_t& comm) {
    cudaStream_t stream = use_device(comm);
    std::vector<float> host(10, 1.0f);
    auto m = test::message_of<usage_error>([&] { comm.push_pull("h", std::span(host)); });
    BPS_EXPECT(m.find("takes device memory") != std::string::npos, "{}", m);
    // Device memory of another device than the rank's.
    cuda(cudaSetDevice(3), "cudaSetDevice");
    device_buffer other(40);
    cuda(cudaSetDevice(comm.local_rank()), "cudaSetDevice");
    m = test::message_of<usage_error>(
        [&] { comm.push_pull("o", other.p, 10, dtype::float32); });
    BPS_EXPECT(m.find("is on CUDA device 3") != std::string::npos, "{}", m);

    device_buffer d(40);
    // Local rank 0 tries again before the others join the operation, so it is still in flight.
    if (comm.local_rank() == 0) {
      auto h = comm.push_pull("t", d.p, 10, dtype::float32, {.stream = stream});
      auto again =
          test::message_of<usage_error>([&] { comm.push_pull("t", d.p, 10, dtype::float32); });
      BPS_EXPECT(again.find("still in flight") != std::string::npos, "{}", again);
      comm.barrier();
      h.wait();
    } else {
      comm.barrier();
      comm.push_pull("t", d.p, 10, dtype::float32, {.stream = stream}).wait();
    }
    auto shape = test::message_of<usage_error>([&] { comm.push_pull("t", d.p, 5, dtype::float64); });
    BPS_EXPECT(shape.find("first used as 10 x float32") != std::string::npos, "{}", shape);
    comm.barrier();
    comm.shutdown();
    auto after = test::message_of<usage_error>([&] { comm.push_pull("t", d.p, 10, dtype::float32); });
    BPS_EXPECT(after.find("shut down") != std::string::npos, "{}", after);
    cudaStreamDestroy(stream);
  });
  CHECK(fake_device::live_comms() == 0);
}

TEST_CASE("nccl (fake device): a local rank that never calls fails the others by the deadline",
          "[nccl][fake][faults]") {
  fake_device::set_device_count(4);
  auto cfg = test::base_config(1, 1);
  cfg.op_timeout = std::chrono::milliseconds(1500);
  cluster c(cfg);
  std::mutex mu;
  std::string message;
  std::uint64_t job = 0;
  c.run_local<nccl_comm_t>(
      {2},
      [&](nccl_comm_t& comm) {
        if (comm.local_rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          return;
        }
        use_device(comm);
        device_buffer d(400);
        auto m = test::message_of<communicator_error>(
            [&] { comm.push_pull("lonely", d.p, 100, dtype::float32).wait(); });
        std::lock_guard lock(mu);
        message = m;
        job = comm.job_id();
      },
      false);
  INFO(message);
  CHECK(message.find("push_pull of 'lonely'") != std::string::npos);
  CHECK(message.find("the other local ranks of machine 0 to call it") != std::string::npos);
  CHECK(shm_files_of(job) == 0);
  CHECK(fake_device::live_comms() == 0);
}

TEST_CASE("nccl (fake device): local ranks that disagree on a shape are named",
          "[nccl][fake][faults]") {
  fake_device::set_device_count(4);
  auto cfg = test::base_config(1, 1);
  cfg.op_timeout = std::chrono::milliseconds(3000);
  cluster c(cfg);
  std::mutex mu;
  std::condition_variable both;
  std::vector<std::string> messages;
  c.run_local<nccl_comm_t>(
      {2},
      [&](nccl_comm_t& comm) {
        use_device(comm);
        const std::size_t n = comm.local_rank() == 0 ? 100 : 200;
        device_buffer d(n * sizeof(float));
        std::string m;
        try {
          comm.push_pull("grad", d.p, n, dtype::float32).wait();
          m = "(no exception)";
        } catch (const std::exception& e) {
          m = e.what();
        }
        std::unique_lock lock(mu);
        messages.push_back(m);
        both.notify_all();
        // A dead worker leaves without a bye, and the scheduler then fails the job: stay until
        // the other local rank has its own error, which is what this test checks.
        both.wait_for(lock, std::chrono::seconds(10), [&] { return messages.size() == 2; });
      },
      false);
  REQUIRE(messages.size() == 2);
  INFO(messages[0] << " | " << messages[1]);
  for (const auto& m : messages) {
    CHECK(m.find("push_pull of 'grad'") != std::string::npos);
    CHECK(m.find("different shapes or dtypes") != std::string::npos);
  }
  CHECK(fake_device::live_comms() == 0);
}

TEST_CASE("nccl (fake device): two local ranks on one device are refused by NCCL, named",
          "[nccl][fake][faults]") {
  fake_device::set_device_count(1);  // both local ranks get device 0
  auto cfg = test::base_config(1, 1);
  cfg.rendezvous_timeout = std::chrono::seconds(5);
  cluster c(cfg);
  std::string message = "(no exception)";
  try {
    c.run_local<nccl_comm_t>({2}, [](nccl_comm_t&) {}, false);
  } catch (const std::exception& e) {
    message = e.what();
  }
  fake_device::set_device_count(4);
  INFO(message);
  CHECK(message.find("ncclCommInitRankConfig failed") != std::string::npos);
  CHECK(message.find("invalid usage") != std::string::npos);
  CHECK(fake_device::live_comms() == 0);
}

TEST_CASE("nccl (fake device): 16 MiB in 16 partitions - a partition is pushed while later ones "
          "are copied out, and copied in while later ones are pulled",
          "[nccl][fake][trace]") {
  fake_device::set_device_count(4);
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("bps-trace-nccl-overlap-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto cfg = test::traced_config(2, 2, dir.string(), 1, 3);
  cfg.partition_bytes = 1 << 20;
  const std::size_t count = (16 << 20) / sizeof(float);
  // The last partition (15) leaves its worker 300 ms late, so the last pull ends long after
  // partition 0's sum came back: without that, on a loaded machine every answer of a round
  // could arrive before the local stage's thread first looked for one.
  using faulty_tcp = transport::faulty<transport::tcp>;
  using comm_t = Communicator<faulty_tcp, local::nccl, partition::by_bytes, schedule::priority>;
  auto plan = std::make_shared<transport::fault_plan>();
  plan->add({.when = {.type = wire::msg::push, .from = role::worker, .part = 15},
             .action = transport::fault::delay(std::chrono::milliseconds(300)),
             .times = transport::fault_rule::always});
  cluster c(cfg);
  c.run_local<comm_t>({1, 1}, [&](comm_t& comm) {
    cudaStream_t stream = use_device(comm);
    device_buffer dev(count * sizeof(float));
    std::vector<float> host(count);
    for (int round = 0; round < 3; ++round) {
      std::fill(host.begin(), host.end(), static_cast<float>(comm.rank() + round));
      cuda(cudaMemcpyAsync(dev.p, host.data(), count * sizeof(float), cudaMemcpyHostToDevice,
                           stream),
           "cudaMemcpyAsync");
      comm.push_pull("big", dev.p, count, dtype::float32, {.stream = stream}).wait();
      cuda(cudaMemcpyAsync(host.data(), dev.p, count * sizeof(float), cudaMemcpyDeviceToHost,
                           stream),
           "cudaMemcpyAsync");
      while (cudaStreamQuery(stream) == cudaErrorNotReady) std::this_thread::yield();
      const float want = static_cast<float>(1 + 2 * round);
      BPS_EXPECT(host[0] == want && host[count / 2] == want && host[count - 1] == want,
                 "round {}: sum {}, want {}", round, host[0], want);
    }
    cudaStreamDestroy(stream);
    // comm.stats() by stage: each partition copied out and in once a round; the policy's
    // reduce and gather run on the whole tensor, once a round.
    const auto s = comm.stats();
    for (auto st : {stage::copy_out, stage::push, stage::pull, stage::copy_in})
      BPS_EXPECT(s.stages[st].partitions == 3 * 16, "{}: {} partitions", stage_name(st),
                 s.stages[st].partitions);
    for (auto st : {stage::local_reduce, stage::local_gather})
      BPS_EXPECT(s.stages[st].partitions == 3, "{}: {} steps", stage_name(st),
                 s.stages[st].partitions);
  }, true, [&](const Config& wc) {
    auto opts = faulty_tcp::options::from(wc);
    opts.plan = plan;
    return std::make_unique<comm_t>(wc, std::move(opts));
  });

  std::size_t workers = 0;
  for (const auto& n : trace_tool::read_dir(dir.string())) {
    if (!n.name.starts_with("worker")) continue;
    ++workers;
    INFO(n.path);
    // By round, by partition, each stage's span [begin, end) in us; and the tensor's own lane.
    std::map<std::int64_t, std::map<int, std::map<std::string, std::pair<double, double>>>> parts;
    std::map<std::int64_t, std::map<std::string, int>> whole;
    std::map<double, std::string> lanes;
    for (const auto& e : n.doc.find("traceEvents")->items)
      if (e.string_or("ph", "") == "M" && e.string_or("name", "") == "thread_name")
        lanes[e.number_or("tid", 0)] = e.find("args")->string_or("name", "");
    for (const auto& e : n.doc.find("traceEvents")->items) {
      if (e.string_or("ph", "") != "X") continue;
      const auto& lane = lanes.at(e.number_or("tid", 0));
      const auto round = static_cast<std::int64_t>(e.find("args")->number_or("round", -1));
      const double begin = e.number_or("ts", 0), end = begin + e.number_or("dur", 0);
      if (lane.starts_with("big part "))
        parts[round][std::stoi(lane.substr(9))][e.string_or("name", "")] = {begin, end};
      else if (lane == "big")
        ++whole[round][e.string_or("name", "")];
    }
    REQUIRE(parts.size() == 2);
    for (const auto& [round, by_part] : parts) {
      INFO("round " << round);
      REQUIRE(by_part.size() == 16);
      double last_pull_end = 0;
      for (const auto& [i, stages] : by_part) {
        INFO("partition " << i);
        CHECK(stages.size() == 5);  // copy_out, queue, push, pull, copy_in
        for (const char* s : {"copy_out", "queue", "push", "pull", "copy_in"})
          REQUIRE(stages.contains(s));
        CHECK(stages.at("copy_out").second <= stages.at("push").first + 0.0015);
        CHECK(stages.at("pull").second <= stages.at("copy_in").first + 0.0015);
        last_pull_end = std::max(last_pull_end, stages.at("pull").second);
      }
      CHECK(by_part.at(0).at("push").first < by_part.at(15).at("copy_out").second);
      CHECK(by_part.at(0).at("copy_in").first < last_pull_end);
      CHECK(whole.at(round).at("local_reduce") == 1);
      CHECK(whole.at(round).at("local_gather") == 1);
    }
  }
  CHECK(workers == 2);
  fs::remove_all(dir);
}
