// A small DLRM-style recommendation model trained through byteps (run it with byteps-launch):
// two embedding tables on the servers (docs/tables.md; 500,000 rows each by default) and a dense
// MLP on the workers. Each sample is one id per table, drawn from a Zipf distribution (a few ids
// are most of the traffic, as in real click logs), and four dense features; its label comes from
// a hidden model of the same shape, so the loss can only fall by learning the rows.
//
// A step on each worker: pull the batch's rows of each table, forward and backward through
// [row of table 0, row of table 1, dense features] -> 32 ReLU units -> one logit (logistic
// loss), push the rows' gradients (the servers apply Adagrad where the rows live) and push_pull
// the MLP's gradients (averaged, then plain SGD on every worker). Only the rows a step touches
// cross the network.
//
// At the end every worker checks that its loss fell (the mean of the last 20 steps at most
// 0.85 of the first 20's) and that all workers hold the same MLP and read the same rows (rank
// 0's broadcast, compared bit for bit); it exits 1 saying which check failed. Rank 0 prints a
// line every --report steps, and at the end a digest of the MLP and of 64 rows of each table
// (tests compare it between runs: a run with a server killed must end on the same bits).
//
//   byteps-launch --workers 2 --servers 2 -- train_recsys [--steps N] [--rows N] [--dim N]
//       [--batch N] [--zipf S] [--seed N] [--report N]

#include <byteps/byteps.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Args {
  int steps = 300;
  std::uint64_t rows = 500000;  // per table
  std::uint32_t dim = 16;
  int batch = 256;
  double zipf = 1.05;
  std::uint64_t seed = 7;
  int report = 50;
};

constexpr int tables = 2;
constexpr int dense_features = 4;
constexpr int hidden = 32;
constexpr int window = 20;  // steps averaged at each end for the loss check

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: train_recsys [--steps N] [--rows N] [--dim N] [--batch N] [--zipf S] "
               "[--seed N] [--report N]\n"
               "  a DLRM-style model: %d embedding tables on the byteps servers (--rows each, "
               "--dim wide, Adagrad\n"
               "  on the servers) and a dense MLP through push_pull; run it under byteps-launch.\n"
               "  Exits 1 unless the loss falls and every worker holds the same model.\n",
               tables);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument("train_recsys: " + std::string(flag) + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--steps") a.steps = std::stoi(value);
    else if (flag == "--rows") a.rows = std::stoull(value);
    else if (flag == "--dim") a.dim = static_cast<std::uint32_t>(std::stoul(value));
    else if (flag == "--batch") a.batch = std::stoi(value);
    else if (flag == "--zipf") a.zipf = std::stod(value);
    else if (flag == "--seed") a.seed = std::stoull(value);
    else if (flag == "--report") a.report = std::stoi(value);
    else throw std::invalid_argument("train_recsys: unknown flag " + std::string(flag) + " (see --help)");
  }
  if (a.steps < 2 * window || a.rows < 2 || a.dim < 1 || a.batch < 1 || !(a.zipf > 0) || a.report < 1)
    throw std::invalid_argument(
        "train_recsys: --steps must be at least 40, --rows at least 2, --dim, --batch and --report "
        "at least 1, --zipf positive");
  return a;
}

