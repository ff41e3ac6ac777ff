"""A user's own build_batches, for tests of --strategy FILE.py:FUNC (written for them)."""

import random


def build_batches(lengths, epoch, seed):
    """Pairs of samples in a shuffled order, reshuffled per epoch."""
    order = list(range(len(lengths)))
    random.Random(seed * 1000 + epoch).shuffle(order)
    return [order[i : i + 2] for i in range(0, len(order), 2)]


def out_of_range(lengths, epoch, seed):
    return [[0, len(lengths)]]


def empty_batch(lengths, epoch, seed):
    return [[0], []]


def not_a_list(lengths, epoch, seed):
    return 42


def raises(lengths, epoch, seed):
    return [[i] for i in range(len(lengths))][10]
