// SPDX-License-Identifier: Apache-2.0
// gqla._gqla: the extension module. It binds the C ABI (gqla/gqla.h) and
// nothing else; the public API with docstrings, string enums and output
// allocation is the pure-Python package around it (gqla/__init__.py).
#include <gqla/gqla.h>

#include "session_object.hpp"
#include "integer_arg.hpp"
#include "status_error.hpp"
#include "struct_dicts.hpp"
#include "tensor_arg.hpp"

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;
using gqla_py::check;
using gqla_py::session_object;

namespace {

py::dict config_defaults(int kind) {
    gqla_config config{};
    check(gqla_config_default(&config, static_cast<gqla_kind>(kind)));
    return gqla_py::config_to_dict(config);
}

void validate_config(const py::dict& fields) {
    const gqla_config config = gqla_py::config_from_dict(fields);
    check(gqla_config_validate(&config));
}

py::dict probe(int device, int32_t index, bool calibrate) {
    gqla_probe_info info{};
    info.struct_size = sizeof(info);
    {
        py::gil_scoped_release no_gil;  // calibration measures for up to a few hundred ms
        check(gqla_probe(static_cast<gqla_device_type>(device), index, calibrate ? GQLA_PROBE_CALIBRATE : 0u, &info));
    }
    return gqla_py::probe_to_dict(info);
}

int32_t device_count(int device) {
    int32_t count = 0;
    check(gqla_device_count(static_cast<gqla_device_type>(device), &count));
    return count;
}

py::dict predict_cost(const py::dict& config_fields, py::object probe_fields, py::handle batch, py::handle context,
                      py::handle s_q) {
    const gqla_config config = gqla_py::config_from_dict(config_fields);
    gqla_probe_info probe_info{};
    const bool have_probe = !probe_fields.is_none();
    if (have_probe) probe_info = gqla_py::probe_from_dict(probe_fields.cast<py::dict>());
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = gqla_py::int32_arg(batch, "batch");
    w.context = gqla_py::int64_arg(context, "context");
    w.q_len = gqla_py::int32_arg(s_q, "s_q");
    gqla_cost_report report{};
    report.struct_size = sizeof(report);
    check(gqla_predict_cost(&config, have_probe ? &probe_info : nullptr, &w, &report));
    return gqla_py::cost_report_to_dict(report);
}

// gqla_merge_attention_states over lists of array objects (host memory).
void merge_attention_states(const py::sequence& outputs, const py::sequence& lses, py::handle out, py::handle out_lse) {
    if (py::len(outputs) != py::len(lses))
        throw gqla_py::status_error(GQLA_ERR_INVALID_ARGUMENT,
                                    "merge_attention_states: outputs and lses differ in length (" +
                                        std::to_string(py::len(outputs)) + " and " + std::to_string(py::len(lses)) +
                                        ")");
    std::vector<std::unique_ptr<gqla_py::tensor_arg>> keep;
    std::vector<gqla_tensor> parts, part_lses;
    std::vector<std::string> names;
    names.reserve(2 * py::len(outputs));
    for (size_t i = 0; i < py::len(outputs); ++i) {
        names.push_back("outputs[" + std::to_string(i) + "]");
        keep.push_back(
            std::make_unique<gqla_py::tensor_arg>(outputs[i], gqla_py::tensor_request{names.back().c_str()}));
        parts.push_back(*keep.back()->get());
        names.push_back("lses[" + std::to_string(i) + "]");
        keep.push_back(std::make_unique<gqla_py::tensor_arg>(lses[i], gqla_py::tensor_request{names.back().c_str()}));
        part_lses.push_back(*keep.back()->get());
    }
    gqla_py::tensor_request ro{"out"}, rl{"out_lse"};
    ro.writable = rl.writable = true;
    gqla_py::tensor_arg to(out, ro);
    std::optional<gqla_py::tensor_arg> tl;
    if (!out_lse.is_none()) tl.emplace(out_lse, rl);
    gqla_tensor* lse_tensor = tl ? tl->get() : nullptr;
    py::gil_scoped_release no_gil;
    check(gqla_merge_attention_states(static_cast<int32_t>(parts.size()), parts.data(), part_lses.data(), to.get(),
                                      lse_tensor));
}

}  // namespace

