//! FILTER, BIND and RANK key expressions: parsed by spargebra (as oxigraph parses them) and
//! evaluated over interned terms with oxsdatatypes (oxigraph's own arithmetic and comparisons).
//! An expression this module does not evaluate is refused when the program is loaded, never
//! guessed at: the engine then is not used for that program.

use crate::terms::{Terms, Value, BLANK, IRI, LITERAL, NONE, XSD};
use oxsdatatypes::{Decimal, Double, Float, Integer};
use spargebra::algebra::{Expression, Function, GraphPattern, OrderExpression};
use spargebra::term::Literal as SLiteral;
use spargebra::{Query, SparqlParser};
use std::cmp::Ordering;

#[derive(Clone, Debug)]
pub enum Expr {
    Const(u32),
    Var(usize),
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Cmp(Box<Expr>, Box<Expr>, CmpOp),
    SameTerm(Box<Expr>, Box<Expr>),
    Arith(Box<Expr>, Box<Expr>, char),
    Neg(Box<Expr>),
    Bound(usize),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    Coalesce(Vec<Expr>),
    Call(Func, Vec<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CmpOp {
    Eq,
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Clone, Copy, Debug)]
pub enum Func {
    Str,
    Lang,
    Datatype,
    Abs,
    Ceil,
    Floor,
    Round,
    Concat,
    StrLen,
    UCase,
    LCase,
    Contains,
    StrStarts,
    StrEnds,
    IsIri,
    IsBlank,
    IsLiteral,
    IsNumeric,
}

/// What the program's parts resolve against while compiling: constants interned, variables numbered.
pub trait Scope {
    fn constant(&mut self, kind: u8, value: &str, datatype: &str, lang: &str) -> u32;
    fn var(&mut self, name: &str) -> usize;
}

fn parser(prefixes: &[(String, String)]) -> Result<SparqlParser, String> {
    let mut parser = SparqlParser::new();
    for (name, iri) in prefixes {
        parser = parser.with_prefix(name, iri).map_err(|e| e.to_string())?;
    }
    Ok(parser)
}

fn parse_query(text: &str, prefixes: &[(String, String)]) -> Result<GraphPattern, String> {
    match parser(prefixes)?.parse_query(text).map_err(|e| format!("{e} in {text:?}"))? {
        Query::Select { pattern, .. } => Ok(pattern),
        _ => Err(format!("not a SELECT: {text}")),
    }
}

/// A FILTER's or BIND's expression, compiled.
pub fn compile(text: &str, prefixes: &[(String, String)], scope: &mut dyn Scope) -> Result<Expr, String> {
    let pattern = parse_query(&format!("SELECT * WHERE {{ BIND(({text}) AS ?__engram_out) }}"), prefixes)?;
    fn find(p: &GraphPattern) -> Option<&Expression> {
        match p {
            GraphPattern::Extend { expression, .. } => Some(expression),
            GraphPattern::Project { inner, .. } | GraphPattern::Distinct { inner } => find(inner),
            _ => None,
        }
    }
    let e = find(&pattern).ok_or_else(|| format!("no expression in {text:?}"))?;
    lower(e, scope)
}

/// A RANK's ORDER BY condition (`DESC(?i)`, `?t`, `STR(?m)`), compiled; true when descending.
pub fn compile_key(text: &str, prefixes: &[(String, String)], scope: &mut dyn Scope) -> Result<(Expr, bool), String> {
    let pattern = parse_query(&format!("SELECT * WHERE {{ }} ORDER BY {text}"), prefixes)?;
    fn find(p: &GraphPattern) -> Option<&OrderExpression> {
        match p {
            GraphPattern::OrderBy { expression, .. } => expression.first(),
            GraphPattern::Project { inner, .. } | GraphPattern::Distinct { inner } => find(inner),
            _ => None,
        }
    }
    match find(&pattern).ok_or_else(|| format!("no ORDER BY condition in {text:?}"))? {
        OrderExpression::Asc(e) => Ok((lower(e, scope)?, false)),
        OrderExpression::Desc(e) => Ok((lower(e, scope)?, true)),
    }
}

fn lower(e: &Expression, scope: &mut dyn Scope) -> Result<Expr, String> {
    let b = |e: &Expression, scope: &mut dyn Scope| lower(e, scope).map(Box::new);
    Ok(match e {
        Expression::NamedNode(n) => Expr::Const(scope.constant(IRI, n.as_str(), "", "")),
        Expression::Literal(l) => Expr::Const(literal(l, scope)),
        Expression::Variable(v) => Expr::Var(scope.var(v.as_str())),
        Expression::Or(a, c) => Expr::Or(b(a, scope)?, b(c, scope)?),
        Expression::And(a, c) => Expr::And(b(a, scope)?, b(c, scope)?),
        Expression::Not(a) => Expr::Not(b(a, scope)?),
        Expression::Equal(a, c) => Expr::Cmp(b(a, scope)?, b(c, scope)?, CmpOp::Eq),
        Expression::Greater(a, c) => Expr::Cmp(b(a, scope)?, b(c, scope)?, CmpOp::Gt),
        Expression::GreaterOrEqual(a, c) => Expr::Cmp(b(a, scope)?, b(c, scope)?, CmpOp::Ge),
        Expression::Less(a, c) => Expr::Cmp(b(a, scope)?, b(c, scope)?, CmpOp::Lt),
        Expression::LessOrEqual(a, c) => Expr::Cmp(b(a, scope)?, b(c, scope)?, CmpOp::Le),
        Expression::SameTerm(a, c) => Expr::SameTerm(b(a, scope)?, b(c, scope)?),
        Expression::Add(a, c) => Expr::Arith(b(a, scope)?, b(c, scope)?, '+'),
        Expression::Subtract(a, c) => Expr::Arith(b(a, scope)?, b(c, scope)?, '-'),
        Expression::Multiply(a, c) => Expr::Arith(b(a, scope)?, b(c, scope)?, '*'),
        Expression::Divide(a, c) => Expr::Arith(b(a, scope)?, b(c, scope)?, '/'),
        Expression::UnaryPlus(a) => Expr::Arith(Box::new(Expr::Const(scope.constant(LITERAL, "0", &format!("{XSD}integer"), ""))), b(a, scope)?, '+'),
        Expression::UnaryMinus(a) => Expr::Neg(b(a, scope)?),
        Expression::Bound(v) => Expr::Bound(scope.var(v.as_str())),
        Expression::If(a, c, d) => Expr::If(b(a, scope)?, b(c, scope)?, b(d, scope)?),
        Expression::Coalesce(items) => Expr::Coalesce(items.iter().map(|i| lower(i, scope)).collect::<Result<_, _>>()?),
        Expression::In(a, items) => {
            // a IN (x, y) is a = x || a = y, with SPARQL's errors
            let mut out: Option<Expr> = None;
            for item in items {
                let eq = Expr::Cmp(b(a, scope)?, b(item, scope)?, CmpOp::Eq);
                out = Some(match out {
                    None => eq,
                    Some(prev) => Expr::Or(Box::new(prev), Box::new(eq)),
                });
            }
            out.ok_or("IN () is not supported")?
        }
        Expression::FunctionCall(f, args) => {
            let func = match f {
                Function::Str => Func::Str,
                Function::Lang => Func::Lang,
                Function::Datatype => Func::Datatype,
                Function::Abs => Func::Abs,
                Function::Ceil => Func::Ceil,
                Function::Floor => Func::Floor,
                Function::Round => Func::Round,
                Function::Concat => Func::Concat,
                Function::StrLen => Func::StrLen,
                Function::UCase => Func::UCase,
                Function::LCase => Func::LCase,
                Function::Contains => Func::Contains,
                Function::StrStarts => Func::StrStarts,
                Function::StrEnds => Func::StrEnds,
                Function::IsIri => Func::IsIri,
                Function::IsBlank => Func::IsBlank,
                Function::IsLiteral => Func::IsLiteral,
                Function::IsNumeric => Func::IsNumeric,
                other => return Err(format!("the function {other} is not evaluated by the core")),
            };
            Expr::Call(func, args.iter().map(|a| lower(a, scope)).collect::<Result<_, _>>()?)
        }
        other => return Err(format!("the expression {other} is not evaluated by the core")),
    })
}

fn literal(l: &SLiteral, scope: &mut dyn Scope) -> u32 {
    match l.language() {
        Some(lang) => scope.constant(LITERAL, l.value(), crate::terms::RDF_LANG_STRING, lang),
        None => scope.constant(LITERAL, l.value(), l.datatype().as_str(), ""),
    }
}

/// A value met while evaluating: a term as it stands, or a computed literal.
#[derive(Clone, Debug)]
pub enum Val {
    Term(u32),
    Lit(Value),
}

pub struct Eval<'a> {
    pub terms: &'a Terms,
    pub binding: &'a [u32],
}

