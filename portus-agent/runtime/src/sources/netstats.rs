//! The in-network statistics poller: a [`NetworkStats`] source that polls an HTTP/JSON
//! endpoint (the paper's REST measurement agent; `ccp-netstats-exporter` on a Linux router)
//! every period on a current-thread tokio runtime of its own, off the decision path.
//!
//! ```text
//!   poller thread (tokio):  every period_ms ─ GET url (≤ timeout_ms, body ≤ MAX_BODY)
//!        ├ good reply  → validated table of paths, swapped in whole (arc-swap)
//!        ├ bad reply   → counted, logged (rate-limited), table withdrawn: every path masked
//!        └ no reply    → counted, logged; the table ages (connect refused, timeout)
//!   decision path:  latest(path) = one atomic load + longest-prefix match, no lock, no I/O;
//!                   a sample older than stale_after_ms is "none" (the flow masks it)
//! ```
//!
//! A bad reply (not HTTP, a status other than 200, not JSON, a missing field, a value out of
//! range, a body over [`MAX_BODY`]) means the source is broken: what it said before is not
//! trusted either. A missed reply is jitter until the samples it leaves behind are
//! `stale_after_ms` old (default 2.5 s: two missed 1 s polls and a margin, as Owl's own
//! `stats_stale_ms`). The format is in `docs/algorithms/owl.md` ("The statistics endpoint"):
//!
//! ```text
//! {"version": 1, "seq": 17, "age_ms": 230,
//!  "paths": [{"dst": "10.0.2.0/24", "pnc_pkts": 3, "pna": 0.42, "known_share": 1.0},
//!            {"dst": "default", "pnc_pkts": 0, "pna": 0.9, "known_share": 0.5}]}
//! ```
//!
//! Sample numbers handed to flows are the poller's own (one per new sample of a path), so
//! an exporter that restarts its numbering is still read as new samples.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use ccp_algs::netstats::{NetStats, NetworkStats, PathKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{info, warn};

use crate::log_limit::LogLimit;

/// Largest reply body read (bytes): a few hundred paths.
pub const MAX_BODY: usize = 64 * 1024;
/// Largest reply head (status line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Most paths in one reply.
pub const MAX_PATHS: usize = 1024;
/// Largest `age_ms` accepted (a day): more is a broken clock, not a sample.
pub const MAX_AGE_MS: f64 = 86_400_000.0;
/// The format version this poller reads.
pub const FORMAT_VERSION: u64 = 1;

/// Defaults of `[netstats]`.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(1000);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_millis(2500);

/// One warning per this long about failed polls (with the count held back).
const LOG_EVERY: Duration = Duration::from_secs(10);
static LOG_POLL: LogLimit = LogLimit::new(LOG_EVERY);

/// An `http://host[:port][/path]` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host name or address (an IPv6 address without its brackets).
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

impl HttpUrl {
    /// `host:port` as a Host header writes it.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for HttpUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let hint = "write http://HOST:PORT/PATH, e.g. http://10.0.0.1:9465/netstats";
        if s.len() > 2048 {
            return Err(format!("the URL is over 2048 bytes ({hint})"));
        }
        if s.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!(
                "{s:?}: spaces or control characters in the URL ({hint})"
            ));
        }
        let lower = s.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(format!(
                "{s}: https is not supported (the reply is a few numbers; serve it on loopback \
                 or a management network, or put a TLS proxy next to the agent): {hint}"
            ));
        }
        let Some(rest) = lower.starts_with("http://").then(|| &s["http://".len()..]) else {
            return Err(format!("{s}: not an http:// URL ({hint})"));
        };
        let (auth, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if auth.contains('@') {
            return Err(format!(
                "{s}: credentials in the URL are not supported ({hint})"
            ));
        }
        let (host, port) = if let Some(r) = auth.strip_prefix('[') {
            let Some((h, p)) = r.split_once(']') else {
                return Err(format!("{s}: unclosed '[' in the host ({hint})"));
            };
            (h, p.strip_prefix(':'))
        } else {
            match auth.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (auth, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{s}: no host ({hint})"));
        }
        let port = match port {
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(format!("{s}: bad port {p:?} ({hint})")),
            },
        };
        Ok(Self {
            host: host.to_string(),
            port,
            path,
        })
    }
}

/// The `[netstats]` section (and `--netstats-url`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetStatsConfig {
    /// The endpoint; `None`: no poller.
    pub url: Option<HttpUrl>,
    /// How often to poll.
    pub period: Duration,
    /// How long one poll may take (connect, request, reply), less than the period.
    pub timeout: Duration,
    /// A sample older than this is withdrawn.
    pub stale_after: Duration,
}

impl Default for NetStatsConfig {
    fn default() -> Self {
        Self {
            url: None,
            period: DEFAULT_PERIOD,
            timeout: DEFAULT_TIMEOUT,
            stale_after: DEFAULT_STALE_AFTER,
        }
    }
}

impl NetStatsConfig {
    /// Check the knobs together; the error names the key and the range.
    pub fn check(&self) -> Result<(), String> {
        let ms = |d: Duration| d.as_millis();
        if !(10..=60_000).contains(&ms(self.period)) {
            return Err(format!(
                "[netstats] period_ms = {}: give 10 to 60000",
                ms(self.period)
            ));
        }
        if ms(self.timeout) < 1 || self.timeout >= self.period {
            return Err(format!(
                "[netstats] timeout_ms = {}: give 1 ms up to less than period_ms ({}), so polls never overlap",
                ms(self.timeout),
                ms(self.period)
            ));
        }
        if self.stale_after < self.period || ms(self.stale_after) > 600_000 {
            return Err(format!(
                "[netstats] stale_after_ms = {}: give period_ms ({}) to 600000",
                ms(self.stale_after),
                ms(self.period)
            ));
        }
        Ok(())
    }
}

