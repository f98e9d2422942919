//! Terms as dense ids: the facts the rules read hold `u32`s, and each id keeps its RDF form and,
//! for a literal, its typed value (parsed once, when first seen).

use oxsdatatypes::{Boolean, Date, DateTime, Decimal, Double, Float, Integer};
use rustc_hash::FxHashMap;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

pub const NONE: u32 = u32::MAX;
pub const IRI: u8 = 0;
pub const BLANK: u8 = 1;
pub const LITERAL: u8 = 2;

pub const XSD: &str = "http://www.w3.org/2001/XMLSchema#";
pub const XSD_STRING: &str = "http://www.w3.org/2001/XMLSchema#string";
pub const XSD_INTEGER: &str = "http://www.w3.org/2001/XMLSchema#integer";
pub const XSD_DECIMAL: &str = "http://www.w3.org/2001/XMLSchema#decimal";
pub const XSD_DOUBLE: &str = "http://www.w3.org/2001/XMLSchema#double";
pub const XSD_FLOAT: &str = "http://www.w3.org/2001/XMLSchema#float";
pub const XSD_BOOLEAN: &str = "http://www.w3.org/2001/XMLSchema#boolean";
pub const XSD_DATE_TIME: &str = "http://www.w3.org/2001/XMLSchema#dateTime";
pub const XSD_DATE: &str = "http://www.w3.org/2001/XMLSchema#date";
pub const RDF_LANG_STRING: &str = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString";

/// A term as Python hands it over: (kind, value, datatype, language); "" where none.
pub type Key = (u8, String, String, String);

/// A literal's value, as SPARQL's operators see it.
#[derive(Clone, Debug)]
pub enum Value {
    Int(Integer),
    Dec(Decimal),
    Flt(Float),
    Dbl(Double),
    Bool(bool),
    DateTime(DateTime),
    Date(Date),
    Str(String),
    LangStr(String, String),
    Other, // a datatype SPARQL has no operators for here, or an ill-typed lexical form
}

pub struct Term {
    pub kind: u8,
    pub value: Box<str>,
    pub datatype: u16, // index into `Terms::datatypes`
    pub lang: Box<str>,
}

pub struct Terms {
    terms: Vec<Term>,
    values: Vec<Option<Box<Value>>>,
    datatypes: Vec<String>,
    by_hash: FxHashMap<u64, u32>,
    collisions: FxHashMap<u64, Vec<u32>>,
}

fn hash_of(kind: u8, value: &str, datatype: &str, lang: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    (kind, value, datatype, lang).hash(&mut h);
    h.finish()
}

impl Default for Terms {
    fn default() -> Self {
        Self {
            terms: Vec::new(),
            values: Vec::new(),
            datatypes: vec![String::new()],
            by_hash: FxHashMap::default(),
            collisions: FxHashMap::default(),
        }
    }
}

impl Terms {
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    pub fn kind(&self, id: u32) -> u8 {
        self.terms[id as usize].kind
    }

    pub fn get(&self, id: u32) -> &Term {
        &self.terms[id as usize]
    }

    pub fn datatype(&self, id: u32) -> &str {
        &self.datatypes[self.terms[id as usize].datatype as usize]
    }

    pub fn key(&self, id: u32) -> (u8, &str, &str, &str) {
        let t = &self.terms[id as usize];
        (t.kind, &t.value, &self.datatypes[t.datatype as usize], &t.lang)
    }

    fn same(&self, id: u32, kind: u8, value: &str, datatype: &str, lang: &str) -> bool {
        self.key(id) == (kind, value, datatype, lang)
    }

    fn canonical_of(&self, id: u32, kind: u8, value: &str, datatype: &str, lang: &str) -> bool {
        let t = &self.terms[id as usize];
        kind == LITERAL
            && t.kind == LITERAL
            && lang.is_empty()
            && t.lang.is_empty()
            && &*self.datatypes[t.datatype as usize] == datatype
            && match (parse(value, datatype, ""), self.values[id as usize].as_deref()) {
                (Value::Dec(a), Some(Value::Dec(b))) => a == *b,
                (Value::Int(a), Some(Value::Int(b))) => a == *b,
                (Value::Dbl(a), Some(Value::Dbl(b))) => a.is_identical_with(*b),
                (Value::Flt(a), Some(Value::Flt(b))) => a.is_identical_with(*b),
                (Value::Bool(a), Some(Value::Bool(b))) => a == *b,
                (Value::DateTime(a), Some(Value::DateTime(b))) => a.is_identical_with(*b),
                (Value::Date(a), Some(Value::Date(b))) => a.is_identical_with(*b),
                _ => false,
            }
    }

    pub fn find(&self, kind: u8, value: &str, datatype: &str, lang: &str) -> Option<u32> {
        let h = hash_of(kind, value, datatype, lang);
        if let Some(&id) = self.by_hash.get(&h) {
            if self.same(id, kind, value, datatype, lang) {
                return Some(id);
            }
            if let Some(more) = self.collisions.get(&h) {
                return more.iter().copied().find(|&id| self.same(id, kind, value, datatype, lang)).or_else(|| {
                    // a non-canonical form given before: its alias, if the hash is not someone else's
                    more.iter().copied().find(|&id| self.canonical_of(id, kind, value, datatype, lang))
                });
            }
        }
        None
    }