type R = Option<Val>; // None: an error (unbound, a type error), as SPARQL has them

impl Eval<'_> {
    pub fn eval(&self, e: &Expr) -> R {
        match e {
            Expr::Const(id) => Some(Val::Term(*id)),
            Expr::Var(v) => match self.binding.get(*v) {
                Some(&id) if id != NONE => Some(Val::Term(id)),
                _ => None,
            },
            Expr::Or(a, b) => match (self.ebv(a), self.ebv(b)) {
                (Some(true), _) | (_, Some(true)) => Some(bool_val(true)),
                (Some(false), Some(false)) => Some(bool_val(false)),
                _ => None,
            },
            Expr::And(a, b) => match (self.ebv(a), self.ebv(b)) {
                (Some(false), _) | (_, Some(false)) => Some(bool_val(false)),
                (Some(true), Some(true)) => Some(bool_val(true)),
                _ => None,
            },
            Expr::Not(a) => self.ebv(a).map(|b| bool_val(!b)),
            Expr::Cmp(a, b, op) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let out = if *op == CmpOp::Eq {
                    self.equal(&a, &b)?
                } else {
                    let ord = self.compare(&a, &b)?;
                    match op {
                        CmpOp::Gt => ord == Ordering::Greater,
                        CmpOp::Ge => ord != Ordering::Less,
                        CmpOp::Lt => ord == Ordering::Less,
                        CmpOp::Le => ord != Ordering::Greater,
                        CmpOp::Eq => unreachable!(),
                    }
                };
                Some(bool_val(out))
            }
            Expr::SameTerm(a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                Some(bool_val(match (&a, &b) {
                    (Val::Term(x), Val::Term(y)) => x == y,
                    _ => self.canonical(&a) == self.canonical(&b),
                }))
            }
            Expr::Arith(a, b, op) => {
                let (a, b) = (self.number(&self.eval(a)?)?, self.number(&self.eval(b)?)?);
                arith(a, b, *op).map(Val::Lit)
            }
            Expr::Neg(a) => match self.number(&self.eval(a)?)? {
                Value::Int(v) => v.checked_neg().map(|v| Val::Lit(Value::Int(v))),
                Value::Dec(v) => v.checked_neg().map(|v| Val::Lit(Value::Dec(v))),
                Value::Flt(v) => Some(Val::Lit(Value::Flt(-v))),
                Value::Dbl(v) => Some(Val::Lit(Value::Dbl(-v))),
                _ => None,
            },
            Expr::Bound(v) => Some(bool_val(self.binding.get(*v).is_some_and(|&id| id != NONE))),
            Expr::If(c, a, b) => {
                if self.ebv(c)? {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Expr::Coalesce(items) => items.iter().find_map(|i| self.eval(i)),
            Expr::Call(f, args) => self.call(*f, args),
        }
    }

    /// The effective boolean value; None is an error (a FILTER drops the solution).
    pub fn ebv(&self, e: &Expr) -> Option<bool> {
        match self.value(&self.eval(e)?)? {
            Value::Bool(b) => Some(b),
            Value::Str(s) => Some(!s.is_empty()),
            Value::LangStr(s, _) => Some(!s.is_empty()),
            Value::Int(v) => Some(v != Integer::from(0)),
            Value::Dec(v) => Some(v != Decimal::from(0)),
            Value::Flt(v) => Some(!(v == Float::from(0.0) || f32::from(v).is_nan())),
            Value::Dbl(v) => Some(!(v == Double::from(0.0) || f64::from(v).is_nan())),
            _ => None,
        }
    }

    /// A literal's value; None for an IRI or a blank node.
    pub fn value(&self, v: &Val) -> Option<Value> {
        match v {
            Val::Lit(v) => Some(v.clone()),
            Val::Term(id) => self.terms.value(*id),
        }
    }

    fn number(&self, v: &Val) -> Option<Value> {
        match self.value(v)? {
            n @ (Value::Int(_) | Value::Dec(_) | Value::Flt(_) | Value::Dbl(_)) => Some(n),
            _ => None,
        }
    }

    fn is_kind(&self, v: &Val, kind: u8) -> bool {
        match v {
            Val::Lit(_) => kind == LITERAL,
            Val::Term(id) => self.terms.kind(*id) == kind,
        }
    }

    /// A value as (kind, lexical, datatype, language): what DISTINCT compares.
    pub fn canonical_key(&self, v: &Val) -> Option<(u8, String, String, String)> {
        self.canonical(v)
    }

    /// A value as (kind, lexical, datatype, language): how two values are the same term.
    fn canonical(&self, v: &Val) -> Option<(u8, String, String, String)> {
        match v {
            Val::Term(id) => {
                let (k, value, dt, lang) = self.terms.key(*id);
                Some((k, value.to_owned(), dt.to_owned(), lang.to_owned()))
            }
            Val::Lit(value) => {
                let (lex, dt, lang) = lexical(value)?;
                Some((LITERAL, lex, dt.to_owned(), lang))
            }
        }
    }

    /// RDFterm-equal with the XSD equalities: values compared where both have one SPARQL
    /// compares, the same term otherwise, an error for two different literals of unknown types.
    fn equal(&self, a: &Val, b: &Val) -> Option<bool> {
        if !self.is_kind(a, LITERAL) || !self.is_kind(b, LITERAL) {
            return Some(self.canonical(a) == self.canonical(b));
        }
        let (x, y) = (self.value(a)?, self.value(b)?);
        match (&x, &y) {
            (Value::Other, _) | (_, Value::Other) => {
                if self.canonical(a) == self.canonical(b) {
                    Some(true)
                } else {
                    None
                }
            }
            (Value::Bool(p), Value::Bool(q)) => Some(p == q),
            (Value::Str(p), Value::Str(q)) => Some(p == q),
            (Value::LangStr(p, l), Value::LangStr(q, m)) => Some(p == q && l.eq_ignore_ascii_case(m)),
            (Value::DateTime(p), Value::DateTime(q)) => p.partial_cmp(q).map(|o| o == Ordering::Equal),
            (Value::Date(p), Value::Date(q)) => p.partial_cmp(q).map(|o| o == Ordering::Equal),
            _ if is_numeric(&x) && is_numeric(&y) => numeric_cmp(&x, &y).map(|o| o == Ordering::Equal),
            _ => Some(false), // values of different kinds SPARQL compares: not equal
        }
    }

    /// `<`, `>` and the rest: numbers, strings, booleans, times; anything else is an error.
    fn compare(&self, a: &Val, b: &Val) -> Option<Ordering> {
        let (x, y) = (self.value(a)?, self.value(b)?);
        match (&x, &y) {
            (Value::Bool(p), Value::Bool(q)) => Some(p.cmp(q)),
            (Value::Str(p), Value::Str(q)) => Some(p.cmp(q)),
            (Value::LangStr(p, l), Value::LangStr(q, m)) if l.eq_ignore_ascii_case(m) => Some(p.cmp(q)),
            (Value::DateTime(p), Value::DateTime(q)) => p.partial_cmp(q),
            (Value::Date(p), Value::Date(q)) => p.partial_cmp(q),
            _ if is_numeric(&x) && is_numeric(&y) => numeric_cmp(&x, &y),
            _ => None,
        }
    }

    fn string_arg(&self, v: &Val) -> Option<(String, Option<String>)> {
        match self.value(v)? {
            Value::Str(s) => Some((s, None)),
            Value::LangStr(s, l) => Some((s, Some(l))),
            _ => None,
        }
    }

    fn call(&self, f: Func, args: &[Expr]) -> R {
        let arg = |i: usize| args.get(i).and_then(|a| self.eval(a));
        let lit = |v: Value| Some(Val::Lit(v));
        match f {
            Func::Str => {
                let v = arg(0)?;
                match &v {
                    Val::Term(id) => match self.terms.kind(*id) {
                        BLANK => None,
                        _ => lit(Value::Str(self.terms.text(*id).to_string())),
                    },
                    Val::Lit(value) => lit(Value::Str(lexical(value)?.0)),
                }
            }
            Func::Lang => {
                let v = arg(0)?;
                if !self.is_kind(&v, LITERAL) {
                    return None;
                }
                match self.value(&v)? {
                    Value::LangStr(_, l) => lit(Value::Str(l)),
                    _ => lit(Value::Str(String::new())),
                }
            }
            Func::Datatype => {
                let v = arg(0)?;
                match &v {
                    Val::Term(id) if self.terms.kind(*id) == LITERAL => {
                        let dt = self.terms.datatype(*id);
                        self.terms.find(IRI, dt, "", "").map(Val::Term)
                    }
                    _ => None,
                }
            }
            Func::Abs | Func::Ceil | Func::Floor | Func::Round => {
                let n = self.number(&arg(0)?)?;
                let out = match n {
                    Value::Int(v) => match f {
                        Func::Abs => v.checked_abs().map(Value::Int),
                        _ => Some(Value::Int(v)),
                    },
                    Value::Dec(v) => match f {
                        Func::Abs => v.checked_abs(),
                        Func::Ceil => v.checked_ceil(),
                        Func::Floor => v.checked_floor(),
                        _ => v.checked_round(),
                    }
                    .map(Value::Dec),
                    Value::Flt(v) => Some(Value::Flt(match f {
                        Func::Abs => v.abs(),
                        Func::Ceil => v.ceil(),
                        Func::Floor => v.floor(),
                        _ => v.round(),
                    })),
                    Value::Dbl(v) => Some(Value::Dbl(match f {
                        Func::Abs => v.abs(),
                        Func::Ceil => v.ceil(),
                        Func::Floor => v.floor(),
                        _ => v.round(),
                    })),
                    _ => None,
                };
                out.map(Val::Lit)
            }
            Func::Concat => {
                let mut text = String::new();
                let mut lang: Option<Option<String>> = None;
                for a in args {
                    let (s, l) = self.string_arg(&self.eval(a)?)?;
                    text.push_str(&s);
                    lang = Some(match lang {
                        None => l,
                        Some(prev) if prev == l => prev,
                        Some(_) => None,
                    });
                }
                match lang.flatten() {
                    Some(l) => lit(Value::LangStr(text, l)),
                    None => lit(Value::Str(text)),
                }
            }
            Func::StrLen => {
                let (s, _) = self.string_arg(&arg(0)?)?;
                lit(Value::Int(Integer::from(s.chars().count() as i64)))
            }
            Func::UCase | Func::LCase => {
                let (s, l) = self.string_arg(&arg(0)?)?;
                let s = if matches!(f, Func::UCase) { s.to_uppercase() } else { s.to_lowercase() };
                match l {
                    Some(l) => lit(Value::LangStr(s, l)),
                    None => lit(Value::Str(s)),
                }
            }
            Func::Contains | Func::StrStarts | Func::StrEnds => {
                let (a, la) = self.string_arg(&arg(0)?)?;
                let (b, lb) = self.string_arg(&arg(1)?)?;
                if lb.is_some() && la != lb {
                    return None;
                }
                lit(Value::Bool(match f {
                    Func::Contains => a.contains(&b),
                    Func::StrStarts => a.starts_with(&b),
                    _ => a.ends_with(&b),
                }))
            }
            Func::IsIri => Some(bool_val(self.is_kind(&arg(0)?, IRI))),
            Func::IsBlank => Some(bool_val(self.is_kind(&arg(0)?, BLANK))),
            Func::IsLiteral => Some(bool_val(self.is_kind(&arg(0)?, LITERAL))),
            Func::IsNumeric => {
                let v = arg(0)?;
                Some(bool_val(self.value(&v).is_some_and(|x| is_numeric(&x))))
            }
        }
    }
}