/// A destination prefix (`10.0.2.0/24`, `10.0.2.2`, `fd00::/64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    fn bits(ip: IpAddr) -> (u128, u8) {
        match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        }
    }

    fn mask(len: u8) -> u128 {
        if len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(len))
        }
    }

    /// Does the prefix hold `ip` (same family)?
    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.addr.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        let (a, _) = Self::bits(self.addr);
        let (b, _) = Self::bits(ip);
        let m = Self::mask(self.len);
        a & m == b & m
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?}: not an address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{s:?}: prefix length over {max}")),
            },
        };
        Ok(Self { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Which flows a reply's path is for: a prefix, or every flow no prefix matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathMatch {
    Default,
    Prefix(Prefix),
}

impl FromStr for PathMatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "default" {
            Ok(Self::Default)
        } else {
            s.parse().map(Self::Prefix)
        }
    }
}

/// One path of a good reply, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSample {
    pub path: PathMatch,
    pub pnc_pkts: f64,
    pub pna: f64,
    pub known_share: f64,
    /// The source's sample number.
    pub src_seq: u64,
    /// How old the sample was when served (ms).
    pub age_ms: f64,
}

/// Why a poll failed (the metrics' `reason` label).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("no complete reply within the timeout")]
    Timeout,
    #[error("HTTP status {0} (expected 200)")]
    HttpStatus(u16),
    #[error("not an HTTP/1.x reply: {0}")]
    BadHttp(String),
    #[error("reply over the limit: {0}")]
    TooLarge(String),
    #[error("not the statistics JSON: {0}")]
    BadJson(String),
    #[error("bad value: {0}")]
    BadValue(String),
}

/// Every failure reason, in the metrics' order.
pub const REASONS: [&str; 7] = [
    "connect",
    "timeout",
    "http_status",
    "bad_http",
    "too_large",
    "bad_json",
    "bad_value",
];

impl PollError {
    /// The metrics label, an index into [`REASONS`].
    pub fn reason(&self) -> usize {
        match self {
            Self::Connect(_) => 0,
            Self::Timeout => 1,
            Self::HttpStatus(_) => 2,
            Self::BadHttp(_) => 3,
            Self::TooLarge(_) => 4,
            Self::BadJson(_) => 5,
            Self::BadValue(_) => 6,
        }
    }

    /// Did the source answer (wrongly)? Then its samples are withdrawn at once; a missed
    /// reply leaves them to age.
    pub fn is_bad_reply(&self) -> bool {
        !matches!(self, Self::Connect(_) | Self::Timeout)
    }
}

/// Parse and validate a reply body: every path or none.
pub fn parse_reply(body: &[u8]) -> Result<Vec<PathSample>, PollError> {
    #[derive(serde::Deserialize)]
    struct RawPath {
        dst: String,
        pnc_pkts: f64,
        pna: f64,
        known_share: f64,
        seq: Option<u64>,
        age_ms: Option<f64>,
    }
    #[derive(serde::Deserialize)]
    struct Raw {
        version: Option<u64>,
        seq: u64,
        age_ms: Option<f64>,
        paths: Vec<RawPath>,
    }
    let r: Raw = serde_json::from_slice(body).map_err(|e| {
        PollError::BadJson(format!(
            "{e} (expected {{\"version\": 1, \"seq\": N, \"paths\": [{{\"dst\": ..., \"pnc_pkts\": ..., \"pna\": ..., \"known_share\": ...}}]}})"
        ))
    })?;
    if let Some(v) = r.version.filter(|v| *v != FORMAT_VERSION) {
        return Err(PollError::BadValue(format!(
            "version {v}: this agent reads version {FORMAT_VERSION}"
        )));
    }
    if r.paths.len() > MAX_PATHS {
        return Err(PollError::TooLarge(format!(
            "{} paths (at most {MAX_PATHS})",
            r.paths.len()
        )));
    }
    let age = |a: Option<f64>, dflt: f64| -> Result<f64, PollError> {
        match a {
            None => Ok(dflt),
            Some(a) if a.is_finite() && (0.0..=MAX_AGE_MS).contains(&a) => Ok(a),
            Some(a) => Err(PollError::BadValue(format!(
                "age_ms = {a}: expected milliseconds in [0, {MAX_AGE_MS}]"
            ))),
        }
    };
    let top_age = age(r.age_ms, 0.0)?;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(r.paths.len());
    for p in r.paths {
        let path: PathMatch = p
            .dst
            .parse()
            .map_err(|e| PollError::BadValue(format!("dst: {e} (or \"default\")")))?;
        if !seen.insert(path) {
            return Err(PollError::BadValue(format!(
                "dst {:?} appears twice",
                p.dst
            )));
        }
        NetStats::new(p.pnc_pkts, p.pna, p.known_share, 0, 0)
            .map_err(|e| PollError::BadValue(format!("dst {:?}: {e}", p.dst)))?;
        out.push(PathSample {
            path,
            pnc_pkts: p.pnc_pkts,
            pna: p.pna,
            known_share: p.known_share,
            src_seq: p.seq.unwrap_or(r.seq),
            age_ms: age(p.age_ms, top_age)?,
        });
    }
    Ok(out)
}

/// One path's latest sample as the decision path reads it.
#[derive(Debug, Clone)]
struct Entry {
    path: PathMatch,
    pnc_pkts: f64,
    pna: f64,
    known_share: f64,
    src_seq: u64,
    /// The poller's number for this sample (what flows see).
    seq: u64,
    /// When it was measured, on this host's clock.
    measured_at: Instant,
}

