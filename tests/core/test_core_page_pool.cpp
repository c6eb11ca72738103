// SPDX-License-Identifier: Apache-2.0
// Page pool: free list order, reference counts, reservations that roll back.
#include <doctest/doctest.h>

#include <string>

#include "core/error.hpp"
#include "core/page_pool.hpp"

using gqla::PagePool;

TEST_CASE("page pool: reservation hands out lowest ids and commit keeps them") {
    PagePool pool(4);
    CHECK(pool.total() == 4);
    CHECK(pool.free_count() == 4);
    {
        PagePool::Reservation r = pool.reserve(3, "test");
        CHECK(pool.free_count() == 1);
        CHECK(r.take() == 0);
        CHECK(r.take() == 1);
        CHECK(r.remaining() == 1);
        r.commit();  // the untaken page goes back
    }
    CHECK(pool.used() == 2);
    CHECK(pool.refcount(0) == 1);
    CHECK(pool.refcount(1) == 1);
    CHECK(pool.refcount(2) == 0);
    PagePool::Reservation r = pool.reserve(1, "test");
    CHECK(r.take() == 2);  // the returned page is next again
    r.commit();
}

TEST_CASE("page pool: an uncommitted reservation restores the pool exactly") {
    PagePool pool(5);
    {
        PagePool::Reservation keep = pool.reserve(1, "test");
        keep.take();
        keep.commit();
    }
    {
        PagePool::Reservation r = pool.reserve(3, "test");
        r.take();
        r.take();
    }  // destroyed without commit
    CHECK(pool.free_count() == 4);
    for (int p = 1; p < 5; ++p) CHECK(pool.refcount(p) == 0);
    PagePool::Reservation again = pool.reserve(4, "test");
    CHECK(again.take() == 1);
    CHECK(again.take() == 2);
    CHECK(again.take() == 3);
    CHECK(again.take() == 4);
}

TEST_CASE("page pool: capacity failure changes nothing and says what was needed") {
    PagePool pool(2);
    try {
        pool.reserve(3, "append (3 new pages)");
        FAIL("expected CAPACITY");
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_CAPACITY);
        std::string m = e.what();
        CHECK(m.find("append (3 new pages)") != std::string::npos);
        CHECK(m.find("needs 3 free pages, only 2 of 2") != std::string::npos);
    }
    CHECK(pool.free_count() == 2);
}

TEST_CASE("page pool: shared pages are freed by their last holder") {
    PagePool pool(2);
    PagePool::Reservation r = pool.reserve(1, "test");
    int32_t page = r.take();
    r.commit();
    pool.retain(page);
    CHECK(pool.shared(page));
    pool.release(page);
    CHECK(!pool.shared(page));
    CHECK(pool.free_count() == 1);
    pool.release(page);
    CHECK(pool.free_count() == 2);
    CHECK_THROWS_AS(pool.release(page), gqla::Error);  // double free is caught
}
