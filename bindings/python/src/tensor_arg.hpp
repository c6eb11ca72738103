// SPDX-License-Identifier: Apache-2.0
// Describing a Python array object as a gqla_tensor without copying it.
//
// Accepted: numpy arrays (and objects exposing __array_interface__), objects
// with __dlpack__ (torch, CuPy, JAX, ...) and objects with
// __cuda_array_interface__ (Numba, older CuPy). The data pointer and strides
// are passed through as they are, so a view into a larger buffer works; the C
// library needs the innermost stride to be 1 and non-negative outer strides,
// and anything else is rejected here with an error naming the argument.
#pragma once

#include <gqla/gqla.h>

#include <pybind11/pybind11.h>

#include <cstdint>

namespace gqla_py {

struct tensor_request {
    const char* name;               // argument name used in error messages
    bool writable = false;          // outputs: read-only views are rejected
    bool index = false;             // an index tensor (int32 only) instead of an io tensor
    int32_t cuda_device_index = 0;  // for __cuda_array_interface__ (it names no device)
    // CUDA stream the consumer will use, for __dlpack__(stream=...) of CUDA
    // tensors; 0 = the session has no stream set, so call __dlpack__() plainly.
    std::intptr_t cuda_stream = 0;
};

// Owns whatever keeps the described memory alive until the C call returns:
// a reference to the array, or a consumed DLPack tensor whose deleter runs in
// the destructor. Construct and destroy it with the GIL held.
class tensor_arg {
public:
    tensor_arg(pybind11::handle object, const tensor_request& request);
    tensor_arg(const tensor_arg&) = delete;
    tensor_arg& operator=(const tensor_arg&) = delete;

    gqla_tensor* get() { return &tensor_; }

private:
    void from_numpy(pybind11::handle array, const tensor_request& request);
    void from_dlpack(pybind11::handle object, const tensor_request& request);
    void from_cuda_array_interface(pybind11::handle object, const tensor_request& request);

    // Calls the deleter of a consumed DLPack tensor. A member of its own so
    // that it also runs when the constructor throws after consuming.
    struct dlpack_owner {
        void* legacy = nullptr;     // DLManagedTensor*
        void* versioned = nullptr;  // DLManagedTensorVersioned*
        dlpack_owner() = default;
        dlpack_owner(const dlpack_owner&) = delete;
        dlpack_owner& operator=(const dlpack_owner&) = delete;
        ~dlpack_owner();
    };

    gqla_tensor tensor_{};
    pybind11::object keep_alive_;
    dlpack_owner dlpack_;
};

// Diagnostic: the descriptor the binding would pass for `object`, as a dict
// (data pointer, dtype, device, shape, strides in elements).
pybind11::dict describe_tensor(pybind11::handle object, bool writable);

}  // namespace gqla_py
