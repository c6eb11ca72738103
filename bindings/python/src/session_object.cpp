// SPDX-License-Identifier: Apache-2.0
#include "session_object.hpp"

#include "integer_arg.hpp"
#include "status_error.hpp"
#include "struct_dicts.hpp"
#include "tensor_arg.hpp"

#include <pybind11/numpy.h>

#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace gqla_py {
namespace {

// A list of integers (int64 ids or counts, int32 query counts): a
// contiguous numpy array of exactly that type is used in place, anything
// else iterable is copied (B is small), each item checked by integer_arg.
template <typename T>
class integer_list {
public:
    integer_list(py::handle object, const char* name) {
        if (py::isinstance<py::array_t<T>>(object)) {
            auto array = py::reinterpret_borrow<py::array>(object);
            if (array.ndim() == 1 && (array.flags() & py::array::c_style)) {
                data_ = static_cast<const T*>(array.data());
                size_ = array.shape(0);
                keep_alive_ = std::move(array);
                return;
            }
        }
        if (!py::isinstance<py::sequence>(object) && !py::isinstance<py::array>(object) &&
            !py::hasattr(object, "__iter__")) {
            invalid_argument(std::string(name) + ": expected a sequence of integers");
        }
        for (py::handle item : object) {
            const std::string item_name = std::string(name) + "[" + std::to_string(copy_.size()) + "]";
            copy_.push_back(static_cast<T>(
                integer_arg(item, item_name, std::numeric_limits<T>::min(), std::numeric_limits<T>::max())));
        }
        data_ = copy_.data();
        size_ = static_cast<int64_t>(copy_.size());
    }
    // Never NULL: an empty list is a valid array of zero entries, so the
    // library judges the count (e.g. "batch: expected 1..") rather than a
    // NULL pointer.
    const T* data() const { return data_ != nullptr ? data_ : &none_; }
    int32_t size() const { return static_cast<int32_t>(size_); }

private:
    const T* data_ = nullptr;
    int64_t size_ = 0;
    std::vector<T> copy_;
    py::object keep_alive_;
    static constexpr T none_ = 0;
};

using int64_list = integer_list<int64_t>;
using int32_list = integer_list<int32_t>;

[[noreturn]] void throw_closed() { throw status_error(GQLA_ERR_INVALID_STATE, "session: the session is closed"); }

}  // namespace

template <typename Call>
gqla_status session_object::locked(Call&& call) const {
    std::shared_lock<std::shared_mutex> lock(lifetime_);
    if (handle_ == nullptr) throw_closed();
    return call(handle_);
}

session_object::session_object(const py::dict& config_fields) {
    const gqla_config config = config_from_dict(config_fields);
    gqla_session* handle = nullptr;
    {
        py::gil_scoped_release no_gil;  // may allocate a large pool or start a GPU context
        check(gqla_session_create(&config, &handle));
    }
    gqla_config resolved{};
    resolved.struct_size = sizeof(resolved);
    const gqla_status status = gqla_session_get_config(handle, &resolved);
    if (status != GQLA_OK) {
        const std::string message = gqla_last_error_message();
        gqla_session_destroy(handle);
        throw status_error(status, message);
    }
    handle_ = handle;
    kind_ = resolved.kind;
    device_index_ = resolved.device_index;
}

session_object::~session_object() { gqla_session_destroy(handle_); }

void session_object::close() {
    py::gil_scoped_release no_gil;  // wait for calls in other threads without blocking them
    std::unique_lock<std::shared_mutex> lock(lifetime_);
    gqla_session_destroy(handle_);
    handle_ = nullptr;
}

py::dict session_object::config() const {
    gqla_config resolved{};
    resolved.struct_size = sizeof(resolved);
    check(locked([&](gqla_session* s) { return gqla_session_get_config(s, &resolved); }));
    return config_to_dict(resolved);
}

void session_object::set_weights(py::handle layer_arg, py::handle w_ukv) {
    const int32_t layer = int32_arg(layer_arg, "layer");
    tensor_request request{"w_ukv"};
    request.cuda_device_index = device_index_;
    request.cuda_stream = stream_;
    tensor_arg w(w_ukv, request);
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) { return gqla_set_weights(s, layer, w.get()); }));
}

int64_t session_object::add_sequence() {
    gqla_seq_id id = 0;
    check(locked([&](gqla_session* s) { return gqla_sequence_add(s, &id); }));
    return id;
}

void session_object::release(py::handle seq_arg) {
    const int64_t seq = int64_arg(seq_arg, "seq");
    check(locked([&](gqla_session* s) { return gqla_sequence_release(s, seq); }));
}

