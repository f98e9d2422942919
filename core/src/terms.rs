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

/// 16 bytes: the text lives in one arena (`Terms::text`), not an allocation a term.
pub struct Term {
    start: u32,
    len: u32,
    pub kind: u8,
    pub datatype: u16, // index into `Terms::datatypes`
    pub lang: u16,     // index into `Terms::langs`
}

pub struct Terms {
    terms: Vec<Term>,
    text: String,
    datatypes: Vec<String>,
    langs: Vec<String>,
    by_text: hashbrown::HashTable<u32>,
    // a non-canonical form given once (a rule's "0.0" for the store's "0"): its canonical term
    aliases: FxHashMap<Key, u32>,
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
            text: String::new(),
            datatypes: vec![String::new()],
            langs: vec![String::new()],
            by_text: hashbrown::HashTable::new(),
            aliases: FxHashMap::default(),
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

    fn text_of(&self, t: &Term) -> &str {
        &self.text[t.start as usize..(t.start + t.len) as usize]
    }

    /// A term's text: an IRI's, a blank node's label, a literal's lexical form.
    pub fn text(&self, id: u32) -> &str {
        self.text_of(&self.terms[id as usize])
    }

    pub fn datatype(&self, id: u32) -> &str {
        &self.datatypes[self.terms[id as usize].datatype as usize]
    }

    pub fn key(&self, id: u32) -> (u8, &str, &str, &str) {
        let t = &self.terms[id as usize];
        (t.kind, self.text_of(t), &self.datatypes[t.datatype as usize], &self.langs[t.lang as usize])
    }

    fn same(&self, id: u32, kind: u8, value: &str, datatype: &str, lang: &str) -> bool {
        self.key(id) == (kind, value, datatype, lang)
    }

    pub fn find(&self, kind: u8, value: &str, datatype: &str, lang: &str) -> Option<u32> {
        let h = hash_of(kind, value, datatype, lang);
        if let Some(&id) = self.by_text.find(h, |&id| self.same(id, kind, value, datatype, lang)) {
            return Some(id);
        }
        if self.aliases.is_empty() {
            return None;
        }
        self.aliases.get(&(kind, value.to_owned(), datatype.to_owned(), lang.to_owned())).copied()
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
                self.aliases.insert((kind, value.to_owned(), datatype.to_owned(), lang.to_owned()), id);
                return id;
            }
        }
        let id = self.terms.len() as u32;
        assert!(id < 1 << 31, "more than 2^31 terms in one tenant's state"); // the index's tag bit
        let dt = small_index(&mut self.datatypes, datatype);
        let lang_index = small_index(&mut self.langs, lang);
        let start = self.text.len();
        assert!(start + value.len() < u32::MAX as usize, "a tenant's terms hold more than 4 GB of text");
        self.text.push_str(value);
        self.terms.push(Term { start: start as u32, len: value.len() as u32, kind, datatype: dt, lang: lang_index });
        let h = hash_of(kind, value, datatype, lang);
        let (terms, text) = (&self.terms, &self.text);
        let (datatypes, langs) = (&self.datatypes, &self.langs);
        self.by_text.insert_unique(h, id, |&other| {
            let t = &terms[other as usize];
            let value = &text[t.start as usize..(t.start + t.len) as usize];
            hash_of(t.kind, value, &datatypes[t.datatype as usize], &langs[t.lang as usize])
        });
        id
    }

    /// A literal's value (parsed when asked: a few of the terms are ever compared, and keeping
    /// every one parsed cost more memory than the parse costs time); None for an IRI or a blank node.
    pub fn value(&self, id: u32) -> Option<Value> {
        let t = &self.terms[id as usize];
        if t.kind != LITERAL {
            return None;
        }
        Some(parse(self.text_of(t), &self.datatypes[t.datatype as usize], &self.langs[t.lang as usize]))
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

    /// Gives back the room the arenas grew into (after a state is built, its biggest growth).
    pub fn compact(&mut self) {
        self.text.shrink_to_fit();
        self.terms.shrink_to_fit();
    }

    pub fn bytes(&self) -> usize {
        let heap = self.text.capacity();
        self.terms.capacity() * std::mem::size_of::<Term>()
            + self.aliases.len() * 120
            + heap
            + self.by_text.capacity() * 5
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

fn small_index(table: &mut Vec<String>, name: &str) -> u16 {
    match table.iter().position(|d| d == name) {
        Some(i) => i as u16,
        None => {
            // datatypes and languages come from the projection's own vocabulary: a handful
            assert!(table.len() < u16::MAX as usize, "more than 65,535 datatypes or languages");
            table.push(name.to_owned());
            (table.len() - 1) as u16
        }
    }
}
