//! Facts indexed for the joins rule bodies make: by predicate, then subject → objects and
//! object → subjects. The index is most of what a tenant's state holds, so an entry is 8 bytes:
//! the key and one word that is either the one id it maps to (most: a memory's one label) or,
//! high bit set, the slot of a list (a few) or a set (a class's members) kept beside the maps.

use rustc_hash::{FxHashMap, FxHashSet};

pub type Fact = [u32; 3];
const SHORT: usize = 24;
const SLOT: u32 = 1 << 31;

enum Many {
    Few(Vec<u32>),
    Set(FxHashSet<u32>),
    Free,
}

#[derive(Default)]
struct Postings {
    slots: Vec<Many>,
    free: Vec<u32>,
}

impl Postings {
    fn put(&mut self, many: Many) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = many;
                i | SLOT
            }
            None => {
                self.slots.push(many);
                (self.slots.len() as u32 - 1) | SLOT
            }
        }
    }

    fn release(&mut self, word: u32) {
        self.slots[(word & !SLOT) as usize] = Many::Free;
        self.free.push(word & !SLOT);
    }

    /// Adds `x` to the posting `word`; false if it was there already.
    fn insert(&mut self, word: &mut u32, x: u32) -> bool {
        if *word & SLOT == 0 {
            if *word == x {
                return false;
            }
            *word = self.put(Many::Few(vec![*word, x]));
            return true;
        }
        let slot = &mut self.slots[(*word & !SLOT) as usize];
        match slot {
            Many::Few(v) => {
                if v.contains(&x) {
                    return false;
                }
                if v.len() >= SHORT {
                    let mut set: FxHashSet<u32> = v.iter().copied().collect();
                    set.insert(x);
                    *slot = Many::Set(set);
                } else {
                    v.push(x);
                }
                true
            }
            Many::Set(set) => set.insert(x),
            Many::Free => unreachable!("a posting's slot was released while in use"),
        }
    }

    /// Removes `x` from the posting `word`: (whether it was there, whether the posting is now empty).
    fn remove(&mut self, word: &mut u32, x: u32) -> (bool, bool) {
        if *word & SLOT == 0 {
            return if *word == x { (true, true) } else { (false, false) };
        }
        let (found, left, empty) = match &mut self.slots[(*word & !SLOT) as usize] {
            Many::Few(v) => match v.iter().position(|&y| y == x) {
                Some(i) => {
                    v.swap_remove(i);
                    (true, (v.len() == 1).then(|| v[0]), v.is_empty())
                }
                None => (false, None, false),
            },
            Many::Set(set) => {
                let found = set.remove(&x);
                (found, None, set.is_empty())
            }
            Many::Free => unreachable!("a posting's slot was released while in use"),
        };
        if let Some(last) = left {
            self.release(*word);
            *word = last;
        } else if empty {
            self.release(*word);
        }
        (found, empty)
    }

    fn contains(&self, word: u32, x: u32) -> bool {
        if word & SLOT == 0 {
            return word == x;
        }
        match &self.slots[(word & !SLOT) as usize] {
            Many::Few(v) => v.contains(&x),
            Many::Set(set) => set.contains(&x),
            Many::Free => false,
        }
    }

    /// Calls `f` on each member until it returns false; false if it was stopped.
    fn each(&self, word: u32, f: &mut dyn FnMut(u32) -> bool) -> bool {
        if word & SLOT == 0 {
            return f(word);
        }
        match &self.slots[(word & !SLOT) as usize] {
            Many::Few(v) => v.iter().all(|&x| f(x)),
            Many::Set(set) => set.iter().all(|&x| f(x)),
            Many::Free => true,
        }
    }

    fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Many>()
            + self.free.capacity() * 4
            + self
                .slots
                .iter()
                .map(|m| match m {
                    Many::Few(v) => v.capacity() * 4,
                    Many::Set(s) => s.capacity() * 5,
                    Many::Free => 0,
                })
                .sum::<usize>()
    }
}

