#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of gqla_capi_libfuzzer (tests/fuzz/corpus/).

Each file encodes a config and a short story of calls in the byte layout
capi_libfuzzer.cpp reads (front to back): sequences added, rows appended,
decodes, forks, path switches, weight uploads, cost predictions, and now and
then a tensor broken on purpose. Deterministic: rerun after changing the
layout in capi_libfuzzer.cpp.

    python3 tests/fuzz/make_corpus.py [OUT_DIR]
"""
import os
import random
import sys

OP_ADD, OP_RELEASE, OP_FORK, OP_APPEND, OP_BATCH, OP_DECODE, OP_PATH, OP_WEIGHTS, OP_COST = 0, 1, 2, 3, 5, 6, 8, 9, 10


class Story:
    def __init__(self, rnd, kind, layers):
        self.r = rnd
        self.kind = kind  # 0 = GQA, 1 = GQLA
        self.layers = layers
        self.live = 0
        self.out = bytearray()

    def b(self, *values):
        self.out.extend(v & 0xFF for v in values)

    def config(self):
        r = self.r
        self.b(self.kind, r.randrange(6), r.randrange(8))
        if self.kind == 0:
            self.b(r.randrange(10))
            if r.random() < 0.5:
                self.b(1)  # value_dim = head_dim
            else:
                self.b(0, r.randrange(10))
        else:
            self.b(r.randrange(7), r.randrange(10), r.randrange(10), r.randrange(10))
        tokens = r.choice([15, 63, 200, 500, 1000])
        self.b(self.layers - 1, r.randrange(3), r.randrange(3), r.randrange(20), tokens & 0xFF, tokens >> 8)
        self.b(r.randrange(8), r.randrange(8), r.randrange(4), r.randrange(3), 0)  # seqs batch q path, no raw field
        if self.kind == 1:
            self.b(0xFF)  # weights for every layer
            for _ in range(self.layers):
                self.seed()

    def seed(self):
        self.b(self.r.randrange(256), self.r.randrange(256))

    def tensor(self, broken=False):
        if broken:
            self.b(0xF0 + self.r.randrange(16), self.r.randrange(256), self.r.randrange(6), self.r.randrange(256), 0)
        else:
            self.b(0)
        self.seed()

    def pick(self):
        self.b(self.r.randrange(0xF0))
        if self.live == 0:
            self.b(self.r.randrange(256))

    def layer(self):
        self.b(self.r.randrange(self.layers))

    def add(self):
        self.b(OP_ADD)
        self.live += 1

    def append(self, broken=False):
        self.b(OP_APPEND)
        self.layer()
        self.pick()
        self.b(self.r.choice([1, 2, 7, 8, 9, 16, 17, 33]))
        self.tensor(broken)
        self.tensor()

    def batch(self):
        n = self.r.randrange(1, 5)
        self.b(OP_BATCH)
        self.layer()
        self.b(n)
        for _ in range(n):
            self.pick()
            self.b(self.r.randrange(0, 12))
        self.tensor()
        self.tensor()

    def decode(self, broken=False):
        batch = self.r.randrange(1, 4)
        self.b(OP_DECODE)
        self.layer()
        self.b(batch)
        for _ in range(batch + 1):
            self.pick()
        self.b(self.r.randrange(1, 4))
        self.tensor(broken)
        self.tensor()
        self.b(self.r.randrange(2))
        self.tensor()

    def fork(self):
        self.b(OP_FORK)
        self.pick()
        self.live += 1

    def release(self):
        self.b(OP_RELEASE)
        self.pick()
        self.live = max(0, self.live - 1)

    def path(self):
        self.b(OP_PATH, self.r.randrange(3))

    def weights(self, broken=False):
        self.b(OP_WEIGHTS)
        self.layer()
        self.b(self.r.randrange(3))
        self.tensor(broken)

    def cost(self):
        self.b(OP_COST, self.r.randrange(1, 64), self.r.randrange(256), self.r.randrange(16), self.r.randrange(1, 8), 0)


def story(index):
    r = random.Random(index)
    s = Story(r, kind=index % 2, layers=1 + index % 3)
    s.config()
    for _ in range(r.randrange(1, 4)):
        s.add()
    steps = [s.append, s.append, s.append, s.decode, s.decode, s.batch, s.fork, s.release, s.path, s.weights,
             s.cost, s.add]
    for _ in range(r.randrange(6, 30)):
        step = r.choice(steps)
        if step in (s.append, s.decode, s.weights) and r.random() < 0.1:
            step(broken=True)
        else:
            step()
    return bytes(s.out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for i in range(40):
        with open(os.path.join(out, "story-%02d" % i), "wb") as f:
            f.write(story(i))


if __name__ == "__main__":
    main()
