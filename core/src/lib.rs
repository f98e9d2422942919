//! engram's compiled core (`engram._core`): the incremental rule engine over interned facts.
//!
//! Python parses the rule files (projections/rules/syntax.py) and hands the program over as data
//! (`Program`); each tenant's graph keeps a `State` of the facts its rules read and what they derive,
//! updated by the base facts each batch adds and removes. Terms cross as (kind, value, datatype,
//! language) tuples: 0 an IRI, 1 a blank node, 2 a literal; "" where a part is absent.

mod expr;
mod index;
mod program;
mod state;
mod terms;

use index::Fact;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;
use terms::Key;

type KeyFact = (Key, Key, Key);

/// The system allocator, counting the bytes the core holds: what a tenant's state costs, exactly
/// (`allocated()` before and after building one), not an estimate from capacities.
struct Counting;

static ALLOCATED: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as isize - layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bytes the core holds now (every state of this process, and whatever a call has in flight).
#[pyfunction]
fn allocated() -> isize {
    ALLOCATED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A rule program compiled for the core; ValueError names what it does not evaluate.
#[pyclass(frozen, module = "engram._core")]
struct Program {
    inner: Arc<program::Program>,
}

#[pymethods]
impl Program {
    #[new]
    fn new(json: &str) -> PyResult<Self> {
        program::Program::from_json(json).map(|p| Program { inner: Arc::new(p) }).map_err(PyValueError::new_err)
    }

    /// The units the rules run in, producers first: (rule indexes, recursive).
    fn units(&self) -> Vec<(Vec<usize>, bool)> {
        self.inner
            .units
            .iter()
            .map(|u| match u {
                program::Unit::One(r) => (vec![*r], false),
                program::Unit::Recursive(rs) => (rs.clone(), true),
            })
            .collect()
    }
}

/// One tenant's facts (those the rules read) and what the rules derive from them.
#[pyclass(unsendable, module = "engram._core")]
struct State {
    inner: state::State,
}

impl State {
    fn ids(&self, facts: &[KeyFact]) -> Vec<Fact> {
        facts.iter().map(|(s, p, o)| [self.inner.intern(s), self.inner.intern(p), self.inner.intern(o)]).collect()
    }

    fn keys(&self, facts: &[Fact]) -> Vec<KeyFact> {
        facts.iter().map(|[s, p, o]| (self.inner.key(*s), self.inner.key(*p), self.inner.key(*o))).collect()
    }
}

#[pymethods]
impl State {
    #[new]
    fn new(program: &Program) -> Self {
        State { inner: state::State::new(program.inner.clone()) }
    }

    /// Base facts, before `materialize`.
    fn load(&mut self, facts: Vec<KeyFact>) {
        let ids = self.ids(&facts);
        self.inner.load(&ids);
    }

    /// Everything the rules derive from the base facts, from scratch: the inferred facts.
    fn materialize(&mut self) -> Vec<KeyFact> {
        let out = self.inner.materialize();
        self.keys(&out)
    }

    /// Base facts added and removed: (inferred facts gained, inferred facts lost).
    fn update(&mut self, added: Vec<KeyFact>, removed: Vec<KeyFact>) -> (Vec<KeyFact>, Vec<KeyFact>) {
        let (added, removed) = (self.ids(&added), self.ids(&removed));
        let (gained, lost) = self.inner.update(&added, &removed);
        (self.keys(&gained), self.keys(&lost))
    }

    fn inferred(&self) -> Vec<KeyFact> {
        self.keys(&self.inner.inferred())
    }

    /// (facts held, derived facts, terms, bytes held as estimated from capacities)
    fn stats(&self) -> (usize, usize, usize, usize) {
        self.inner.stats()
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()?;
    m.add_class::<State>()?;
    m.add_function(wrap_pyfunction!(allocated, m)?)?;
    Ok(())
}
