//! A rule program as the core runs it: the rules Python parsed (rules/*.dlog), handed over as
//! JSON, their variables numbered, constants listed, expressions compiled, and ordered into units
//! (one rule, or a recursive group) so that what a unit reads is produced by the units before it.

use crate::expr::{compile, compile_key, Expr, Scope};
use crate::terms::Key;
use rustc_hash::FxHashMap;
use serde_json::Value as Json;

const RDF_TYPE: &str = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum T {
    V(usize),
    C(u32), // an index into `Program::consts`: every state interns those first, in order
}

#[derive(Clone, Debug)]
pub struct Atom {
    pub t: [T; 3],
    pub vars: u64,
}

#[derive(Debug)]
pub enum Lit {
    Atom(Atom),
    Neg { atoms: Vec<Atom>, locals: u64, outer: u64 },
    Filter { e: Expr, vars: u64 },
    Bind { e: Expr, var: usize, vars: u64 },
}

#[derive(Debug)]
pub struct RankSpec {
    pub item: usize,
    pub var: usize,
    pub limit: usize,
    pub keys: Vec<(Expr, bool)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AggFunc {
    Count,
    Sum,
    Min,
    Max,
}

#[derive(Debug)]
pub struct AggOutput {
    pub func: AggFunc,
    pub distinct: bool,
    pub expr: Option<Expr>, // None: `*`
    pub var: usize,
}

/// An `AGGREGATE`: its atoms and filters are the rule's `lits` (their solutions are kept, by
/// group), the FILTERs and BINDs beside it run on each group's row (`outer`).
#[derive(Debug)]
pub struct AggSpec {
    pub group: Vec<usize>,
    pub outputs: Vec<AggOutput>,
    pub outer: Vec<Lit>,
}

#[derive(Debug)]
pub struct Rule {
    pub source: String,
    pub lits: Vec<Lit>,
    pub nvars: usize,
    pub heads: Vec<Atom>,
    pub rank: Option<RankSpec>,
    pub aggregate: Option<AggSpec>,
}

pub enum Unit {
    One(usize),
    Recursive(Vec<usize>),
}

pub struct Program {
    pub consts: Vec<Key>,
    pub rules: Vec<Rule>,
    pub units: Vec<Unit>,
    /// What the bodies read, so only those facts are indexed (a fact only concluded, such as a
    /// conflict-set membership, is counted but never joined on): predicates (constants' indexes),
    /// the classes asked for by `[?x, a, :C]`, and whether some atom reads any predicate or class.
    pub read_predicates: Vec<u32>,
    pub read_classes: Vec<u32>,
    pub reads_any_predicate: bool,
    pub reads_any_class: bool,
    pub rdf_type: Option<u32>,
}

struct Compiling<'a> {
    consts: &'a mut Vec<Key>,
    const_ids: &'a mut FxHashMap<Key, u32>,
    vars: FxHashMap<String, usize>,
}

impl Scope for Compiling<'_> {
    fn constant(&mut self, kind: u8, value: &str, datatype: &str, lang: &str) -> u32 {
        let key: Key = (kind, value.to_owned(), datatype.to_owned(), lang.to_owned());
        if let Some(&id) = self.const_ids.get(&key) {
            return id;
        }
        let id = self.consts.len() as u32;
        self.consts.push(key.clone());
        self.const_ids.insert(key, id);
        id
    }

    fn var(&mut self, name: &str) -> usize {
        let next = self.vars.len();
        *self.vars.entry(name.to_owned()).or_insert(next)
    }
}

fn bit(v: usize) -> u64 {
    1u64 << v
}

