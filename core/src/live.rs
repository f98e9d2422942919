//! The event path of the live business data (`KpiObserved`, `SpendObserved`, `ClockTicked`) for a
//! tenant's run of records: Avro decoding, the checks, the content digest, the plan and the run's
//! net delta, with no Python object per event.
//!
//! It takes only what is plainly valid. A record it cannot decide exactly as the Python path would
//! (another writer schema, another event type, a value a check refuses, an id applied before) makes
//! `decode` answer None, and the run goes through the Python path (`projections/plan.py`), which
//! refuses it with its reason. The differential test (`tests/projections/test_live_core.py`) holds
//! the two paths equal on random runs.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustc_hash::{FxHashMap, FxHashSet};
use sha2::{Digest, Sha256};
use std::fmt::Write;

const ENGRAM: &str = "https://engram.dev/ns#";
const XSD_DATETIME: &str = "http://www.w3.org/2001/XMLSchema#dateTime";
const XSD_DOUBLE: &str = "http://www.w3.org/2001/XMLSchema#double";
const RDF_TYPE: &str = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>";
const COMPANY: &str = "<urn:engram:company>";
const CLOCK: &str = "<urn:engram:clock>";
// the times it takes: years 1900-8999, far inside what Python's datetime and Avro hold
const MIN_MS: i64 = -2_208_988_800_000;
const MAX_MS: i64 = 221_845_392_000_000;

/// What the layout of the current Envelope must be for this reader; Python hands the schema's
/// (`live_core.layout`), and a different one leaves every record to the Python path.
const LAYOUT: &[&str] = &[
    "event_id:string",
    "tenant:string",
    "occurred_at:long",
    "actor:Actor(id:string,role:string,on_behalf_of:null|string)",
    "source:enum",
    "purpose:null|string",
    "correlation_id:null|string",
    "occurred_at_given:boolean",
    "payload:union",
    "KpiObserved(metric:string,value:double,period:string)",
    "SpendObserved(platform:string,amount:double,currency:string,period:string)",
    "ClockTicked(now:long)",
];

#[derive(Clone)]
enum Payload {
    Kpi { metric: String, value: f64, period: String },
    Spend { platform: String, amount: f64, currency: String, period: String },
    Clock { now: i64 },
}

#[derive(Clone)]
struct LiveEvent {
    event_id: String,
    occurred_at: i64,
    digest: String,
    payload: Payload,
}

/// The reader of the current Envelope's live-data branches.
#[pyclass(frozen)]
pub struct LiveCodec {
    fingerprint: Vec<u8>,
    sources: Vec<String>,
    kpi: i64,
    spend: i64,
    clock: i64,
}

#[pymethods]
impl LiveCodec {
    /// `layout`: the Envelope as `LAYOUT` spells it; `sources`: the Source enum's symbols in
    /// order; `branches`: the payload union's index of KpiObserved, SpendObserved, ClockTicked.
    #[new]
    fn new(fingerprint: Vec<u8>, layout: Vec<String>, sources: Vec<String>, branches: (i64, i64, i64)) -> PyResult<Self> {
        if layout.iter().map(String::as_str).ne(LAYOUT.iter().copied()) {
            return Err(PyValueError::new_err(format!("the Envelope is not the layout this reader knows: {layout:?}")));
        }
        Ok(Self { fingerprint, sources, kpi: branches.0, spend: branches.1, clock: branches.2 })
    }

    /// Which of a tenant's records are plainly valid live data of `tenant`, each on its own.
    fn takes(&self, tenant: &str, values: Vec<Bound<'_, PyBytes>>) -> Vec<bool> {
        values.iter().map(|v| tenant_ok(tenant) && self.event(tenant, v.as_bytes()).is_some()).collect()
    }

    /// A tenant's records (their values, in log order) as one run of live data, or None when any
    /// of them is not plainly valid live data of `tenant`.
    fn decode(&self, tenant: &str, values: Vec<Bound<'_, PyBytes>>) -> Option<LiveRun> {
        if !tenant_ok(tenant) {
            return None;
        }
        let mut events = Vec::with_capacity(values.len());
        for value in &values {
            events.push(self.event(tenant, value.as_bytes())?);
        }
        Some(LiveRun { events })
    }
}