/// Polls and their outcomes.
#[derive(Debug, Default)]
pub struct PollCounters {
    pub ok: AtomicU64,
    /// By [`REASONS`].
    pub failed: [AtomicU64; REASONS.len()],
    /// Times the samples were withdrawn because of a bad reply.
    pub withdrawn: AtomicU64,
}

/// The poller's table: a [`NetworkStats`] source.
#[derive(Debug)]
pub struct PolledStats {
    table: ArcSwap<Vec<Entry>>,
    stale_after: Duration,
    pub counters: PollCounters,
    /// The next sample number to hand out (written by the poller only).
    next_seq: AtomicU64,
}

impl PolledStats {
    pub fn new(stale_after: Duration) -> Self {
        Self {
            table: ArcSwap::from_pointee(Vec::new()),
            stale_after,
            counters: PollCounters::default(),
            next_seq: AtomicU64::new(1),
        }
    }

    /// Take a good reply received at `now`: a path whose source number did not change keeps
    /// its number and its (earlier) measurement time.
    pub fn apply(&self, samples: Vec<PathSample>, now: Instant) {
        let old = self.table.load_full();
        let table: Vec<Entry> = samples
            .into_iter()
            .map(|s| {
                let measured = now
                    .checked_sub(Duration::from_secs_f64(s.age_ms / 1000.0))
                    .unwrap_or(now);
                match old
                    .iter()
                    .find(|e| e.path == s.path && e.src_seq == s.src_seq)
                {
                    Some(e) => Entry {
                        measured_at: e.measured_at.min(measured),
                        ..e.clone()
                    },
                    None => Entry {
                        path: s.path,
                        pnc_pkts: s.pnc_pkts,
                        pna: s.pna,
                        known_share: s.known_share,
                        src_seq: s.src_seq,
                        seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
                        measured_at: measured,
                    },
                }
            })
            .collect();
        self.table.store(Arc::new(table));
    }

    /// Forget every sample (a bad reply).
    pub fn withdraw(&self) {
        if !self.table.load().is_empty() {
            self.table.store(Arc::new(Vec::new()));
            self.counters.withdrawn.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Paths with a fresh sample now.
    pub fn fresh_paths(&self) -> usize {
        self.fresh_paths_at(Instant::now())
    }

    /// Paths with a fresh sample at `now` (the clock passed in: tests).
    pub fn fresh_paths_at(&self, now: Instant) -> usize {
        self.table
            .load()
            .iter()
            .filter(|e| now.saturating_duration_since(e.measured_at) <= self.stale_after)
            .count()
    }

    fn entry_for<'a>(table: &'a [Entry], path: &PathKey) -> Option<&'a Entry> {
        let by_prefix = path.dst.and_then(|ip| {
            table
                .iter()
                .filter_map(|e| match e.path {
                    PathMatch::Prefix(p) if p.contains(ip) => Some((p.len(), e)),
                    _ => None,
                })
                .max_by_key(|(l, _)| *l)
                .map(|(_, e)| e)
        });
        by_prefix.or_else(|| table.iter().find(|e| e.path == PathMatch::Default))
    }
}

impl PolledStats {
    /// [`NetworkStats::latest`] at `now` (the clock passed in: tests).
    pub fn latest_at(&self, path: &PathKey, now: Instant) -> Option<NetStats> {
        let table = self.table.load();
        let e = Self::entry_for(&table, path)?;
        let age = now.saturating_duration_since(e.measured_at);
        if age > self.stale_after {
            return None;
        }
        let age_us = u64::try_from(age.as_micros()).unwrap_or(u64::MAX);
        NetStats::new(e.pnc_pkts, e.pna, e.known_share, e.seq, age_us).ok()
    }
}

impl NetworkStats for PolledStats {
    fn latest(&self, path: &PathKey) -> Option<NetStats> {
        self.latest_at(path, Instant::now())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What the reply head says about the body.
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// Status and framing of a reply head (without the blank line).
fn parse_head(head: &[u8]) -> Result<(u16, Framing), PollError> {
    let text = std::str::from_utf8(head)
        .map_err(|_| PollError::BadHttp("the head is not UTF-8".into()))?;
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap_or("");
    let mut parts = status.splitn(3, ' ');
    let (v, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !v.starts_with("HTTP/1.") {
        let shown: String = status.chars().take(40).collect();
        return Err(PollError::BadHttp(format!("status line {shown:?}")));
    }
    let code: u16 = code
        .parse()
        .map_err(|_| PollError::BadHttp(format!("status code {code:?}")))?;
    let mut framing = Framing::UntilClose;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Err(PollError::BadHttp("a header without ':'".into()));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            let n: usize = v
                .parse()
                .map_err(|_| PollError::BadHttp(format!("Content-Length {v:?}")))?;
            if n > MAX_BODY {
                return Err(PollError::TooLarge(format!(
                    "Content-Length {n} (at most {MAX_BODY})"
                )));
            }
            framing = Framing::Length(n);
        } else if k.eq_ignore_ascii_case("transfer-encoding")
            && v.to_ascii_lowercase().contains("chunked")
        {
            framing = Framing::Chunked;
        }
    }
    Ok((code, framing))
}

/// Decode a chunked body: `Ok(None)` while incomplete.
fn dechunk(raw: &[u8]) -> Result<Option<Vec<u8>>, PollError> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = find(&raw[at..], b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&raw[at..at + eol])
            .map_err(|_| PollError::BadHttp("a chunk size is not text".into()))?;
        let size = line.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(size, 16)
            .map_err(|_| PollError::BadHttp(format!("chunk size {size:?}")))?;
        at += eol + 2;
        if n == 0 {
            return Ok(Some(out));
        }
        // the size is the peer's: every sum with it is checked (a size near usize::MAX
        // must not wrap past the bound and index out of the buffer)
        if out
            .len()
            .checked_add(n)
            .is_none_or(|total| total > MAX_BODY)
        {
            return Err(PollError::TooLarge(format!(
                "a chunked body over {MAX_BODY} bytes (chunk size {size:?})"
            )));
        }
        // n <= MAX_BODY here, so these sums cannot overflow; checked all the same
        let (Some(data_end), Some(next)) = (at.checked_add(n), at.checked_add(n + 2)) else {
            return Err(PollError::TooLarge(format!("chunk size {size:?}")));
        };
        let Some(chunk) = raw.get(at..data_end) else {
            return Ok(None);
        };
        match raw.get(data_end..next) {
            None => return Ok(None),
            Some(b"\r\n") => {}
            Some(_) => {
                return Err(PollError::BadHttp(
                    "a chunk not followed by CRLF (its size is wrong)".into(),
                ))
            }
        }
        out.extend_from_slice(chunk);
        at = next;
    }
}

