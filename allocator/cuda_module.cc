#include "allocator/cuda_module.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

// The installed library folder relative to the installed tools' folder ("../lib"), from CMake.
#ifndef DYNVM_CUDA_MODULE_INSTALL_RELDIR
#define DYNVM_CUDA_MODULE_INSTALL_RELDIR "../lib"
#endif

namespace dynvm {
namespace {

namespace fs = std::filesystem;

// The folder of the object (executable or shared library) this code is linked into.
fs::path LoaderDirectory() {
  Dl_info info{};
  link_map* map = nullptr;
  std::error_code ec;
  if (dladdr1(reinterpret_cast<void*>(&CudaModuleCandidates), &info, reinterpret_cast<void**>(&map),
              RTLD_DL_LINKMAP) != 0 &&
      map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
    fs::path p = fs::weakly_canonical(map->l_name, ec);
    if (!ec) return p.parent_path();
  }
  // The main program (its link-map name is empty): the executable's own path.
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path();
}

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

std::vector<std::string> CudaModuleCandidates() {
  if (const char* env = std::getenv(kCudaModuleEnvVar); env != nullptr && env[0] != '\0') {
    return {env};
  }
  std::vector<std::string> out;
  const fs::path dir = LoaderDirectory();
  if (dir.empty()) return out;
  for (const fs::path& d : {dir, dir / DYNVM_CUDA_MODULE_INSTALL_RELDIR, dir / ".." / "lib",
                            dir / ".." / ".." / "lib"}) {
    std::string p = (d / kCudaModuleFileName).lexically_normal().string();
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<CudaModule> LoadCudaModuleFrom(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "the CUDA module ", path, " could not be loaded: ", DlError(),
        " (it needs the CUDA runtime and cuBLAS libraries of the toolkit it was built with: "
        "install them or add their folder to LD_LIBRARY_PATH)"));
  }
  using AbiFn = uint32_t (*)();
  using ApiFn = const CudaModuleApi* (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(handle, kCudaModuleAbiSymbol));
  auto api = reinterpret_cast<ApiFn>(dlsym(handle, kCudaModuleApiSymbol));
  if (abi == nullptr || api == nullptr) {
    dlclose(handle);
    return absl::UnavailableError(
        absl::StrCat("the CUDA module ", path, " is not a dynvm CUDA module (it has no ",
                     kCudaModuleAbiSymbol, " or ", kCudaModuleApiSymbol, ")"));
  }
  const uint32_t version = abi();
  if (version != kCudaModuleAbiVersion) {
    dlclose(handle);
    return absl::UnavailableError(
        absl::StrCat("the CUDA module ", path, " has ABI version ", version,
                     ", but this dynvm needs ABI version ", kCudaModuleAbiVersion,
                     ": use the module built with this dynvm (the same build or install)"));
  }
  const CudaModuleApi* table = api();
  if (table == nullptr) {
    return absl::UnavailableError(absl::StrCat("the CUDA module ", path, " returned no API table"));
  }
  return CudaModule{path, table};
}

absl::StatusOr<const CudaModule*> LoadCudaModule() {
#if defined(DYNVM_WITH_CUDA)
  // Loaded once, on first use: never at process start, never on the CPU path.
  static const absl::StatusOr<const CudaModule*>* const loaded =
      []() -> absl::StatusOr<const CudaModule*>* {
    const std::vector<std::string> candidates = CudaModuleCandidates();
    for (const std::string& path : candidates) {
      if (access(path.c_str(), F_OK) != 0) continue;
      absl::StatusOr<CudaModule> m = LoadCudaModuleFrom(path);
      if (!m.ok()) return new absl::StatusOr<const CudaModule*>(m.status());
      return new absl::StatusOr<const CudaModule*>(new CudaModule(*std::move(m)));
    }
    const char* env = std::getenv(kCudaModuleEnvVar);
    const bool from_env = env != nullptr && env[0] != '\0';
    return new absl::StatusOr<const CudaModule*>(absl::UnavailableError(absl::StrCat(
        "the CUDA module ", kCudaModuleFileName, " was not found (looked for ",
        candidates.empty() ? std::string("it nowhere: the program's folder is unknown")
                           : absl::StrJoin(candidates, ", "),
        from_env ? absl::StrCat(", as ", kCudaModuleEnvVar, " says") : std::string(),
        "); it is built with -DDYNVM_WITH_CUDA=ON into <build>/lib and installed next to the "
        "dynvm libraries; set ",
        kCudaModuleEnvVar, " to its path to use another")));
  }();
  return *loaded;
#else
  return absl::UnimplementedError(
      "this build has no CUDA device support (configure with -DDYNVM_WITH_CUDA=ON)");
#endif
}

}  // namespace dynvm