// Zipf over ids 0 .. n-1 (id k with weight 1 / (k + 1)^s), drawn by inverse CDF.
class zipf_ids {
 public:
  zipf_ids(std::uint64_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::uint64_t k = 0; k < n; ++k) cdf_[k] = sum += std::pow(static_cast<double>(k + 1), -s);
    for (auto& c : cdf_) c /= sum;
  }
  std::uint64_t draw(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<std::uint64_t>(std::lower_bound(cdf_.begin(), cdf_.end() - 1, u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// The hidden model's value for (table, id, column): a fixed hash, in [-1, 1).
float hidden_value(int table, std::uint64_t id, std::uint32_t column) {
  std::uint64_t x = id * 0x9e3779b97f4a7c15ull ^ (static_cast<std::uint64_t>(table) << 56) ^ column;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1u << 23) - 1.0);
}

struct Sample {
  std::uint64_t id[tables];
  float dense[dense_features];
  float label;
};

// A label the student can learn: the sign of the hidden model's logit (each table's row summed,
// plus the dense features).
Sample draw(const zipf_ids& z, std::mt19937_64& rng, std::uint32_t dim) {
  Sample s{};
  float logit = 0;
  for (int t = 0; t < tables; ++t) {
    s.id[t] = z.draw(rng);
    for (std::uint32_t j = 0; j < dim; ++j) logit += hidden_value(t, s.id[t], j) * (t == 0 ? 1.0f : -0.5f);
  }
  for (int f = 0; f < dense_features; ++f) {
    s.dense[f] = std::uniform_real_distribution<float>(-1, 1)(rng);
    logit += 0.5f * s.dense[f] * static_cast<float>(f % 2 == 0 ? 1 : -1);
  }
  s.label = logit > 0 ? 1.0f : 0.0f;
  return s;
}

// The dense part: [rows, dense] -> hidden ReLU units -> one logit. Every tensor is one span,
// pushed by name.
struct Mlp {
  int in = 0;
  std::vector<float> w1, b1, w2, b2;

  explicit Mlp(int inputs) : in(inputs), w1(static_cast<std::size_t>(hidden * inputs)), b1(hidden), w2(hidden), b2(1) {
    std::mt19937_64 rng(1234);  // the same on every worker
    std::normal_distribution<float> n(0, 1);
    for (auto& x : w1) x = n(rng) / std::sqrt(static_cast<float>(inputs));
    for (auto& x : w2) x = n(rng) / std::sqrt(static_cast<float>(hidden));
  }
  std::vector<std::span<float>> tensors() { return {w1, b1, w2, b2}; }
};

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);
  bps::Communicator<> comm(bps::Config::from_env());
  const int rank = comm.rank(), size = comm.size();
  const std::uint32_t dim = args.dim;
  const std::string names[tables] = {"user_rows", "item_rows"};
  for (const auto& name : names)
    comm.declare_table({.name = name, .rows = args.rows, .dim = dim, .optimizer = "adagrad:lr=0.2",
                        .init_scale = 0.05, .seed = args.seed});
  if (rank == 0)
    std::printf("train_recsys: %d workers, %d tables of %llu rows x %u on the servers, batch %d, "
                "Zipf %.2f, %d steps\n",
                size, tables, static_cast<unsigned long long>(args.rows), dim, args.batch,
                args.zipf, args.steps);

  const zipf_ids zipf(args.rows, args.zipf);
  std::mt19937_64 rng(args.seed * 1000003 + static_cast<std::uint64_t>(rank));
  const int inputs = tables * static_cast<int>(dim) + dense_features;
  Mlp mlp(inputs);
  Mlp grad(inputs);
  std::vector<double> losses;
  const auto began = std::chrono::steady_clock::now();
  std::size_t rows_moved = 0;

  for (int step = 1; step <= args.steps; ++step) {
    std::vector<Sample> batch;
    for (int i = 0; i < args.batch; ++i) batch.push_back(draw(zipf, rng, dim));
    // Pull each table's rows for the batch (duplicates are fetched once).
    std::vector<std::vector<std::uint64_t>> ids(tables);
    std::vector<std::vector<float>> rows(tables, std::vector<float>(batch.size() * dim));
    std::vector<bps::handle> pulls;
    for (int t = 0; t < tables; ++t) {
      for (const auto& s : batch) ids[t].push_back(s.id[t]);
      pulls.push_back(comm.pull_rows(names[t], ids[t], std::span(rows[t])));
    }
    for (auto& h : pulls) h.wait();

    // Forward and backward, the loss averaged over every worker's samples.
    for (auto tensor : grad.tensors()) std::fill(tensor.begin(), tensor.end(), 0.0f);
    std::vector<std::vector<float>> row_grads(tables, std::vector<float>(batch.size() * dim, 0.0f));
    const float scale = 1.0f / static_cast<float>(batch.size() * static_cast<std::size_t>(size));
    double loss = 0;
    std::vector<float> x(static_cast<std::size_t>(inputs)), h(hidden), dh(hidden), dx(x.size());
    for (std::size_t s = 0; s < batch.size(); ++s) {
      for (int t = 0; t < tables; ++t)
        std::copy_n(rows[t].begin() + static_cast<std::ptrdiff_t>(s * dim), dim, x.begin() + t * dim);
      std::copy_n(batch[s].dense, dense_features, x.begin() + tables * dim);
      double z = mlp.b2[0];
      for (int o = 0; o < hidden; ++o) {
        float a = mlp.b1[o];
        for (int i = 0; i < inputs; ++i) a += mlp.w1[o * inputs + i] * x[i];
        h[o] = std::max(a, 0.0f);
        z += mlp.w2[o] * h[o];
      }
      const double p = sigmoid(z), y = batch[s].label;
      loss += -(y * std::log(p + 1e-12) + (1 - y) * std::log(1 - p + 1e-12));
      const auto dz = static_cast<float>(p - y) * scale;
      grad.b2[0] += dz;
      std::fill(dx.begin(), dx.end(), 0.0f);
      for (int o = 0; o < hidden; ++o) {
        grad.w2[o] += dz * h[o];
        dh[o] = h[o] > 0 ? dz * mlp.w2[o] : 0.0f;
        grad.b1[o] += dh[o];
        for (int i = 0; i < inputs; ++i) {
          grad.w1[o * inputs + i] += dh[o] * x[i];
          dx[i] += dh[o] * mlp.w1[o * inputs + i];
        }
      }
      for (int t = 0; t < tables; ++t)
        std::copy_n(dx.begin() + t * dim, dim, row_grads[t].begin() + static_cast<std::ptrdiff_t>(s * dim));
    }
    losses.push_back(loss / static_cast<double>(batch.size()));

    // Rows' gradients to the servers (summed over workers there, Adagrad applied); the MLP's
    // summed through push_pull (each worker's is already divided by the workers' count).
    std::vector<bps::handle> pending;
    for (int t = 0; t < tables; ++t) pending.push_back(comm.push_rows(names[t], ids[t], std::span(row_grads[t])));
    const char* tensor_names[] = {"mlp.w1", "mlp.b1", "mlp.w2", "mlp.b2"};
    auto g = grad.tensors();
    for (std::size_t i = 0; i < g.size(); ++i) pending.push_back(comm.push_pull(tensor_names[i], g[i]));
    for (auto& p : pending) p.wait();
    auto w = mlp.tensors();
    for (std::size_t i = 0; i < w.size(); ++i)
      for (std::size_t j = 0; j < w[i].size(); ++j) w[i][j] -= 0.5f * g[i][j];
    rows_moved += 2 * batch.size() * tables;  // pulled and pushed (before duplicates are merged)

    if (rank == 0 && (step % args.report == 0 || step == args.steps)) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      double recent = 0;
      const std::size_t n = std::min<std::size_t>(window, losses.size());
      for (std::size_t i = losses.size() - n; i < losses.size(); ++i) recent += losses[i];
      std::printf("step %d/%d: loss %.4f (mean of the last %zu steps, rank 0), %.1f ms a step, "
                  "%.0f rows a second in and out\n",
                  step, args.steps, recent / static_cast<double>(n), n, 1e3 * seconds / step,
                  static_cast<double>(rows_moved) / seconds);
      std::fflush(stdout);
    }
  }

  // The checks: the loss fell; the workers hold rank 0's MLP and read rank 0's rows.
  double first = 0, last = 0;
  for (int i = 0; i < window; ++i) {
    first += losses[static_cast<std::size_t>(i)] / window;
    last += losses[losses.size() - 1 - static_cast<std::size_t>(i)] / window;
  }
  bool ok = true;
  if (!(last <= 0.85 * first)) {
    std::printf("FAILED: worker %d's loss did not fall enough: %.4f -> %.4f (at most 0.85x)\n", rank, first, last);
    ok = false;
  }
  std::uint64_t digest = 14695981039346656037ull;  // FNV-1a of the MLP, then of the probed rows
  const auto hash = [&digest](std::span<const float> v) {
    for (const auto b : std::as_bytes(v)) digest = (digest ^ static_cast<std::uint8_t>(b)) * 1099511628211ull;
  };
  for (const auto& t : mlp.tensors()) hash(t);
  std::vector<std::uint64_t> probe(64);
  for (std::size_t i = 0; i < probe.size(); ++i) probe[i] = i * 7919 % args.rows;
  for (int t = 0; t < tables; ++t) {
    std::vector<float> mine(probe.size() * dim), theirs;
    comm.pull_rows(names[t], probe, std::span(mine)).wait();
    hash(mine);
    theirs = mine;
    comm.broadcast(names[t] + ".check", std::span(theirs), 0).wait();
    if (std::memcmp(mine.data(), theirs.data(), mine.size() * sizeof(float)) != 0) {
      std::printf("FAILED: worker %d reads other rows of %s than worker 0\n", rank, names[t].c_str());
      ok = false;
    }
  }
  auto w = mlp.tensors();
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::vector<float> theirs(w[i].begin(), w[i].end());
    comm.broadcast("mlp.check." + std::to_string(i), std::span(theirs), 0).wait();
    if (std::memcmp(theirs.data(), w[i].data(), theirs.size() * sizeof(float)) != 0) {
      std::printf("FAILED: worker %d's MLP tensor %zu differs from worker 0's\n", rank, i);
      ok = false;
    }
  }
  if (ok)
    std::printf("OK: worker %d: loss %.4f -> %.4f; the workers hold the same MLP and rows\n", rank, first, last);
  if (ok && rank == 0)
    std::printf("final parameters: digest %016llx (the MLP, and %zu rows of each table)\n",
                static_cast<unsigned long long>(digest), probe.size());
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_recsys: %s\n", e.what());
  return 1;
}
