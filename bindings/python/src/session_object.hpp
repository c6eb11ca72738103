// SPDX-License-Identifier: Apache-2.0
// The extension's Session: a gqla_session* plus what the Python layer needs
// around it (closing, the CUDA stream used for DLPack hand-over, GIL
// release). Argument policy (output allocation, framework streams) lives in
// the Python layer; this class stays a thin, fast shell over the C ABI.
#pragma once

#include <gqla/gqla.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <shared_mutex>

namespace gqla_py {

class session_object {
public:
    explicit session_object(const pybind11::dict& config);
    ~session_object();
    session_object(const session_object&) = delete;
    session_object& operator=(const session_object&) = delete;

    void close();
    bool closed() const { return handle_ == nullptr; }

    pybind11::dict config() const;
    // Integer arguments arrive as Python objects: gqla_py::integer_arg turns
    // bools and out-of-range values into gqla.InvalidArgument.
    void set_weights(pybind11::handle layer, pybind11::handle w_ukv);
    int64_t add_sequence();
    void release(pybind11::handle seq);
    int64_t fork(pybind11::handle parent);
    int64_t length(pybind11::handle seq, pybind11::handle layer) const;
    void append(pybind11::handle layer, pybind11::handle seq, pybind11::handle a, pybind11::handle b);
    void append_batch(pybind11::handle layer, pybind11::handle seqs, pybind11::handle counts, pybind11::handle a,
                      pybind11::handle b);
    void decode(pybind11::handle layer, pybind11::handle seqs, pybind11::handle q, pybind11::handle o,
                pybind11::handle lse);
    // gqla_attention; q_lens None = uniform queries. Returns the path taken.
    int attend(pybind11::handle layer, pybind11::handle seqs, pybind11::handle q, pybind11::handle o,
               pybind11::handle lse, pybind11::handle q_lens, int path, pybind11::handle indices);
    void select_path(int path);
    pybind11::tuple get_path() const;
    size_t export_size(pybind11::handle seq) const;
    pybind11::object export_sequence(pybind11::handle seq, pybind11::handle out) const;
    int64_t import_sequence(pybind11::handle data);
    pybind11::dict predict_cost(pybind11::handle batch, pybind11::handle context, pybind11::handle s_q) const;
    pybind11::dict stats() const;
    void set_stream(std::intptr_t stream);
    std::intptr_t stream() const { return stream_; }
    void synchronize();

private:
    // Calls take the lock shared and close() takes it exclusive, so a session
    // is never destroyed under a call running with the GIL released. The C
    // library serializes the calls themselves.
    template <typename Call>
    gqla_status locked(Call&& call) const;

    gqla_session* handle_ = nullptr;
    gqla_kind kind_ = GQLA_KIND_GQA;
    int32_t device_index_ = 0;
    std::intptr_t stream_ = 0;
    mutable std::shared_mutex lifetime_;
};

}  // namespace gqla_py