/// A run of live-data events, decoded and checked.
#[pyclass(frozen)]
pub struct LiveRun {
    events: Vec<LiveEvent>,
}

type Quad = (String, String, String, String);

/// `projections.batch.Overlay` over the stored facts of the run's nodes (`ASSERTED` only): what
/// the store holds of them, with the run's adds and removes on top.
struct Overlay {
    stored: FxHashMap<(String, String), Vec<String>>,
    added: Vec<Option<Quad>>,
    added_at: FxHashMap<Quad, usize>,
    added_by: FxHashMap<(String, String), Vec<usize>>,
    removed: Vec<Option<Quad>>,
    removed_at: FxHashMap<Quad, usize>,
}

const ASSERTED: &str = "<urn:engram:graph:asserted>";
const META: &str = "<urn:engram:graph:meta>";

impl Overlay {
    fn new(facts: Vec<(String, String, String)>) -> Self {
        let mut stored: FxHashMap<(String, String), Vec<String>> = FxHashMap::default();
        for (s, p, o) in facts {
            stored.entry((s, p)).or_default().push(o);
        }
        Self {
            stored,
            added: Vec::new(),
            added_at: FxHashMap::default(),
            added_by: FxHashMap::default(),
            removed: Vec::new(),
            removed_at: FxHashMap::default(),
        }
    }

    fn objects(&self, s: &str, p: &str) -> Vec<String> {
        let key = (s.to_string(), p.to_string());
        let mut out = Vec::new();
        for o in self.stored.get(&key).into_iter().flatten() {
            let q = (key.0.clone(), key.1.clone(), o.clone(), ASSERTED.to_string());
            if !self.removed_at.contains_key(&q) {
                out.push(o.clone());
            }
        }
        for &i in self.added_by.get(&key).into_iter().flatten() {
            if let Some(q) = &self.added[i] {
                out.push(q.2.clone());
            }
        }
        out
    }

    fn is_stored(&self, q: &Quad) -> bool {
        q.3 == ASSERTED && self.stored.get(&(q.0.clone(), q.1.clone())).is_some_and(|os| os.contains(&q.2))
    }

    /// `Overlay.apply`: a quad added then removed (or removed then added back) within the run is
    /// in neither list.
    fn apply(&mut self, removes: Vec<Quad>, adds: Vec<Quad>) {
        for q in removes {
            if let Some(i) = self.added_at.remove(&q) {
                self.added[i] = None;
            } else if self.is_stored(&q) && !self.removed_at.contains_key(&q) {
                self.removed_at.insert(q.clone(), self.removed.len());
                self.removed.push(Some(q));
            }
        }
        for q in adds {
            if let Some(i) = self.removed_at.remove(&q) {
                self.removed[i] = None;
            } else if !self.added_at.contains_key(&q) && !self.is_stored(&q) {
                let i = self.added.len();
                self.added_by.entry((q.0.clone(), q.1.clone())).or_default().push(i);
                self.added_at.insert(q.clone(), i);
                self.added.push(Some(q));
            }
        }
    }
}

/// `projections.plan.Builder`, for the live-data planners.
struct Builder<'a> {
    overlay: &'a Overlay,
    removes: Vec<Quad>,
    adds: Vec<Quad>,
}

impl Builder<'_> {
    fn add(&mut self, s: &str, p: &str, o: String) {
        self.adds.push((s.to_string(), p.to_string(), o, ASSERTED.to_string()));
    }

    fn replace(&mut self, s: &str, p: &str, o: String) {
        for old in self.overlay.objects(s, p) {
            self.removes.push((s.to_string(), p.to_string(), old, ASSERTED.to_string()));
        }
        self.add(s, p, o);
    }

    /// `Builder.delta`: removes not re-added, each once; adds each once.
    fn delta(self) -> (Vec<Quad>, Vec<Quad>) {
        let adds_set: FxHashSet<_> = self.adds.iter().cloned().collect();
        let mut seen = FxHashSet::default();
        let removes = self.removes.into_iter().filter(|q| !adds_set.contains(q) && seen.insert(q.clone())).collect();
        let mut seen = FxHashSet::default();
        let adds = self.adds.into_iter().filter(|q| seen.insert(q.clone())).collect();
        (removes, adds)
    }
}

