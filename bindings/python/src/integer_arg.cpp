// SPDX-License-Identifier: Apache-2.0
#include "integer_arg.hpp"

#include "status_error.hpp"

namespace py = pybind11;

namespace gqla_py {
namespace {

std::string range_text(int64_t lo, int64_t hi) {
    if (lo == INT32_MIN && hi == INT32_MAX) return "an int32";
    if (lo == INT64_MIN && hi == INT64_MAX) return "an int64";
    return "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
}

// numpy.bool_ has __index__ (deprecated), so it is recognized by type name.
bool is_bool(py::handle value) {
    if (PyBool_Check(value.ptr())) return true;
    const std::string type = py::str(py::type::handle_of(value).attr("__name__"));
    return type == "bool_" ||
           (type == "bool" && py::type::handle_of(value).attr("__module__").cast<std::string>() == "numpy");
}

[[noreturn]] void refuse(py::handle value, const std::string& name, int64_t lo, int64_t hi, const char* why) {
    invalid_argument(name + ": expected " + range_text(lo, hi) + ", got " + why + py::repr(value).cast<std::string>());
}

}  // namespace

int64_t integer_arg(py::handle value, const std::string& name, int64_t lo, int64_t hi) {
    py::object index;
    if (PyLong_CheckExact(value.ptr())) {
        index = py::reinterpret_borrow<py::object>(value);  // the common case: a plain int
    } else {
        if (is_bool(value)) refuse(value, name, lo, hi, "the bool ");
        PyObject* converted = PyNumber_Index(value.ptr());
        if (converted == nullptr) {
            PyErr_Clear();
            refuse(value, name, lo, hi, "");
        }
        index = py::reinterpret_steal<py::object>(converted);
    }
    int overflow = 0;
    const long long result = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (result == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        refuse(value, name, lo, hi, "");
    }
    if (overflow != 0 || result < lo || result > hi) refuse(value, name, lo, hi, "");
    return static_cast<int64_t>(result);
}

}  // namespace gqla_py
