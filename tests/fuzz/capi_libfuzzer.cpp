// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness over the public C ABI. The input is read front to back
// as a config (occasionally with raw, out-of-range fields) followed by a
// sequence of calls: sequence add/release/fork, append and append_batch with
// values taken from the input, decode, path switches, weight uploads, stats,
// cost predictions, and tensor descriptors broken on purpose (dtype, ndim,
// extents, strides, struct_size, device, NULL pointers).
//
// Invariants, any violation aborts (and libFuzzer saves the input):
//   - statuses are gqla_status values and never GQLA_ERR_INTERNAL;
//   - a failed call leaves a non-empty last-error message and the session's
//     stats unchanged;
//   - stats agree with themselves and with the sequences and lengths the
//     accepted calls imply;
//   - decode outputs are finite (every input value is finite).
// ASan/UBSan (the build's sanitizers) catch out-of-bounds reads of the
// caller's buffers and undefined behaviour.
//
// Build and run: see tests/fuzz/README.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "gqla/gqla.h"
#include "tests/fuzz/fuzz_inputs.hpp"

namespace {

// Bytes of the input, front to back; zeros once it is used up.
class Reader {
public:
    Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
    bool empty() const { return p_ >= end_; }
    uint8_t u8() { return empty() ? 0 : *p_++; }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    int32_t i32() { return static_cast<int32_t>(u16() | (static_cast<uint32_t>(u16()) << 16)); }
    int64_t i64() { return static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(i32())) |
                                                (static_cast<uint64_t>(static_cast<uint32_t>(i32())) << 32)); }

private:
    const uint8_t* p_;
    const uint8_t* end_;
};

[[noreturn]] void violated(const char* what, const char* detail = "") {
    std::fprintf(stderr, "capi_libfuzzer: invariant violated: %s %s\n(last error: %s)\n", what, detail,
                 gqla_last_error_message());
    std::abort();
}

gqla_status checked(gqla_status st, const char* call) {
    if (st < GQLA_OK || st > GQLA_ERR_INTERNAL) violated("status out of range from", call);
    if (st == GQLA_ERR_INTERNAL) violated("GQLA_ERR_INTERNAL from", call);
    if (st != GQLA_OK) {
        const char* msg = gqla_last_error_message();
        if (msg == nullptr || msg[0] == '\0') violated("empty error message after a failure of", call);
    }
    return st;
}

// A host tensor built from the input, contiguous unless the input breaks it.
// The buffer always covers every element the final descriptor can address
// with non-negative strides (so an out-of-bounds access is gqla's, not the
// harness's); descriptors too large for that get a small buffer and must be
// refused.
struct InputTensor {
    fuzz::TypedBuffer buf;
    gqla_tensor t;
    const gqla_tensor* ptr = &t;
};

constexpr int64_t kMaxSpan = 1 << 22;

void build_tensor(Reader& in, InputTensor& x, gqla_dtype dtype, const std::vector<int64_t>& shape, bool break_it) {
    std::memset(&x.t, 0, sizeof(x.t));
    x.ptr = &x.t;
    std::vector<int> order;
    for (int d = 0; d + 1 < static_cast<int>(shape.size()); ++d) order.push_back(d);
    int64_t span = 0;
    x.t = fuzz::strided_tensor(dtype, shape, order, std::vector<int64_t>(shape.size(), 0), &span);
    bool null_data = false;
    if (break_it) {
        const uint8_t how = in.u8();
        const int dim = static_cast<int>(in.u8() % GQLA_MAX_DIMS);
        switch (how % 9) {
            case 0: x.t.dtype = static_cast<gqla_dtype>(in.u8() % 5); break;
            case 1: x.t.ndim = static_cast<int32_t>(static_cast<int8_t>(in.u8()) % 8); break;
            case 2: x.t.shape[dim] += static_cast<int8_t>(in.u8()); break;
            case 3: x.t.strides[dim] = static_cast<int8_t>(in.u8()); break;
            // Large but valid strides: the buffer below must still cover them
            // (rows <= 2048, so the span stays under kMaxSpan).
            case 4: x.t.strides[dim] = in.u16() % 1024; break;
            case 5: x.t.struct_size = in.u8(); break;
            case 6: x.t.device = static_cast<gqla_device_type>(in.u8() % 4); break;
            case 7: null_data = true; break;
            default: x.ptr = nullptr; break;
        }
    }
    // Elements the descriptor reaches with its first ndim dims (clamped to the real ones).
    const size_t esz = fuzz::dtype_bytes(dtype);
    int64_t last = 0;
    bool fits = true;
    for (int d = 0; d < GQLA_MAX_DIMS && d < std::max(1, x.t.ndim); ++d) {
        if (x.t.shape[d] <= 0) continue;
        const int64_t stride = x.t.strides[d] < 0 ? 0 : x.t.strides[d];
        if (x.t.shape[d] > kMaxSpan || stride > kMaxSpan) { fits = false; break; }
        last += (x.t.shape[d] - 1) * stride;
        if (last > kMaxSpan) { fits = false; break; }
    }
    // Sized for the widest dtype a broken descriptor may claim.
    const int64_t elems = fits ? last + 1 : 16;
    x.buf = fuzz::TypedBuffer(dtype, static_cast<size_t>(elems * 4 / static_cast<int64_t>(esz) + 1));
    // Values: a generator seeded from two input bytes (the input stays short).
    uint32_t state = in.u16() * 2654435761u + 1u;
    for (size_t i = 0; i < x.buf.size(); ++i) {
        state = state * 1103515245u + 12345u;
        x.buf.set(i, static_cast<int8_t>(state >> 24) * 0.0625);
    }
    x.t.data = null_data ? nullptr : x.buf.data();
}