/// One GET of `url` (the caller bounds the time): the body of a 200 reply.
pub async fn http_get(url: &HttpUrl) -> Result<Vec<u8>, PollError> {
    let addrs = tokio::net::lookup_host((url.host.as_str(), url.port))
        .await
        .map_err(|e| PollError::Connect(format!("{}: {e}", url.host)))?;
    let mut last = PollError::Connect(format!("{}: no address", url.host));
    let mut stream = None;
    for a in addrs {
        match tokio::net::TcpStream::connect(a).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = PollError::Connect(format!("{a}: {e}")),
        }
    }
    let mut s = stream.ok_or(last)?;
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: ccp-agent/{}\r\nConnection: close\r\n\r\n",
        url.path,
        url.authority(),
        env!("CARGO_PKG_VERSION")
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| PollError::Connect(format!("sending the request: {e}")))?;
    // the head, then the body as framed; never more than MAX_HEAD + a bounded body
    let limit = MAX_HEAD + MAX_BODY + MAX_BODY / 4 + 1024;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut head: Option<(usize, u16, Framing)> = None;
    loop {
        if head.is_none() {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                if end > MAX_HEAD {
                    return Err(PollError::TooLarge(format!(
                        "a reply head over {MAX_HEAD} bytes"
                    )));
                }
                let (code, framing) = parse_head(&buf[..end])?;
                head = Some((end + 4, code, framing));
            } else if buf.len() > MAX_HEAD {
                return Err(PollError::TooLarge(format!(
                    "a reply head over {MAX_HEAD} bytes"
                )));
            }
        }
        if let Some((start, code, framing)) = &head {
            if *code != 200 {
                return Err(PollError::HttpStatus(*code));
            }
            let body = &buf[*start..];
            match framing {
                Framing::Length(n) if body.len() >= *n => return Ok(body[..*n].to_vec()),
                Framing::Chunked => {
                    if let Some(b) = dechunk(body)? {
                        return Ok(b);
                    }
                }
                Framing::UntilClose if body.len() > MAX_BODY => {
                    return Err(PollError::TooLarge(format!("a body over {MAX_BODY} bytes")))
                }
                _ => {}
            }
        }
        if buf.len() > limit {
            return Err(PollError::TooLarge(format!("a reply over {limit} bytes")));
        }
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| PollError::BadHttp(format!("reading the reply: {e}")))?;
        if n == 0 {
            return match head {
                Some((start, _, Framing::UntilClose)) => Ok(buf[start..].to_vec()),
                Some(_) => Err(PollError::BadHttp("the reply ended early".into())),
                None => Err(PollError::BadHttp("no reply head".into())),
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One poll: fetch, parse, and update `stats`.
pub async fn poll_once(url: &HttpUrl, timeout: Duration, stats: &PolledStats) {
    let got = match tokio::time::timeout(timeout, http_get(url)).await {
        Ok(Ok(body)) => parse_reply(&body),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(PollError::Timeout),
    };
    let c = &stats.counters;
    match got {
        Ok(samples) => {
            let n = samples.len();
            stats.apply(samples, Instant::now());
            if c.ok.fetch_add(1, Ordering::Relaxed) == 0 {
                info!(url = %url, paths = n, "in-network statistics: first good reply");
            }
        }
        Err(e) => {
            c.failed[e.reason()].fetch_add(1, Ordering::Relaxed);
            if e.is_bad_reply() {
                stats.withdraw();
            }
            if let Some(held) = LOG_POLL.allow() {
                warn!(url = %url, reason = REASONS[e.reason()], error = %e, held_back = held,
                    "in-network statistics: poll failed (flows mask the features while there is no fresh sample)");
            }
        }
    }
}

/// The poller on its own thread.
pub struct NetStatsPoller {
    source: Arc<PolledStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NetStatsPoller {
    /// Start polling `url` every `cfg.period` (the first poll at once).
    pub fn spawn(url: HttpUrl, cfg: &NetStatsConfig) -> io::Result<Self> {
        cfg.check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let source = Arc::new(PolledStats::new(cfg.stale_after));
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (period, timeout, src) = (cfg.period, cfg.timeout, source.clone());
        let thread = std::thread::Builder::new()
            .name("ccp-netstats".into())
            .spawn(move || {
                rt.block_on(async move {
                    let mut tick = tokio::time::interval(period);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            _ = &mut rx => break,
                            _ = tick.tick() => poll_once(&url, timeout, &src).await,
                        }
                    }
                })
            })?;
        Ok(Self {
            source,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The source the agent's flows read.
    pub fn source(&self) -> Arc<PolledStats> {
        self.source.clone()
    }

    /// Stop polling and wait for the thread (at most one poll's timeout).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NetStatsPoller {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener};
    use std::sync::Mutex;

    /// What the test server answers next.
    #[derive(Clone)]
    enum Reply {
        /// These bytes, after waiting this long.
        Raw(Vec<u8>, Duration),
    }

    fn ok_json(body: &str) -> Reply {
        Reply::Raw(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
            Duration::ZERO,
        )
    }

    fn good(seq: u64, pnc: f64, pna: f64) -> String {
        format!(
            r#"{{"version":1,"seq":{seq},"age_ms":0,"paths":[
                {{"dst":"default","pnc_pkts":{pnc},"pna":{pna},"known_share":1.0}},
                {{"dst":"10.0.2.0/24","pnc_pkts":7,"pna":0.25,"known_share":0.5}}]}}"#
        )
    }

    /// A one-connection-at-a-time HTTP server answering `reply` to every request.
    struct Server {
        port: u16,
        reply: Arc<Mutex<Reply>>,
        requests: Arc<AtomicU64>,
    }

    impl Server {
        fn start(first: Reply) -> Self {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let reply = Arc::new(Mutex::new(first));
            let requests = Arc::new(AtomicU64::new(0));
            let (r, n) = (reply.clone(), requests.clone());
            std::thread::spawn(move || {
                for s in l.incoming() {
                    let Ok(mut s) = s else { continue };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut head = Vec::new();
                    let mut b = [0u8; 512];
                    while find(&head, b"\r\n\r\n").is_none() {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => break,
                            Ok(k) => head.extend_from_slice(&b[..k]),
                        }
                    }
                    n.fetch_add(1, Ordering::SeqCst);
                    let Reply::Raw(bytes, wait) = r.lock().unwrap().clone();
                    let r2 = bytes.clone();
                    // a slow reply must not hold up the next poll's connection
                    std::thread::spawn(move || {
                        std::thread::sleep(wait);
                        let _ = s.write_all(&r2);
                    });
                }
            });
            Self {
                port,
                reply,
                requests,
            }
        }

        fn set(&self, r: Reply) {
            *self.reply.lock().unwrap() = r;
        }

        fn url(&self) -> HttpUrl {
            format!("http://127.0.0.1:{}/netstats", self.port)
                .parse()
                .unwrap()
        }
    }

    fn cfg(stale_ms: u64) -> NetStatsConfig {
        NetStatsConfig {
            url: None,
            period: Duration::from_millis(50),
            timeout: Duration::from_millis(40),
            stale_after: Duration::from_millis(stale_ms),
        }
    }

    const DEFAULT: PathKey = PathKey { dst: None };

    fn dst(a: [u8; 4]) -> PathKey {
        PathKey {
            dst: Some(IpAddr::V4(Ipv4Addr::from(a))),
        }
    }

    /// Wait (at most 5 s) until `f` holds.
    fn until(what: &str, mut f: impl FnMut() -> bool) {
        until_at(what, |_| f());
    }

    /// Wait (at most 5 s) until `f(now)` holds; that `now`. Reading the source again "at"
    /// it (`latest_at`) sees what `f` saw however long the host takes to get there: a
    /// sample that was fresh then does not go stale between two reads on a loaded machine.
    fn until_at(what: &str, mut f: impl FnMut(Instant) -> bool) -> Instant {
        let t0 = Instant::now();
        loop {
            let now = Instant::now();
            if f(now) {
                return now;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "timed out: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn failed(s: &PolledStats, reason: &str) -> u64 {
        let i = REASONS.iter().position(|r| *r == reason).unwrap();
        s.counters.failed[i].load(Ordering::Relaxed)
    }

    #[test]
    fn urls_parse_or_say_what_to_write() {
        let u: HttpUrl = "http://10.0.0.1:9465/netstats?x=1".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("10.0.0.1", 9465, "/netstats?x=1")
        );
        assert_eq!(u.to_string(), "http://10.0.0.1:9465/netstats?x=1");
        let u: HttpUrl = "HTTP://[::1]:8080".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 8080, "/")
        );
        assert_eq!(u.authority(), "[::1]:8080");
        let u: HttpUrl = "http://router?q".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("router", 80, "/?q")
        );
        for (bad, says) in [
            ("https://x/", "https is not supported"),
            ("ftp://x/", "not an http:// URL"),
            ("http://:80/", "no host"),
            ("http://x:0/", "bad port"),
            ("http://x:99999/", "bad port"),
            ("http://u@x/", "credentials"),
            ("http://x/a b", "spaces or control"),
            ("http://x/a\r\nHost: y", "spaces or control"),
            ("http://[::1/", "unclosed"),
        ] {
            let e = bad.parse::<HttpUrl>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("http://HOST:PORT/PATH"), "{e}");
        }
    }

    #[test]
    fn config_knobs_are_checked_together() {
        assert!(NetStatsConfig::default().check().is_ok());
        let d = NetStatsConfig::default();
        let c = NetStatsConfig {
            timeout: d.period,
            ..d.clone()
        };
        assert!(c.check().unwrap_err().contains("timeout_ms"));
        let c = NetStatsConfig {
            stale_after: Duration::from_millis(500),
            ..d.clone()
        };
        assert!(c.check().unwrap_err().contains("stale_after_ms"));
        let c = NetStatsConfig {
            period: Duration::from_millis(5),
            ..d
        };
        assert!(c.check().unwrap_err().contains("period_ms"));
    }

    #[test]
    fn replies_are_validated_whole() {
        let s = parse_reply(good(4, 3.0, 0.5).as_bytes()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path, PathMatch::Default);
        assert_eq!((s[0].pnc_pkts, s[0].pna, s[0].src_seq), (3.0, 0.5, 4));
        assert_eq!(s[1].path, PathMatch::Prefix("10.0.2.0/24".parse().unwrap()));
        // per-path number and age override the reply's; extra fields are ignored
        let s = parse_reply(
            br#"{"seq":1,"age_ms":100,"links":[],"paths":[{"dst":"10.0.0.2","pnc_pkts":0,"pna":2,"known_share":0,"seq":9,"age_ms":5}]}"#,
        )
        .unwrap();
        assert_eq!((s[0].src_seq, s[0].age_ms), (9, 5.0));
        assert!(parse_reply(br#"{"seq":1,"paths":[]}"#).unwrap().is_empty());
        let bad = |b: &str| parse_reply(b.as_bytes()).unwrap_err();
        for (b, reason) in [
            ("not json", "bad_json"),
            (r#"{"paths":[]}"#, "bad_json"), // no seq
            (r#"{"seq":-1,"paths":[]}"#, "bad_json"),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pna":0.5,"known_share":1}]}"#,
                "bad_json",
            ),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pnc_pkts":"3","pna":0.5,"known_share":1}]}"#,
                "bad_json",
            ),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pnc_pkts":1e999,"pna":0.5,"known_share":1}]}"#,
                "bad_json",
            ),
            (r#"{"version":2,"seq":1,"paths":[]}"#, "bad_value"),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pnc_pkts":-1,"pna":0.5,"known_share":1}]}"#,
                "bad_value",
            ),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pnc_pkts":2e9,"pna":0.5,"known_share":1}]}"#,
                "bad_value",
            ),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pnc_pkts":1,"pna":0.5,"known_share":1.5}]}"#,
                "bad_value",
            ),
            (
                r#"{"seq":1,"paths":[{"dst":"10.0.0.0/33","pnc_pkts":1,"pna":0.5,"known_share":1}]}"#,
                "bad_value",
            ),
            (
                r#"{"seq":1,"paths":[{"dst":"eth0","pnc_pkts":1,"pna":0.5,"known_share":1}]}"#,
                "bad_value",
            ),
            (r#"{"seq":1,"age_ms":-5,"paths":[]}"#, "bad_value"),
            (
                r#"{"seq":1,"paths":[{"dst":"default","pnc_pkts":1,"pna":0.5,"known_share":1},{"dst":"default","pnc_pkts":1,"pna":0.5,"known_share":1}]}"#,
                "bad_value",
            ),
        ] {
            assert_eq!(REASONS[bad(b).reason()], reason, "{b}: {}", bad(b));
        }
        let many = format!(
            r#"{{"seq":1,"paths":[{}]}}"#,
            (0..=MAX_PATHS)
                .map(|i| format!(
                    r#"{{"dst":"10.{}.{}.0/24","pnc_pkts":1,"pna":0.5,"known_share":1}}"#,
                    i / 256,
                    i % 256
                ))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(REASONS[bad(&many).reason()], "too_large");
    }

    #[test]
    fn a_flow_reads_its_longest_prefix_else_the_default_and_stale_is_none() {
        // one clock for the whole test, passed in: nothing here depends on how fast it runs
        let now = Instant::now();
        let ms = Duration::from_millis;
        let s = PolledStats::new(ms(200));
        assert_eq!(s.latest_at(&DEFAULT, now), None);
        let body = r#"{"seq":1,"paths":[
            {"dst":"default","pnc_pkts":1,"pna":0.9,"known_share":1},
            {"dst":"10.0.0.0/8","pnc_pkts":2,"pna":0.8,"known_share":1},
            {"dst":"10.0.2.0/24","pnc_pkts":3,"pna":0.7,"known_share":1},
            {"dst":"fd00::/64","pnc_pkts":4,"pna":0.6,"known_share":1}]}"#;
        s.apply(parse_reply(body.as_bytes()).unwrap(), now);
        let pnc = |k: &PathKey| s.latest_at(k, now).map(|x| x.pnc_pkts());
        assert_eq!(pnc(&DEFAULT), Some(1.0));
        assert_eq!(pnc(&dst([10, 0, 2, 9])), Some(3.0));
        assert_eq!(pnc(&dst([10, 9, 0, 1])), Some(2.0));
        assert_eq!(pnc(&dst([192, 168, 0, 1])), Some(1.0));
        let v6 = PathKey {
            dst: Some("fd00::5".parse().unwrap()),
        };
        assert_eq!(pnc(&v6), Some(4.0));
        // the same source sample again keeps its number; a new one gets the next
        let seq = s.latest_at(&DEFAULT, now).unwrap().seq();
        s.apply(parse_reply(body.as_bytes()).unwrap(), now + ms(10));
        let again = s.latest_at(&DEFAULT, now + ms(10)).unwrap();
        assert_eq!(again.seq(), seq);
        // ... and its measurement time: 10 ms old
        assert_eq!(again.age_us(), 10_000);
        s.apply(
            parse_reply(body.replace("\"seq\":1", "\"seq\":2").as_bytes()).unwrap(),
            now + ms(20),
        );
        assert!(s.latest_at(&DEFAULT, now + ms(20)).unwrap().seq() > seq);
        // a sample served as old starts old; past stale_after it is none
        let aged = r#"{"seq":3,"age_ms":150,"paths":[{"dst":"default","pnc_pkts":1,"pna":0.9,"known_share":1}]}"#;
        let t = now + ms(30);
        s.apply(parse_reply(aged.as_bytes()).unwrap(), t);
        let got = s.latest_at(&DEFAULT, t).unwrap();
        assert_eq!(got.age_us(), 150_000, "{got:?}");
        assert_eq!(s.fresh_paths_at(t), 1);
        // fresh up to stale_after (200 ms) inclusive, none past it
        assert_eq!(
            s.latest_at(&DEFAULT, t + ms(50)).map(|x| x.age_us()),
            Some(200_000)
        );
        assert_eq!(s.latest_at(&DEFAULT, t + ms(51)), None);
        assert_eq!(s.fresh_paths_at(t + ms(51)), 0);
        // a prefix gone from the table: its flows read the default path
        assert_eq!(
            s.latest_at(&dst([10, 0, 2, 9]), t).map(|x| x.pnc_pkts()),
            Some(1.0)
        );
        // no default path: an unmatched flow has none
        let only =
            r#"{"seq":4,"paths":[{"dst":"10.0.2.0/24","pnc_pkts":3,"pna":0.7,"known_share":1}]}"#;
        let u = PolledStats::new(Duration::from_secs(1));
        u.apply(parse_reply(only.as_bytes()).unwrap(), now);
        assert_eq!(u.latest_at(&DEFAULT, now), None);
        assert_eq!(u.latest_at(&dst([10, 0, 3, 1]), now), None);
        assert!(u.latest_at(&dst([10, 0, 2, 1]), now).is_some());
        // the trait's latest reads the real clock: a sample measured now is fresh
        u.apply(parse_reply(only.as_bytes()).unwrap(), Instant::now());
        assert!(u.latest(&dst([10, 0, 2, 1])).is_some());
    }

    #[test]
    fn the_poller_publishes_good_replies_and_masks_stale_and_bad_ones() {
        let srv = Server::start(ok_json(&good(1, 3.0, 0.5)));
        let p = NetStatsPoller::spawn(srv.url(), &cfg(300)).unwrap();
        let s = p.source();
        let t = until_at("a first sample", |t| s.latest_at(&DEFAULT, t).is_some());
        let a = s.latest_at(&DEFAULT, t).unwrap();
        assert_eq!((a.pnc_pkts(), a.pna(), a.known_share()), (3.0, 0.5, 1.0));
        let b = s.latest_at(&dst([10, 0, 2, 2]), t).unwrap();
        assert_eq!((b.pnc_pkts(), b.pna(), b.known_share()), (7.0, 0.25, 0.5));
        assert_eq!(s.latest_at(&dst([10, 0, 3, 2]), t).unwrap().pnc_pkts(), 3.0);

        // the source keeps serving sample 1: it is not news, and goes stale
        until("sample 1 stale", || s.latest(&DEFAULT).is_none());
        assert!(srv.requests.load(Ordering::SeqCst) >= 4);
        srv.set(ok_json(&good(2, 4.0, 0.5)));
        let t = until_at("sample 2", |t| s.latest_at(&DEFAULT, t).is_some());
        let seq2 = s.latest_at(&DEFAULT, t).unwrap().seq();
        assert!(seq2 > a.seq());

        // garbage: counted, withdrawn at once
        srv.set(ok_json("<html>hello</html>"));
        until("garbage masked", || s.latest(&DEFAULT).is_none());
        assert!(failed(&s, "bad_json") >= 1);
        assert!(s.counters.withdrawn.load(Ordering::Relaxed) >= 1);

        // out of range
        srv.set(ok_json(&good(3, -5.0, 0.5)));
        until("bad value counted", || failed(&s, "bad_value") >= 1);
        assert_eq!(s.latest(&DEFAULT), None);

        // oversized, with and without a length
        srv.set(ok_json(&good(4, 1.0, 0.5)));
        until("sample 4", || s.latest(&DEFAULT).is_some());
        let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BODY));
        srv.set(ok_json(&big));
        until("too large (length)", || failed(&s, "too_large") >= 1);
        assert_eq!(s.latest(&DEFAULT), None);
        srv.set(Reply::Raw(
            format!("HTTP/1.0 200 OK\r\n\r\n{big}").into_bytes(),
            Duration::ZERO,
        ));
        let n = failed(&s, "too_large");
        until("too large (until close)", || failed(&s, "too_large") > n);
        srv.set(Reply::Raw(
            format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "y".repeat(MAX_HEAD)).into_bytes(),
            Duration::ZERO,
        ));
        let n = failed(&s, "too_large");
        until("too large (head)", || failed(&s, "too_large") > n);

        // not HTTP, an error status
        srv.set(Reply::Raw(
            b"SSH-2.0-OpenSSH\r\n\r\n".to_vec(),
            Duration::ZERO,
        ));
        until("bad http", || failed(&s, "bad_http") >= 1);
        srv.set(Reply::Raw(
            b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n".to_vec(),
            Duration::ZERO,
        ));
        until("http status", || failed(&s, "http_status") >= 1);

        // chunked and HTTP/1.0 until-close replies are read
        let body = good(5, 2.0, 0.75);
        let (h1, h2) = body.split_at(10);
        srv.set(Reply::Raw(
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{h1}\r\n{:x};ext\r\n{h2}\r\n0\r\n\r\n",
                h1.len(),
                h2.len()
            )
            .into_bytes(),
            Duration::ZERO,
        ));
        until("chunked sample", || {
            s.latest(&DEFAULT).is_some_and(|x| x.pna() == 0.75)
        });
        srv.set(Reply::Raw(
            format!("HTTP/1.0 200 OK\r\n\r\n{}", good(6, 9.0, 0.75)).into_bytes(),
            Duration::ZERO,
        ));
        until("until-close sample", || {
            s.latest(&DEFAULT).is_some_and(|x| x.pnc_pkts() == 9.0)
        });

        // slow: counted as timeouts; the last sample stays until it is stale
        srv.set(Reply::Raw(
            ok_json_bytes(&good(7, 1.0, 0.5)),
            Duration::from_millis(200),
        ));
        until("timeout counted", || failed(&s, "timeout") >= 1);
        until("slow source stale", || s.latest(&DEFAULT).is_none());
        assert!(s.counters.ok.load(Ordering::Relaxed) >= 5);
        p.stop();

        // nobody listening
        let port = srv.port;
        drop(srv);
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        assert_ne!(closed, port);
        let url: HttpUrl = format!("http://127.0.0.1:{closed}/").parse().unwrap();
        let p = NetStatsPoller::spawn(url, &cfg(300)).unwrap();
        let s = p.source();
        until("connect refused counted", || failed(&s, "connect") >= 1);
        assert_eq!(s.latest(&DEFAULT), None);
    }

    #[test]
    fn chunk_sizes_near_usize_max_are_refused_not_wrapped() {
        // issue 42 item 3: a 1-byte chunk, then size ffffffffffffffff wrapped
        // `out.len() + n` and panicked the poller's thread on a slice index
        let huge = format!("{:x}", usize::MAX);
        for raw in [
            format!("1\r\nx\r\n{huge}\r\nabc\r\n0\r\n\r\n"),
            format!("{huge}\r\nabc\r\n0\r\n\r\n"),
            format!("1\r\nx\r\n{:x}\r\nabc", usize::MAX - 1),
        ] {
            match dechunk(raw.as_bytes()) {
                Err(PollError::TooLarge(m)) => assert!(m.contains("chunk"), "{m}"),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
        // a wrong size (data not followed by CRLF) is a bad reply, not a misparse
        assert!(matches!(
            dechunk(b"2\r\nabc\r\n0\r\n\r\n"),
            Err(PollError::BadHttp(_))
        ));
        // incomplete stays incomplete; complete decodes
        assert!(matches!(dechunk(b"3\r\nab"), Ok(None)));
        assert_eq!(
            dechunk(b"3\r\nabc\r\n1;x\r\nd\r\n0\r\n\r\n").unwrap(),
            Some(b"abcd".to_vec())
        );
    }

    #[test]
    fn the_poller_keeps_polling_after_an_overflowing_chunk_size() {
        let overflow = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n{:x}\r\nabc\r\n",
            usize::MAX
        );
        let srv = Server::start(Reply::Raw(overflow.into_bytes(), Duration::ZERO));
        let p = NetStatsPoller::spawn(srv.url(), &cfg(300)).unwrap();
        let s = p.source();
        until("the overflow reply refused", || {
            failed(&s, "too_large") >= 2
        });
        srv.set(ok_json(&good(1, 3.0, 0.5)));
        until("a good sample after it", || s.latest(&DEFAULT).is_some());
        p.stop();
    }

    fn ok_json_bytes(body: &str) -> Vec<u8> {
        let Reply::Raw(b, _) = ok_json(body);
        b
    }

    #[test]
    fn flows_keep_deciding_whatever_the_source_answers() {
        use crate::adapter::AgentCore;
        use crate::flows::portfolio::AutoSelect;
        use crate::flows::FlowTables;
        use ccp_algs::{Action, Controller, FlowMetrics, Interval, Preference};

        type Seen = Arc<Mutex<Vec<Option<(u64, f64)>>>>;
        struct Recorder {
            seen: Seen,
            metrics: FlowMetrics,
        }
        impl Controller for Recorder {
            fn on_report(&mut self, _iv: &Interval) -> Action {
                Action {
                    cwnd_bytes: Some(20_000),
                    ..Default::default()
                }
            }
            fn metrics(&self) -> &FlowMetrics {
                &self.metrics
            }
            fn wants_network_stats(&self) -> bool {
                true
            }
            fn network_stats(&mut self, s: Option<&NetStats>) {
                self.seen
                    .lock()
                    .unwrap()
                    .push(s.map(|s| (s.seq(), s.pnc_pkts())));
            }
        }

        let srv = Server::start(ok_json(&good(1, 3.0, 0.5)));
        // bad replies withdraw at once; a long staleness keeps a slow machine from aging out
        // the good samples between two decisions
        let p = NetStatsPoller::spawn(srv.url(), &cfg(2000)).unwrap();
        let registry = ccp_algs::Registry::builtin();
        let reno = registry.get("reno").cloned().unwrap();
        let core = AgentCore {
            default_alg: reno.clone(),
            registry,
            tables: Arc::new(FlowTables::default()),
            flow_log: None,
            auto: Arc::new(AutoSelect::none(Preference::default())),
            network_stats: Some(p.source()),
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let rec = Recorder {
            seen: seen.clone(),
            metrics: FlowMetrics::default(),
        };
        let (mut d, _) = core.start_flow(&reno, 1, 1448, 14_480, |_| Box::new(rec));
        let v = vec![0u64; d.fields.len()];
        let decide = |d: &mut crate::adapter::FlowDriver| {
            let a = d.on_report(Some(&v));
            assert!(a.contains(&("Cwnd", 20_000)), "{a:?}");
        };
        let s = p.source();
        until("sample", || s.latest(&DEFAULT).is_some());
        decide(&mut d);
        let total_failed = || -> u64 {
            s.counters
                .failed
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum()
        };
        for junk in [
            ok_json("]]"),
            Reply::Raw(vec![0xff; 64], Duration::ZERO),
            ok_json(&good(2, f64::MAX, 0.5)),
        ] {
            // deciding all along, until the poller has failed on it and withdrawn the samples
            let before = total_failed();
            srv.set(junk);
            until("the junk reply counted and withdrawn", || {
                decide(&mut d);
                total_failed() > before && s.latest(&DEFAULT).is_none()
            });
            decide(&mut d);
        }
        srv.set(ok_json(&good(3, 5.0, 0.5)));
        until("sample 3", || {
            s.latest(&DEFAULT).is_some_and(|x| x.pnc_pkts() == 5.0)
        });
        decide(&mut d);
        let got = seen.lock().unwrap().clone();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].map(|x| x.1), Some(3.0));
        assert_eq!(got[1], None);
        assert_eq!(got[2].map(|x| x.1), Some(5.0));
        let total = total_failed();
        assert!(total >= 3, "{total}");
    }
}