#[pymethods]
impl LiveRun {
    /// The nodes whose stored facts the plan reads (`(subject IRI)`), once each.
    fn nodes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.events {
            let node = node_of(&e.payload);
            if !out.contains(&node) {
                out.push(node);
            }
        }
        out.iter().map(|n| n[1..n.len() - 1].to_string()).collect()
    }

    fn event_ids(&self) -> Vec<String> {
        self.events.iter().map(|e| e.event_id.clone()).collect()
    }

    /// The run planned against `facts` (the stored `(subject, predicate, object)` of `nodes()` in
    /// N-Triples) and `applied` (the digest stored for an event id, where one is), each event
    /// against what those before it leave: per event `(status, reason)` (0 applied, 1 skipped),
    /// then the net removes and adds as N-Quads. None if an event id was applied with other
    /// content (the Python path refuses it, with its reason).
    #[allow(clippy::type_complexity)]
    fn plan(
        &self,
        positions: Vec<(i64, i64, i64)>,
        facts: Vec<(String, String, String)>,
        applied: FxHashMap<String, String>,
    ) -> Option<(Vec<(u8, Option<String>)>, String, String)> {
        let mut overlay = Overlay::new(facts);
        let mut digests: FxHashMap<String, String> = applied;
        let mut outcomes = Vec::with_capacity(self.events.len());
        for (e, (partition, offset, _)) in self.events.iter().zip(positions) {
            if let Some(seen) = digests.get(&e.event_id) {
                if *seen != e.digest {
                    return None;
                }
                outcomes.push((1u8, Some(format!("event {} was already applied", e.event_id))));
                continue;
            }
            let mut b = Builder { overlay: &overlay, removes: Vec::new(), adds: Vec::new() };
            plan_event(&mut b, e);
            let (removes, mut adds) = b.delta();
            let node = format!("<urn:engram:event:{}>", e.event_id);
            adds.push((node.clone(), engram("digest"), plain(&e.digest), META.to_string()));
            adds.push((node, engram("position"), plain(&format!("{partition}:{offset}")), META.to_string()));
            overlay.apply(removes, adds);
            digests.insert(e.event_id.clone(), e.digest.clone());
            outcomes.push((0u8, None));
        }
        Some((outcomes, nquads(&overlay.removed), nquads(&overlay.added)))
    }
}

fn nquads(quads: &[Option<Quad>]) -> String {
    let mut out = String::new();
    for (s, p, o, g) in quads.iter().flatten() {
        let _ = writeln!(out, "{s} {p} {o} {g} .");
    }
    out
}

fn engram(local: &str) -> String {
    format!("<{ENGRAM}{local}>")
}

/// A string literal; every string written here is ASCII with nothing to escape (the checks).
fn plain(text: &str) -> String {
    format!("\"{text}\"")
}

fn double(value: f64) -> String {
    format!("\"{}\"^^<{XSD_DOUBLE}>", value + 0.0)
}

fn time(ms: i64) -> String {
    format!("\"{}\"^^<{XSD_DATETIME}>", canonical_time(ms))
}

fn node_of(p: &Payload) -> String {
    match p {
        Payload::Kpi { metric, period, .. } => format!("<urn:engram:kpi:{metric}:{period}>"),
        Payload::Spend { platform, currency, period, .. } => format!("<urn:engram:spend:{platform}:{currency}:{period}>"),
        Payload::Clock { .. } => CLOCK.to_string(),
    }
}

