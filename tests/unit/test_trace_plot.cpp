#include <catch2/catch.hpp>
#include <string>

#include "trace/plot.hpp"

// byteps-trace plot's gnuplot script (tools/trace/plot.hpp). gnuplot draws text in its
// enhanced mode unless told otherwise, where "local_reduce" shows as "local" followed by a
// lowered "reduce": the script must ask for names as written.

TEST_CASE("byteps-trace plot: stage and lane names are drawn as written, not as subscripts",
          "[trace]") {
  const std::string script = bps::trace_tool::gnuplot_script(
      {"job.png", "job.png.dat", 1600, 2, 12.5, "\"worker 0: local_reduce\" 2, \"server 0\" 1"});
  CHECK(script.rfind("set terminal png noenhanced size 1600,", 0) == 0);
  CHECK(script.find("title 'local_reduce'") != std::string::npos);
  CHECK(script.find("title 'local_gather'") != std::string::npos);
  CHECK(script.find("set ytics (\"worker 0: local_reduce\" 2, \"server 0\" 1)") !=
        std::string::npos);
  CHECK(script.find("set output 'job.png'") != std::string::npos);
  CHECK(script.find("plot 'job.png.dat' using") != std::string::npos);
}
