// SPDX-License-Identifier: Apache-2.0
#include "status_error.hpp"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace gqla_py {
namespace {

// Raise gqla._errors.make_error(status, message). The module is imported
// lazily (errors are rare) and kept for the process lifetime: a leaked
// reference, because destroying Python objects after interpreter shutdown
// would crash.
void raise_status_error(const status_error& error) {
    static py::object* make_error = nullptr;
    try {
        if (make_error == nullptr) {
            make_error = new py::object(py::module_::import("gqla._errors").attr("make_error"));
        }
        py::object exception = (*make_error)(static_cast<int>(error.status()), error.what());
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
    } catch (py::error_already_set&) {
        // gqla._errors is unavailable (extension imported on its own): still
        // report the failure, as a plain RuntimeError.
        PyErr_Clear();
        PyErr_SetString(PyExc_RuntimeError, error.what());
    }
}

}  // namespace

void register_status_error_translator() {
    py::register_exception_translator([](std::exception_ptr pending) {
        try {
            if (pending) std::rethrow_exception(pending);
        } catch (const status_error& error) {
            raise_status_error(error);
        }
    });
}

}  // namespace gqla_py