/// `plan_live._kpi`, `_spend` and `_clock`.
fn plan_event(b: &mut Builder, e: &LiveEvent) {
    let node = node_of(&e.payload);
    match &e.payload {
        Payload::Kpi { metric, value, period } => {
            b.add(COMPANY, RDF_TYPE, engram("Company"));
            b.add(COMPANY, &engram("hasKpi"), node.clone());
            b.add(&node, RDF_TYPE, engram("Kpi"));
            b.add(&node, &engram("metric"), plain(metric));
            b.replace(&node, &engram("value"), double(*value));
            observation(b, &node, &format!("kpi/{metric}"), period, e.occurred_at);
        }
        Payload::Spend { platform, amount, currency, period } => {
            let kind = parse_period(period, e.occurred_at).expect("checked when decoded").1;
            b.add(COMPANY, RDF_TYPE, engram("Company"));
            b.add(COMPANY, &engram("hasSpend"), node.clone());
            b.add(&node, RDF_TYPE, engram("Spend"));
            b.add(&node, &engram("platform"), plain(platform));
            b.add(&node, &engram("currency"), plain(currency));
            b.replace(&node, &engram("amount"), double(*amount));
            observation(b, &node, &format!("spend/{platform}/{currency}/{kind}"), period, e.occurred_at);
        }
        Payload::Clock { now } => {
            b.add(CLOCK, RDF_TYPE, engram("Clock"));
            b.replace(CLOCK, &engram("now"), time(*now));
        }
    }
}

fn observation(b: &mut Builder, node: &str, series: &str, period: &str, occurred_at: i64) {
    let (start, kind, end) = parse_period(period, occurred_at).expect("checked when decoded");
    b.add(node, &engram("series"), plain(series));
    b.add(node, &engram("period"), plain(period));
    b.add(node, &engram("periodKind"), plain(kind));
    b.replace(node, &engram("periodStart"), time(start));
    b.replace(node, &engram("periodEnd"), time(end));
    b.replace(node, &engram("observedAt"), time(occurred_at));
}

// -- decoding ---------------------------------------------------------------------------------

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn long(&mut self) -> Option<i64> {
        let mut value: u64 = 0;
        let mut shift = 0;
        loop {
            let byte = *self.data.get(self.at)?;
            self.at += 1;
            if shift > 63 {
                return None;
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        Some(((value >> 1) as i64) ^ -((value & 1) as i64))
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.long()?).ok()?;
        let bytes = self.data.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        String::from_utf8(bytes.to_vec()).ok()
    }

    fn double(&mut self) -> Option<f64> {
        let bytes = self.data.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(f64::from_le_bytes(bytes.try_into().ok()?))
    }

    fn boolean(&mut self) -> Option<bool> {
        let byte = *self.data.get(self.at)?;
        self.at += 1;
        match byte {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn optional_string(&mut self) -> Option<Option<String>> {
        match self.long()? {
            0 => Some(None),
            1 => Some(Some(self.string()?)),
            _ => None,
        }
    }
}

impl LiveCodec {
    fn event(&self, tenant: &str, data: &[u8]) -> Option<LiveEvent> {
        if data.len() < 10 || data[..2] != [0xc3, 0x01] || data[2..10] != self.fingerprint[..] {
            return None;
        }
        let mut r = Reader { data: &data[10..], at: 0 };
        let event_id = r.string()?;
        let record_tenant = r.string()?;
        let occurred_at = r.long()?;
        let actor_id = r.string()?;
        let role = r.string()?;
        let on_behalf_of = r.optional_string()?;
        let source = self.sources.get(usize::try_from(r.long()?).ok()?)?.clone();
        let purpose = r.optional_string()?;
        let correlation_id = r.optional_string()?;
        let given = r.boolean()?;
        let branch = r.long()?;
        let payload = if branch == self.kpi {
            let (metric, value, period) = (r.string()?, r.double()?, r.string()?);
            (name_ok(&metric) && value.is_finite()).then_some(Payload::Kpi { metric, value, period })?
        } else if branch == self.spend {
            let (platform, amount, currency, period) = (r.string()?, r.double()?, r.string()?, r.string()?);
            let ok = name_ok(&platform) && currency.len() == 3 && currency.bytes().all(|c| c.is_ascii_uppercase());
            (ok && amount.is_finite() && amount >= 0.0).then_some(Payload::Spend { platform, amount, currency, period })?
        } else if branch == self.clock {
            let now = r.long()?;
            (MIN_MS..MAX_MS).contains(&now).then_some(Payload::Clock { now })?
        } else {
            return None;
        };
        if r.at != r.data.len()
            || record_tenant != tenant
            || !uuid_ok(&event_id)
            || !(MIN_MS..MAX_MS).contains(&occurred_at)
            || !(role == "pipeline" || role == "operator") // the live data's writers (governance)
            || !actor_id.chars().any(|c| c.is_ascii_graphic() || c.is_alphanumeric())
            || on_behalf_of.is_some()
        {
            return None;
        }
        if let Payload::Kpi { period, .. } | Payload::Spend { period, .. } = &payload {
            parse_period(period, occurred_at)?;
        }
        let digest = digest(&event_id, tenant, occurred_at, given, &actor_id, &role, &source, &purpose, &correlation_id, &payload);
        Some(LiveEvent { event_id, occurred_at, digest, payload })
    }
}

fn tenant_ok(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..].iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn name_ok(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty() && b.len() <= 64 && b[0].is_ascii_alphabetic() && b[1..].iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

fn uuid_ok(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                *c == b'-'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(c)
            }
        })
}

