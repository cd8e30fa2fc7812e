// Ask a real libMIOpen where it reads its databases: tests/integration/test_real_miopen.py.
//
// usage: miopen_paths LIBRARY
// dlopens LIBRARY (the path a process maps: a symlink is followed by the loader, as in torch) and
// prints one "key=value" line per answer, from MIOpen's own functions (exported C++ symbols of a
// release build of MIOpen 2.17; a symbol that is missing prints "key!" instead):
//   version         miopenGetVersion
//   system_db       miopen::GetSystemDbPath()          the system database dir (perf db, find db, kdb)
//   user_db         miopen::GetUserDbPath()            the user database dir
//   user_db_suffix  miopen::GetUserDbSuffix()          what user database names carry
//   user_cache      miopen::GetCachePath(false)        the user kernel cache (creates it, as MIOpen does)
//   system_cache    miopen::GetCachePath(true)         the dir the system kernel db (.kdb) is read from
// No GPU is needed: none of these touches a device.
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <string>

namespace {

// boost::filesystem::path of boost 1.74 holds one std::string; it has a destructor, so it is
// returned through a hidden pointer, as this stand-in is.
struct BoostPath {
    std::string text;
    ~BoostPath() {}
};

using StrFn = std::string (*)();
using RefFn = const std::string& (*)();
using PathFn = BoostPath (*)(bool);
using VersionFn = int (*)(std::size_t*, std::size_t*, std::size_t*);

void *sym(void *lib, const char *name, const char *key) {
    void *f = dlsym(lib, name);
    if (f == nullptr) std::printf("%s!\n", key);
    return f;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        std::fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    if (auto f = reinterpret_cast<VersionFn>(sym(lib, "miopenGetVersion", "version"))) {
        std::size_t major = 0, minor = 0, patch = 0;
        f(&major, &minor, &patch);
        std::printf("version=%zu.%zu.%zu\n", major, minor, patch);
    }
    if (auto f = reinterpret_cast<StrFn>(sym(lib, "_ZN6miopen15GetSystemDbPathB5cxx11Ev", "system_db")))
        std::printf("system_db=%s\n", f().c_str());
    if (auto f = reinterpret_cast<RefFn>(sym(lib, "_ZN6miopen13GetUserDbPathB5cxx11Ev", "user_db")))
        std::printf("user_db=%s\n", f().c_str());
    if (auto f = reinterpret_cast<StrFn>(sym(lib, "_ZN6miopen15GetUserDbSuffixB5cxx11Ev", "user_db_suffix")))
        std::printf("user_db_suffix=%s\n", f().c_str());
    if (auto f = reinterpret_cast<PathFn>(sym(lib, "_ZN6miopen12GetCachePathEb", "user_cache"))) {
        std::printf("user_cache=%s\n", f(false).text.c_str());
        std::printf("system_cache=%s\n", f(true).text.c_str());
    }
    return 0;
}