PYBIND11_MODULE(_gqla, m) {
    m.doc() = "Low-level binding of the gqla C ABI; use the `gqla` package instead.";
    gqla_py::register_status_error_translator();

    m.attr("ABI_VERSION") = GQLA_VERSION;  // the header this module was compiled against
    m.def("version", &gqla_version, "Runtime library version, major*10000 + minor*100 + patch.");
    m.def("version_string", &gqla_version_string, "Runtime library version as 'major.minor.patch'.");
    m.def(
        "status_string", [](int status) { return gqla_status_string(static_cast<gqla_status>(status)); },
        "Static English name of a status code.");
    m.def(
        "isa_name",
        [](uint64_t flag) -> py::object {
            const char* name = gqla_isa_name(flag);
            return name ? py::object(py::str(name)) : py::object(py::none());
        },
        py::arg("flag"), "gqla_isa_name: the name of one GQLA_ISA_* bit, or None.");
    m.def("config_defaults", &config_defaults, py::arg("kind"), "gqla_config_default(kind) as a dict.");
    m.def("validate_config", &validate_config, py::arg("config"), "gqla_config_validate on a config dict.");
    m.def("probe", &probe, py::arg("device"), py::arg("index"), py::arg("calibrate"), "gqla_probe as a dict.");
    m.def("device_count", &device_count, py::arg("device"), "gqla_device_count.");
    m.def("predict_cost", &predict_cost, py::arg("config"), py::arg("probe"), py::arg("batch"), py::arg("context"),
          py::arg("s_q"), "gqla_predict_cost for a config dict.");
    m.def("describe_tensor", &gqla_py::describe_tensor, py::arg("tensor"), py::arg("writable") = false,
          "The gqla_tensor descriptor the binding builds for an array object (no copy is made).");

    m.def("merge_attention_states", &merge_attention_states, py::arg("outputs"), py::arg("lses"), py::arg("out"),
          py::arg("out_lse").none(true), "gqla_merge_attention_states.");

    py::class_<session_object>(m, "Session", "A gqla_session*; see gqla.Session.")
        .def(py::init<const py::dict&>(), py::arg("config"))
        .def("close", &session_object::close)
        .def_property_readonly("closed", &session_object::closed)
        .def("config", &session_object::config)
        .def("set_weights", &session_object::set_weights, py::arg("layer"), py::arg("w_ukv"))
        .def("add_sequence", &session_object::add_sequence)
        .def("release", &session_object::release, py::arg("seq"))
        .def("fork", &session_object::fork, py::arg("seq"))
        .def("length", &session_object::length, py::arg("seq"), py::arg("layer"))
        .def("append", &session_object::append, py::arg("layer"), py::arg("seq"), py::arg("a"), py::arg("b"))
        .def("append_batch", &session_object::append_batch, py::arg("layer"), py::arg("seqs"), py::arg("counts"),
             py::arg("a"), py::arg("b"))
        .def("decode", &session_object::decode, py::arg("layer"), py::arg("seqs"), py::arg("q"), py::arg("out"),
             py::arg("lse").none(true))
        .def("attend", &session_object::attend, py::arg("layer"), py::arg("seqs"), py::arg("q"), py::arg("out"),
             py::arg("lse").none(true), py::arg("q_lens").none(true), py::arg("path"),
             py::arg("indices").none(true) = py::none())
        .def("select_path", &session_object::select_path, py::arg("path"))
        .def("get_path", &session_object::get_path)
        .def("export_size", &session_object::export_size, py::arg("seq"))
        .def("export_sequence", &session_object::export_sequence, py::arg("seq"), py::arg("out") = py::none())
        .def("import_sequence", &session_object::import_sequence, py::arg("data"))
        .def("predict_cost", &session_object::predict_cost, py::arg("batch"), py::arg("context"), py::arg("s_q"))
        .def("stats", &session_object::stats)
        .def("set_stream", &session_object::set_stream, py::arg("stream"))
        .def_property_readonly("stream", &session_object::stream)
        .def("synchronize", &session_object::synchronize);
}