#[derive(Default)]
pub struct ByPredicate {
    so: FxHashMap<u32, u32>,
    os: FxHashMap<u32, u32>,
}

#[derive(Default)]
pub struct Index {
    by_p: FxHashMap<u32, ByPredicate>,
    postings: Postings,
    len: usize,
}

fn add(postings: &mut Postings, map: &mut FxHashMap<u32, u32>, key: u32, x: u32) -> bool {
    match map.entry(key) {
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(x);
            true
        }
        std::collections::hash_map::Entry::Occupied(mut e) => postings.insert(e.get_mut(), x),
    }
}

fn take(postings: &mut Postings, map: &mut FxHashMap<u32, u32>, key: u32, x: u32) -> bool {
    let Some(word) = map.get_mut(&key) else { return false };
    let (found, empty) = postings.remove(word, x);
    if empty {
        map.remove(&key);
    }
    found
}

impl Index {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn clear(&mut self) {
        self.by_p.clear();
        self.postings = Postings::default();
        self.len = 0;
    }

    pub fn insert(&mut self, [s, p, o]: Fact) -> bool {
        let by = self.by_p.entry(p).or_default();
        if !add(&mut self.postings, &mut by.so, s, o) {
            return false;
        }
        add(&mut self.postings, &mut by.os, o, s);
        self.len += 1;
        true
    }

    pub fn remove(&mut self, [s, p, o]: Fact) -> bool {
        let Some(by) = self.by_p.get_mut(&p) else { return false };
        if !take(&mut self.postings, &mut by.so, s, o) {
            return false;
        }
        take(&mut self.postings, &mut by.os, o, s);
        if by.so.is_empty() {
            self.by_p.remove(&p);
        }
        self.len -= 1;
        true
    }

    pub fn contains(&self, [s, p, o]: Fact) -> bool {
        match self.by_p.get(&p).and_then(|by| by.so.get(&s)) {
            Some(&word) => self.postings.contains(word, o),
            None => false,
        }
    }

    pub fn has_predicate(&self, p: u32) -> bool {
        self.by_p.contains_key(&p)
    }

    /// Every fact matching the pattern (None: any), until `f` returns false; false if stopped.
    pub fn scan(&self, s: Option<u32>, p: Option<u32>, o: Option<u32>, f: &mut dyn FnMut(Fact) -> bool) -> bool {
        match p {
            Some(p) => match self.by_p.get(&p) {
                Some(by) => self.scan_by(by, s, p, o, f),
                None => true,
            },
            None => self.by_p.iter().all(|(&p, by)| self.scan_by(by, s, p, o, f)),
        }
    }

    fn scan_by(
        &self,
        by: &ByPredicate,
        s: Option<u32>,
        p: u32,
        o: Option<u32>,
        f: &mut dyn FnMut(Fact) -> bool,
    ) -> bool {
        let postings = &self.postings;
        match (s, o) {
            (Some(s), Some(o)) => match by.so.get(&s) {
                Some(&word) if postings.contains(word, o) => f([s, p, o]),
                _ => true,
            },
            (Some(s), None) => match by.so.get(&s) {
                Some(&word) => postings.each(word, &mut |o| f([s, p, o])),
                None => true,
            },
            (None, Some(o)) => match by.os.get(&o) {
                Some(&word) => postings.each(word, &mut |s| f([s, p, o])),
                None => true,
            },
            (None, None) => by.so.iter().all(|(&s, &word)| postings.each(word, &mut |o| f([s, p, o]))),
        }
    }

    pub fn bytes(&self) -> usize {
        let mut total = self.by_p.capacity() * 80 + self.postings.bytes();
        for by in self.by_p.values() {
            // an entry: the key, the word and hashbrown's control byte
            total += (by.so.capacity() + by.os.capacity()) * 9;
        }
        total
    }
}
