// SPDX-License-Identifier: Apache-2.0
// One fuzzed session: each step() makes a random call (valid or not) on a
// live gqla session, keeps the shadow model in step with what gqla accepted,
// and compares the session with it afterwards. The members are defined by
// purpose in session_fuzz_*.cpp:
//   checks       stepping, and comparing the session with the shadow model
//   arguments    random ids, layers, tensors in random layouts, tensor flaws
//   sequences    sequence_add, sequence_release, sequence_fork
//   append       append and append_batch
//   decode       decode
//   attention    gqla_attention: ragged q_lens, per-call paths, sparse indices
//   outputs      the outputs of an accepted decode or attention call against
//                the float64 reference of each form it may have run on
//   sequence_io  sequence_export (byte for byte) and sequence_import
//   settings     select_path and set_weights
//   queries      getters, cost predictions and NULL-pointer calls
#pragma once

#include <cstdint>
#include <vector>

#include "gqla/gqla.h"
#include "tests/fuzz/fuzz_inputs.hpp"
#include "tests/fuzz/fuzz_run.hpp"
#include "tests/fuzz/shadow_session.hpp"

namespace fuzz {

// Tensor mistakes a caller can make; each must be refused with INVALID_ARGUMENT.
enum class Flaw { None, Dtype, Ndim, Extent, InnerStride, Null, StructSize, Device, Negative, Overlap, DataNull };

class SessionFuzz {
public:
    // `resolved` is the session's config as gqla_session_get_config returns it.
    SessionFuzz(Random& r, gqla_session* s, const gqla_config& resolved);

    // One random call, then the comparison with the shadow model.
    void step();

private:
    // ---- checks (session_fuzz_checks.cpp)

    gqla_stats stats();
    void verify(bool accepted, const gqla_stats* before);

    // ---- choosing ids and layers (session_fuzz_arguments.cpp)

    gqla_seq_id unknown_id();
    // A batch for decode and attention: mostly sequences holding tokens in
    // `layer`, sometimes an unknown or repeated id (expected in e).
    std::vector<gqla_seq_id> pick_batch(int32_t layer, bool layer_valid, Expect& e);
    // What decode and attention both draw first: a layer (INVALID_STATE
    // expected when a GQLA layer has no weights) and its batch.
    struct CallTarget {
        int32_t layer;
        bool layer_valid;
        std::vector<gqla_seq_id> ids;
    };
    CallTarget pick_call(Expect& e);
    gqla_seq_id some_id(Expect& e);  // a live id, or (rarely, or when none) an unknown one
    int32_t some_layer(Expect& e);
    static bool layer_ok(int32_t layer, int32_t layers) { return layer >= 0 && layer < layers; }

    // ---- tensors (session_fuzz_arguments.cpp)

    // A host tensor of `shape` in a random layout: the buffer is poisoned
    // (NaN; I32: INT32_MIN) everywhere, then, with `fill`, the view's
    // elements get fresh normal numbers of deviation sd rounded to the
    // dtype, read back into `stored`.
    struct Tensor {
        TypedBuffer buf;
        gqla_tensor t;
        std::vector<double> stored;  // row-major view values as the dtype holds them
        std::vector<char> in_view;   // per buffer element
    };

    Tensor make_tensor(gqla_dtype dtype, const std::vector<int64_t>& shape, double sd, bool fill);
    // Read the view back row-major.
    static std::vector<double> read_view(const Tensor& x);
    // Write `values` (row-major, one per view element) into the view.
    static void write_view(Tensor& x, const std::vector<double>& values);
    Flaw maybe_flaw(double p);
    // Apply a flaw to a tensor descriptor (the pointer may become NULL).
    // Returns false when the flaw cannot apply to this tensor (it stays valid).
    bool apply_flaw(Flaw f, gqla_tensor& t, const gqla_tensor** ptr, gqla_dtype expected_dtype, bool any_dtype);

    // ---- operations (each returns whether gqla accepted the call)

    // session_fuzz_sequences.cpp
    bool op_add();
    bool op_release();
    bool op_fork();

    // session_fuzz_append.cpp
    int64_t random_rows();
    bool op_append();
    bool op_append_batch();
    std::vector<int64_t> a_shape(int64_t n) const;
    std::vector<int64_t> b_shape(int64_t n) const;

    // session_fuzz_decode.cpp
    bool op_decode();

    // session_fuzz_attention.cpp
    bool op_attention();
    // Index lists [n, topk] for the n queries of a sequence of `length`
    // tokens: visible positions, page boundaries, repeats, -1, the causal
    // tail, positions outside [0, length); empty_row (when >= 0) lists
    // nothing visible.
    std::vector<int32_t> index_lists(int64_t length, int32_t n, int32_t topk, int32_t empty_row);

    // session_fuzz_outputs.cpp
    // An accepted decode or attention call, as check_outputs compares it.
    struct CallCheck {
        const char* call = "decode";
        int32_t layer = 0;
        std::vector<gqla_seq_id> ids;
        std::vector<int32_t> q_lens;  // per sequence; q/o/lse rows packed in that order
        const Tensor* q = nullptr;
        const Tensor* o = nullptr;
        const std::vector<unsigned char>* o_before = nullptr;
        const Tensor* lse = nullptr;  // nullptr: not asked for
        const std::vector<unsigned char>* lse_before = nullptr;
        std::vector<int32_t> idx;  // [sum(q_lens), topk]; empty: dense
        int32_t topk = 0;
        // The forms the call may have run on: it passes if it matches one.
        std::vector<ShadowSession::Form> forms;
    };
    void check_outputs(const CallCheck& c);
    // Whether a refused call left o and lse as they were.
    static void check_unwritten(const char* call, const Tensor& o, const std::vector<unsigned char>& o_before,
                                const Tensor* lse, const std::vector<unsigned char>& lse_before);
    // The form a GQLA session's session path runs on now.
    ShadowSession::Form session_form();

    // session_fuzz_sequence_io.cpp
    bool op_export();
    bool op_import();
    ShadowSession::Rows random_sequence_rows();

    // session_fuzz_settings.cpp
    bool op_select_path();
    bool op_set_weights();

    // session_fuzz_queries.cpp
    bool op_getters();
    bool op_bad_pointers();

    Random& r_;
    gqla_session* s_;
    ShadowSession shadow_;
    gqla_config session_cfg_;                   // resolved (a shard's: the full layer's, with its groups)
    gqla_config cfg_;                           // what the session behaves as: shard_view(session_cfg_)
    gqla_path expected_path_ = GQLA_PATH_AUTO;  // AUTO: not known (the cost model decides)
    gqla_path requested_ = GQLA_PATH_AUTO;
    gqla_seq_id next_unused_id_ = 1;
    // The last accepted export, and the rows it was made of.
    std::vector<unsigned char> exported_;
    ShadowSession::Rows exported_rows_;
};

}  // namespace fuzz
