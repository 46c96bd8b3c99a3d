// mpi-allreduce: MPI_Allreduce (MPI_SUM) swept over the same sizes and printed in the same
// columns as bps-bench (see common.hpp). Which algorithm and transport Open MPI uses is set on
// the mpirun line; benchmarks/run-emulated.sh forces TCP and the ring algorithm
// (--mca btl self,tcp --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4).
#include <mpi.h>

#include <malloc.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "common.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "mpi-allreduce: MPI_Allreduce sweep, bps-bench's columns.\n\n"
               "Usage: mpirun -np N [mpirun options] mpi-allreduce [options]\n\n"
               "%s"
               "  --keep-malloc      keep glibc's default malloc thresholds (by default large\n"
               "                     blocks are kept instead of being unmapped after each call:\n"
               "                     Open MPI's ring allocates a temporary per call, and page\n"
               "                     faulting it anew each time would slow it about 3x)\n"
               "  --help             print this help\n\n"
               "Example, 2 ranks over TCP on loopback:\n"
               "  mpirun -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca pml ob1 \\\n"
               "      --mca mpi_yield_when_idle 1 mpi-allreduce --max-bytes 64M\n",
               bench::common_help());
}

MPI_Datatype mpi_type(bps::dtype t) {
  switch (t) {
    case bps::dtype::float32: return MPI_FLOAT;
    case bps::dtype::float64: return MPI_DOUBLE;
    case bps::dtype::int8: return MPI_INT8_T;
    case bps::dtype::uint8: return MPI_UINT8_T;
    case bps::dtype::int32: return MPI_INT32_T;
    case bps::dtype::int64: return MPI_INT64_T;
    case bps::dtype::float16:   // no half-precision types in MPI 3.1
    case bps::dtype::bfloat16: break;
  }
  return MPI_DATATYPE_NULL;
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(std::string(what) + ": " + std::string(text, static_cast<std::size_t>(len)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::options opts;
  opts.topo = bench::topology::ring;
  bool keep_malloc = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (bench::parse_common(opts, argc, argv, i)) continue;
      if (a == "--keep-malloc") keep_malloc = true;
      else throw bench::usage_error("unknown flag '" + std::string(a) + "' (see --help)");
    }
    bench::validate(opts);
  } catch (const bench::usage_error& e) {
    if (rank == 0) std::fprintf(stderr, "mpi-allreduce: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  if (!keep_malloc) {
    // Serve large blocks from the heap and keep freed memory, so that a temporary allocated per
    // call reuses pages that are already mapped (as MALLOC_MMAP_THRESHOLD_/TRIM_THRESHOLD_ do).
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  int rc = 0;
  try {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    bench::backend b;
    b.name = "mpi";
    b.rank = rank;
    b.size = size;
    b.supports = [](bps::dtype t) { return mpi_type(t) != MPI_DATATYPE_NULL; };
    b.all_reduce = [&](void* data, std::size_t count, bps::dtype t) {
      if (count > static_cast<std::size_t>(INT32_MAX)) throw std::runtime_error("count exceeds INT_MAX");
      check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(t), MPI_SUM,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
    };
    b.barrier = [] { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); };
    b.sum_doubles = [](std::vector<double>& v) {
      check(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
    };
    if (rank == 0) {
      char version[MPI_MAX_LIBRARY_VERSION_STRING];
      int len = 0;
      MPI_Get_library_version(version, &len);
      std::string v(version, static_cast<std::size_t>(len));
      if (auto nl = v.find('\n'); nl != std::string::npos) v.resize(nl);
      std::fprintf(stderr, "mpi-allreduce: %d ranks, %s\n", size, v.c_str());
    }
    const double wrong = bench::run_sweep(opts, b);
    if (wrong != 0) {
      if (rank == 0) std::fprintf(stderr, "mpi-allreduce: %.0f wrong elements\n", wrong);
      rc = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi-allreduce (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
