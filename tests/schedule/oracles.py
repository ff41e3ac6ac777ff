"""Literal pure-Python transcriptions of the batching procedures, as their docstrings and
the original pipelines write them.  The tests compare the vectorised library with these.
Nothing here imports dflash_diag."""

from __future__ import annotations

import random

MASK32 = 0xFFFFFFFF


def build_batches(lens, token_budget, max_seq_len=None, mode="padded", max_batch_size=None):
    """The story's build_batches: stable sort by capped length, greedy pack."""
    cap = max_seq_len if max_seq_len is not None else max(lens, default=0)
    indexed = sorted(((i, min(L, cap)) for i, L in enumerate(lens)), key=lambda x: x[1])
    return greedy_pack(indexed, token_budget, mode, max_batch_size)


def greedy_pack(items, token_budget, mode="padded", max_batch_size=None):
    """Pack (index, length) pairs in the given order."""
    batches, cur, cur_max, cur_sum = [], [], 0, 0
    for i, L in items:
        if cur:
            if mode == "padded":
                over = (len(cur) + 1) * max(cur_max, L) > token_budget
            else:
                over = cur_sum + L > token_budget
            if over or (max_batch_size is not None and len(cur) + 1 > max_batch_size):
                batches.append(cur)
                cur, cur_max, cur_sum = [], 0, 0
        cur.append(i)
        cur_max = max(cur_max, L)
        cur_sum += L
    if cur:
        batches.append(cur)
    return batches


def sorted_greedy_epochs(lens, token_budget, seed, epochs, max_seq_len=None):
    """Batch order of every epoch: random.seed(seed) once, shuffle the order each epoch."""
    batches = build_batches(lens, token_budget, max_seq_len)
    random.seed(seed)
    out = []
    for _ in range(epochs):
        order = list(range(len(batches)))
        random.shuffle(order)
        out.append([batches[b] for b in order])
    return out


def bucketed_epochs(lens, edges, token_budget, seed, epochs, mode="padded"):
    """The bucketed shuffle: per epoch shuffle each bucket, pack it, shuffle all batches."""
    rng = random.Random(seed)
    k = len(edges) - 1

    def bucket(L):
        for i in range(k):
            if edges[i] <= L < edges[i + 1]:
                return i
        return 0 if L < edges[0] else k - 1

    out = []
    for _ in range(epochs):
        batches = []
        for b in range(k):
            members = [i for i, L in enumerate(lens) if bucket(L) == b]
            rng.shuffle(members)
            batches += greedy_pack([(i, lens[i]) for i in members], token_budget, mode)
        rng.shuffle(batches)
        out.append(batches)
    return out


def fairseq_baseline(lens_in_order, max_tokens, max_sentences, bsz_mult):
    """fairseq tests/test_data_utils.py batch_by_size_baseline over positions, plus the
    final-batch quirk of data_utils.batch_by_size."""
    indices = list(range(len(lens_in_order)))
    batches = []
    start = 0
    while start < len(indices):
        for end in range(start + 1, len(indices) + 1):
            max_val = max(lens_in_order[pos] for pos in range(start, end))
            sent_count = end - start
            num_tokens = max_val * sent_count
            overflow = num_tokens > max_tokens > 0 or sent_count > max_sentences > 0
            terminate = overflow or end == len(indices)
            if overflow:
                sent_count -= 1
            if terminate:
                if sent_count > bsz_mult:
                    sent_count = sent_count - sent_count % bsz_mult
                batches.append(indices[start : start + sent_count])
                start = start + sent_count
                break
    if bsz_mult > 1 and batches and len(batches[-1]) % bsz_mult != 0:
        batches = batches[:-1]
    return batches


def hf_length_grouped(lengths, perm, batch_size, mega_batch_mult):
    """transformers get_length_grouped_indices with a given permutation."""
    megabatch_size = mega_batch_mult * batch_size
    megabatches = [perm[i : i + megabatch_size] for i in range(0, len(lengths), megabatch_size)]
    megabatches = [sorted(mb, key=lambda i: lengths[i], reverse=True) for mb in megabatches]
    maximums = [lengths[mb[0]] for mb in megabatches]
    max_idx = maximums.index(max(maximums))
    megabatches[0][0], megabatches[max_idx][0] = megabatches[max_idx][0], megabatches[0][0]
    return [i for mb in megabatches for i in mb]


class MT19937:
    """Matsumoto & Nishimura's reference generator (init_genrand + genrand_int32)."""

    def __init__(self, seed):
        self.mt = [seed & MASK32]
        for i in range(1, 624):
            prev = self.mt[-1]
            self.mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & MASK32)
        self.index = 624

    def _twist(self):
        mt = self.mt
        for i in range(624):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
            mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        self.index = 0

    def next32(self):
        if self.index >= 624:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & MASK32


def torch_randperm(n, gen):
    """randperm_cpu's forward Fisher-Yates with one raw 32-bit draw per position."""
    r = list(range(n))
    for i in range(n - 1):
        z = gen.next32() % (n - i)
        r[i], r[z + i] = r[z + i], r[i]
    return r