impl Compiling<'_> {
    fn term(&mut self, j: &Json) -> Result<T, String> {
        if let Some(name) = j.get("v").and_then(Json::as_str) {
            return Ok(T::V(self.var(name)));
        }
        let t = j.get("t").and_then(Json::as_array).ok_or("a term is {v} or {t}")?;
        let s = |i: usize| t.get(i).and_then(Json::as_str).unwrap_or("").to_owned();
        let kind = t.first().and_then(Json::as_u64).ok_or("a term's kind")? as u8;
        Ok(T::C(self.constant(kind, &s(1), &s(2), &s(3))))
    }

    fn atom(&mut self, j: &Json) -> Result<Atom, String> {
        let parts = j.as_array().filter(|a| a.len() == 3).ok_or("an atom is three terms")?;
        let t = [self.term(&parts[0])?, self.term(&parts[1])?, self.term(&parts[2])?];
        let vars = t.iter().fold(0, |acc, term| match term {
            T::V(v) => acc | bit(*v),
            T::C(_) => acc,
        });
        Ok(Atom { t, vars })
    }

    fn atoms(&mut self, j: &Json) -> Result<Vec<Atom>, String> {
        j.as_array().ok_or("a list of atoms")?.iter().map(|a| self.atom(a)).collect()
    }
}

fn expr_vars(e: &Expr) -> u64 {
    match e {
        Expr::Var(v) | Expr::Bound(v) => bit(*v),
        Expr::Const(_) => 0,
        Expr::Or(a, b) | Expr::And(a, b) | Expr::Cmp(a, b, _) | Expr::SameTerm(a, b) | Expr::Arith(a, b, _) => {
            expr_vars(a) | expr_vars(b)
        }
        Expr::Not(a) | Expr::Neg(a) => expr_vars(a),
        Expr::If(a, b, c) => expr_vars(a) | expr_vars(b) | expr_vars(c),
        Expr::Coalesce(items) | Expr::Call(_, items) => items.iter().map(expr_vars).fold(0, |a, b| a | b),
    }
}

impl Program {
    pub fn from_json(text: &str) -> Result<Program, String> {
        let j: Json = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let prefixes: Vec<(String, String)> = j["prefixes"]
            .as_array()
            .ok_or("prefixes")?
            .iter()
            .filter_map(|p| Some((p.get(0)?.as_str()?.to_owned(), p.get(1)?.as_str()?.to_owned())))
            .collect();
        let mut consts = Vec::new();
        let mut const_ids = FxHashMap::default();
        let mut rules = Vec::new();
        for r in j["rules"].as_array().ok_or("rules")? {
            let source = r["source"].as_str().unwrap_or("").to_owned();
            let mut c = Compiling { consts: &mut consts, const_ids: &mut const_ids, vars: FxHashMap::default() };
            let rule = compile_rule(r, &prefixes, &mut c).map_err(|e| format!("{source}: {e}"))?;
            rules.push(rule);
        }
        let units = order(&rules)?;
        let rdf_type = consts.iter().position(|k| k.0 == crate::terms::IRI && k.1 == RDF_TYPE).map(|i| i as u32);
        let (mut read_predicates, mut read_classes) = (Vec::new(), Vec::new());
        let (mut reads_any_predicate, mut reads_any_class) = (false, false);
        for atom in rules.iter().flat_map(body_atoms) {
            match atom.t[1] {
                T::V(_) => reads_any_predicate = true,
                T::C(p) => {
                    read_predicates.push(p);
                    if Some(p) == rdf_type {
                        match atom.t[2] {
                            T::C(c) => read_classes.push(c),
                            T::V(_) => reads_any_class = true,
                        }
                    }
                }
            }
        }
        Ok(Program {
            consts,
            rules,
            units,
            read_predicates,
            read_classes,
            reads_any_predicate,
            reads_any_class,
            rdf_type,
        })
    }
}

