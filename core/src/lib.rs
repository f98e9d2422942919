//! engram's compiled core (`engram._core`): the incremental rule engine over interned facts, and
//! the event path of the live business data (`live`).
//!
//! Python parses the rule files (projections/rules/syntax.py) and hands the program over as data
//! (`Program`); each tenant's graph keeps a `State` of the facts its rules read and what they derive,
//! updated by the base facts each batch adds and removes. Terms cross as (kind, value, datatype,
//! language) tuples: 0 an IRI, 1 a blank node, 2 a literal; "" where a part is absent.

mod expr;
mod index;
mod live;
mod program;
mod state;
mod terms;

use index::Fact;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
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

/// One tenant's facts (those the rules read) and what the rules derive from them. Usable from
/// any thread (a graph may be rebuilt off the event loop); the work runs without the GIL.
#[pyclass(module = "engram._core")]
struct State {
    inner: Mutex<state::State>,
}

fn ids(state: &state::State, facts: &[KeyFact]) -> Vec<Fact> {
    facts.iter().map(|(s, p, o)| [state.intern(s), state.intern(p), state.intern(o)]).collect()
}

fn keys(state: &state::State, facts: &[Fact]) -> Vec<KeyFact> {
    facts.iter().map(|[s, p, o]| (state.key(*s), state.key(*p), state.key(*o))).collect()
}

#[pymethods]
impl State {
    #[new]
    fn new(program: &Program) -> Self {
        State { inner: Mutex::new(state::State::new(program.inner.clone())) }
    }

    /// Base facts, before `materialize`.
    fn load(&self, py: Python<'_>, facts: Vec<KeyFact>) {
        py.allow_threads(|| {
            let mut state = self.inner.lock().unwrap();
            let ids = ids(&state, &facts);
            state.load(&ids);
        })
    }

    /// Everything the rules derive from the base facts, from scratch: the inferred facts.
    fn materialize(&self, py: Python<'_>) -> Vec<KeyFact> {
        py.allow_threads(|| {
            let mut state = self.inner.lock().unwrap();
            let out = state.materialize();
            keys(&state, &out)
        })
    }

    /// `materialize` without handing the facts over: the state derives what the store already
    /// holds (a state built again for a graph whose inferences are current); how many.
    fn settle(&self, py: Python<'_>) -> usize {
        py.allow_threads(|| self.inner.lock().unwrap().materialize().len())
    }

    /// Base facts added and removed: (inferred facts gained, inferred facts lost).
    fn update(&self, py: Python<'_>, added: Vec<KeyFact>, removed: Vec<KeyFact>) -> (Vec<KeyFact>, Vec<KeyFact>) {
        py.allow_threads(|| {
            let mut state = self.inner.lock().unwrap();
            let (added, removed) = (ids(&state, &added), ids(&state, &removed));
            let (gained, lost) = state.update(&added, &removed);
            (keys(&state, &gained), keys(&state, &lost))
        })
    }

    fn inferred(&self) -> Vec<KeyFact> {
        let state = self.inner.lock().unwrap();
        keys(&state, &state.inferred())
    }

    /// (facts held, derived facts, terms, bytes held as estimated from capacities)
    fn stats(&self) -> (usize, usize, usize, usize) {
        self.inner.lock().unwrap().stats()
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()?;
    m.add_class::<State>()?;
    m.add_class::<live::LiveCodec>()?;
    m.add_class::<live::LiveRun>()?;
    m.add_function(wrap_pyfunction!(allocated, m)?)?;
    Ok(())
}
