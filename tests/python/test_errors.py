# SPDX-License-Identifier: Apache-2.0
"""Bad inputs raise the gqla.Error subclass of their status (which is also
the matching built-in exception), carry the library's message, change
nothing, and leave the session usable."""

import numpy as np
import pytest

import gqla
import cases
import reference as ref


@pytest.fixture
def filled(rng):
    filled = cases.gqla_session(rng, path="absorb", page_size=16, max_tokens=256)
    yield filled
    filled.session.close()


def still_usable(filled, seq):
    q = filled.random_queries(1, 1)
    o = filled.decode([seq], q)
    o_ref, _ = filled.reference([seq], q)
    assert ref.relative_error(o, o_ref) <= 1e-5


def test_hierarchy():
    assert issubclass(gqla.InvalidArgument, ValueError)
    assert issubclass(gqla.OutOfMemory, MemoryError)
    assert issubclass(gqla.NotFound, KeyError)
    for cls in (gqla.InvalidArgument, gqla.OutOfMemory, gqla.CapacityError, gqla.Unsupported,
                gqla.NotFound, gqla.InvalidState, gqla.BackendError, gqla.InternalError):
        assert issubclass(cls, gqla.Error) and issubclass(cls, RuntimeError)
    assert [cls.status for cls in (gqla.InvalidArgument, gqla.NotFound)] == [1, 5]


def test_wrong_query_shape(filled):
    seq = filled.new_sequence(5)
    c = filled.config
    bad = np.ones((1, 1, c.num_heads, c.query_dim + 1), np.float32)
    out = np.empty((1, 1, c.num_heads, c.value_dim), np.float32)
    with pytest.raises(gqla.InvalidArgument) as info:
        filled.session.decode(0, [seq], bad, out=out)
    assert info.value.status == 1 and info.value.message
    with pytest.raises(ValueError, match=r"^q: "):
        filled.session.decode(0, [seq], np.ones((1, c.num_heads, c.query_dim), np.float32))
    still_usable(filled, seq)


def test_wrong_dtype_names_argument(filled):
    seq = filled.new_sequence(5)
    c = filled.config
    with pytest.raises(gqla.InvalidArgument, match=r"^q: .*float64"):
        filled.session.decode(0, [seq], np.ones((1, 1, c.num_heads, c.query_dim)))
    with pytest.raises(gqla.InvalidArgument, match=r"^c: .*int32"):
        filled.session.append(0, seq, np.ones((2, c.latent_dim), np.int32),
                              np.ones((2, c.rope_dim), np.float32))
    with pytest.raises(gqla.InvalidArgument, match=r"^q: "):
        filled.session.decode(0, [seq], [[1.0]])  # not an array
    assert filled.session.length(seq) == 5
    still_usable(filled, seq)


def test_unknown_sequence(filled):
    seq = filled.new_sequence(3)
    with pytest.raises(gqla.NotFound) as info:
        filled.session.length(seq + 1000)
    assert isinstance(info.value, KeyError)
    assert "'" not in str(info.value)[:1]  # plain message, not KeyError's quoting
    with pytest.raises(KeyError):
        filled.session.decode(0, [seq + 1000], filled.random_queries(1, 1))
    with pytest.raises(gqla.NotFound):
        filled.session.release(seq + 1000)
    still_usable(filled, seq)


def test_more_queries_than_tokens(filled):
    seq = filled.new_sequence(2)
    with pytest.raises(gqla.InvalidArgument):
        filled.session.decode(0, [seq], filled.random_queries(1, 3))
    still_usable(filled, seq)


def test_capacity_is_all_or_nothing(filled):
    seq = filled.new_sequence(200)
    a, b = filled.random_rows(100)
    with pytest.raises(gqla.CapacityError):
        filled.session.append(0, seq, a, b)
    assert filled.session.length(seq) == 200
    other = filled.session.add_sequence()
    with pytest.raises(gqla.CapacityError):
        filled.session.append_many(0, [seq, other], a, b, [50, 50])
    assert filled.session.length(seq) == 200 and filled.session.length(other) == 0
    still_usable(filled, seq)


def test_weights_required(rng):
    config = gqla.Config.gqla(**cases.ODD_GQLA, num_layers=2, device="cpu", cache_dtype="f32")
    with gqla.Session(config) as s:
        seq = s.add_sequence()
        c = np.ones((1, config.latent_dim), np.float32)
        kr = np.ones((1, config.rope_dim), np.float32)
        with pytest.raises(gqla.InvalidState):
            s.append(1, seq, c, kr)
        assert s.length(seq, layer=1) == 0


def test_bad_layer_and_path(filled):
    seq = filled.new_sequence(4)
    with pytest.raises(gqla.InvalidArgument):
        filled.session.length(seq, layer=5)
    with pytest.raises(gqla.InvalidArgument, match="path"):
        filled.session.select_path("fastest")
    still_usable(filled, seq)


def test_gqa_kind_rejects_absorb(rng):
    filled = cases.gqa_session(rng)
    with filled.session as s:
        with pytest.raises(gqla.InvalidArgument):
            s.select_path("absorb")
        with pytest.raises(gqla.InvalidState):
            s.set_weights(0, np.ones((4, 4), np.float32))
        assert s.path == "gqa"


def test_bad_config():
    with pytest.raises(gqla.InvalidArgument):
        gqla.Session(gqla.Config.gqa(num_heads=6, num_kv_heads=4, head_dim=16, device="cpu"))
    with pytest.raises(gqla.InvalidArgument, match="cache_dtype"):
        gqla.Config.gqa(num_heads=2, num_kv_heads=1, head_dim=16, cache_dtype="int8").validate()
    with pytest.raises(TypeError):
        gqla.Config.gqa(num_heads=2, num_kv_heads=1, head_dim=16, bogus=1)


def test_cuda_unavailable_is_unsupported_or_works():
    config = gqla.Config.gqa(num_heads=2, num_kv_heads=1, head_dim=16, device="cuda")
    if gqla.device_count("cuda") == 0:
        with pytest.raises(gqla.Unsupported):
            gqla.Session(config)
    else:
        gqla.Session(config).close()


def test_closed_session(filled):
    s = filled.session
    s.close()
    s.close()  # idempotent
    with pytest.raises(gqla.InvalidState):
        s.add_sequence()
    with pytest.raises(gqla.InvalidState):
        s.stats()
