#!/usr/bin/env python3
"""Checks conanfile.py without Conan (which this project's machines do not have): the recipe is
loaded against a small stand-in for the parts of Conan 2's API that it uses, and what it tells
Conan is compared with the installed CMake package (cmake/byteps-config.cmake.in, cmake/*.cmake):
the same targets, each with the same dependencies, for every combination of the recipe's options.
It also applies Conan's own rule that each direct requirement is used by some component.

What it cannot check is Conan itself: resolving the requirements from ConanCenter, CMakeDeps's
generated files, and building test_package. `conan create . -s compiler.cppstd=20` does that.

    python3 tests/install/check_conanfile.py [REPOSITORY_ROOT]
"""

import importlib.util
import itertools
import re
import sys
import types
from pathlib import Path


class ConanException(Exception):
    pass


class ConanInvalidConfiguration(ConanException):
    pass


class _Info:
    """cpp_info or one of its components: what package_info() may set."""

    def __init__(self):
        self.properties = {}
        self.requires, self.defines, self.system_libs, self.libs = [], [], [], []
        self.bindirs, self.libdirs = ["bin"], ["lib"]
        self.components = {}

    def set_property(self, name, value):
        self.properties[name] = value


class _Components(dict):
    def __missing__(self, name):
        self[name] = _Info()
        return self[name]


class _Settings:
    def __init__(self, **values):
        self.__dict__.update(values)

    def get_safe(self, name):
        return self.__dict__.get(name.replace("compiler.", "compiler_"))


class ConanFile:
    def __init__(self, root, os_name, options):
        self.recipe_folder = str(root)
        self.version = None
        self.settings = _Settings(os=os_name, compiler_cppstd="20")
        self.options = types.SimpleNamespace(**options)
        self.cpp_info = _Info()
        self.cpp_info.components = _Components()
        self.required = []

    def requires(self, ref, **traits):
        self.required.append(ref)


def _install_stand_in():
    """The modules conanfile.py imports, as far as it uses them."""
    def module(name, **members):
        m = types.ModuleType(name)
        m.__dict__.update(members)
        sys.modules[name] = m
        return m

    module("conan", ConanFile=ConanFile)
    module("conan.errors", ConanException=ConanException,
           ConanInvalidConfiguration=ConanInvalidConfiguration)
    module("conan.tools")
    module("conan.tools.build", check_min_cppstd=lambda conanfile, version: None)
    module("conan.tools.files", copy=lambda *a, **k: None,
           load=lambda conanfile, path: Path(path).read_text())
    module("conan.tools.layout", basic_layout=lambda conanfile: None)
    module("conan.tools.cmake", CMake=object, CMakeDeps=object, CMakeToolchain=object)


def _cmake_components(root):
    """The CMake package's components and their targets' link libraries, from cmake/."""
    config = (root / "cmake" / "byteps-config.cmake.in").read_text()
    known = re.search(r"known components: ([a-z, ]+);", config).group(1).split(", ")
    links = {}
    for comp in known:
        if comp == "tcp":  # part of byteps::byteps
            continue
        text = (root / "cmake" / f"{comp}.cmake").read_text()
        links[comp] = re.search(
            rf"target_link_libraries\(byteps_{comp} (?:INTERFACE|PUBLIC) ([^)]*)\)",
            text).group(1).split()
    return known, links


# What each CMake imported target is called in Conan (ConanCenter's component names; the CUDA
# toolkit and NCCL are no Conan packages and are linked by library name).
CONAN_NAME = {
    "byteps": "byteps",
    "OpenSSL::SSL": "openssl::ssl",
    "RdmaCore::rdmacm": "rdma-core::librdmacm",
    "RdmaCore::ibverbs": "rdma-core::libibverbs",
    "CUDA::cudart": "cudart",
    "NCCL::nccl": "nccl",
    "torch": ["torch", "torch_cpu", "c10"],  # Torch's imported target: libtorch, libtorch_cpu, libc10
}


def _conan_names(target):
    name = CONAN_NAME[target]
    return name if isinstance(name, list) else [name]