// Sequence lengths the accepted calls imply.
struct Lengths {
    std::map<gqla_seq_id, std::vector<int64_t>> per_seq;
    int64_t tokens() const {
        int64_t sum = 0;
        for (const auto& kv : per_seq) {
            int64_t m = 0;
            for (int64_t l : kv.second) m = std::max(m, l);
            sum += m;
        }
        return sum;
    }
};

class CallSequence {
public:
    CallSequence(Reader& in, gqla_session* s, const gqla_config& c) : in_(in), s_(s), c_(c) {}

    void run() {
        check_stats(nullptr);
        for (int calls = 0; calls < 48 && !in_.empty(); ++calls) {
            gqla_stats before = stats();
            const bool changed = step();
            check_stats(changed ? nullptr : &before);
        }
    }

private:
    gqla_stats stats() {
        gqla_stats st;
        std::memset(&st, 0, sizeof(st));
        st.struct_size = sizeof(st);
        if (checked(gqla_session_stats(s_, &st), "gqla_session_stats") != GQLA_OK) violated("stats refused");
        return st;
    }

    void check_stats(const gqla_stats* unchanged_from) {
        gqla_stats st = stats();
        if (unchanged_from != nullptr && std::memcmp(&st, unchanged_from, sizeof(st)) != 0)
            violated("a refused call changed the session's stats");
        if (st.pages_used + st.pages_free != st.pages_total) violated("pages_used + pages_free != pages_total");
        if (st.pages_used < 0 || st.pages_free < 0) violated("negative page counts");
        if (st.token_capacity_left != st.pages_free * st.page_size) violated("token_capacity_left");
        if (st.page_size != c_.page_size) violated("page_size");
        if (st.sequences != static_cast<int64_t>(lengths_.per_seq.size())) violated("sequences count");
        if (st.tokens_cached != lengths_.tokens()) violated("tokens_cached");
        // The longest sequence alone holds ceil(longest / page) pages.
        int64_t longest = 0;
        for (const auto& kv : lengths_.per_seq)
            for (int64_t l : kv.second) longest = std::max(longest, l);
        if (st.pages_used * st.page_size < longest) violated("pages_used below the longest sequence's pages");
        if (st.path != GQLA_PATH_GQA && st.path != GQLA_PATH_ABSORB) violated("stats.path");
        for (const auto& kv : lengths_.per_seq)
            for (int32_t l = 0; l < c_.num_layers; ++l) {
                int64_t len = -1;
                if (checked(gqla_sequence_length(s_, kv.first, l, &len), "gqla_sequence_length") != GQLA_OK)
                    violated("sequence_length refused a live sequence");
                if (len != kv.second[static_cast<size_t>(l)]) violated("sequence length differs");
            }
    }

