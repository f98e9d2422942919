//! Facts indexed for the joins rule bodies make: by predicate, then subject → objects and
//! object → subjects. A short posting list is a vector; a long one (a class's members) a set.

use rustc_hash::{FxHashMap, FxHashSet};

pub type Fact = [u32; 3];
const SHORT: usize = 24;

#[derive(Default)]
pub enum Posting {
    #[default]
    Empty,
    Few(Vec<u32>),
    Many(FxHashSet<u32>),
}

impl Posting {
    fn insert(&mut self, x: u32) -> bool {
        match self {
            Posting::Empty => {
                *self = Posting::Few(vec![x]);
                true
            }
            Posting::Few(v) => {
                if v.contains(&x) {
                    return false;
                }
                if v.len() >= SHORT {
                    let mut set: FxHashSet<u32> = v.iter().copied().collect();
                    set.insert(x);
                    *self = Posting::Many(set);
                } else {
                    v.push(x);
                }
                true
            }
            Posting::Many(s) => s.insert(x),
        }
    }

    fn remove(&mut self, x: u32) -> bool {
        match self {
            Posting::Empty => false,
            Posting::Few(v) => match v.iter().position(|&y| y == x) {
                Some(i) => {
                    v.swap_remove(i);
                    true
                }
                None => false,
            },
            Posting::Many(s) => s.remove(&x),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Posting::Empty => true,
            Posting::Few(v) => v.is_empty(),
            Posting::Many(s) => s.is_empty(),
        }
    }

    pub fn contains(&self, x: u32) -> bool {
        match self {
            Posting::Empty => false,
            Posting::Few(v) => v.contains(&x),
            Posting::Many(s) => s.contains(&x),
        }
    }

    /// Calls `f` on each member until it returns false; false if it was stopped.
    pub fn each(&self, f: &mut dyn FnMut(u32) -> bool) -> bool {
        match self {
            Posting::Empty => true,
            Posting::Few(v) => v.iter().all(|&x| f(x)),
            Posting::Many(s) => s.iter().all(|&x| f(x)),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Posting::Empty => 0,
            Posting::Few(v) => v.capacity() * 4,
            Posting::Many(s) => s.capacity() * 5,
        }
    }
}

#[derive(Default)]
pub struct ByPredicate {
    so: FxHashMap<u32, Posting>,
    os: FxHashMap<u32, Posting>,
}

#[derive(Default)]
pub struct Index {
    by_p: FxHashMap<u32, ByPredicate>,
    len: usize,
}

impl Index {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn clear(&mut self) {
        self.by_p.clear();
        self.len = 0;
    }

    pub fn insert(&mut self, [s, p, o]: Fact) -> bool {
        let by = self.by_p.entry(p).or_default();
        if !by.so.entry(s).or_default().insert(o) {
            return false;
        }
        by.os.entry(o).or_default().insert(s);
        self.len += 1;
        true
    }

    pub fn remove(&mut self, [s, p, o]: Fact) -> bool {
        let Some(by) = self.by_p.get_mut(&p) else { return false };
        let Some(objects) = by.so.get_mut(&s) else { return false };
        if !objects.remove(o) {
            return false;
        }
        if objects.is_empty() {
            by.so.remove(&s);
        }
        if let Some(subjects) = by.os.get_mut(&o) {
            subjects.remove(s);
            if subjects.is_empty() {
                by.os.remove(&o);
            }
        }
        if by.so.is_empty() {
            self.by_p.remove(&p);
        }
        self.len -= 1;
        true
    }

    pub fn contains(&self, [s, p, o]: Fact) -> bool {
        self.by_p.get(&p).and_then(|by| by.so.get(&s)).is_some_and(|objects| objects.contains(o))
    }

    pub fn has_predicate(&self, p: u32) -> bool {
        self.by_p.contains_key(&p)
    }

    /// Every fact matching the pattern (None: any), until `f` returns false; false if stopped.
    pub fn scan(&self, s: Option<u32>, p: Option<u32>, o: Option<u32>, f: &mut dyn FnMut(Fact) -> bool) -> bool {
        match p {
            Some(p) => match self.by_p.get(&p) {
                Some(by) => scan_by(by, s, p, o, f),
                None => true,
            },
            None => self.by_p.iter().all(|(&p, by)| scan_by(by, s, p, o, f)),
        }
    }

    pub fn bytes(&self) -> usize {
        let mut total = self.by_p.capacity() * 80;
        for by in self.by_p.values() {
            total += (by.so.capacity() + by.os.capacity()) * 33;
            total += by.so.values().chain(by.os.values()).map(Posting::bytes).sum::<usize>();
        }
        total
    }
}

fn scan_by(by: &ByPredicate, s: Option<u32>, p: u32, o: Option<u32>, f: &mut dyn FnMut(Fact) -> bool) -> bool {
    match (s, o) {
        (Some(s), Some(o)) => match by.so.get(&s) {
            Some(objects) if objects.contains(o) => f([s, p, o]),
            _ => true,
        },
        (Some(s), None) => match by.so.get(&s) {
            Some(objects) => objects.each(&mut |o| f([s, p, o])),
            None => true,
        },
        (None, Some(o)) => match by.os.get(&o) {
            Some(subjects) => subjects.each(&mut |s| f([s, p, o])),
            None => true,
        },
        (None, None) => by.so.iter().all(|(&s, objects)| objects.each(&mut |o| f([s, p, o]))),
    }
}