fn bool_val(b: bool) -> Val {
    Val::Lit(Value::Bool(b))
}

pub fn is_numeric(v: &Value) -> bool {
    matches!(v, Value::Int(_) | Value::Dec(_) | Value::Flt(_) | Value::Dbl(_))
}

/// The lexical form, datatype and language a computed value is written with (oxigraph's forms).
pub fn lexical(v: &Value) -> Option<(String, &'static str, String)> {
    use crate::terms::*;
    Some(match v {
        Value::Int(x) => (x.to_string(), XSD_INTEGER, String::new()),
        Value::Dec(x) => (x.to_string(), XSD_DECIMAL, String::new()),
        Value::Flt(x) => (x.to_string(), XSD_FLOAT, String::new()),
        Value::Dbl(x) => (x.to_string(), XSD_DOUBLE, String::new()),
        Value::Bool(x) => (x.to_string(), XSD_BOOLEAN, String::new()),
        Value::DateTime(x) => (x.to_string(), XSD_DATE_TIME, String::new()),
        Value::Date(x) => (x.to_string(), XSD_DATE, String::new()),
        Value::Str(x) => (x.clone(), XSD_STRING, String::new()),
        Value::LangStr(x, l) => (x.clone(), RDF_LANG_STRING, l.clone()),
        Value::Other => return None,
    })
}