    gqla_seq_id pick_id() {
        const uint8_t b = in_.u8();
        if (b >= 0xf0 || lengths_.per_seq.empty()) return static_cast<gqla_seq_id>(static_cast<int8_t>(in_.u8()));
        auto it = lengths_.per_seq.begin();
        std::advance(it, b % lengths_.per_seq.size());
        return it->first;
    }

    int32_t pick_layer() {
        const uint8_t b = in_.u8();
        return b >= 0xf8 ? static_cast<int32_t>(static_cast<int8_t>(in_.u8())) : b % c_.num_layers;
    }

    bool broken() { return in_.u8() >= 0xe8; }

    std::vector<int64_t> a_shape(int64_t n) const {
        if (c_.kind == GQLA_KIND_GQLA) return {n, c_.latent_dim};
        return {n, c_.num_kv_heads, c_.head_dim};
    }
    std::vector<int64_t> b_shape(int64_t n) const {
        if (c_.kind == GQLA_KIND_GQLA) return {n, c_.rope_dim};
        return {n, c_.num_kv_heads, c_.value_dim};
    }

    // One call; returns whether the session may have changed.
    bool step() {
        switch (in_.u8() % 11) {
            case 0: {
                gqla_seq_id id = 0;
                if (checked(gqla_sequence_add(s_, &id), "gqla_sequence_add") != GQLA_OK) return false;
                lengths_.per_seq[id].assign(static_cast<size_t>(c_.num_layers), 0);
                return true;
            }
            case 1: {
                gqla_seq_id id = pick_id();
                if (checked(gqla_sequence_release(s_, id), "gqla_sequence_release") != GQLA_OK) return false;
                lengths_.per_seq.erase(id);
                return true;
            }
            case 2: {
                gqla_seq_id parent = pick_id(), child = 0;
                if (checked(gqla_sequence_fork(s_, parent, &child), "gqla_sequence_fork") != GQLA_OK) return false;
                lengths_.per_seq[child] = lengths_.per_seq.at(parent);
                return true;
            }
            case 3:
            case 4: return append();
            case 5: return append_batch();
            case 6:
            case 7: return decode();
            case 8: return checked(gqla_select_path(s_, static_cast<gqla_path>(static_cast<int8_t>(in_.u8()) % 4)),
                                   "gqla_select_path") == GQLA_OK;
            case 9: return set_weights();
            default: return cost();
        }
    }

    bool append() {
        const int32_t layer = pick_layer();
        const gqla_seq_id id = pick_id();
        const int64_t n = in_.u8() % 40;
        InputTensor a, b;
        build_tensor(in_, a, c_.io_dtype, a_shape(n), broken());
        build_tensor(in_, b, c_.io_dtype, b_shape(n), broken());
        if (checked(gqla_append(s_, layer, id, a.ptr, b.ptr), "gqla_append") != GQLA_OK) return false;
        lengths_.per_seq.at(id).at(static_cast<size_t>(layer)) += n;
        return true;
    }

    bool append_batch() {
        const int32_t layer = pick_layer();
        const int32_t num = static_cast<int32_t>(in_.u8() % 5);
        std::vector<gqla_seq_id> ids(static_cast<size_t>(num) + 1);
        std::vector<int64_t> counts(static_cast<size_t>(num) + 1);
        int64_t total = 0;
        for (int32_t i = 0; i < num; ++i) {
            ids[static_cast<size_t>(i)] = pick_id();
            counts[static_cast<size_t>(i)] = static_cast<int8_t>(in_.u8()) % 20;
            total += counts[static_cast<size_t>(i)];
        }
        const int64_t rows = total < 0 ? 0 : total;
        InputTensor a, b;
        build_tensor(in_, a, c_.io_dtype, a_shape(rows), broken());
        build_tensor(in_, b, c_.io_dtype, b_shape(rows), broken());
        const gqla_status st = checked(gqla_append_batch(s_, layer, num, ids.data(), counts.data(), a.ptr, b.ptr),
                                       "gqla_append_batch");
        if (st != GQLA_OK) return false;
        for (int32_t i = 0; i < num; ++i)
            lengths_.per_seq.at(ids[static_cast<size_t>(i)]).at(static_cast<size_t>(layer)) +=
                counts[static_cast<size_t>(i)];
        return true;
    }