    pub fn intern(&mut self, kind: u8, value: &str, datatype: &str, lang: &str) -> u32 {
        if let Some(id) = self.find(kind, value, datatype, lang) {
            return id;
        }
        // the store keeps these datatypes by value and gives them back in canonical form
        // ("0.0" as decimal is "0"): so does the core, or a fact it derives would not be the store's
        if kind == LITERAL && lang.is_empty() {
            let canonical = match parse(value, datatype, lang) {
                Value::Bool(b) if datatype == XSD_BOOLEAN => Some(b.to_string()),
                Value::Dec(v) if datatype == XSD_DECIMAL => Some(v.to_string()),
                Value::Dbl(v) if datatype == XSD_DOUBLE => Some(v.to_string()),
                Value::Flt(v) if datatype == XSD_FLOAT => Some(v.to_string()),
                Value::Int(v) if datatype == XSD_INTEGER => Some(v.to_string()),
                Value::DateTime(v) => Some(v.to_string()),
                Value::Date(v) => Some(v.to_string()),
                _ => None,
            };
            if let Some(c) = canonical.filter(|c| c != value) {
                let id = self.intern(kind, &c, datatype, lang);
                // the form it was given finds the same id next time
                let h = hash_of(kind, value, datatype, lang);
                self.collisions.entry(h).or_default().push(id);
                self.by_hash.entry(h).or_insert(id);
                return id;
            }
        }
        let id = self.terms.len() as u32;
        let dt = match self.datatypes.iter().position(|d| d == datatype) {
            Some(i) => i as u16,
            None => {
                self.datatypes.push(datatype.to_owned());
                (self.datatypes.len() - 1) as u16
            }
        };
        let value_of = if kind == LITERAL { Some(Box::new(parse(value, datatype, lang))) } else { None };
        self.terms.push(Term { kind, value: value.into(), datatype: dt, lang: lang.into() });
        self.values.push(value_of);
        let h = hash_of(kind, value, datatype, lang);
        if let std::collections::hash_map::Entry::Vacant(e) = self.by_hash.entry(h) {
            e.insert(id);
        } else {
            self.collisions.entry(h).or_default().push(id);
        }
        id
    }

    /// A literal's value; None for an IRI or a blank node.
    pub fn value(&self, id: u32) -> Option<&Value> {
        self.values[id as usize].as_deref()
    }

    /// The literal holding `value`, interned (its canonical form, as oxigraph writes it).
    pub fn literal(&mut self, value: &Value) -> Option<u32> {
        let (lex, dt, lang): (String, &str, &str) = match value {
            Value::Int(v) => (v.to_string(), XSD_INTEGER, ""),
            Value::Dec(v) => (v.to_string(), XSD_DECIMAL, ""),
            Value::Flt(v) => (v.to_string(), XSD_FLOAT, ""),
            Value::Dbl(v) => (v.to_string(), XSD_DOUBLE, ""),
            Value::Bool(v) => (v.to_string(), XSD_BOOLEAN, ""),
            Value::DateTime(v) => (v.to_string(), XSD_DATE_TIME, ""),
            Value::Date(v) => (v.to_string(), XSD_DATE, ""),
            Value::Str(v) => (v.clone(), XSD_STRING, ""),
            Value::LangStr(v, l) => (v.clone(), RDF_LANG_STRING, l.as_str()),
            Value::Other => return None,
        };
        Some(self.intern(LITERAL, &lex, dt, lang))
    }

    pub fn bytes(&self) -> usize {
        let heap: usize = self.terms.iter().map(|t| t.value.len() + t.lang.len()).sum();
        self.terms.capacity() * std::mem::size_of::<Term>()
            + self.values.capacity() * 8
            + self.values.iter().flatten().count() * std::mem::size_of::<Value>()
            + heap
            + self.by_hash.capacity() * 13
    }
}

fn parse(value: &str, datatype: &str, lang: &str) -> Value {
    if !lang.is_empty() {
        return Value::LangStr(value.to_owned(), lang.to_owned());
    }
    let Some(local) = datatype.strip_prefix(XSD) else { return Value::Other };
    let parsed = match local {
        "string" => return Value::Str(value.to_owned()),
        "boolean" => Boolean::from_str(value).ok().map(|b| Value::Bool(b.into())),
        "decimal" => Decimal::from_str(value).ok().map(Value::Dec),
        "double" => Double::from_str(value).ok().map(Value::Dbl),
        "float" => Float::from_str(value).ok().map(Value::Flt),
        "dateTime" => DateTime::from_str(value).ok().map(Value::DateTime),
        "date" => Date::from_str(value).ok().map(Value::Date),
        "integer" | "int" | "long" | "short" | "byte" | "nonNegativeInteger" | "positiveInteger"
        | "nonPositiveInteger" | "negativeInteger" | "unsignedInt" | "unsignedLong" | "unsignedShort"
        | "unsignedByte" => Integer::from_str(value).ok().map(Value::Int),
        _ => None,
    };
    parsed.unwrap_or(Value::Other)
}
