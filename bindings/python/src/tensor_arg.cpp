// SPDX-License-Identifier: Apache-2.0
#include "tensor_arg.hpp"

#include "dlpack_compat.hpp"
#include "status_error.hpp"

#include <pybind11/numpy.h>

#include <string>
#include <utility>

namespace py = pybind11;

namespace gqla_py {
namespace {

std::string describe_shape(int ndim, const int64_t* shape) {
    std::string s = "(";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (ndim == 1 ? ",)" : ")");
}

// Row-major strides of t's shape; an empty dimension counts as one so that
// no stride is 0 (the C ABI wants every stride >= 1).
void set_compact_strides(gqla_tensor& t) {
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
        t.strides[i] = stride;
        stride *= t.shape[i] > 1 ? t.shape[i] : 1;
    }
}

// Refuses strides under which two indices address one element: outputs would
// be written twice (and the C ABI refuses them too). The dimensions, taken
// from the smallest stride up, must each step past what the smaller ones
// reach. Strides are known >= 1 here.
void check_disjoint(const gqla_tensor& t, const char* name) {
    int order[GQLA_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t.ndim; ++i)
        if (t.shape[i] > 1) order[n++] = i;
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && t.strides[order[j]] < t.strides[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
    int64_t reach = 0;  // largest offset of the dimensions with smaller strides
    for (int k = 0; k < n; ++k) {
        const int i = order[k];
        if (t.strides[i] <= reach) {
            invalid_argument(std::string(name) + ": strides overlap: dimension " + std::to_string(i) + " steps " +
                             std::to_string(t.strides[i]) + " elements, within the " + std::to_string(reach + 1) +
                             " the dimensions with smaller strides span, so two "
                             "indices address one element (shape " +
                             describe_shape(t.ndim, t.shape) +
                             "); expected non-overlapping strides (a contiguous array works)");
        }
        reach += (t.shape[i] - 1) * t.strides[i];
    }
}

// Checks the stride rules of the C ABI and normalizes strides of extent-1
// dimensions (never used to address memory, but frameworks fill them with
// arbitrary values, e.g. 0 after broadcasting) and of empty arrays (numpy
// gives those all-zero strides).
void finish_layout(gqla_tensor& t, const char* name) {
    if (t.ndim < 1 || t.ndim > GQLA_MAX_DIMS) {
        invalid_argument(std::string(name) + ": " + std::to_string(t.ndim) + " dimensions; gqla takes 1.." +
                         std::to_string(GQLA_MAX_DIMS));
    }
    for (int i = 0; i < t.ndim; ++i) {
        if (t.shape[i] == 0) {  // no element is addressed: any strides do
            set_compact_strides(t);
            return;
        }
    }
    int64_t span = 1;  // elements covered by the dimensions inside the current one
    for (int i = t.ndim - 1; i >= 0; --i) {
        if (t.shape[i] == 1) {
            t.strides[i] = span;
            continue;
        }
        if (i == t.ndim - 1 && t.strides[i] != 1 && t.shape[i] > 1) {
            invalid_argument(std::string(name) +
                             ": the innermost dimension must be contiguous "
                             "(stride 1 element), got stride " +
                             std::to_string(t.strides[i]) + " for shape " + describe_shape(t.ndim, t.shape) +
                             "; pass a view with unit inner stride or a contiguous copy");
        }
        if (t.strides[i] < 0) {
            invalid_argument(std::string(name) + ": negative stride " + std::to_string(t.strides[i]) +
                             " in dimension " + std::to_string(i) + " is not supported; pass a contiguous copy");
        }
        if (t.strides[i] == 0 && t.shape[i] > 1) {
            invalid_argument(std::string(name) + ": zero stride (broadcast) in dimension " + std::to_string(i) +
                             " is not supported; materialize the array first");
        }
        const int64_t extent = t.strides[i] * t.shape[i];
        if (extent > span) span = extent;
    }
    check_disjoint(t, name);
}

// Numpy can hold either byte order; the library reads native values only.
// Reading a swapped array would give garbage, so it is refused (converting
// would break the promise that arrays are used in place, never copied).
void require_native_byte_order(const py::dtype& dtype, const char* name) {
    if (dtype.attr("isnative").cast<bool>()) return;
    invalid_argument(std::string(name) + ": numpy dtype " + py::str(dtype.attr("str")).cast<std::string>() +
                     " has non-native byte order; expected native byte order (convert with "
                     "array.astype(array.dtype.newbyteorder('=')))");
}

// io dtypes: float32, float16, and bfloat16 given either as raw uint16 bits or
// as a bfloat16 dtype of ml_dtypes-like libraries; int32 only for index
// tensors (index: attend's indices), which take nothing else.
gqla_dtype numpy_dtype(const py::array& array, const char* name, bool index) {
    const py::dtype dtype = array.dtype();
    const char kind = dtype.kind();
    const auto size = dtype.itemsize();
    if (index) {
        if (kind == 'i' && size == 4) return GQLA_DTYPE_I32;
        invalid_argument(std::string(name) + ": numpy dtype " +
                         py::str(static_cast<const py::handle&>(dtype)).cast<std::string>() +
                         " is not supported; use int32");
    }
    if (kind == 'f' && size == 4) return GQLA_DTYPE_F32;
    if (kind == 'f' && size == 2) return GQLA_DTYPE_F16;
    if (kind == 'u' && size == 2) return GQLA_DTYPE_BF16;
    if (size == 2 && py::str(dtype.attr("name")).cast<std::string>() == "bfloat16") return GQLA_DTYPE_BF16;
    invalid_argument(std::string(name) + ": numpy dtype " +
                     py::str(static_cast<const py::handle&>(dtype)).cast<std::string>() +
                     " is not supported; use float32, float16, or bfloat16 (as uint16 bits or "
                     "ml_dtypes.bfloat16)");
}

gqla_dtype dlpack_dtype(DLDataType dtype, const char* name, bool index) {
    if (index) {
        if (dtype.lanes == 1 && dtype.code == kDLInt && dtype.bits == 32) return GQLA_DTYPE_I32;
        invalid_argument(std::string(name) + ": DLPack dtype (code " + std::to_string(dtype.code) + ", bits " +
                         std::to_string(dtype.bits) + ", lanes " + std::to_string(dtype.lanes) +
                         ") is not supported; use int32");
    }
    if (dtype.lanes == 1 && dtype.code == kDLFloat && dtype.bits == 32) return GQLA_DTYPE_F32;
    if (dtype.lanes == 1 && dtype.code == kDLFloat && dtype.bits == 16) return GQLA_DTYPE_F16;
    if (dtype.lanes == 1 && dtype.code == kDLBfloat && dtype.bits == 16) return GQLA_DTYPE_BF16;
    invalid_argument(std::string(name) + ": DLPack dtype (code " + std::to_string(dtype.code) + ", bits " +
                     std::to_string(dtype.bits) + ", lanes " + std::to_string(dtype.lanes) +
                     ") is not supported; use float32, float16 or bfloat16");
}

gqla_dtype typestr_dtype(const std::string& typestr, const char* name, bool index) {
    const char native = py::module_::import("sys").attr("byteorder").cast<std::string>() == "little" ? '<' : '>';
    if (typestr.size() == 3 && typestr[0] != native && typestr[0] != '|') {
        invalid_argument(std::string(name) + ": __cuda_array_interface__ typestr '" + typestr +
                         "' has non-native byte order; expected native byte order ('" + native + "')");
    }
    const std::string code = typestr.size() == 3 ? typestr.substr(1) : typestr;
    if (index) {
        if (code == "i4") return GQLA_DTYPE_I32;
        invalid_argument(std::string(name) + ": __cuda_array_interface__ typestr '" + typestr +
                         "' is not supported; use <i4");
    }
    if (code == "f4") return GQLA_DTYPE_F32;
    if (code == "f2") return GQLA_DTYPE_F16;
    if (code == "u2") return GQLA_DTYPE_BF16;
    invalid_argument(std::string(name) + ": __cuda_array_interface__ typestr '" + typestr +
                     "' is not supported; use <f4, <f2 or <u2 (bfloat16 bits)");
}

int64_t bytes_to_elements(int64_t bytes, int64_t itemsize, const char* name) {
    if (bytes % itemsize != 0) {
        invalid_argument(std::string(name) + ": stride of " + std::to_string(bytes) +
                         " bytes is not a multiple of the element size " + std::to_string(itemsize));
    }
    return bytes / itemsize;
}

int64_t dtype_size(gqla_dtype dtype) { return dtype == GQLA_DTYPE_F32 || dtype == GQLA_DTYPE_I32 ? 4 : 2; }

}  // namespace

tensor_arg::tensor_arg(py::handle object, const tensor_request& request) {
    tensor_.struct_size = sizeof(gqla_tensor);
    if (py::isinstance<py::array>(object)) {
        from_numpy(object, request);
    } else if (py::hasattr(object, "__dlpack__")) {
        from_dlpack(object, request);
    } else if (py::hasattr(object, "__cuda_array_interface__")) {
        from_cuda_array_interface(object, request);
    } else if (py::hasattr(object, "__array_interface__") || py::hasattr(object, "__array_struct__")) {
        // A host buffer that numpy can view without copying.
        from_numpy(py::module_::import("numpy").attr("asarray")(object), request);
    } else {
        invalid_argument(std::string(request.name) +
                         ": expected a numpy array or an object with "
                         "__dlpack__ or __cuda_array_interface__, got " +
                         py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>());
    }
    finish_layout(tensor_, request.name);
}

tensor_arg::dlpack_owner::~dlpack_owner() {
    // The producer's deleter releases its reference (e.g. a torch tensor).
    if (legacy != nullptr) {
        auto* managed = static_cast<DLManagedTensor*>(legacy);
        if (managed->deleter != nullptr) managed->deleter(managed);
    }
    if (versioned != nullptr) {
        auto* managed = static_cast<dlpack_versioned_tensor*>(versioned);
        if (managed->deleter != nullptr) managed->deleter(managed);
    }
}

void tensor_arg::from_numpy(py::handle object, const tensor_request& request) {
    auto array = py::reinterpret_borrow<py::array>(object);
    if (request.writable && !array.writeable()) {
        invalid_argument(std::string(request.name) + ": the array is read-only");
    }
    require_native_byte_order(array.dtype(), request.name);
    tensor_.dtype = numpy_dtype(array, request.name, request.index);
    tensor_.device = GQLA_DEVICE_CPU;
    tensor_.ndim = static_cast<int32_t>(array.ndim());
    if (tensor_.ndim < 1 || tensor_.ndim > GQLA_MAX_DIMS) finish_layout(tensor_, request.name);
    const int64_t itemsize = dtype_size(tensor_.dtype);
    for (int i = 0; i < tensor_.ndim; ++i) {
        tensor_.shape[i] = array.shape(i);
        tensor_.strides[i] = tensor_.shape[i] == 1 ? 1 : bytes_to_elements(array.strides(i), itemsize, request.name);
    }
    tensor_.data = const_cast<void*>(array.data());
    keep_alive_ = std::move(array);
}

void tensor_arg::from_dlpack(py::handle object, const tensor_request& request) {
    py::object capsule;
    bool pass_stream = false;
    if (request.cuda_stream != 0) {
        // Only CUDA producers take a stream; asking is one extra call, made
        // only when the session works on a non-default stream.
        const auto device = object.attr("__dlpack_device__")().cast<py::tuple>();
        const int type = device[0].cast<int>();
        pass_stream = type == kDLCUDA || type == kDLCUDAManaged;
    }
    capsule =
        pass_stream ? object.attr("__dlpack__")(py::arg("stream") = request.cuda_stream) : object.attr("__dlpack__")();

    PyObject* raw = capsule.ptr();
    DLTensor* dl = nullptr;
    if (PyCapsule_IsValid(raw, "dltensor")) {
        auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(raw, "dltensor"));
        // Renaming marks the capsule consumed: its destructor then leaves the
        // tensor to us, and we call the deleter once the C call is done.
        PyCapsule_SetName(raw, "used_dltensor");
        dlpack_.legacy = managed;
        dl = &managed->dl_tensor;
    } else if (PyCapsule_IsValid(raw, "dltensor_versioned")) {
        auto* managed = static_cast<dlpack_versioned_tensor*>(PyCapsule_GetPointer(raw, "dltensor_versioned"));
        PyCapsule_SetName(raw, "used_dltensor_versioned");
        dlpack_.versioned = managed;
        if (managed->version.major != 1) {
            invalid_argument(std::string(request.name) + ": DLPack major version " +
                             std::to_string(managed->version.major) + " is not supported");
        }
        if (request.writable && (managed->flags & dlpack_flag_read_only)) {
            invalid_argument(std::string(request.name) + ": the tensor is read-only");
        }
        dl = &managed->dl_tensor;
    } else {
        invalid_argument(std::string(request.name) + ": __dlpack__() did not return a DLPack capsule");
    }

