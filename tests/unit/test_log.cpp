#include <byteps/core/log.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

// A node's logger: its lines go to a sink when one is set (how the tests check what a server
// logged), with the level filter applied first.

TEST_CASE("logger sends whole lines to its sink above its level", "[log]") {
  bps::logger log(bps::log_level::info, "server 3");
  std::vector<std::string> lines;
  std::vector<bps::log_level> levels;
  log.set_sink([&](bps::log_level l, std::string_view line) {
    levels.push_back(l);
    lines.emplace_back(line);
  });
  log.debug("not shown {}", 1);
  log.info("shown {} of {}", 1, 2);
  log.warn("also shown");
  REQUIRE(lines.size() == 2);
  CHECK(levels == std::vector<bps::log_level>{bps::log_level::info, bps::log_level::warning});
  CHECK(lines[0].ends_with("] INFO server 3: shown 1 of 2\n"));
  CHECK(lines[1].ends_with("] WARNING server 3: also shown\n"));
  // A copy keeps the sink; a renamed logger's lines carry the new name.
  bps::logger copy = log;
  copy.rename("server 4");
  copy.error("from the copy");
  REQUIRE(lines.size() == 3);
  CHECK(lines[2].ends_with("] ERROR server 4: from the copy\n"));
  log.set_sink({});  // back to stderr
  log.info("to stderr");
  CHECK(lines.size() == 3);
}
