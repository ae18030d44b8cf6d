"""FIPS 140-2 (2001-10-10) statistical tests on 20,000-bit blocks, counted the way rngtest counts.

Conventions matched to rng-tools' rngtest, so its counts and ours agree on the same input:
- the first 32-bit word of the stream is the start-up word of the continuous test, not tested;
- bits are taken most significant first; a block's runs are counted from the block start
  (a run crossing a block boundary is split), the final run of a block included;
- a run is filed under the bit that *ends* it (rngtest's layout; both halves share limits);
- continuous test: each little-endian 32-bit word against the one before it, across blocks;
- only whole blocks are tested;
- rngtest stores a run that ends on a block's first bit, when that bit is 0, one slot before its
  runs table, which is the poker counter for nibble 15: reproduced, since it can flip a verdict.
Every test is vectorized over all blocks at once.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import asdict, dataclass

import numpy as np

from strongroom.rng import native

BLOCK_BYTES = 2500
BLOCK_BITS = BLOCK_BYTES * 8
MONOBIT = (9725, 10275)  # fail when ones <= 9725 or ones >= 10275
POKER_SUMSQ = (1563176, 1576928)  # 16/5000 * sum(f^2) - 5000 outside (2.16, 46.17)
RUN_LIMITS = np.array([(2315, 2685), (1114, 1386), (527, 723), (240, 384), (103, 209), (103, 209)])
LONG_RUN = 26  # a run of 26 or more bits fails


@dataclass(frozen=True)
class FipsResult:
    blocks: int
    successes: int
    failures: int
    monobit: int
    poker: int
    runs: int
    long_run: int
    continuous_run: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)


CHUNK_BLOCKS = 400  # 1 MB per numpy pass: bounded memory


_FLAGS = (1, 2, 4, 8, 16)  # monobit, poker, runs, long run, continuous: as in fipsblocks.c


def fips_140_2(data: bytes | bytearray | memoryview, startup_word: bool = True, engine: str = "auto") -> FipsResult:
    """Test every whole 20,000-bit block; ``engine`` is "c" (the helper), "numpy", or "auto"."""
    lib = native.require() if engine == "c" else native.lib() if engine == "auto" else None
    if lib is not None:
        return _fips_c(data, startup_word)
    return _fips_numpy(data, startup_word)


def _fips_c(data: bytes | bytearray | memoryview, startup_word: bool) -> FipsResult:
    stream = FipsStream(startup_word)
    stream.feed(data, keep=False)
    return stream.result()


def _fips_numpy(data: bytes | bytearray | memoryview, startup_word: bool) -> FipsResult:
    raw = np.frombuffer(data, dtype=np.uint8)
    if startup_word:
        if raw.size < 4:
            raise ValueError("need at least the 32-bit start-up word")
        last32: int | None = int(np.frombuffer(raw[:4].tobytes(), dtype="<u4")[0])
        raw = raw[4:]
    else:
        last32 = None
    nblocks = raw.size // BLOCK_BYTES
    totals = np.zeros(7, dtype=np.int64)
    last_bit = 0
    for first in range(0, nblocks, CHUNK_BLOCKS):
        count = min(CHUNK_BLOCKS, nblocks - first)
        chunk = raw[first * BLOCK_BYTES : (first + count) * BLOCK_BYTES].reshape(count, BLOCK_BYTES)
        totals += _blocks(chunk, last_bit, last32)
        last_bit = int(chunk[-1, -1] & 1)
        last32 = int(np.frombuffer(chunk[-1, -4:].tobytes(), dtype="<u4")[0])
    successes, failures, monobit, poker, runs, long_run, continuous = (int(x) for x in totals)
    return FipsResult(nblocks, successes, failures, monobit, poker, runs, long_run, continuous)


def _blocks(blocks: np.ndarray, last_bit: int, last32: int | None) -> np.ndarray:
    """Counts [successes, failures, monobit, poker, runs, long run, continuous] for whole blocks."""
    nblocks = blocks.shape[0]
    bits = np.unpackbits(blocks, axis=1)  # most significant bit first

    # Monobit
    ones = bits.sum(axis=1, dtype=np.int64)
    monobit = (ones <= MONOBIT[0]) | (ones >= MONOBIT[1])

    # Runs and long run.  prev carries the last bit of the previous block (0 before the first).
    flat = bits.ravel()
    prev = np.empty_like(flat)
    prev[0] = last_bit
    prev[1:] = flat[:-1]
    changed = (flat != prev).reshape(nblocks, BLOCK_BITS)
    blk, loc = np.nonzero(changed)  # row and column: no division over millions of events
    change = blk * BLOCK_BITS + loc
    first = np.ones(change.size, dtype=bool)
    first[1:] = blk[1:] != blk[:-1]
    prev_loc = np.zeros(change.size, dtype=np.int64)
    prev_loc[1:] = loc[:-1]
    prev_loc[first] = 0
    # run length minus one, as rngtest keeps it; a change on a block's first bit gives -1
    rlen = loc - prev_loc - 1
    rlen[first] = loc[first] - 1
    ending_bit = flat[change].astype(np.int64)
    # the last (possibly incomplete) run of every block
    last_change = np.full(nblocks, -1, dtype=np.int64)
    if change.size:  # changes are sorted: each block's last one precedes the next block's first
        ends = np.flatnonzero(np.append(blk[1:] != blk[:-1], True))
        last_change[blk[ends]] = loc[ends]
    end_rlen = np.where(last_change >= 0, BLOCK_BITS - 1 - last_change, BLOCK_BITS - 1)
    end_bit = bits[:, -1].astype(np.int64)

    ev_blk = np.concatenate([blk, np.arange(nblocks)])
    ev_rlen = np.concatenate([rlen, end_rlen])
    ev_bit = np.concatenate([ending_bit, end_bit])
    bucket = np.minimum(ev_rlen, 5) + 6 * ev_bit
    valid = bucket >= 0  # rngtest's out-of-range slot for a first-bit change to 0 is not a count
    runs = np.bincount(ev_blk[valid] * 12 + bucket[valid], minlength=12 * nblocks).reshape(nblocks, 12)
    lo = np.concatenate([RUN_LIMITS[:, 0], RUN_LIMITS[:, 0]])
    hi = np.concatenate([RUN_LIMITS[:, 1], RUN_LIMITS[:, 1]])
    runs_fail = ((runs < lo) | (runs > hi)).any(axis=1)
    long_fail = np.zeros(nblocks, dtype=bool)
    long_fail[np.unique(ev_blk[ev_rlen >= LONG_RUN - 1])] = True

    # Poker: 5000 nibbles per block
    nibbles = np.concatenate([blocks >> 4, blocks & 15], axis=1).astype(np.int64)
    idx = nibbles + 16 * np.arange(nblocks)[:, None]
    f = np.bincount(idx.ravel(), minlength=16 * nblocks).reshape(nblocks, 16)
    # rngtest files a change to 0 on a block's first bit in runs[-1], which is poker[15] in its
    # struct: the same block's poker count for 15 gains one.  Matched so the counts agree.
    np.add.at(f[:, 15], ev_blk[~valid], 1)
    sumsq = (f * f).sum(axis=1)
    poker = (sumsq < POKER_SUMSQ[0]) | (sumsq > POKER_SUMSQ[1])

    # Continuous run: little-endian 32-bit words against their predecessor
    words = np.frombuffer(blocks.tobytes(), dtype="<u4").reshape(nblocks, BLOCK_BYTES // 4)
    flat_words = words.ravel()
    before = np.empty_like(flat_words)
    before[1:] = flat_words[:-1]
    if last32 is None:
        before[0] = flat_words[0] ^ 1  # no start-up word: the first word has nothing to repeat
    else:
        before[0] = last32
    continuous = (flat_words == before).reshape(nblocks, -1).any(axis=1)

    failed = monobit | poker | runs_fail | long_fail | continuous
    return np.array(
        [(~failed).sum(), failed.sum(), monobit.sum(), poker.sum(), runs_fail.sum(), long_fail.sum(), continuous.sum()],
        dtype=np.int64,
    )


class FipsStream:
    """The FIPS 140-2 tests over a stream read in pieces, for a source under test: the first 32-bit
    word is the continuous test's start-up word (not tested), whole blocks are tested as they
    complete, and `feed` says which blocks failed so their bytes can be dropped."""

    def __init__(self, startup_word: bool = True) -> None:
        self._lib = native.require()
        self._pending = b""
        self._last_bit = ctypes.c_int(0)
        self._last32 = ctypes.c_uint32(0)
        self._started = not startup_word
        self._has_last32 = 0
        self._counts = [0] * len(_FLAGS)
        self.blocks = self.failures = 0
        self.last_blocks = self.last_failures = 0  # of the latest feed

    def feed(self, data: bytes | bytearray | memoryview, keep: bool = True) -> list[memoryview]:
        """Test the blocks that ``data`` completes; with ``keep``, return the ones that passed, in
        order, as views (nothing is copied but the few bytes of a block split across calls)."""
        view = memoryview(data).cast("B")
        if not self._started:
            head = self._pending + bytes(view[: 4 - len(self._pending)])
            view = view[len(head) - len(self._pending) :]
            if len(head) < 4:
                self._pending = head
                return []
            self._last32.value = int.from_bytes(head, "little")
            self._pending, self._started, self._has_last32 = b"", True, 1
        kept: list[memoryview] = []
        if self._pending:  # finish the block begun by an earlier call
            need = BLOCK_BYTES - len(self._pending)
            if len(view) < need:
                self._pending += bytes(view)
                return []
            kept += self._test(memoryview(self._pending + bytes(view[:need])), keep)
            view = view[need:]
            self._pending = b""
        whole = len(view) // BLOCK_BYTES * BLOCK_BYTES
        if whole:
            kept += self._test(view[:whole], keep)
        self._pending = bytes(view[whole:])
        return kept

    def _test(self, blocks: memoryview, keep: bool) -> list[memoryview]:
        nblocks = len(blocks) // BLOCK_BYTES
        flags = np.zeros(nblocks, dtype=np.uint8)
        if (
            self._lib.sr_fips_blocks(
                native.address(blocks),
                len(blocks),
                nblocks,
                ctypes.byref(self._last_bit),
                ctypes.byref(self._last32),
                self._has_last32,
                native.address(flags),
                flags.nbytes,
            )
            != 0
        ):
            raise ValueError("the FIPS helper refused the buffer sizes")
        self._has_last32 = 1
        failed = int(np.count_nonzero(flags))
        if failed:
            for i, bit in enumerate(_FLAGS):
                self._counts[i] += int(np.count_nonzero(flags & bit))
        self.blocks += nblocks
        self.failures += failed
        self.last_blocks, self.last_failures = nblocks, failed
        if not keep:
            return []
        if not failed:
            return [blocks]
        return [blocks[i * BLOCK_BYTES : (i + 1) * BLOCK_BYTES] for i in np.flatnonzero(flags == 0).tolist()]

    def result(self) -> FipsResult:
        """Counts over everything fed so far, as rngtest reports them."""
        if not self._started:
            raise ValueError("need at least the 32-bit start-up word")
        return FipsResult(self.blocks, self.blocks - self.failures, self.failures, *self._counts)


# The chance that one block of perfect data fails at least one test, counted as above: measured
# over 1,717,986 blocks of getrandom(2) output (1,384 failed, 0.00081).  The runs and long-run
# tests contribute most (a run of 26 alone: ~20,000 * 2^-26 per block).
CHANCE_FAILURE_RATE = 0.0008
FALSE_ALARM_RATE = 0.001  # rng test calls data not random when chance alone gives this or less


def chance_p_value(blocks: int, failures: int, rate: float = CHANCE_FAILURE_RATE) -> float:
    """P(at least ``failures`` of ``blocks`` fail | every block fails independently with
    ``rate``): the binomial upper tail, summed in log space so millions of blocks stay exact."""
    if failures <= 0:
        return 1.0
    if failures > blocks:
        return 0.0

    def term(k: int) -> float:
        log = math.lgamma(blocks + 1) - math.lgamma(k + 1) - math.lgamma(blocks - k + 1)
        return math.exp(log + k * math.log(rate) + (blocks - k) * math.log1p(-rate))

    if failures <= blocks * rate:  # the lower side is the shorter sum
        return max(0.0, 1.0 - math.fsum(term(k) for k in range(failures)))
    total, k = 0.0, failures
    while k <= blocks:
        t = term(k)
        total += t
        if t < total * 1e-17:  # terms fall geometrically past the mean
            break
        k += 1
    return min(1.0, total)