    bool decode() {
        const int32_t layer = pick_layer();
        const int32_t batch = static_cast<int32_t>(in_.u8() % 6);
        std::vector<gqla_seq_id> ids(static_cast<size_t>(batch) + 1);
        for (auto& id : ids) id = pick_id();
        const int64_t s_q = in_.u8() % 5;
        const int64_t H = c_.num_heads;
        const int64_t Dq = c_.kind == GQLA_KIND_GQLA ? c_.nope_dim + c_.rope_dim : c_.head_dim;
        InputTensor q, o, lse;
        build_tensor(in_, q, c_.io_dtype, {batch, s_q, H, Dq}, broken());
        build_tensor(in_, o, c_.io_dtype, {batch, s_q, H, c_.value_dim}, broken());
        const bool with_lse = in_.u8() & 1;
        build_tensor(in_, lse, GQLA_DTYPE_F32, {batch, s_q, H}, broken());
        const gqla_status st = checked(gqla_decode(s_, layer, batch, ids.data(), q.ptr, const_cast<gqla_tensor*>(o.ptr),
                                                   with_lse ? const_cast<gqla_tensor*>(lse.ptr) : nullptr),
                                       "gqla_decode");
        if (st != GQLA_OK) return false;
        // Every element of the (valid, so contiguous-or-strided) output view is finite.
        for (const InputTensor* x : {&o, with_lse ? &lse : nullptr}) {
            if (x == nullptr) continue;
            int64_t idx[4] = {0, 0, 0, 0};
            const int nd = x->t.ndim;
            int64_t numel = 1;
            for (int d = 0; d < nd; ++d) numel *= x->t.shape[d];
            for (int64_t flat = 0; flat < numel; ++flat) {
                int64_t rem = flat;
                for (int d = nd - 1; d >= 0; --d) {
                    idx[d] = rem % x->t.shape[d];
                    rem /= x->t.shape[d];
                }
                const double v = x->buf.get(static_cast<size_t>(fuzz::element_offset(x->t, idx)));
                if (!std::isfinite(v)) violated("decode output not finite for finite inputs");
            }
        }
        return true;  // AUTO may switch paths on a decode
    }

    bool set_weights() {
        const int32_t layer = pick_layer();
        const int64_t rows = int64_t(c_.num_kv_heads) * (c_.nope_dim + c_.value_dim);
        InputTensor w;
        build_tensor(in_, w, static_cast<gqla_dtype>(1 + in_.u8() % 3), {rows, c_.latent_dim}, broken());
        return checked(gqla_set_weights(s_, layer, w.ptr), "gqla_set_weights") == GQLA_OK;
    }

    bool cost() {
        gqla_workload w{sizeof(gqla_workload), static_cast<int32_t>(static_cast<int8_t>(in_.u8())),
                        static_cast<int64_t>(in_.u16()) - 16, static_cast<int32_t>(static_cast<int8_t>(in_.u8()))};
        if (in_.u8() >= 0xf0) w.struct_size = in_.u8();
        gqla_cost_report rep;
        std::memset(&rep, 0, sizeof(rep));
        rep.struct_size = sizeof(rep);
        if (checked(gqla_session_predict_cost(s_, &w, &rep), "gqla_session_predict_cost") == GQLA_OK) {
            for (const gqla_path_cost* p : {&rep.gqa, &rep.absorb})
                if (!std::isfinite(p->time_s) || p->time_s < 0 || !std::isfinite(p->bytes) || p->bytes < 0)
                    violated("predict_cost: non-finite or negative cost");
            if (rep.chosen != GQLA_PATH_GQA && rep.chosen != GQLA_PATH_ABSORB) violated("predict_cost: chosen path");
        }
        return false;
    }

    Reader& in_;
    gqla_session* s_;
    gqla_config c_;  // resolved
    Lengths lengths_;
};

const int32_t kHeads[] = {1, 2, 3, 4, 6, 8};
const int32_t kDims[] = {1, 3, 8, 16, 17, 32, 64, 72, 96, 128};
const int32_t kLatent[] = {1, 7, 16, 64, 130, 384, 512};

template <class T>
T small_or_negative(T v, T limit) {
    return v > limit ? static_cast<T>(-(v % limit) - 1) : v;
}