// -- times and periods ------------------------------------------------------------------------

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

const DAY_MS: i64 = 86_400_000;

/// `time_literal`'s text: UTC, milliseconds without trailing zeros, `Z`.
fn canonical_time(ms: i64) -> String {
    let (days, rest) = (ms.div_euclid(DAY_MS), ms.rem_euclid(DAY_MS));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (rest / 3_600_000, rest / 60_000 % 60, rest / 1000 % 60, rest % 1000);
    let mut out = format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}");
    if milli != 0 {
        let fraction = format!("{milli:03}");
        let _ = write!(out, ".{}", fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// `isoformat(timespec="milliseconds")` of a UTC time, as the digest's JSON writes it.
fn iso_millis(ms: i64) -> String {
    let (days, rest) = (ms.div_euclid(DAY_MS), ms.rem_euclid(DAY_MS));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (rest / 3_600_000, rest / 60_000 % 60, rest / 1000 % 60, rest % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}+00:00")
}

fn digits(text: &str, n: usize) -> Option<i64> {
    (text.len() == n && text.bytes().all(|c| c.is_ascii_digit())).then(|| text.parse().ok())?
}

/// `schemas.periods.parse_period` as (start ms, kind, end ms), for years 1900-8999 only (None
/// otherwise: the Python path decides those, and refuses what is no period).
fn parse_period(label: &str, occurred_at: i64) -> Option<(i64, &'static str, i64)> {
    if label == "unspecified" {
        return Some((occurred_at, "unspecified", occurred_at));
    }
    let ms = |y: i64, m: i64, d: i64| days_from_civil(y, m, d) * DAY_MS;
    let year = digits(label.get(..4)?, 4)?;
    if !(1900..9000).contains(&year) {
        return None;
    }
    let rest = &label[4..];
    let month_start = |y: i64, m: i64| ms(y + (m - 1) / 12, (m - 1) % 12 + 1, 1);
    if rest.is_empty() {
        return Some((ms(year, 1, 1), "year", ms(year + 1, 1, 1)));
    }
    if let Some(q) = rest.strip_prefix("-Q") {
        let q = digits(q, 1)?;
        return (1..=4).contains(&q).then(|| (month_start(year, 3 * q - 2), "quarter", month_start(year, 3 * q + 1)));
    }
    if let Some(w) = rest.strip_prefix("-W") {
        let w = digits(w, 2)?;
        let jan4 = days_from_civil(year, 1, 4);
        let weekday = (jan4 + 3).rem_euclid(7); // 0 Monday (1970-01-01 was a Thursday)
        let jan1 = days_from_civil(year, 1, 1);
        let jan1_weekday = (jan1 + 3).rem_euclid(7);
        let weeks = if jan1_weekday == 3 || (leap(year) && jan1_weekday == 2) { 53 } else { 52 };
        if !(1..=weeks).contains(&w) {
            return None;
        }
        let monday = jan4 - weekday + (w - 1) * 7;
        return Some((monday * DAY_MS, "week", (monday + 7) * DAY_MS));
    }
    let rest = rest.strip_prefix('-')?;
    if rest.len() == 2 {
        let m = digits(rest, 2)?;
        return (1..=12).contains(&m).then(|| (ms(year, m, 1), "month", month_start(year, m + 1)));
    }
    let (m, d) = (digits(rest.get(..2)?, 2)?, rest.get(2..3)?);
    let d = if d == "-" { digits(rest.get(3..)?, 2)? } else { return None };
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(year, m) {
        return None;
    }
    let day = days_from_civil(year, m, d);
    Some((day * DAY_MS, "day", (day + 1) * DAY_MS))
}

// -- the content digest -----------------------------------------------------------------------

/// `repr(float)`: the shortest digits that read back, fixed from 1e-4 to 1e16, else scientific.
fn py_float(x: f64) -> String {
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let sci = format!("{:e}", x.abs()); // "1.2345e-5", "3e0"
    let (mantissa, exp) = sci.split_once('e').expect("{:e} writes an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let text = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            format!("{}.{}", &digits[..(exp + 1) as usize], &digits[(exp + 1) as usize..])
        };
        format!("{sign}{text}")
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        format!("{sign}{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// A JSON string as `json.dumps(ensure_ascii=True)` writes it.
fn json_str(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `schemas.events.content_digest`: sha256 of the Avro record as sorted JSON, fields at their
/// defaults left out, `occurred_at` only when the writer named it.
#[allow(clippy::too_many_arguments)]
fn digest(
    event_id: &str,
    tenant: &str,
    occurred_at: i64,
    given: bool,
    actor_id: &str,
    role: &str,
    source: &str,
    purpose: &Option<String>,
    correlation_id: &Option<String>,
    payload: &Payload,
) -> String {
    let mut j = String::from("{\"actor\": {\"id\": ");
    json_str(&mut j, actor_id);
    j.push_str(", \"role\": ");
    json_str(&mut j, role);
    j.push('}');
    if let Some(c) = correlation_id {
        j.push_str(", \"correlation_id\": ");
        json_str(&mut j, c);
    }
    j.push_str(", \"event_id\": ");
    json_str(&mut j, event_id);
    if given {
        let _ = write!(j, ", \"occurred_at\": \"{}\", \"occurred_at_given\": true", iso_millis(occurred_at));
    }
    j.push_str(", \"payload\": [");
    let period_field = |j: &mut String, period: &str| {
        if period != "unspecified" {
            j.push_str(", \"period\": ");
            json_str(j, period);
        }
    };
    match payload {
        Payload::Kpi { metric, value, period } => {
            j.push_str("\"engram.events.KpiObserved\", {\"metric\": ");
            json_str(&mut j, metric);
            period_field(&mut j, period);
            let _ = write!(j, ", \"value\": {}}}", py_float(*value));
        }
        Payload::Spend { platform, amount, currency, period } => {
            let _ = write!(j, "\"engram.events.SpendObserved\", {{\"amount\": {}, \"currency\": ", py_float(*amount));
            json_str(&mut j, currency);
            period_field(&mut j, period);
            j.push_str(", \"platform\": ");
            json_str(&mut j, platform);
            j.push('}');
        }
        Payload::Clock { now } => {
            let _ = write!(j, "\"engram.events.ClockTicked\", {{\"now\": \"{}\"}}", iso_millis(*now));
        }
    }
    j.push(']');
    if let Some(p) = purpose {
        j.push_str(", \"purpose\": ");
        json_str(&mut j, p);
    }
    j.push_str(", \"source\": ");
    json_str(&mut j, source);
    j.push_str(", \"tenant\": ");
    json_str(&mut j, tenant);
    j.push('}');
    let hash = Sha256::digest(j.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in hash {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_writes_them() {
        for (x, want) in [
            (3.5, "3.5"),
            (3.0, "3.0"),
            (1e16, "1e+16"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456789012345.0, "123456789012345.0"),
            (1.5e-7, "1.5e-07"),
            (-0.0, "-0.0"),
            (2.0000000000000004, "2.0000000000000004"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(py_float(x), want);
        }
    }

    #[test]
    fn periods() {
        assert_eq!(parse_period("2026-W53", 0), Some((days_from_civil(2026, 12, 28) * DAY_MS, "week", days_from_civil(2027, 1, 4) * DAY_MS)));
        assert_eq!(parse_period("2025-W53", 0), None);
        assert_eq!(parse_period("2024-02-30", 0), None);
        assert_eq!(parse_period("2024-02-29", 0).map(|p| p.1), Some("day"));
        assert_eq!(canonical_time(1_500), "1970-01-01T00:00:01.5Z");
    }
}
