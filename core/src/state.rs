//! One tenant's facts and what the rules derive from them, kept current as facts change.
//!
//! Non-recursive rules keep a count of derivations per derived fact; a change's effect is the
//! classic delta of a join (for body literal i: the literals before i as they are now, literal i's
//! change, the literals after i as they were), so an update costs the derivations it touches,
//! never the store. NOT is a literal whose change is a change of its atoms' existence for the
//! bindings those atoms touch. A recursive group is recomputed whole when what it reads changes
//! (the shipped program's only one is the ontology's subclass closure). A RANK keeps its body's
//! solutions in key order and derives the first LIMIT items; the difference is applied.

use crate::expr::{Eval, Val};
use crate::index::{Fact, Index};
use crate::program::{body_atoms, Atom, Lit, Program, Rule, Unit, T};
use crate::terms::{Key, Terms, Value, BLANK, IRI, LITERAL, NONE};
use oxsdatatypes::Integer;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq)]
enum When {
    Now,
    Before,
}

const ALL: usize = usize::MAX;
const BASE: u32 = 1 << 31;

#[derive(Clone, Debug)]
enum SortKey {
    Unbound,
    Blank(Box<str>),
    Iri(Box<str>),
    Literal(Value, Box<str>),
}

#[derive(Clone, Debug)]
struct Keyed(SortKey, bool);

fn kind_rank(k: &SortKey) -> u8 {
    match k {
        SortKey::Unbound => 0,
        SortKey::Blank(_) => 1,
        SortKey::Iri(_) => 2,
        SortKey::Literal(..) => 3,
    }
}

fn cmp_key(a: &SortKey, b: &SortKey) -> Ordering {
    match (a, b) {
        (SortKey::Blank(x), SortKey::Blank(y)) | (SortKey::Iri(x), SortKey::Iri(y)) => x.cmp(y),
        (SortKey::Literal(x, lx), SortKey::Literal(y, ly)) => {
            let by_value = match (x, y) {
                (Value::Str(p), Value::Str(q)) => Some(p.cmp(q)),
                (Value::DateTime(p), Value::DateTime(q)) => p.partial_cmp(q),
                (Value::Date(p), Value::Date(q)) => p.partial_cmp(q),
                (Value::Bool(p), Value::Bool(q)) => Some(p.cmp(q)),
                _ if crate::expr::is_numeric(x) && crate::expr::is_numeric(y) => crate::expr::numeric_cmp(x, y),
                _ => None,
            };
            by_value.filter(|o| *o != Ordering::Equal).unwrap_or_else(|| lx.cmp(ly))
        }
        _ => kind_rank(a).cmp(&kind_rank(b)),
    }
}

impl PartialEq for Keyed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Keyed {}
impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Keyed {
    fn cmp(&self, other: &Self) -> Ordering {
        let o = cmp_key(&self.0, &other.0);
        if self.1 {
            o.reverse()
        } else {
            o
        }
    }
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    keys: Vec<Keyed>,
    sol: Vec<u32>,
}

#[derive(Default)]
struct Aggregated {
    groups: FxHashMap<Vec<u32>, FxHashMap<Vec<u32>, i32>>, // group key -> its solutions
    heads: FxHashMap<Vec<u32>, Vec<Fact>>,                  // group key -> what its row derived
}

#[derive(Default)]
struct Ranked {
    solutions: FxHashMap<Vec<u32>, i32>,
    sorted: BTreeSet<Row>,
    top: Vec<Fact>,
}

pub struct State {
    prog: Arc<Program>,
    read_predicates: FxHashSet<u32>,
    read_classes: FxHashSet<u32>,
    rdf_type: u32,
    pub terms: RefCell<Terms>,
    consts: Vec<u32>,
    idx: Index, // every fact that holds and a body reads: base and derived
    // per derived fact: how many derivations it has, and BASE if it is a base fact too. A base fact
    // nothing derives has no entry: it is in `idx` if a body reads it, else in `unread_base` (kept
    // so that a rule concluding it, a superclass say, does not infer what is asserted)
    facts: FxHashMap<Fact, u32>,
    unread_base: FxHashSet<Fact>,
    ranked: FxHashMap<usize, Ranked>,
    aggregated: FxHashMap<usize, Aggregated>,
    recursive: FxHashMap<usize, FxHashSet<Fact>>,
    // during an update: what holds now and did not before (plus), and the reverse (minus)
    plus: Index,
    plus_set: FxHashSet<Fact>,
    minus: Index,
    minus_set: FxHashSet<Fact>,
    touched: FxHashMap<Fact, bool>, // fact -> whether it was inferred before the update
    tracking: bool,                 // false while materialising: no update to report
}