fn compile_rule(r: &Json, prefixes: &[(String, String)], c: &mut Compiling) -> Result<Rule, String> {
    let source = r["source"].as_str().unwrap_or("").to_owned();
    let mut lits = Vec::new();
    let mut rank = None;
    let body = r["body"].as_array().ok_or("body")?;
    let aggregated = body.iter().any(|l| l.get("aggregate").is_some());
    let mut aggregate: Option<AggSpec> = None;
    let mut outer: Vec<Lit> = Vec::new();
    let mut negations = Vec::new(); // (index, atoms, declared locals)
    for l in body {
        if let Some(k) = l.get("aggregate") {
            for a in c.atoms(&k["atoms"])? {
                lits.push(Lit::Atom(a));
            }
            for f in k["filters"].as_array().ok_or("AGGREGATE's filters")? {
                let e = compile(f.as_str().ok_or("a filter")?, prefixes, c)?;
                lits.push(Lit::Filter { vars: expr_vars(&e), e });
            }
            let group = k["group"]
                .as_array()
                .ok_or("AGGREGATE's group")?
                .iter()
                .map(|g| g.as_str().map(|n| c.var(n)).ok_or("a group variable"))
                .collect::<Result<Vec<_>, _>>()?;
            let mut outputs = Vec::new();
            for o in k["outputs"].as_array().ok_or("AGGREGATE's outputs")? {
                let func = match o["func"].as_str().unwrap_or("") {
                    "COUNT" => AggFunc::Count,
                    "SUM" => AggFunc::Sum,
                    "MIN" => AggFunc::Min,
                    "MAX" => AggFunc::Max,
                    other => return Err(format!("the aggregate {other} is not evaluated by the core")),
                };
                let text = o["expr"].as_str().ok_or("an aggregate's expression")?.trim();
                let expr = if text == "*" { None } else { Some(compile(text, prefixes, c)?) };
                let var = c.var(o["var"].as_str().ok_or("an aggregate's variable")?);
                outputs.push(AggOutput { func, distinct: o["distinct"].as_bool().unwrap_or(false), expr, var });
            }
            aggregate = Some(AggSpec { group, outputs, outer: Vec::new() });
        } else if aggregated && (l.get("filter").is_some() || l.get("bind").is_some()) {
            // beside an AGGREGATE: on each group's row, BINDs first, as the SPARQL it replaces
            if let Some(text) = l.get("filter").and_then(Json::as_str) {
                let e = compile(text, prefixes, c)?;
                outer.push(Lit::Filter { vars: expr_vars(&e), e });
            } else {
                let e = compile(l["bind"].as_str().ok_or("BIND")?, prefixes, c)?;
                let var = c.var(l["var"].as_str().ok_or("BIND's variable")?);
                outer.insert(0, Lit::Bind { vars: expr_vars(&e), e, var });
            }
        } else if let Some(a) = l.get("atom") {
            lits.push(Lit::Atom(c.atom(a)?));
        } else if let Some(atoms) = l.get("not") {
            let atoms = c.atoms(atoms)?;
            let declared: u64 = l["declared"]
                .as_array()
                .map(|names| names.iter().filter_map(Json::as_str).map(|n| bit(c.var(n))).fold(0, |a, b| a | b))
                .unwrap_or(0);
            negations.push((lits.len(), declared));
            lits.push(Lit::Neg { atoms, locals: 0, outer: 0 });
        } else if let Some(text) = l.get("filter").and_then(Json::as_str) {
            let e = compile(text, prefixes, c)?;
            lits.push(Lit::Filter { vars: expr_vars(&e), e });
        } else if let Some(text) = l.get("bind").and_then(Json::as_str) {
            let e = compile(text, prefixes, c)?;
            let var = c.var(l["var"].as_str().ok_or("BIND's variable")?);
            lits.push(Lit::Bind { vars: expr_vars(&e), e, var });
        } else if let Some(k) = l.get("rank") {
            for a in c.atoms(&k["atoms"])? {
                lits.push(Lit::Atom(a));
            }
            for f in k["filters"].as_array().ok_or("RANK's filters")? {
                let e = compile(f.as_str().ok_or("a filter")?, prefixes, c)?;
                lits.push(Lit::Filter { vars: expr_vars(&e), e });
            }
            let item = c.var(k["item"].as_str().ok_or("RANK's item")?);
            let mut keys = Vec::new();
            for key in k["keys"].as_array().ok_or("RANK's keys")? {
                keys.push(compile_key(key.as_str().ok_or("a key")?, prefixes, c)?);
            }
            let limit = c.var(k["limit"].as_str().ok_or("RANK's limit")?);
            let var = c.var(k["var"].as_str().ok_or("RANK's variable")?);
            rank = Some(RankSpec { item, var, limit, keys });
        } else {
            return Err(format!("a body literal the core does not evaluate: {l}"));
        }
    }
    let heads = c.atoms(&r["heads"])?;
    // bound by the body: positive atoms and BIND targets; a negation's other variables are local
    let mut positive = 0u64;
    let mut bind_targets = 0u64;
    for l in &lits {
        match l {
            Lit::Atom(a) => positive |= a.vars,
            Lit::Bind { var, .. } => bind_targets |= bit(*var),
            _ => {}
        }
    }
    for l in &lits {
        match l {
            Lit::Atom(a) if a.vars & bind_targets != 0 => {
                return Err("a BIND's variable read by an atom".into());
            }
            Lit::Neg { atoms, .. } if atoms.iter().any(|a| a.vars & bind_targets != 0) => {
                return Err("a BIND's variable read under NOT".into());
            }
            _ => {}
        }
    }
    for (i, declared) in negations {
        if let Lit::Neg { atoms, locals, outer } = &mut lits[i] {
            let all = atoms.iter().fold(0, |a, atom| a | atom.vars);
            *locals = (all & !positive) | (all & declared);
            *outer = all & !*locals;
        }
    }
    let nvars = c.vars.len();
    if nvars > 64 {
        return Err("more than 64 variables in one rule".into());
    }
    if lits.len() > 64 {
        return Err("more than 64 body literals in one rule".into());
    }
    if let Some(spec) = aggregate.as_mut() {
        // BINDs in their order, then the FILTERs
        let (mut binds, filters): (Vec<Lit>, Vec<Lit>) = outer.into_iter().partition(|l| matches!(l, Lit::Bind { .. }));
        binds.reverse();
        spec.outer = binds.into_iter().chain(filters).collect();
    }
    Ok(Rule { source, lits, nvars, heads, rank, aggregate })
}