def check(root):
    _install_stand_in()
    spec = importlib.util.spec_from_file_location("byteps_conanfile", root / "conanfile.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    known, cmake_links = _cmake_components(root)
    version = re.search(r"project\(\s*byteps\s+VERSION\s+([0-9.]+)",
                        (root / "CMakeLists.txt").read_text()).group(1)
    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f"{what}: {got!r}, expected {want!r}")

    for with_rdma, with_cuda, compiled, with_torch in itertools.product([False, True], repeat=4):
        where = (f"with_rdma={with_rdma} with_cuda={with_cuda} compiled={compiled} "
                 f"with_torch={with_torch}")
        c = recipe.BytepsConan(root, "Linux", {"with_rdma": with_rdma, "with_cuda": with_cuda,
                                               "compiled": compiled, "with_torch": with_torch})
        c.set_version()
        expect("version", c.version, version)
        c.requirements()
        c.validate()
        c.package_info()
        comps = c.cpp_info.components
        expect(f"{where}: root file name", c.cpp_info.properties.get("cmake_file_name"), "byteps")
        want = (["byteps", "tls"] + (["rdma"] if with_rdma else []) +
                (["cuda"] if with_cuda else []) + (["compiled"] if compiled else []) +
                (["torch"] if with_torch else []))
        expect(f"{where}: components", sorted(comps), sorted(want))
        for name, comp in comps.items():
            expect(f"{where}: {name}'s target", comp.properties.get("cmake_target_name"),
                   f"byteps::{name}")
            # Only the compiled component has a library (libbyteps.a in lib/).
            expect(f"{where}: {name}'s dirs", (comp.bindirs, comp.libdirs),
                   ([], ["lib"] if name == "compiled" else []))
        if compiled:
            expect(f"{where}: compiled's library and define",
                   (comps["compiled"].libs, comps["compiled"].defines),
                   (["byteps"], ["BYTEPS_COMPILED"]))
        core = comps["byteps"]
        expect(f"{where}: byteps requires", core.requires,
               ["asio::asio", "fmt::fmt", "openssl::crypto"])
        expect(f"{where}: byteps defines", core.defines, ["ASIO_NO_DEPRECATED"])
        expect(f"{where}: byteps system libs", core.system_libs, ["pthread"])
        # Each component links what its CMake target links.
        for name in want[1:]:
            comp = comps[name]
            expect(f"{where}: {name} links", sorted(comp.requires + comp.system_libs),
                   sorted(n for t in cmake_links[name] for n in _conan_names(t)))
        # Conan's rule: each direct requirement is used by some component, and each component
        # names only requirements and components that exist.
        required = {ref.split("/")[0] for ref in c.required}
        used = {r.split("::")[0] for comp in comps.values() for r in comp.requires if "::" in r}
        expect(f"{where}: requirements used by no component", sorted(required - used), [])
        expect(f"{where}: components naming no requirement", sorted(used - required), [])
        for comp in comps.values():
            for r in comp.requires:
                if "::" not in r and r not in comps:
                    failures.append(f"{where}: a component requires an unknown component {r!r}")
        expect(f"{where}: rdma-core required", "rdma-core" in required, with_rdma)
    # Every component of the CMake package but tcp (inside byteps::byteps) is a Conan component.
    expect("CMake components without a Conan one",
           sorted(set(known) - {"tcp"} - {"tls", "rdma", "cuda", "compiled", "torch"}), [])
    try:
        recipe.BytepsConan(root, "Windows", {"with_rdma": True, "with_cuda": False,
                                             "compiled": False, "with_torch": False}).validate()
        failures.append("with_rdma on Windows was not refused")
    except ConanInvalidConfiguration:
        pass
    return failures


if __name__ == "__main__":
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    problems = check(repo)
    for p in problems:
        print("check_conanfile:", p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print("check_conanfile: conanfile.py declares the CMake package's components "
          "(byteps, tls, rdma, cuda, compiled, torch) with the same dependencies, for every option "
          "combination")
