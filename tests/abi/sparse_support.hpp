// SPDX-License-Identifier: Apache-2.0
// Support of the sparse-attention tests: a session with a host mirror of its
// cache rows as stored, index lists that mix visible positions with every
// kind of entry that must be skipped, and a gqla_attention call checked
// against the float64 sparse reference.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gqla/gqla.h"
#include "harness.hpp"

namespace sparse_test {

// Device every Fixture's session is created on (GPU suites: CUDA; default CPU).
void use_device(gqla_device_type device);
gqla_device_type device();

// Which form a call runs on.
enum class Form { Gqa, Absorb, GqlaGqaKept, Transient };
std::string form_label(Form f);  // std::string: doctest prints a const char* as an address

// One sequence: its length and rows as the cache stores them.
struct Seq {
    gqla_seq_id id = 0;
    int64_t length = 0;
    std::vector<double> a, b;  // per token a_cols / b_cols values (k|v or c|kr)
};

// Result of one checked call.
struct CallCheck {
    gqla_status status = GQLA_ERR_INTERNAL;
    double o_err = 0, lse_err = 0;
    bool empty_rows_ok = true;  // rows without a visible entry: o == 0, lse == -inf
    int64_t empty_rows = 0;
    gqla_path taken = GQLA_PATH_AUTO;
};

class Fixture {
public:
    // form Gqa needs a GQA-kind config; the others a GQLA one.
    Fixture(const gqla_config& cfg, Form form);
    ~Fixture();
    Fixture(const Fixture&) = delete;
    Fixture& operator=(const Fixture&) = delete;

    gqla_session* session() const { return s_; }
    // How call() runs its gqla_attention: directly (default), or through
    // `runner` (GPU suites: device copies of the tensors, a CUDA graph
    // replay), which must leave o and lse in args' host tensors.
    using Runner = std::function<gqla_status(gqla_session*, gqla_attention_args&)>;
    void set_runner(Runner runner) { runner_ = std::move(runner); }
    const gqla_config& config() const { return cfg_; }
    abi::Rng& rng() { return rng_; }
    // A sequence of `length` tokens appended in uneven chunks.
    Seq& add(int64_t length);
    std::vector<Seq>& seqs() { return seqs_; }

    // Lists of `topk` entries for the n queries of sequence s: visible
    // positions (page boundaries among them), -1, invisible and
    // out-of-range positions and repeats. empty_query >= 0: that query lists
    // no visible position.
    std::vector<int32_t> lists(const Seq& s, int32_t n, int32_t topk, int32_t empty_query = -1);

    // gqla_attention on the fixture's form with these sequences and q_lens
    // (uniform when `ragged` is false: all q_lens equal), indices [N, topk]
    // (or [B, s_q, topk] when as_3d), checked against the reference.
    CallCheck call(const std::vector<int>& which, const std::vector<int32_t>& q_lens, int32_t topk,
                   const std::vector<int32_t>& idx, bool ragged, bool as_3d = false);

private:
    void store_fp8(const std::vector<float>& af, const std::vector<float>& bf, int64_t n, Seq* s) const;
    int64_t a_cols() const;
    int64_t b_cols() const;
    int32_t q_dim() const;
    gqla_path request() const;

    gqla_config cfg_{};
    Form form_;
    gqla_session* s_ = nullptr;
    abi::Rng rng_;
    std::mt19937_64 pick_;
    std::vector<double> w_;  // W_UKV as given (f32 io)
    std::vector<Seq> seqs_;
    Runner runner_;
};

}  // namespace sparse_test