fn rank_of(v: &Value) -> u8 {
    match v {
        Value::Int(_) => 0,
        Value::Dec(_) => 1,
        Value::Flt(_) => 2,
        _ => 3,
    }
}

fn as_dec(v: &Value) -> Option<Decimal> {
    match v {
        Value::Int(x) => Some(Decimal::from(*x)),
        Value::Dec(x) => Some(*x),
        _ => None,
    }
}

fn as_flt(v: &Value) -> Option<Float> {
    match v {
        Value::Int(x) => Some(Float::from(Double::from(*x))),
        Value::Dec(x) => Some(Float::from(*x)),
        Value::Flt(x) => Some(*x),
        _ => None,
    }
}

fn as_dbl(v: &Value) -> Option<Double> {
    match v {
        Value::Int(x) => Some(Double::from(*x)),
        Value::Dec(x) => Some(Double::from(*x)),
        Value::Flt(x) => Some(Double::from(*x)),
        Value::Dbl(x) => Some(*x),
        _ => None,
    }
}

/// `a + b` with XPath's numeric promotion (a SUM's step); None unless both are numbers.
pub fn add(a: Value, b: Value) -> Option<Value> {
    if !is_numeric(&a) || !is_numeric(&b) {
        return None;
    }
    arith(a, b, '+')
}

