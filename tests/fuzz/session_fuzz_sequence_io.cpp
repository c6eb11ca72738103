// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): gqla_sequence_export and
// gqla_sequence_import. An accepted export must be, byte for byte, the
// documented format of the shadow model's rows (sequence_buffer.hpp), and
// change nothing; size queries and short buffers must report the size. An
// import gets an earlier export, the encoding of a live sequence's rows or
// of random rows, or a damaged copy (a changed byte, a truncation, a
// reshaped header under a valid checksum, an 8-bit scale gqla never writes),
// and on success adds a sequence of
// fresh pages holding exactly those rows. What must be refused:
//   keep_latent = 0 (docs/sharding.md)  export INVALID_STATE (the latent is what travels);
//                                       import works (the latent is expanded and dropped)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tests/fuzz/sequence_buffer.hpp"
#include "tests/fuzz/session_fuzz.hpp"

namespace fuzz {

ShadowSession::Rows SessionFuzz::random_sequence_rows() {
    ShadowSession::Rows rows;
    const int64_t P = cfg_.page_size;
    for (int32_t l = 0; l < cfg_.num_layers; ++l) {
        const int64_t n = r_.chance(0.2) ? 0 : r_.range(1, std::min<int64_t>(3 * P, 40));
        rows.lengths.push_back(n);
        std::vector<double> given_a, given_b, a, b;
        for (int64_t k = 0; k < n * shadow_.a_cols(); ++k) given_a.push_back(r_.normal(1.0));
        for (int64_t k = 0; k < n * shadow_.b_cols(); ++k) given_b.push_back(r_.normal(1.0));
        shadow_.store_rows(given_a.data(), given_b.data(), n, a, b);  // as an append would store them
        rows.a.push_back(std::move(a));
        rows.b.push_back(std::move(b));
    }
    return rows;
}

bool SessionFuzz::op_export() {
    run.op = "sequence_export";
    Expect e;
    const gqla_seq_id id = some_id(e);
    if (!shadow_.keeps_latent()) e.error(GQLA_ERR_INVALID_STATE);
    const bool exportable = e.must_succeed();
    const std::vector<unsigned char> want =
        shadow_.has(id) ? encode_sequence(session_cfg_, shadow_.rows(id)) : std::vector<unsigned char>(80, 0);
    const size_t sentinel = 7;  // never a buffer's size
    size_t needed = sentinel;
    const int64_t mode = r_.range(0, 9);
    std::vector<unsigned char> buf;
    gqla_status st;
    if (mode == 0) {  // the size query
        st = gqla_sequence_export(s_, id, nullptr, 0, &needed);
    } else if (mode == 1) {
        e.error(GQLA_ERR_INVALID_ARGUMENT);
        buf.assign(want.size(), 0);
        st = gqla_sequence_export(s_, id, buf.data(), buf.size(), nullptr);
    } else if (mode == 2) {
        e.error(GQLA_ERR_INVALID_ARGUMENT);
        st = gqla_sequence_export(s_, id, nullptr, want.size(), &needed);
    } else if (mode == 3) {  // too small (0 too, with a buffer): refused, with *needed set
        e.error(GQLA_ERR_CAPACITY);
        buf.assign(want.size(), 0xa5);
        const size_t capacity = want.size() - static_cast<size_t>(r_.range(1, static_cast<int64_t>(want.size())));
        st = gqla_sequence_export(s_, id, buf.data(), capacity, &needed);
    } else {
        buf.assign(want.size() + static_cast<size_t>(r_.range(0, 1) * r_.range(1, 16)), 0xa5);
        st = gqla_sequence_export(s_, id, buf.data(), buf.size(), &needed);
    }
    const bool accepted = check_status("gqla_sequence_export", st, e);
    if (exportable && mode != 1 && mode != 2 && needed != want.size())
        fail("sequence_export: *needed %zu, the format says %zu bytes", needed, want.size());
    if (!accepted || mode == 0) return false;
    if (!std::equal(want.begin(), want.end(), buf.begin())) {
        size_t at = 0;
        while (want[at] == buf[at]) ++at;
        fail("sequence_export of sequence %lld: byte %zu of %zu is 0x%02x, the documented format gives 0x%02x",
             (long long)id, at, want.size(), buf[at], want[at]);
    }
    for (size_t i = want.size(); i < buf.size(); ++i)
        if (buf[i] != 0xa5) fail("sequence_export wrote past the %zu bytes it needed", want.size());
    exported_ = want;
    exported_rows_ = shadow_.rows(id);
    ++run.exports_checked;
    run.exports_fp8 += shadow_.fp8();
    return false;  // an export changes nothing
}

bool SessionFuzz::op_import() {
    run.op = "sequence_import";
    Expect e;
    ShadowSession::Rows rows;
    std::vector<unsigned char> buf;
    const int64_t source = r_.range(0, 9);
    if (source <= 1 && !exported_.empty()) {
        buf = exported_;
        rows = exported_rows_;
    } else {
        const std::vector<gqla_seq_id> live = shadow_.live();
        rows = !live.empty() && r_.chance(0.6) ? shadow_.rows(r_.pick(live)) : random_sequence_rows();
        buf = encode_sequence(session_cfg_, rows);
    }
    // Damage: every kind must be refused, and refused before anything changes.
    bool intact = true;
    if (source == 7) {  // any single changed byte fails the checksum
        buf[static_cast<size_t>(r_.range(0, static_cast<int64_t>(buf.size()) - 1))] ^=
            static_cast<unsigned char>(r_.range(1, 255));
        intact = false;
    } else if (source == 8) {  // truncated (an empty buffer too)
        buf.resize(buf.size() - static_cast<size_t>(r_.range(1, static_cast<int64_t>(buf.size()))));
        intact = false;
    } else if (source == 9) {  // a header that does not fit, under a valid checksum
        const int64_t what = r_.range(0, 5);
        if (what == 0)
            buf[kSeqMagicOffset + 3] = 'X';
        else if (what == 1)
            buf[kSeqVersionOffset] = 2;
        else if (what == 2)
            buf[kSeqHeaderBytesOffset] =  // the other header size: the fields after it do not fit
                sequence_header_bytes(session_cfg_) == kSeqHeaderBytes ? kSeqShardHeaderBytes : kSeqHeaderBytes;
        else if (what == 3)
            buf[kSeqFieldsOffset + 4 * r_.range(0, 11)] ^= static_cast<unsigned char>(r_.range(1, 3));  // a shape field
        else  // a layer's token count that does not add up
            buf[sequence_header_bytes(session_cfg_) + 8 * static_cast<size_t>(r_.range(0, cfg_.num_layers - 1))] ^= 1;
        reseal(buf);
        intact = false;
    } else if (source == 6 && shadow_.fp8()) {  // an 8-bit scale gqla never writes, under a valid checksum
        const std::vector<size_t> scales = sequence_scale_offsets(session_cfg_, rows);
        if (!scales.empty()) {
            const float wrong[] = {0.0f, -1.0f, 1e-39f, INFINITY, NAN};
            uint32_t bits;
            std::memcpy(&bits, &wrong[r_.range(0, 4)], 4);
            const size_t at = scales[static_cast<size_t>(r_.range(0, static_cast<int64_t>(scales.size()) - 1))];
            for (int k = 0; k < 4; ++k) buf[at + static_cast<size_t>(k)] = static_cast<unsigned char>(bits >> (8 * k));
            reseal(buf);
            intact = false;
        }
    }
    if (!intact) e.error(GQLA_ERR_INVALID_ARGUMENT);
    if (intact) {
        for (int32_t l = 0; l < cfg_.num_layers; ++l)
            if (rows.lengths[static_cast<size_t>(l)] > 0 && shadow_.is_gqla() && !shadow_.weights_set(l))
                e.error(GQLA_ERR_INVALID_STATE);
        if (shadow_.sequences() >= cfg_.max_sequences ||
            shadow_.pages_for(rows) > shadow_.pages_total() - shadow_.pages_used())
            e.error(GQLA_ERR_CAPACITY);
    }
    gqla_seq_id id = -1;
    // An empty buffer: data() may be NULL, which is refused as such.
    if (!check_status("gqla_sequence_import", gqla_sequence_import(s_, buf.data(), buf.size(), &id), e)) return false;
    if (run.verbose) std::printf("import -> %lld\n", (long long)id);
    if (id < next_unused_id_) fail("sequence_import returned id %lld, reused or decreasing", (long long)id);
    next_unused_id_ = id + 1;
    shadow_.import(id, rows);
    ++run.imports;
    run.imports_fp8 += shadow_.fp8();
    return true;
}

}  // namespace fuzz