gqla_config config_from(Reader& in) {
    gqla_config c;
    gqla_config_default(&c, (in.u8() & 1) ? GQLA_KIND_GQLA : GQLA_KIND_GQA);
    c.num_heads = kHeads[in.u8() % 6];
    std::vector<int32_t> divisors;
    for (int32_t g = 1; g <= c.num_heads; ++g)
        if (c.num_heads % g == 0) divisors.push_back(g);
    c.num_kv_heads = divisors[in.u8() % divisors.size()];
    if (c.kind == GQLA_KIND_GQA) {
        c.head_dim = kDims[in.u8() % 10];
        c.value_dim = in.u8() & 1 ? 0 : kDims[in.u8() % 10];
    } else {
        c.latent_dim = kLatent[in.u8() % 7];
        c.nope_dim = kDims[in.u8() % 10];
        c.rope_dim = kDims[in.u8() % 10];
        c.value_dim = kDims[in.u8() % 10];
    }
    c.num_layers = 1 + in.u8() % 3;
    c.cache_dtype = static_cast<gqla_dtype>(1 + in.u8() % 3);
    c.io_dtype = static_cast<gqla_dtype>(1 + in.u8() % 3);
    c.page_size = 1 + in.u8() % 20;
    c.max_tokens = 1 + in.u16() % 1024;
    c.max_sequences = 1 + in.u8() % 8;
    c.max_batch = 1 + in.u8() % 8;
    c.max_q_len = 1 + in.u8() % 4;
    c.device = GQLA_DEVICE_CPU;
    c.path = static_cast<gqla_path>(in.u8() % 3);
    c.num_threads = 1;
    // Now and then a raw field: validation must refuse it without crashing.
    const uint8_t raw = in.u8();
    if (raw >= 0xe0) {
        switch (raw % 12) {
            // Values that would be valid but large are folded to negatives:
            // a valid huge pool is not what this input is about.
            case 0: c.num_heads = small_or_negative(in.i32(), 4096); break;
            case 1: c.num_kv_heads = small_or_negative(in.i32(), 4096); break;
            case 2: c.head_dim = small_or_negative(in.i32(), 4096); break;
            case 3: c.latent_dim = small_or_negative(in.i32(), 4096); break;
            case 4: c.page_size = small_or_negative(in.i32(), 64); break;
            case 5: c.max_tokens = small_or_negative<int64_t>(in.i64(), 4096); break;
            case 6: c.memory_budget_bytes = small_or_negative<int64_t>(in.i64(), 1 << 20), c.max_tokens = 0; break;
            case 7: c.max_sequences = small_or_negative(in.i32(), 64); break;
            case 8: c.kind = static_cast<gqla_kind>(in.i32()); break;
            case 9: c.cache_dtype = static_cast<gqla_dtype>(in.i32()); break;
            case 10: c.struct_size = static_cast<size_t>(in.u16()); break;
            default: c.max_q_len = in.i32(); break;
        }
    }
    return c;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    setenv("GQLA_PROBE_CALIBRATE", "0", 0);  // spec-sheet numbers: no timing loops per session
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in(data, size);
    gqla_config cfg = config_from(in);
    checked(gqla_config_validate(&cfg), "gqla_config_validate");
    gqla_session* s = nullptr;
    if (checked(gqla_session_create(&cfg, &s), "gqla_session_create") != GQLA_OK) {
        if (s != nullptr) violated("session_create failed but set *out");
        return 0;
    }
    // Resolved: tiny pools only (a raw field may ask for a huge one; skip those inputs' work).
    gqla_config resolved;
    std::memset(&resolved, 0, sizeof(resolved));
    resolved.struct_size = sizeof(resolved);
    checked(gqla_session_get_config(s, &resolved), "gqla_session_get_config");
    if (resolved.kind == GQLA_KIND_GQLA) {
        const uint8_t mask = in.u8();  // which layers get weights up front
        for (int32_t l = 0; l < resolved.num_layers; ++l) {
            if (!(mask & (1u << l))) continue;
            const int64_t rows = int64_t(resolved.num_kv_heads) * (resolved.nope_dim + resolved.value_dim);
            InputTensor w;
            build_tensor(in, w, GQLA_DTYPE_F32, {rows, resolved.latent_dim}, false);
            checked(gqla_set_weights(s, l, w.ptr), "gqla_set_weights");
        }
    }
    if (resolved.max_tokens <= 4096 && resolved.max_sequences <= 64) CallSequence(in, s, resolved).run();
    gqla_session_destroy(s);
    return 0;
}
