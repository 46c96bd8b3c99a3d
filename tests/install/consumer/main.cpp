// Built against an installed byteps through find_package(byteps); see ../CMakeLists.txt.
#include <byteps/core/config.hpp>
#include <byteps/core/dtype.hpp>

#include <cstdio>
#include <exception>

int main() {
  try {
    bps::Config config;
    config.num_workers = 2;
    config.num_servers = 1;
    config.validate();
    if (bps::dtype_size(bps::dtype::float16) != 2) {
      std::fprintf(stderr, "consumer: dtype_size(float16) is %zu, expected 2\n",
                   bps::dtype_size(bps::dtype::float16));
      return 1;
    }
    std::printf("consumer: installed byteps works (Config validated, float16 is 2 bytes)\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