fn bits(mut m: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        Some(i)
    })
}

/// The first `n` bits: every literal of a body (at most 64), or every atom of a NOT.
fn first(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

fn all_lits(r: &Rule) -> u64 {
    first(r.lits.len())
}

fn bound_mask(b: &[u32]) -> u64 {
    b.iter().enumerate().fold(0, |m, (i, &v)| if v != NONE { m | (1 << i) } else { m })
}

impl State {
    pub fn new(prog: Arc<Program>) -> State {
        let mut terms = Terms::default();
        let consts: Vec<u32> = prog.consts.iter().map(|(k, v, d, l)| terms.intern(*k, v, d, l)).collect();
        State {
            read_predicates: prog.read_predicates.iter().map(|&c| consts[c as usize]).collect(),
            read_classes: prog.read_classes.iter().map(|&c| consts[c as usize]).collect(),
            rdf_type: prog.rdf_type.map(|c| consts[c as usize]).unwrap_or(NONE),
            prog,
            terms: RefCell::new(terms),
            consts,
            idx: Index::default(),
            facts: FxHashMap::default(),
            unread_base: FxHashSet::default(),
            ranked: FxHashMap::default(),
            aggregated: FxHashMap::default(),
            recursive: FxHashMap::default(),
            plus: Index::default(),
            plus_set: FxHashSet::default(),
            minus: Index::default(),
            minus_set: FxHashSet::default(),
            touched: FxHashMap::default(),
            tracking: true,
        }
    }

    pub fn intern(&self, k: &Key) -> u32 {
        self.terms.borrow_mut().intern(k.0, &k.1, &k.2, &k.3)
    }

    pub fn key(&self, id: u32) -> Key {
        let terms = self.terms.borrow();
        let (k, v, d, l) = terms.key(id);
        (k, v.to_owned(), d.to_owned(), l.to_owned())
    }

    fn c(&self, t: T, b: &[u32]) -> Option<u32> {
        match t {
            T::C(c) => Some(self.consts[c as usize]),
            T::V(v) => b.get(v).copied().filter(|&x| x != NONE),
        }
    }

    // -- facts ---------------------------------------------------------------------------------
    fn is_base(&self, f: &Fact) -> bool {
        match self.facts.get(f) {
            Some(&v) => v & BASE != 0,
            None if self.is_read(f) => self.idx.contains(*f),
            None => self.unread_base.contains(f),
        }
    }

    fn count(&self, f: &Fact) -> u32 {
        self.facts.get(f).map_or(0, |&v| v & !BASE)
    }

    /// Records `f`'s base flag and count; a read fact's presence in `idx` is the caller's to keep.
    fn set(&mut self, f: Fact, base: bool, count: u32) {
        if count == 0 {
            self.facts.remove(&f);
        } else {
            self.facts.insert(f, count | if base { BASE } else { 0 });
        }
        if !self.is_read(&f) {
            if base && count == 0 {
                self.unread_base.insert(f);
            } else {
                self.unread_base.remove(&f);
            }
        }
    }

    fn is_inferred(&self, f: &Fact) -> bool {
        self.facts.get(f).is_some_and(|&v| v & BASE == 0 && v > 0)
    }

    fn touch(&mut self, f: Fact) {
        if self.tracking && !self.touched.contains_key(&f) {
            let was = self.is_inferred(&f);
            self.touched.insert(f, was);
        }
    }

    /// Whether some rule body may join on this fact (only those are indexed).
    fn is_read(&self, f: &Fact) -> bool {
        let prog = &self.prog;
        if prog.reads_any_predicate {
            return true;
        }
        self.read_predicates.contains(&f[1])
            && (f[1] != self.rdf_type || prog.reads_any_class || self.read_classes.contains(&f[2]))
    }

    fn set_visible(&mut self, f: Fact, visible: bool) {
        if !self.is_read(&f) {
            return;
        }
        if !self.tracking {
            if visible {
                self.idx.insert(f);
            } else {
                self.idx.remove(f);
            }
            return;
        }
        if visible {
            self.idx.insert(f);
            if self.minus_set.remove(&f) {
                self.minus.remove(f);
            } else {
                self.plus_set.insert(f);
                self.plus.insert(f);
            }
        } else {
            self.idx.remove(f);
            if self.plus_set.remove(&f) {
                self.plus.remove(f);
            } else {
                self.minus_set.insert(f);
                self.minus.insert(f);
            }
        }
    }

    fn adjust(&mut self, f: Fact, d: i32) {
        if d == 0 {
            return;
        }
        self.touch(f);
        let base = self.is_base(&f);
        let before = self.count(&f) as i64;
        let after = before + d as i64;
        assert!((0..BASE as i64).contains(&after), "derivation count {after} for {f:?}: a bug in the core's deltas");
        self.set(f, base, after as u32);
        if !base && (before > 0) != (after > 0) {
            self.set_visible(f, after > 0);
        }
    }

    fn begin(&mut self) {
        self.plus.clear();
        self.minus.clear();
        if self.plus_set.capacity() + self.minus_set.capacity() + self.touched.capacity() > 1 << 14 {
            // a big batch's room is not kept for the small ones after it
            self.plus_set = FxHashSet::default();
            self.minus_set = FxHashSet::default();
            self.touched = FxHashMap::default();
        }
        self.plus_set.clear();
        self.minus_set.clear();
        self.touched.clear();
    }

    /// Base facts, before `materialize`: nothing is derived from them yet.
    pub fn load(&mut self, facts: &[Fact]) {
        for &f in facts {
            if !self.is_base(&f) {
                self.set(f, true, self.count(&f));
                if self.is_read(&f) {
                    self.idx.insert(f);
                }
            }
        }
    }

    // -- matching --------------------------------------------------------------------------------
    fn scan(&self, when: When, s: Option<u32>, p: Option<u32>, o: Option<u32>, f: &mut dyn FnMut(Fact) -> bool) -> bool {
        match when {
            When::Now => self.idx.scan(s, p, o, f),
            When::Before => {
                self.idx.scan(s, p, o, &mut |fact| self.plus_set.contains(&fact) || f(fact))
                    && self.minus.scan(s, p, o, f)
            }
        }
    }

    /// Binds `atom`'s unbound variables from `fact`; false if a repeated variable disagrees.
    fn unify(&self, atom: &Atom, fact: Fact, b: &mut [u32], set: &mut Vec<usize>) -> bool {
        for (t, x) in atom.t.iter().zip(fact) {
            match *t {
                T::C(c) => {
                    if self.consts[c as usize] != x {
                        return false;
                    }
                }
                T::V(v) => {
                    if b[v] == NONE {
                        b[v] = x;
                        set.push(v);
                    } else if b[v] != x {
                        return false;
                    }
                }
            }
        }
        true
    }

    fn score(&self, atom: &Atom, bound: u64) -> i32 {
        let mut score = 0;
        for (t, if_bound, if_const) in [(atom.t[0], 16, 12), (atom.t[2], 6, 3), (atom.t[1], 1, 1)] {
            score += match t {
                T::V(v) if bound & (1 << v) != 0 => if_bound,
                T::V(_) => 0,
                T::C(_) => if_const,
            };
        }
        score * 8 - (atom.vars & !bound).count_ones() as i32
    }

    /// Solutions of `atoms` (less those not in `todo`) extending `b`, until `f` returns false.
    fn join(&self, atoms: &[Atom], todo: u64, b: &mut Vec<u32>, when: When, f: &mut dyn FnMut(&[u32]) -> bool) -> bool {
        if todo == 0 {
            return f(b);
        }
        let bound = bound_mask(b);
        let j = bits(todo).max_by_key(|&j| self.score(&atoms[j], bound)).unwrap();
        let atom = &atoms[j];
        let (s, p, o) = (self.c(atom.t[0], b), self.c(atom.t[1], b), self.c(atom.t[2], b));
        let rest = todo & !(1 << j);
        self.scan(when, s, p, o, &mut |fact| {
            let mut set = Vec::new();
            let go = if self.unify(atom, fact, b, &mut set) { self.join(atoms, rest, b, when, f) } else { true };
            for v in set {
                b[v] = NONE;
            }
            go
        })
    }

    fn exists(&self, atoms: &[Atom], locals: u64, b: &[u32], when: When) -> bool {
        let mut inner: Vec<u32> = b.to_vec();
        for v in bits(locals) {
            inner[v] = NONE;
        }
        let todo = first(atoms.len());
        !self.join(atoms, todo, &mut inner, when, &mut |_| false)
    }

    fn eval_ok(&self, e: &crate::expr::Expr, b: &[u32]) -> bool {
        let terms = self.terms.borrow();
        Eval { terms: &terms, binding: b }.ebv(e) == Some(true)
    }

    fn eval_term(&self, e: &crate::expr::Expr, b: &[u32]) -> u32 {
        let out = {
            let terms = self.terms.borrow();
            Eval { terms: &terms, binding: b }.eval(e)
        };
        match out {
            Some(Val::Term(id)) => id,
            Some(Val::Lit(v)) => self.terms.borrow_mut().literal(&v).unwrap_or(NONE),
            None => NONE,
        }
    }

    /// The rule's body solutions extending `b` over the literals in `todo`; literal j is read as
    /// it is now when j < `pivot`, as it was before the update when j > `pivot` (ALL: all now).
    fn solve(&self, r: &Rule, todo: u64, b: &mut Vec<u32>, pivot: usize, emit: &mut dyn FnMut(&[u32])) {
        if todo == 0 {
            emit(b);
            return;
        }
        let when = |j: usize| if j < pivot { When::Now } else { When::Before };
        let bound = bound_mask(b);
        let mut best: Option<(i32, usize)> = None;
        for j in bits(todo) {
            let rest = todo & !(1 << j);
            match &r.lits[j] {
                Lit::Filter { e, vars } if vars & !bound == 0 => {
                    if self.eval_ok(e, b) {
                        self.solve(r, rest, b, pivot, emit);
                    }
                    return;
                }
                Lit::Bind { e, var, vars } if vars & !bound == 0 => {
                    b[*var] = self.eval_term(e, b);
                    self.solve(r, rest, b, pivot, emit);
                    b[*var] = NONE;
                    return;
                }
                Lit::Neg { atoms, locals, outer } if outer & !bound == 0 => {
                    if !self.exists(atoms, *locals, b, when(j)) {
                        self.solve(r, rest, b, pivot, emit);
                    }
                    return;
                }
                Lit::Atom(a) => {
                    let score = self.score(a, bound);
                    if best.is_none_or(|(s, _)| score > s) {
                        best = Some((score, j));
                    }
                }
                _ => {}
            }
        }
        if let Some((_, j)) = best {
            let Lit::Atom(atom) = &r.lits[j] else { unreachable!() };
            let (s, p, o) = (self.c(atom.t[0], b), self.c(atom.t[1], b), self.c(atom.t[2], b));
            let rest = todo & !(1 << j);
            self.scan(when(j), s, p, o, &mut |fact| {
                let mut set = Vec::new();
                if self.unify(atom, fact, b, &mut set) {
                    self.solve(r, rest, b, pivot, emit);
                }
                for v in set {
                    b[v] = NONE;
                }
                true
            });
            return;
        }
        // what is left reads a variable nothing binds: a FILTER is an error (false), a BIND leaves
        // its variable unbound, a NOT leaves it free
        let j = bits(todo).next().unwrap();
        let rest = todo & !(1 << j);
        match &r.lits[j] {
            Lit::Filter { .. } => {}
            Lit::Bind { var, .. } => {
                b[*var] = NONE;
                self.solve(r, rest, b, pivot, emit);
            }
            Lit::Neg { atoms, locals, .. } => {
                if !self.exists(atoms, *locals, b, when(j)) {
                    self.solve(r, rest, b, pivot, emit);
                }
            }
            Lit::Atom(_) => unreachable!(),
        }
    }

    /// Each change of the rule's body solutions the update made, with its sign.
    fn delta(&self, r: &Rule, emit: &mut dyn FnMut(&[u32], i32)) {
        let all = all_lits(r);
        for (i, lit) in r.lits.iter().enumerate() {
            let rest = all & !(1 << i);
            match lit {
                Lit::Atom(a) => {
                    for (changes, sign) in [(&self.plus, 1), (&self.minus, -1)] {
                        let (s, p, o) = (self.c(a.t[0], &[]), self.c(a.t[1], &[]), self.c(a.t[2], &[]));
                        let mut found = Vec::new();
                        changes.scan(s, p, o, &mut |fact| {
                            found.push(fact);
                            true
                        });
                        for fact in found {
                            let mut b = vec![NONE; r.nvars];
                            if self.unify(a, fact, &mut b, &mut Vec::new()) {
                                self.solve(r, rest, &mut b, i, &mut |sol| emit(sol, sign));
                            }
                        }
                    }
                }
                Lit::Neg { atoms, locals, outer } => {
                    let mut affected: FxHashSet<Vec<u32>> = FxHashSet::default();
                    let every = first(atoms.len());
                    for (k, a) in atoms.iter().enumerate() {
                        for changes in [&self.plus, &self.minus] {
                            let (s, p, o) = (self.c(a.t[0], &[]), self.c(a.t[1], &[]), self.c(a.t[2], &[]));
                            let mut found = Vec::new();
                            changes.scan(s, p, o, &mut |fact| {
                                found.push(fact);
                                true
                            });
                            for fact in found {
                                let mut b = vec![NONE; r.nvars];
                                if !self.unify(a, fact, &mut b, &mut Vec::new()) {
                                    continue;
                                }
                                for when in [When::Now, When::Before] {
                                    self.join(atoms, every & !(1 << k), &mut b, when, &mut |sol| {
                                        let mut key = vec![NONE; r.nvars];
                                        for v in bits(*outer) {
                                            key[v] = sol[v];
                                        }
                                        affected.insert(key);
                                        true
                                    });
                                }
                            }
                        }
                    }
                    for key in affected {
                        let before = self.exists(atoms, *locals, &key, When::Before);
                        let now = self.exists(atoms, *locals, &key, When::Now);
                        if before != now {
                            let sign = if now { -1 } else { 1 };
                            let mut b = key;
                            self.solve(r, rest, &mut b, i, &mut |sol| emit(sol, sign));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn instantiate(&self, heads: &[Atom], b: &[u32], out: &mut dyn FnMut(Fact)) {
        let terms = self.terms.borrow();
        for h in heads {
            let (Some(s), Some(p), Some(o)) = (self.c(h.t[0], b), self.c(h.t[1], b), self.c(h.t[2], b)) else {
                continue;
            };
            if terms.kind(s) == LITERAL || terms.kind(p) != IRI {
                continue; // a BIND produced something that cannot stand there
            }
            out([s, p, o]);
        }
    }

    fn reads_changes(&self, r: &Rule) -> bool {
        body_atoms(r).any(|a| match self.c(a.t[1], &[]) {
            Some(p) => self.plus.has_predicate(p) || self.minus.has_predicate(p),
            None => self.plus.len() + self.minus.len() > 0,
        })
    }

    // -- units -------------------------------------------------------------------------------------
    fn counted(&mut self, ri: usize, full: bool) {
        let prog = self.prog.clone();
        let r = &prog.rules[ri];
        let mut counts: FxHashMap<Fact, i32> = FxHashMap::default();
        {
            let mut add = |sol: &[u32], sign: i32| {
                self.instantiate(&r.heads, sol, &mut |f| *counts.entry(f).or_insert(0) += sign);
            };
            if full {
                self.solve(r, all_lits(r), &mut vec![NONE; r.nvars], ALL, &mut |sol| add(sol, 1));
            } else {
                self.delta(r, &mut add);
            }
        }
        for (f, d) in counts {
            self.adjust(f, d);
        }
    }

    fn row(&self, r: &Rule, sol: &[u32]) -> Row {
        let spec = r.rank.as_ref().unwrap();
        let terms = self.terms.borrow();
        let eval = Eval { terms: &terms, binding: sol };
        let mut keys: Vec<Keyed> =
            spec.keys.iter().map(|(e, desc)| Keyed(sort_key(&terms, eval.eval(e)), *desc)).collect();
        // then STR(?item) and the limit, as the reference's ORDER BY: a total order
        let item = sol[spec.item];
        let text = if item == NONE { String::new() } else { terms.text(item).to_string() };
        keys.push(Keyed(SortKey::Literal(Value::Str(text.clone()), text.into()), false));
        let limit = sol[spec.limit];
        keys.push(Keyed(if limit == NONE { SortKey::Unbound } else { term_key(&terms, limit) }, false));
        Row { keys, sol: sol.to_vec() }
    }

    /// The rule's body solutions that the update gained (+) and lost (-), or all of them (`full`).
    fn solution_changes(&self, r: &Rule, full: bool) -> FxHashMap<Vec<u32>, i32> {
        let mut changes: FxHashMap<Vec<u32>, i32> = FxHashMap::default();
        if full {
            self.solve(r, all_lits(r), &mut vec![NONE; r.nvars], ALL, &mut |sol| {
                *changes.entry(sol.to_vec()).or_insert(0) += 1;
            });
        } else {
            self.delta(r, &mut |sol, sign| *changes.entry(sol.to_vec()).or_insert(0) += sign);
        }
        changes
    }

    /// What a RANK's top or an AGGREGATE's row derives now in place of `old`: one derivation less
    /// for each fact no longer derived, one more for each new one; returns the new facts, once each.
    fn replace(&mut self, old: &[Fact], new: Vec<Fact>) -> Vec<Fact> {
        let old: FxHashSet<Fact> = old.iter().copied().collect();
        let new: FxHashSet<Fact> = new.into_iter().collect();
        for &f in old.difference(&new) {
            self.adjust(f, -1);
        }
        for &f in new.difference(&old) {
            self.adjust(f, 1);
        }
        new.into_iter().collect()
    }

    fn ranked_unit(&mut self, ri: usize, full: bool) {
        let prog = self.prog.clone();
        let r = &prog.rules[ri];
        let spec = r.rank.as_ref().unwrap();
        let changes = self.solution_changes(r, full);
        let mut state = self.ranked.remove(&ri).unwrap_or_default();
        let mut moved = full;
        for (sol, d) in changes {
            if d == 0 {
                continue;
            }
            let count = state.solutions.entry(sol.clone()).or_insert(0);
            let before = *count;
            *count += d;
            let after = *count;
            assert!(after >= 0, "{}: RANK solution count below zero", r.source);
            if after == 0 {
                state.solutions.remove(&sol);
            }
            if (before > 0) != (after > 0) {
                moved = true;
                let row = self.row(r, &sol);
                if after > 0 {
                    state.sorted.insert(row);
                } else {
                    state.sorted.remove(&row);
                }
            }
        }
        if moved {
            let mut top = Vec::new();
            let mut seen: FxHashSet<u32> = FxHashSet::default();
            let mut position: i64 = 0;
            for row in &state.sorted {
                let item = row.sol[spec.item];
                if seen.contains(&item) {
                    continue;
                }
                if position >= self.count_of(row.sol[spec.limit]) {
                    break;
                }
                position += 1;
                seen.insert(item);
                let mut b = row.sol.clone();
                b[spec.var] = self.terms.borrow_mut().literal(&Value::Int(Integer::from(position))).unwrap();
                self.instantiate(&r.heads, &b, &mut |f| top.push(f));
            }
            state.top = self.replace(&state.top, top);
        }
        self.ranked.insert(ri, state);
    }

    fn aggregate_unit(&mut self, ri: usize, full: bool) {
        let prog = self.prog.clone();
        let r = &prog.rules[ri];
        let spec = r.aggregate.as_ref().unwrap();
        let changes = self.solution_changes(r, full);
        let mut state = self.aggregated.remove(&ri).unwrap_or_default();
        let mut affected: FxHashSet<Vec<u32>> = FxHashSet::default();
        if full && spec.group.is_empty() {
            affected.insert(Vec::new()); // no GROUP BY: one row, even over no solution
        }
        for (sol, d) in changes {
            if d == 0 {
                continue;
            }
            let key: Vec<u32> = spec.group.iter().map(|&v| sol[v]).collect();
            let group = state.groups.entry(key.clone()).or_default();
            let count = group.entry(sol.clone()).or_insert(0);
            *count += d;
            assert!(*count >= 0, "{}: AGGREGATE solution count below zero", r.source);
            if *count == 0 {
                group.remove(&sol);
            }
            if group.is_empty() {
                state.groups.remove(&key);
            }
            affected.insert(key);
        }
        let empty = FxHashMap::default();
        for key in affected {
            let new = match state.groups.get(&key) {
                Some(group) => self.group_row(r, &key, group),
                None if spec.group.is_empty() => self.group_row(r, &key, &empty),
                None => Vec::new(),
            };
            let old = state.heads.remove(&key).unwrap_or_default();
            let kept = self.replace(&old, new);
            if !kept.is_empty() {
                state.heads.insert(key, kept);
            }
        }
        self.aggregated.insert(ri, state);
    }

    /// A group's row (its key, each output over its solutions, then the BINDs and FILTERs beside
    /// the AGGREGATE) and the heads it derives.
    fn group_row(&self, r: &Rule, key: &[u32], solutions: &FxHashMap<Vec<u32>, i32>) -> Vec<Fact> {
        let spec = r.aggregate.as_ref().unwrap();
        let mut b = vec![NONE; r.nvars];
        for (i, &v) in spec.group.iter().enumerate() {
            b[v] = key[i];
        }
        for out in &spec.outputs {
            let value = {
                let terms = self.terms.borrow();
                aggregate(out, solutions.keys(), &terms)
            };
            b[out.var] = match value {
                Some(v) => self.terms.borrow_mut().literal(&v).unwrap_or(NONE),
                None => NONE,
            };
        }
        for lit in &spec.outer {
            match lit {
                Lit::Bind { e, var, .. } => b[*var] = self.eval_term(e, &b),
                Lit::Filter { e, .. } => {
                    if !self.eval_ok(e, &b) {
                        return Vec::new();
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        self.instantiate(&r.heads, &b, &mut |f| out.push(f));
        out
    }

    /// A RANK's limit as a number of positions: none when it is not a number (as the reference).
    fn count_of(&self, id: u32) -> i64 {
        if id == NONE {
            return 0;
        }
        let terms = self.terms.borrow();
        if terms.kind(id) != LITERAL {
            return 0;
        }
        match terms.text(id).trim().parse::<f64>() {
            Ok(x) if x.is_finite() => x.max(0.0).trunc() as i64,
            _ => 0,
        }
    }

    fn recursive_unit(&mut self, u: usize, rules: &[usize]) {
        let prog = self.prog.clone();
        let old = self.recursive.remove(&u).unwrap_or_default();
        for &f in &old {
            self.adjust(f, -1);
        }
        let mut out: FxHashSet<Fact> = FxHashSet::default();
        loop {
            let mut new: Vec<Fact> = Vec::new();
            for &ri in rules {
                let r = &prog.rules[ri];
                self.solve(r, all_lits(r), &mut vec![NONE; r.nvars], ALL, &mut |sol| {
                    self.instantiate(&r.heads, sol, &mut |f| {
                        if !out.contains(&f) {
                            new.push(f);
                        }
                    });
                });
            }
            let mut grew = false;
            for f in new {
                if out.insert(f) {
                    self.adjust(f, 1);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        self.recursive.insert(u, out);
    }

    fn run(&mut self, full: bool) {
        let prog = self.prog.clone();
        for (u, unit) in prog.units.iter().enumerate() {
            match unit {
                Unit::One(ri) => {
                    let r = &prog.rules[*ri];
                    if !full && !self.reads_changes(r) {
                        continue;
                    }
                    if r.rank.is_some() {
                        self.ranked_unit(*ri, full);
                    } else if r.aggregate.is_some() {
                        self.aggregate_unit(*ri, full);
                    } else {
                        self.counted(*ri, full);
                    }
                }
                Unit::Recursive(rules) => {
                    if full || rules.iter().any(|&ri| self.reads_changes(&prog.rules[ri])) {
                        self.recursive_unit(u, rules);
                    }
                }
            }
        }
    }

    /// Everything derived from the base facts, from scratch; returns the inferred facts.
    pub fn materialize(&mut self) -> Vec<Fact> {
        // back to the base facts alone: the derived-only ones out of the index, the counts dropped
        let derived_only: Vec<Fact> = self.facts.iter().filter(|(_, &v)| v & BASE == 0).map(|(f, _)| *f).collect();
        let base_too: Vec<Fact> = self.facts.iter().filter(|(_, &v)| v & BASE != 0).map(|(f, _)| *f).collect();
        for f in derived_only {
            if self.is_read(&f) {
                self.idx.remove(f);
            }
        }
        self.facts = FxHashMap::default();
        for f in base_too {
            if !self.is_read(&f) {
                self.unread_base.insert(f);
            }
        }
        self.ranked.clear();
        self.aggregated.clear();
        self.recursive.clear();
        self.begin();
        self.tracking = false;
        self.run(true);
        self.tracking = true;
        self.begin();
        self.terms.borrow_mut().compact();
        self.inferred()
    }

    /// Base facts added and removed: the inferred facts gained and lost.
    pub fn update(&mut self, added: &[Fact], removed: &[Fact]) -> (Vec<Fact>, Vec<Fact>) {
        self.begin();
        for &f in removed {
            if self.is_base(&f) {
                self.touch(f);
                let count = self.count(&f);
                self.set(f, false, count);
                if count == 0 {
                    self.set_visible(f, false);
                }
            }
        }
        for &f in added {
            if !self.is_base(&f) {
                self.touch(f);
                let count = self.count(&f);
                self.set(f, true, count);
                if count == 0 {
                    self.set_visible(f, true);
                }
            }
        }
        self.run(false);
        let (mut gained, mut lost) = (Vec::new(), Vec::new());
        for (&f, &was) in &self.touched {
            let now = self.is_inferred(&f);
            if now && !was {
                gained.push(f);
            } else if was && !now {
                lost.push(f);
            }
        }
        self.begin();
        (gained, lost)
    }

    pub fn inferred(&self) -> Vec<Fact> {
        self.facts.iter().filter(|(_, &v)| v & BASE == 0 && v > 0).map(|(f, _)| *f).collect()
    }

    pub fn stats(&self) -> (usize, usize, usize, usize) {
        let bytes = self.idx.bytes()
            + self.facts.capacity() * 17
            + self.unread_base.capacity() * 13
            + self.terms.borrow().bytes()
            + self.ranked.values().map(|r| r.solutions.len() * 64 + r.sorted.len() * 160).sum::<usize>();
        (self.idx.len() + self.unread_base.len(), self.facts.len(), self.terms.borrow().len(), bytes)
    }
}

/// How ORDER BY (a RANK's keys) and MIN/MAX order a value: unbound first, then blank nodes, IRIs,
/// literals (by value where comparable, else by lexical form).
fn sort_key(terms: &Terms, val: Option<Val>) -> SortKey {
    match val {
        None => SortKey::Unbound,
        Some(Val::Term(id)) => term_key(terms, id),
        Some(Val::Lit(v)) => {
            let lex = crate::expr::lexical(&v).map(|l| l.0).unwrap_or_default();
            SortKey::Literal(v, lex.into())
        }
    }
}

fn term_key(terms: &Terms, id: u32) -> SortKey {
    let text: Box<str> = terms.text(id).into();
    match terms.kind(id) {
        IRI => SortKey::Iri(text),
        BLANK => SortKey::Blank(text),
        _ => SortKey::Literal(terms.value(id).unwrap_or(Value::Other), text),
    }
}

/// COUNT, SUM, MIN or MAX of an output's expression over a group's solutions (each once: a
/// solution binds every variable of the atoms); None when SPARQL's would be an error (a SUM over
/// something not a number; a MIN or MAX over nothing).
fn aggregate<'a>(
    out: &crate::program::AggOutput,
    solutions: impl Iterator<Item = &'a Vec<u32>>,
    terms: &Terms,
) -> Option<Value> {
    use crate::program::AggFunc;
    let mut values: Vec<Option<Val>> = Vec::new();
    let mut seen: FxHashSet<(u8, String, String, String)> = FxHashSet::default();
    for sol in solutions {
        let eval = Eval { terms, binding: sol };
        let value = match &out.expr {
            None => Some(Val::Term(0)), // COUNT(*): each solution
            Some(e) => eval.eval(e),
        };
        if out.distinct && out.expr.is_some() {
            if let Some(v) = &value {
                if !seen.insert(eval.canonical_key(v)?) {
                    continue;
                }
            }
        }
        values.push(value);
    }
    match out.func {
        AggFunc::Count => Some(Value::Int(Integer::from(values.iter().flatten().count() as i64))),
        AggFunc::Sum => {
            let mut total = Value::Int(Integer::from(0));
            for v in values {
                let eval = Eval { terms, binding: &[] };
                let n = eval.value(&v?)?;
                total = crate::expr::add(total, n)?;
            }
            Some(total)
        }
        AggFunc::Min | AggFunc::Max => {
            let mut best: Option<(SortKey, Value)> = None;
            for v in values.into_iter().flatten() {
                let key = sort_key(terms, Some(v.clone()));
                let value = Eval { terms, binding: &[] }.value(&v).unwrap_or(Value::Other);
                let better = match &best {
                    None => true,
                    Some((k, _)) => {
                        let o = cmp_key(&key, k);
                        if out.func == AggFunc::Min { o == Ordering::Less } else { o == Ordering::Greater }
                    }
                };
                if better {
                    best = Some((key, value));
                }
            }
            best.map(|(_, v)| v).filter(|v| !matches!(v, Value::Other))
        }
    }
}
