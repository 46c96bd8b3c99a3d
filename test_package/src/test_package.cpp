// Conan test_package: byteps found through CMakeDeps, as a Conan consumer finds it.
#include <byteps/core/config.hpp>
#include <byteps/core/dtype.hpp>

#include <cstdio>
#include <exception>

int main() {
  try {
    bps::Config config;
    config.validate();
    if (bps::dtype_size(bps::dtype::float16) != 2) {
      std::fprintf(stderr, "test_package: dtype_size(float16) is not 2\n");
      return 1;
    }
    std::printf("test_package: byteps from Conan works\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_package: %s\n", e.what());
    return 1;
  }
}