    switch (dl->device.device_type) {
        case kDLCPU:
        case kDLCUDAHost:  // pinned host memory: addressable by the CPU
            tensor_.device = GQLA_DEVICE_CPU;
            break;
        case kDLCUDA:
        case kDLCUDAManaged:
            tensor_.device = GQLA_DEVICE_CUDA;
            tensor_.device_index = dl->device.device_id;
            break;
        default:
            invalid_argument(std::string(request.name) + ": DLPack device type " +
                             std::to_string(dl->device.device_type) + " is not supported (CPU or CUDA)");
    }
    tensor_.dtype = dlpack_dtype(dl->dtype, request.name, request.index);
    tensor_.ndim = dl->ndim;
    if (tensor_.ndim < 1 || tensor_.ndim > GQLA_MAX_DIMS) finish_layout(tensor_, request.name);
    for (int i = 0; i < tensor_.ndim; ++i) tensor_.shape[i] = dl->shape[i];
    if (dl->strides == nullptr) {
        set_compact_strides(tensor_);  // NULL strides mean compact row-major
    } else {
        for (int i = 0; i < tensor_.ndim; ++i) tensor_.strides[i] = dl->strides[i];
    }
    tensor_.data = static_cast<char*>(dl->data) + dl->byte_offset;
    keep_alive_ = std::move(capsule);
}

