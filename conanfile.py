"""Conan 2 recipe for byteps, a header-only C++20 library with an optional compiled mode.

    conan create . -s compiler.cppstd=20 --build=missing

Consumers then write, with the CMakeDeps and CMakeToolchain generators:

    find_package(byteps CONFIG REQUIRED)
    target_link_libraries(app PRIVATE byteps::byteps)   # byteps::tls for transport/tls/tls.hpp,
                                                        # byteps::rdma for transport/rdma/rdma.hpp,
                                                        # byteps::cuda for local/nccl.hpp

package_info() below describes the package to Conan's generators; the CMake package that
`cmake --install` produces (cmake/byteps-config.cmake.in, cmake/Findasio.cmake) is not used.
Its targets are the CMake package's, one Conan component each (cmake/tls.cmake, rdma.cmake,
cuda.cmake): byteps::byteps (asio, fmt, libcrypto), byteps::tls (adds libssl), byteps::rdma
(adds rdma-core's libibverbs and librdmacm; option with_rdma) and byteps::cuda (adds the CUDA
runtime and NCCL, which are no Conan packages: linked by name from the consumer's system;
option with_cuda). With the option compiled, the package also builds and ships the library of
compiled mode, byteps::compiled (cmake/compiled.cmake: the shipped policies' Communicator,
Server and SchedulerNode, and BYTEPS_COMPILED for its users); the package then depends on the
settings. tests/install/check_conanfile.py checks this description without Conan.
"""

