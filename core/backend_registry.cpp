// SPDX-License-Identifier: Apache-2.0
#include "core/backend_registry.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/enum_value.hpp"
#include "core/error.hpp"
#include "core/probe.hpp"

namespace gqla {
namespace {

using CudaEntry = const gqla_backend_vtable* (*)(uint32_t);

struct CudaModule {
    const gqla_backend_vtable* vtable = nullptr;
    std::string why_not;
};

// Any function of ours: dladdr on it names the file the library lives in.
void library_anchor() {}

std::string own_directory() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&library_anchor), &info) == 0 || info.dli_fname == nullptr) return {};
    std::string path = info.dli_fname;
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// A vtable that skips one of the functions every session uses would crash
// later; refuse it here with a message instead.
const char* missing_function(const gqla_backend_vtable* vt) {
    if (!vt->device_count) return "device_count";
    if (!vt->probe) return "probe";
    if (!vt->create) return "create";
    if (!vt->destroy) return "destroy";
    if (!vt->error_message) return "error_message";
    if (!vt->memory_usage) return "memory_usage";
    if (!vt->set_weights) return "set_weights";
    if (!vt->set_expanded) return "set_expanded";
    if (!vt->append) return "append";
    if (!vt->expand) return "expand";
    if (!vt->copy_pages) return "copy_pages";
    if (!vt->decode) return "decode";
    return nullptr;
}

CudaModule load_cuda_module() {
    CudaModule m;
    std::vector<std::string> candidates;
    const char* env = std::getenv("GQLA_CUDA_MODULE");
    if (env != nullptr && *env != '\0') {
        candidates.emplace_back(env);
    } else {
        std::string dir = own_directory();
        if (!dir.empty()) {
            candidates.push_back(dir + "/libgqla_cuda.so.1");
            candidates.push_back(dir + "/libgqla_cuda.so");
        }
        candidates.emplace_back("libgqla_cuda.so.1");
        candidates.emplace_back("libgqla_cuda.so");
    }
    void* handle = nullptr;
    std::string tried;
    for (const std::string& path : candidates) {
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle != nullptr) break;
        const char* err = dlerror();
        tried += "\n  " + path + ": " + (err ? err : "not loadable");
    }
    if (handle == nullptr) {
        m.why_not = "CUDA module not found (tried:" + tried + ")";
        return m;
    }
    auto entry = reinterpret_cast<CudaEntry>(dlsym(handle, GQLA_CUDA_BACKEND_ENTRY));
    if (entry == nullptr) {
        m.why_not = std::string("CUDA module has no entry point ") + GQLA_CUDA_BACKEND_ENTRY;
        return m;  // the handle stays open: modules are never unloaded
    }
    const gqla_backend_vtable* vt = entry(GQLA_BACKEND_ABI_VERSION);
    if (vt == nullptr || vt->abi_version != GQLA_BACKEND_ABI_VERSION) {
        m.why_not = "CUDA module ABI mismatch: core expects backend ABI version " +
                    std::to_string(GQLA_BACKEND_ABI_VERSION) +
                    (vt ? ", module has " + std::to_string(vt->abi_version) : ", module refused it");
        return m;
    }
    if (vt->struct_size < sizeof(gqla_backend_vtable)) {
        m.why_not = "CUDA module ABI mismatch: vtable has " + std::to_string(vt->struct_size) +
                    " bytes, core expects at least " + std::to_string(sizeof(gqla_backend_vtable));
        return m;
    }
    if (const char* missing = missing_function(vt)) {
        m.why_not = std::string("CUDA module vtable lacks ") + missing;
        return m;
    }
    m.vtable = vt;
    return m;
}

const CudaModule& cuda_module() {
    static const CudaModule module = load_cuda_module();  // thread-safe, once
    return module;
}

int32_t cuda_device_count(const gqla_backend_vtable* vt) {
    int32_t count = 0;
    if (vt->device_count(&count) != GQLA_OK || count < 0) return 0;
    return count;
}