void tensor_arg::from_cuda_array_interface(py::handle object, const tensor_request& request) {
    const auto info = object.attr("__cuda_array_interface__").cast<py::dict>();
    if (info.contains("mask") && !info["mask"].is_none()) {
        invalid_argument(std::string(request.name) + ": masked arrays are not supported");
    }
    const auto data = info["data"].cast<py::tuple>();
    if (request.writable && data[1].cast<bool>()) {
        invalid_argument(std::string(request.name) + ": the array is read-only");
    }
    tensor_.data = reinterpret_cast<void*>(data[0].cast<std::uintptr_t>());
    tensor_.device = GQLA_DEVICE_CUDA;
    tensor_.device_index = request.cuda_device_index;
    tensor_.dtype = typestr_dtype(info["typestr"].cast<std::string>(), request.name, request.index);
    const auto shape = info["shape"].cast<py::tuple>();
    tensor_.ndim = static_cast<int32_t>(shape.size());
    if (tensor_.ndim < 1 || tensor_.ndim > GQLA_MAX_DIMS) finish_layout(tensor_, request.name);
    for (int i = 0; i < tensor_.ndim; ++i) tensor_.shape[i] = shape[i].cast<int64_t>();
    const py::object strides = info.contains("strides") ? py::object(info["strides"]) : py::none();
    if (strides.is_none()) {
        set_compact_strides(tensor_);
    } else {
        const auto byte_strides = strides.cast<py::tuple>();
        const int64_t itemsize = dtype_size(tensor_.dtype);
        for (int i = 0; i < tensor_.ndim; ++i) {
            tensor_.strides[i] = bytes_to_elements(byte_strides[i].cast<int64_t>(), itemsize, request.name);
        }
    }
    keep_alive_ = py::reinterpret_borrow<py::object>(object);
}

py::dict describe_tensor(py::handle object, bool writable) {
    tensor_request request{"tensor"};
    request.writable = writable;
    tensor_arg arg(object, request);
    const gqla_tensor& t = *arg.get();
    py::list shape, strides;
    for (int i = 0; i < t.ndim; ++i) {
        shape.append(t.shape[i]);
        strides.append(t.strides[i]);
    }
    py::dict d;
    d["data"] = reinterpret_cast<std::uintptr_t>(t.data);
    d["dtype"] = static_cast<int>(t.dtype);
    d["device"] = static_cast<int>(t.device);
    d["device_index"] = t.device_index;
    d["shape"] = py::tuple(shape);
    d["strides"] = py::tuple(strides);
    return d;
}

}  // namespace gqla_py