/// XPath's numeric promotion: integer < decimal < float < double.
fn arith(a: Value, b: Value, op: char) -> Option<Value> {
    let level = rank_of(&a).max(rank_of(&b));
    match level {
        0 => {
            let (Value::Int(x), Value::Int(y)) = (a, b) else { return None };
            match op {
                '+' => x.checked_add(y).map(Value::Int),
                '-' => x.checked_sub(y).map(Value::Int),
                '*' => x.checked_mul(y).map(Value::Int),
                _ => Decimal::from(x).checked_div(Decimal::from(y)).map(Value::Dec),
            }
        }
        1 => {
            let (x, y) = (as_dec(&a)?, as_dec(&b)?);
            match op {
                '+' => x.checked_add(y),
                '-' => x.checked_sub(y),
                '*' => x.checked_mul(y),
                _ => x.checked_div(y),
            }
            .map(Value::Dec)
        }
        2 => {
            let (x, y) = (as_flt(&a)?, as_flt(&b)?);
            Some(Value::Flt(match op {
                '+' => x + y,
                '-' => x - y,
                '*' => x * y,
                _ => x / y,
            }))
        }
        _ => {
            let (x, y) = (as_dbl(&a)?, as_dbl(&b)?);
            Some(Value::Dbl(match op {
                '+' => x + y,
                '-' => x - y,
                '*' => x * y,
                _ => x / y,
            }))
        }
    }
}

pub fn numeric_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match rank_of(a).max(rank_of(b)) {
        0 => match (a, b) {
            (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
            _ => None,
        },
        1 => as_dec(a)?.partial_cmp(&as_dec(b)?),
        2 => as_flt(a)?.partial_cmp(&as_flt(b)?),
        _ => as_dbl(a)?.partial_cmp(&as_dbl(b)?),
    }
}