import os
import re

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class BytepsConan(ConanFile):
    name = "byteps"
    description = ("BytePS-style gradient exchange (push_pull) through summation servers "
                   "over TCP, header-only C++20")
    topics = ("distributed-training", "parameter-server", "allreduce", "asio", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    # The components that need more than asio, fmt and OpenSSL, as the CMake build's
    # BYTEPS_WITH_RDMA and BYTEPS_WITH_CUDA; off by default, as those libraries are not everywhere.
    # compiled: also build byteps::compiled (compiled mode), as the CMake build's
    # BYTEPS_BUILD_COMPILED; off by default, so the package stays headers only.
    # with_torch: the libtorch plugin's component, byteps::torch (cmake/torch.cmake); libtorch is
    # no ConanCenter package that matches Debian's, so it is linked by name from the system.
    options = {"with_rdma": [True, False], "with_cuda": [True, False], "compiled": [True, False],
               "with_torch": [True, False]}
    default_options = {"with_rdma": False, "with_cuda": False, "compiled": False,
                       "with_torch": False}
    exports_sources = "include/*", "src/*", "cmake/*", "CMakeLists.txt", "LICENSE*"
    no_copy_source = True

    def set_version(self):
        # One source of truth: project(byteps VERSION x.y.z) in CMakeLists.txt.
        if self.version:
            return
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(\s*byteps\s+VERSION\s+([0-9]+(?:\.[0-9]+)*)", text)
        if not match:
            raise ConanException("byteps: no 'project(byteps VERSION ...)' in CMakeLists.txt")
        self.version = match.group(1)

    def layout(self):
        basic_layout(self)

    def requirements(self):
        # Versions near Debian 12's libasio-dev 1.22.1 and libfmt-dev 9.1.0. The public
        # headers include both, so their headers must reach byteps' consumers.
        self.requires("asio/1.28.1", transitive_headers=True)
        self.requires("fmt/9.1.0", transitive_headers=True)
        # libcrypto: the job token's challenge-response (rendezvous/auth.hpp), near Debian 12's 3.0;
        # libssl: the tls component (transport/tls/tls.hpp).
        self.requires("openssl/3.0.13", transitive_headers=True)
        if self.options.with_rdma:
            # transport/rdma/rdma.hpp includes infiniband/verbs.h and rdma/rdma_cma.h.
            self.requires("rdma-core/48.0", transitive_headers=True)

    def configure(self):
        if self.options.compiled:
            self.package_type = "static-library"

    def package_id(self):
        # Headers only: one package serves every os, arch, compiler and build type. The
        # compiled library depends on all of them.
        if not self.info.options.compiled:
            self.info.clear()

    def generate(self):
        if self.options.compiled:
            tc = CMakeToolchain(self)
            tc.cache_variables["BYTEPS_BUILD_COMPILED"] = True
            for off in ("BYTEPS_BUILD_TESTS", "BYTEPS_BUILD_EXAMPLES", "BYTEPS_BUILD_TOOLS"):
                tc.cache_variables[off] = False
            tc.cache_variables["BYTEPS_WITH_CUDA"] = "OFF"
            tc.cache_variables["BYTEPS_WITH_RDMA"] = "OFF"
            tc.cache_variables["BYTEPS_WITH_TORCH"] = "OFF"
            tc.generate()
            CMakeDeps(self).generate()

    def build(self):
        if self.options.compiled:
            cmake = CMake(self)
            cmake.configure()
            cmake.build(target="byteps_compiled")

    def validate(self):
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 20)
        if self.options.with_rdma and self.settings.os != "Linux":
            raise ConanInvalidConfiguration("byteps: with_rdma needs rdma-core, which is Linux only")

    def package(self):
        copy(self, "LICENSE*", src=self.source_folder,
             dst=os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"))
        if self.options.compiled:
            copy(self, "libbyteps.a", src=self.build_folder,
                 dst=os.path.join(self.package_folder, "lib"), keep_path=False)

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "byteps")
        # Conan's aggregate of every component; the CMake package has no such target, and users
        # link the components' targets below, as they do the installed CMake package's.
        self.cpp_info.set_property("cmake_target_name", "byteps::all")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []

        # byteps::byteps: everything but the transports and collectives named below. The TCP
        # transport (the CMake component "tcp") is part of it, as in the installed CMake package;
        # CMakeDeps accepts find_package(... COMPONENTS tcp).
        core = self._component("byteps")
        core.requires = ["asio::asio", "fmt::fmt", "openssl::crypto"]
        # As in the CMake build (cmake/Findasio.cmake); ASIO_STANDALONE comes from Conan's asio.
        core.defines = ["ASIO_NO_DEPRECATED"]
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs = ["pthread"]

        # byteps::compiled: the library of compiled mode (cmake/compiled.cmake).
        if self.options.compiled:
            compiled = self._component("compiled")
            compiled.requires = ["byteps"]
            compiled.defines = ["BYTEPS_COMPILED"]
            compiled.libs = ["byteps"]
            compiled.libdirs = ["lib"]
        # byteps::tls: bps::transport::tls<tcp>, over OpenSSL's libssl (cmake/tls.cmake).
        self._component("tls").requires = ["byteps", "openssl::ssl"]
        # byteps::rdma: bps::transport::rdma, over rdma-core (cmake/rdma.cmake).
        if self.options.with_rdma:
            self._component("rdma").requires = ["byteps", "rdma-core::librdmacm",
                                                "rdma-core::libibverbs"]
        # byteps::cuda: bps::local::nccl (cmake/cuda.cmake). The CUDA toolkit and NCCL are not
        # Conan packages: their libraries are linked by name and must be on the linker's path
        # (for example LIBRARY_PATH=/usr/local/cuda/lib64), their headers on the include path.
        if self.options.with_cuda:
            cuda = self._component("cuda")
            cuda.requires = ["byteps"]
            cuda.system_libs = ["cudart", "nccl"]

        # byteps::torch: the libtorch plugin (cmake/torch.cmake), headers over libtorch and c10,
        # which must be on the linker's path and their headers on the include path (Debian's
        # libtorch-dev puts both where the compiler looks, plus
        # /usr/include/torch/csrc/api/include for the C++ frontend).
        if self.options.with_torch:
            torch = self._component("torch")
            torch.requires = ["byteps"]
            torch.system_libs = ["torch", "torch_cpu", "c10"]

    def _component(self, name):
        c = self.cpp_info.components[name]
        c.set_property("cmake_target_name", f"byteps::{name}")
        c.bindirs = []
        c.libdirs = []
        return c
