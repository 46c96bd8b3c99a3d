"""Conan 2 recipe for byteps, a header-only C++20 library.

    conan create . -s compiler.cppstd=20 --build=missing

Consumers then write, with the CMakeDeps and CMakeToolchain generators:

    find_package(byteps CONFIG REQUIRED)
    target_link_libraries(app PRIVATE byteps::byteps)

package_info() below describes the package to Conan's generators; the CMake package that
`cmake --install` produces (cmake/byteps-config.cmake.in, cmake/Findasio.cmake) is not used.
"""

import os
import re

from conan import ConanFile
from conan.errors import ConanException
from conan.tools.build import check_min_cppstd
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
    exports_sources = "include/*", "cmake/*", "CMakeLists.txt", "LICENSE*"
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
        # libcrypto: the job token's challenge-response (rendezvous/auth.hpp), near Debian 12's 3.0.
        self.requires("openssl/3.0.13", transitive_headers=True)

    def package_id(self):
        # Headers only: one package serves every os, arch, compiler and build type.
        self.info.clear()

    def validate(self):
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 20)

    def package(self):
        copy(self, "LICENSE*", src=self.source_folder,
             dst=os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "byteps")
        self.cpp_info.set_property("cmake_target_name", "byteps::byteps")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        # The TCP transport (the CMake component "tcp") is part of the one target, as in the
        # installed CMake package; CMakeDeps accepts find_package(... COMPONENTS tcp).
        self.cpp_info.requires = ["asio::asio", "fmt::fmt", "openssl::crypto"]
        # As in the CMake build (cmake/Findasio.cmake); ASIO_STANDALONE comes from Conan's asio.
        self.cpp_info.defines = ["ASIO_NO_DEPRECATED"]
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