const gqla_backend_vtable* cpu_vtable() {
    static const gqla_backend_vtable* vt = [] {
        const gqla_backend_vtable* v = gqla_cpu_backend();
        if (v == nullptr || v->abi_version != GQLA_BACKEND_ABI_VERSION || v->struct_size < sizeof(gqla_backend_vtable))
            return static_cast<const gqla_backend_vtable*>(nullptr);
        return missing_function(v) ? nullptr : v;
    }();
    if (vt == nullptr) fail(GQLA_ERR_INTERNAL, "the built-in CPU backend has an inconsistent vtable");
    return vt;
}

}  // namespace

const gqla_backend_vtable* cuda_backend(std::string* why_not) {
    const CudaModule& m = cuda_module();
    if (m.vtable == nullptr && why_not != nullptr) *why_not = m.why_not;
    return m.vtable;
}

gqla_device_type resolve_device(gqla_device_type requested) {
    const int value = enum_value(requested);
    if (value == GQLA_DEVICE_CPU || value == GQLA_DEVICE_CUDA) return requested;
    if (value != GQLA_DEVICE_AUTO)
        fail(GQLA_ERR_INVALID_ARGUMENT, "device: expected GQLA_DEVICE_AUTO, _CPU or _CUDA (0..2), got %d", value);
    const char* forced = std::getenv("GQLA_DEVICE");
    if (forced != nullptr && *forced != '\0') {
        if (std::strcmp(forced, "cpu") == 0 || std::strcmp(forced, "CPU") == 0) return GQLA_DEVICE_CPU;
        if (std::strcmp(forced, "cuda") == 0 || std::strcmp(forced, "CUDA") == 0) {
            backend_for(GQLA_DEVICE_CUDA, 0);  // throws UNSUPPORTED saying why
            return GQLA_DEVICE_CUDA;
        }
        fail(GQLA_ERR_INVALID_ARGUMENT, "GQLA_DEVICE: expected \"cpu\" or \"cuda\", got \"%s\"", forced);
    }
    const gqla_backend_vtable* cuda = cuda_backend();
    if (cuda != nullptr && cuda_device_count(cuda) > 0) return GQLA_DEVICE_CUDA;
    return GQLA_DEVICE_CPU;
}

const gqla_backend_vtable* backend_for(gqla_device_type device, int32_t index) {
    const int value = enum_value(device);
    if (value == GQLA_DEVICE_CPU) return cpu_vtable();
    if (value != GQLA_DEVICE_CUDA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "device: expected GQLA_DEVICE_CPU or GQLA_DEVICE_CUDA, got %d", value);
    std::string why;
    const gqla_backend_vtable* cuda = cuda_backend(&why);
    if (cuda == nullptr) fail(GQLA_ERR_UNSUPPORTED, "CUDA requested but unavailable: %s", why.c_str());
    int32_t count = cuda_device_count(cuda);
    if (count == 0) fail(GQLA_ERR_UNSUPPORTED, "CUDA requested but unavailable: no GPU visible");
    if (index < 0 || index >= count)
        fail(GQLA_ERR_INVALID_ARGUMENT, "device_index: %d out of range [0, %d) (visible CUDA devices)", index, count);
    return cuda;
}

int32_t visible_device_count(gqla_device_type device) {
    const int value = enum_value(device);
    if (value == GQLA_DEVICE_CPU) return 1;
    if (value != GQLA_DEVICE_CUDA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "device: expected GQLA_DEVICE_CPU or GQLA_DEVICE_CUDA, got %d", value);
    const gqla_backend_vtable* cuda = cuda_backend();
    return cuda ? cuda_device_count(cuda) : 0;
}

gqla_probe_info probe_through_backend(gqla_device_type device, int32_t index, uint32_t flags) {
    gqla_probe_info info{};
    info.struct_size = sizeof(info);
    std::string why;
    gqla_status st = probe_device(device, index, flags, &info, &why);
    if (st != GQLA_OK)
        fail(status_known(st) ? st : GQLA_ERR_BACKEND, "probe failed: %s",
             why.empty() ? status_description(st) : why.c_str());
    info.struct_size = sizeof(info);
    return info;
}

}  // namespace gqla