int64_t session_object::fork(py::handle parent_arg) {
    const int64_t parent = int64_arg(parent_arg, "seq");
    gqla_seq_id child = 0;
    py::gil_scoped_release no_gil;  // may copy a partial page
    check(locked([&](gqla_session* s) { return gqla_sequence_fork(s, parent, &child); }));
    return child;
}

int64_t session_object::length(py::handle seq_arg, py::handle layer_arg) const {
    const int64_t seq = int64_arg(seq_arg, "seq");
    const int32_t layer = int32_arg(layer_arg, "layer");
    int64_t n = 0;
    check(locked([&](gqla_session* s) { return gqla_sequence_length(s, seq, layer, &n); }));
    return n;
}

void session_object::append(py::handle layer_arg, py::handle seq_arg, py::handle a, py::handle b) {
    const int32_t layer = int32_arg(layer_arg, "layer");
    const int64_t seq = int64_arg(seq_arg, "seq");
    const bool latent = kind_ == GQLA_KIND_GQLA;
    tensor_request ra{latent ? "c" : "k"}, rb{latent ? "kr" : "v"};
    ra.cuda_device_index = rb.cuda_device_index = device_index_;
    ra.cuda_stream = rb.cuda_stream = stream_;
    tensor_arg ta(a, ra), tb(b, rb);
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) { return gqla_append(s, layer, seq, ta.get(), tb.get()); }));
}

void session_object::append_batch(py::handle layer_arg, py::handle seqs, py::handle counts, py::handle a,
                                  py::handle b) {
    const int32_t layer = int32_arg(layer_arg, "layer");
    const bool latent = kind_ == GQLA_KIND_GQLA;
    int64_list ids(seqs, "seqs"), n(counts, "counts");
    if (ids.size() != n.size()) {
        invalid_argument("counts: " + std::to_string(n.size()) + " entries for " + std::to_string(ids.size()) +
                         " sequences");
    }
    tensor_request ra{latent ? "c" : "k"}, rb{latent ? "kr" : "v"};
    ra.cuda_device_index = rb.cuda_device_index = device_index_;
    ra.cuda_stream = rb.cuda_stream = stream_;
    tensor_arg ta(a, ra), tb(b, rb);
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) {
        return gqla_append_batch(s, layer, ids.size(), ids.data(), n.data(), ta.get(), tb.get());
    }));
}

void session_object::decode(py::handle layer_arg, py::handle seqs, py::handle q, py::handle o, py::handle lse) {
    const int32_t layer = int32_arg(layer_arg, "layer");
    int64_list ids(seqs, "seqs");
    tensor_request rq{"q"}, ro{"out"}, rl{"lse"};
    rq.cuda_device_index = ro.cuda_device_index = rl.cuda_device_index = device_index_;
    rq.cuda_stream = ro.cuda_stream = rl.cuda_stream = stream_;
    ro.writable = rl.writable = true;
    tensor_arg tq(q, rq), to(o, ro);
    std::optional<tensor_arg> tl;
    if (!lse.is_none()) tl.emplace(lse, rl);
    gqla_tensor* lse_tensor = tl ? tl->get() : nullptr;
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) {
        return gqla_decode(s, layer, ids.size(), ids.data(), tq.get(), to.get(), lse_tensor);
    }));
}

int session_object::attend(py::handle layer_arg, py::handle seqs, py::handle q, py::handle o, py::handle lse,
                           py::handle q_lens, int path, py::handle indices) {
    gqla_attention_args args{};
    check(gqla_attention_args_default(&args));
    args.layer = int32_arg(layer_arg, "layer");
    int64_list ids(seqs, "seqs");
    std::optional<int32_list> lens;
    if (!q_lens.is_none()) {
        lens.emplace(q_lens, "q_lens");
        // The C call reads one entry per sequence; say so here rather than
        // let it read past a short list.
        if (lens->size() != ids.size()) {
            invalid_argument("q_lens: " + std::to_string(lens->size()) + " entries for " + std::to_string(ids.size()) +
                             " sequences");
        }
    }
    tensor_request rq{"q"}, ro{"out"}, rl{"lse"}, ri{"indices"};
    rq.cuda_device_index = ro.cuda_device_index = rl.cuda_device_index = ri.cuda_device_index = device_index_;
    rq.cuda_stream = ro.cuda_stream = rl.cuda_stream = ri.cuda_stream = stream_;
    ro.writable = rl.writable = true;
    ri.index = true;
    tensor_arg tq(q, rq), to(o, ro);
    std::optional<tensor_arg> tl, ti;
    if (!lse.is_none()) tl.emplace(lse, rl);
    if (!indices.is_none()) ti.emplace(indices, ri);  // sparse attention: passed through as given
    gqla_path taken = GQLA_PATH_AUTO;
    args.batch = ids.size();
    args.seqs = ids.data();
    args.q_lens = lens ? lens->data() : nullptr;
    args.q = tq.get();
    args.o = to.get();
    args.lse = tl ? tl->get() : nullptr;
    args.path = static_cast<gqla_path>(path);
    args.path_taken = &taken;
    args.indices = ti ? ti->get() : nullptr;
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) { return gqla_attention(s, &args); }));
    return static_cast<int>(taken);
}

