//! [`ChunkMap`]: an ordered map from sequence numbers to values, kept dense.
//!
//! A sub-queue holds up to a million queued jobs, added in sequence order and taken mostly from
//! the front. A `BTreeMap` fills its nodes to about 60% under such appends (it splits a full
//! node in two and never fills the left half again), so each entry cost about 115 bytes for 72
//! bytes of payload. Here the entries lie in sorted runs (chunks) of up to [`CHUNK`], and an
//! append to a full last chunk starts a new one instead of splitting it, so appended entries
//! cost their own size and a few bytes of chunk index.
//!
//! A chunk is filed under a lower bound of its numbers: every number in the chunk is at least its
//! key and less than the next chunk's key. Taking a chunk's first entry keeps its key, so the
//! front of the queue is taken without refiling anything. Chunks are never empty. A chunk that
//! loses entries from its middle keeps its allocation: memory follows the most entries a stretch
//! of numbers has held, not fewer.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

/// Entries per chunk.
const CHUNK: usize = 64;

/// See the module docs.
pub(crate) struct ChunkMap<V> {
    chunks: BTreeMap<u64, VecDeque<(u64, V)>>,
}

impl<V> Default for ChunkMap<V> {
    fn default() -> Self {
        Self { chunks: BTreeMap::new() }
    }
}

impl<V> ChunkMap<V> {
    /// The key of the chunk that holds (or would hold) `n`: the last one filed at or below it.
    fn chunk_key(&self, n: u64) -> Option<u64> {
        self.chunks.range(..=n).next_back().map(|(key, _)| *key)
    }

    /// The smallest number and its value.
    pub fn first(&self) -> Option<(u64, &V)> {
        let (n, value) = self.chunks.values().next()?.front()?;
        Some((*n, value))
    }

    pub fn get(&self, n: u64) -> Option<&V> {
        let chunk = &self.chunks[&self.chunk_key(n)?];
        let i = chunk.binary_search_by_key(&n, |(k, _)| *k).ok()?;
        Some(&chunk[i].1)
    }

    /// The first entry after `after` (from the start, when `None`).
    pub fn next_after(&self, after: Option<u64>) -> Option<(u64, &V)> {
        let Some(after) = after else { return self.first() };
        let from = self.chunk_key(after).map_or(Bound::Unbounded, Bound::Included);
        // At most two chunks: the one `after` falls in, whose entries may all be at or below it,
        // and the next, which is not empty.
        self.chunks.range((from, Bound::Unbounded)).find_map(|(_, chunk)| {
            let i = chunk.partition_point(|(k, _)| *k <= after);
            chunk.get(i).map(|(n, value)| (*n, value))
        })
    }

    /// Files `value` under `n`; the value it replaces, if `n` was there.
    pub fn insert(&mut self, n: u64, value: V) -> Option<V> {
        let key = match self.chunk_key(n) {
            Some(key) => key,
            // Below every chunk: the first one is filed under `n` from now on.
            None => {
                let first = self.chunks.pop_first().map(|(_, chunk)| chunk);
                self.chunks.insert(n, first.unwrap_or_else(|| VecDeque::with_capacity(CHUNK)));
                n
            }
        };
        let is_last = self.chunks.range((Bound::Excluded(key), Bound::Unbounded)).next().is_none();
        let chunk = self.chunks.get_mut(&key).expect("found above");
        let i = match chunk.binary_search_by_key(&n, |(k, _)| *k) {
            Ok(i) => return Some(std::mem::replace(&mut chunk[i].1, value)),
            Err(i) => i,
        };
        if chunk.len() < CHUNK {
            chunk.insert(i, (n, value));
        } else if i == CHUNK && is_last {
            let mut next = VecDeque::with_capacity(CHUNK);
            next.push_back((n, value));
            self.chunks.insert(n, next);
        } else {
            let mut upper = chunk.split_off(CHUNK / 2);
            upper.reserve_exact(CHUNK - upper.len());
            let upper_key = upper[0].0;
            if n < upper_key {
                chunk.insert(i, (n, value));
            } else {
                upper.insert(i - CHUNK / 2, (n, value));
            }
            self.chunks.insert(upper_key, upper);
        }
        None
    }

    /// Takes `n` out; its value, if it was there.
    pub fn remove(&mut self, n: u64) -> Option<V> {
        let key = self.chunk_key(n)?;
        let chunk = self.chunks.get_mut(&key).expect("found above");
        let i = chunk.binary_search_by_key(&n, |(k, _)| *k).ok()?;
        let (_, value) = chunk.remove(i).expect("found above");
        if chunk.is_empty() {
            self.chunks.remove(&key);
        }
        Some(value)
    }

    #[cfg(test)]
    fn chunk_lengths(&self) -> Vec<usize> {
        self.chunks.values().map(VecDeque::len).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation agrees with a `BTreeMap` given the same ones, in a long mixed run.
    #[test]
    fn behaves_as_an_ordered_map() {
        let mut map = ChunkMap::default();
        let mut model = BTreeMap::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for step in 0..200_000u64 {
            let n = random(5_000);
            match random(10) {
                0..=3 => assert_eq!(map.insert(n, step), model.insert(n, step)),
                4..=6 => assert_eq!(map.remove(n), model.remove(&n)),
                7 => assert_eq!(map.get(n), model.get(&n)),
                8 => assert_eq!(map.first(), model.iter().next().map(|(k, v)| (*k, v))),
                _ => {
                    let after = (random(2) == 0).then_some(n);
                    let expected = match after {
                        None => model.iter().next(),
                        Some(after) => model.range(after + 1..).next(),
                    };
                    assert_eq!(map.next_after(after), expected.map(|(k, v)| (*k, v)));
                }
            }
        }
        assert!(map.chunk_lengths().iter().all(|len| (1..=CHUNK).contains(len)));
    }

    /// Appends fill each chunk before the next one starts, and taking from the front empties
    /// chunks in turn.
    #[test]
    fn appends_fill_chunks_and_front_takes_empty_them() {
        let mut map = ChunkMap::default();
        for n in 0..1000 {
            map.insert(n, ());
        }
        let lengths = map.chunk_lengths();
        assert_eq!(lengths.len(), 1000usize.div_ceil(CHUNK));
        assert!(lengths[..lengths.len() - 1].iter().all(|len| *len == CHUNK), "{lengths:?}");
        for n in 0..100 {
            assert_eq!(map.remove(n), Some(()));
        }
        assert_eq!(map.first(), Some((100, &())));
        assert_eq!(map.chunk_lengths().len(), 1000usize.div_ceil(CHUNK) - 1);
    }
}