/// Whether a fact of `head` may match `body` (constants that differ rule it out).
fn may_match(head: &Atom, body: &Atom) -> bool {
    head.t.iter().zip(body.t.iter()).all(|(h, b)| match (h, b) {
        (T::C(x), T::C(y)) => x == y,
        _ => true,
    })
}

pub fn body_atoms(rule: &Rule) -> impl Iterator<Item = &Atom> {
    rule.lits.iter().flat_map(|l| -> Box<dyn Iterator<Item = &Atom>> {
        match l {
            Lit::Atom(a) => Box::new(std::iter::once(a)),
            Lit::Neg { atoms, .. } => Box::new(atoms.iter()),
            _ => Box::new(std::iter::empty()),
        }
    })
}

/// The rules in units, producers before readers (Tarjan's strongly connected components).
fn order(rules: &[Rule]) -> Result<Vec<Unit>, String> {
    let n = rules.len();
    let reads: Vec<Vec<usize>> = (0..n)
        .map(|a| {
            (0..n)
                .filter(|&b| rules[b].heads.iter().any(|h| body_atoms(&rules[a]).any(|x| may_match(h, x))))
                .collect()
        })
        .collect();
    struct Tarjan<'a> {
        edges: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on[v] = true;
            for &w in &self.edges[v].clone() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on[w] => self.low[v] = self.low[v].min(i),
                    _ => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                scc.sort_unstable();
                self.out.push(scc);
            }
        }
    }
    let mut t = Tarjan {
        edges: &reads,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let mut units = Vec::new();
    for scc in t.out {
        let recursive = scc.len() > 1 || reads[scc[0]].contains(&scc[0]);
        if !recursive {
            units.push(Unit::One(scc[0]));
            continue;
        }
        for &r in &scc {
            let rule = &rules[r];
            if rule.rank.is_some() || rule.aggregate.is_some() {
                return Err(format!("{}: a RANK or an AGGREGATE in a recursive group", rule.source));
            }
            for l in &rule.lits {
                if let Lit::Neg { atoms, .. } = l {
                    if scc.iter().any(|&p| rules[p].heads.iter().any(|h| atoms.iter().any(|a| may_match(h, a)))) {
                        return Err(format!("{}: NOT of what its own recursive group derives", rule.source));
                    }
                }
            }
        }
        units.push(Unit::Recursive(scc));
    }
    Ok(units)
}