size_t session_object::export_size(py::handle seq_arg) const {
    const int64_t seq = int64_arg(seq_arg, "seq");
    size_t needed = 0;
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) { return gqla_sequence_export(s, seq, nullptr, 0, &needed); }));
    return needed;
}

namespace {

// A contiguous buffer of the caller's (bytes, bytearray, memoryview, mmap,
// a numpy array), held for as long as this object lives: while it is held,
// the owner cannot resize or free it, so the GIL may be released around
// reads and writes of it.
class held_buffer {
public:
    held_buffer(py::handle object, bool writable, const char* name) {
        const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
            PyErr_Clear();
            invalid_argument(std::string(name) + ": expected a C-contiguous" + (writable ? ", writable" : "") +
                             " buffer (bytes, bytearray, memoryview, a numpy array), got " +
                             py::repr(object).cast<std::string>());
        }
    }
    ~held_buffer() { PyBuffer_Release(&view_); }
    held_buffer(const held_buffer&) = delete;
    held_buffer& operator=(const held_buffer&) = delete;
    void* data() const { return view_.buf; }
    size_t size() const { return static_cast<size_t>(view_.len); }

private:
    Py_buffer view_{};
};

}  // namespace

py::object session_object::export_sequence(py::handle seq_arg, py::handle out) const {
    const int64_t seq = int64_arg(seq_arg, "seq");
    size_t needed = 0;
    if (!out.is_none()) {
        // Into the caller's buffer: one copy of the cache, into memory the
        // caller already owns (a reused staging buffer, a mapped file).
        held_buffer target(out, true, "out");
        {
            // The count is returned as a Python int, which must be built
            // with the GIL held: the release ends before it.
            py::gil_scoped_release no_gil;
            check(locked(
                [&](gqla_session* s) { return gqla_sequence_export(s, seq, target.data(), target.size(), &needed); }));
        }
        return py::int_(needed);
    }
    needed = export_size(seq_arg);
    // Written in place into the new bytes object, which no other code can
    // see yet (so the GIL may be released): the cache is copied once, not
    // into a string first and then again into the bytes.
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(needed));
    if (raw == nullptr) throw py::error_already_set();
    py::bytes bytes = py::reinterpret_steal<py::bytes>(raw);
    char* buffer = PyBytes_AS_STRING(raw);
    {
        py::gil_scoped_release no_gil;  // copies the whole cache of the sequence (a CUDA session waits)
        check(locked([&](gqla_session* s) { return gqla_sequence_export(s, seq, buffer, needed, &needed); }));
    }
    return std::move(bytes);
}

int64_t session_object::import_sequence(py::handle data) {
    held_buffer source(data, false, "data");  // no copy of the caller's buffer
    gqla_seq_id id = 0;
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) { return gqla_sequence_import(s, source.data(), source.size(), &id); }));
    return id;
}

void session_object::select_path(int path) {
    py::gil_scoped_release no_gil;  // may expand the whole cache
    check(locked([&](gqla_session* s) { return gqla_select_path(s, static_cast<gqla_path>(path)); }));
}

py::tuple session_object::get_path() const {
    gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
    check(locked([&](gqla_session* s) { return gqla_get_path(s, &active, &requested); }));
    return py::make_tuple(static_cast<int>(active), static_cast<int>(requested));
}

py::dict session_object::predict_cost(py::handle batch, py::handle context, py::handle s_q) const {
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = int32_arg(batch, "batch");
    w.context = int64_arg(context, "context");
    w.q_len = int32_arg(s_q, "s_q");
    gqla_cost_report report{};
    report.struct_size = sizeof(report);
    check(locked([&](gqla_session* s) { return gqla_session_predict_cost(s, &w, &report); }));
    return cost_report_to_dict(report);
}

py::dict session_object::stats() const {
    gqla_stats stats{};
    stats.struct_size = sizeof(stats);
    check(locked([&](gqla_session* s) { return gqla_session_stats(s, &stats); }));
    return stats_to_dict(stats);
}

void session_object::set_stream(std::intptr_t stream) {
    check(locked([&](gqla_session* s) { return gqla_session_set_stream(s, reinterpret_cast<void*>(stream)); }));
    stream_ = stream;
}

void session_object::synchronize() {
    py::gil_scoped_release no_gil;
    check(locked([&](gqla_session* s) { return gqla_session_synchronize(s); }));
}

}  // namespace gqla_py
