//! `ccp-netstats-exporter`: a Linux router's in-network statistics for Owl, served as the
//! JSON the CCP agent's poller reads (`ccp_runtime::sources::netstats`; the format is in
//! `docs/algorithms/owl.md`, "The statistics endpoint").
//!
//! ```text
//!   sampler thread: every period ─ rtnetlink dumps (RTM_GETLINK stats64, RTM_GETQDISC root
//!                   qdisc queue stats) ─ per --link: PNC, PNA from the last two snapshots
//!                   (model.rs) ─ per --path: max PNC, min PNA over its links ─ publish
//!   HTTP thread (tokio): GET /netstats → the latest sample, with its age at serving time
//! ```
//!
//! A period that cannot be measured (counters reset, an interface gone, netlink failing) is
//! logged and publishes nothing: the served sample ages and the agents' pollers mask it
//! once it is stale. The exporter never serves a number it did not measure.

pub mod model;
pub mod rtnl;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, warn};

use model::{link_period, path_stats, LinkCounters, LinkPeriod};

/// Default listening address: loopback (give the router's management address to serve
/// hosts).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9465";
/// The path the JSON is served on (`/` too).
pub const URL_PATH: &str = "/netstats";
/// Connections served at once.
const MAX_CONNECTIONS: usize = 32;
const MAX_REQUEST: usize = 8192;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One `--link`: an egress port and its capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    pub name: String,
    pub capacity_bps: f64,
}

/// One `--path`: a destination (`default`, an address or a prefix) and the links it crosses
/// (empty: every link).
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    pub dst: String,
    pub links: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ExporterConfig {
    pub links: Vec<LinkSpec>,
    pub paths: Vec<PathSpec>,
    pub period: Duration,
    pub known_share: f64,
    pub listen: SocketAddr,
}

/// Bad flags: the user's to fix (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("{0}")]
    Flag(String),
    #[error("no interface {name:?} on this host (have: {have}): give --link NAME=RATE with a name from `ip link`")]
    UnknownInterface { name: String, have: String },
}

/// `IF=RATE`, e.g. `eth1=100mbit`.
pub fn parse_link(s: &str) -> Result<LinkSpec, String> {
    let Some((name, rate)) = s.split_once('=') else {
        return Err(format!(
            "--link {s:?}: write NAME=RATE, e.g. --link eth1=100mbit"
        ));
    };
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', ',']) {
        return Err(format!(
            "--link {s:?}: {name:?} is not an interface name (1 to 15 characters, no '/', ' ' or ',')"
        ));
    }
    let capacity_bps = model::parse_rate(rate).map_err(|e| format!("--link {s:?}: {e}"))?;
    Ok(LinkSpec {
        name: name.to_string(),
        capacity_bps,
    })
}

/// `DST[=IF,IF...]`, DST being `default`, an address or a prefix.
pub fn parse_path(s: &str) -> Result<PathSpec, String> {
    let (dst, links) = match s.split_once('=') {
        Some((d, l)) => (d, l.split(',').map(str::to_string).collect()),
        None => (s, Vec::new()),
    };
    let ok = dst == "default" || {
        let (a, len) = dst.split_once('/').unwrap_or((dst, "0"));
        a.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 128)
    };
    if !ok {
        return Err(format!(
            "--path {s:?}: write default, an address or a prefix, optionally =IF,IF (e.g. --path 10.0.2.0/24=eth1)"
        ));
    }
    Ok(PathSpec {
        dst: dst.to_string(),
        links,
    })
}

impl ExporterConfig {
    /// Check the links exist (`have`: the host's interfaces) and the paths name configured
    /// links.
    pub fn check(&self, have: &[String]) -> Result<(), UsageError> {
        let flag = |m: String| Err(UsageError::Flag(m));
        if self.links.is_empty() {
            return flag("give at least one --link NAME=RATE (e.g. --link eth1=100mbit)".into());
        }
        if !(self.known_share.is_finite() && (0.0..=1.0).contains(&self.known_share)) {
            return flag(format!(
                "--known-share {}: give the fraction of the path's nodes this router is, in [0, 1]",
                self.known_share
            ));
        }
        let ms = self.period.as_millis();
        if !(100..=60_000).contains(&ms) {
            return flag(format!("--period-ms {ms}: give 100 to 60000"));
        }
        for (i, l) in self.links.iter().enumerate() {
            if self.links[..i].iter().any(|o| o.name == l.name) {
                return flag(format!("--link {} given twice", l.name));
            }
            if !have.contains(&l.name) {
                let mut h = have.to_vec();
                h.sort();
                return Err(UsageError::UnknownInterface {
                    name: l.name.clone(),
                    have: h.join(", "),
                });
            }
        }
        for (i, p) in self.paths.iter().enumerate() {
            if self.paths[..i].iter().any(|o| o.dst == p.dst) {
                return flag(format!("--path {} given twice", p.dst));
            }
            if let Some(l) = p
                .links
                .iter()
                .find(|l| !self.links.iter().any(|k| &k.name == *l))
            {
                return flag(format!(
                    "--path {}: link {l:?} is not one of the --link interfaces",
                    p.dst
                ));
            }
        }
        Ok(())
    }

    /// The paths served: the `--path`s, or one default path over every link.
    pub fn served_paths(&self) -> Vec<PathSpec> {
        if self.paths.is_empty() {
            vec![PathSpec {
                dst: "default".into(),
                links: Vec::new(),
            }]
        } else {
            self.paths.clone()
        }
    }
}

/// One published sample.
#[derive(Debug, Clone)]
pub struct Sample {
    pub seq: u64,
    pub at: Instant,
    pub period_ms: u64,
    pub paths: Vec<serde_json::Value>,
    pub links: Vec<serde_json::Value>,
}

impl Sample {
    /// The reply body, with the sample's age now.
    pub fn json(&self, now: Instant) -> serde_json::Value {
        serde_json::json!({
            "version": 1,
            "seq": self.seq,
            "age_ms": now.saturating_duration_since(self.at).as_millis() as u64,
            "period_ms": self.period_ms,
            "paths": self.paths,
            "links": self.links,
        })
    }
}

/// Compute one sample from two snapshots `dt` seconds apart (`None`-free: every link must be
/// measurable, else the error says which is not).
pub fn compute(
    cfg: &ExporterConfig,
    prev: &HashMap<String, LinkCounters>,
    cur: &HashMap<String, LinkCounters>,
    dt: f64,
) -> Result<(Vec<serde_json::Value>, Vec<serde_json::Value>), String> {
    let mut per: Vec<(&str, LinkPeriod)> = Vec::with_capacity(cfg.links.len());
    for l in &cfg.links {
        let (Some(p), Some(c)) = (prev.get(&l.name), cur.get(&l.name)) else {
            return Err(format!("interface {} is gone", l.name));
        };
        let lp = link_period(p, c, dt, l.capacity_bps).map_err(|e| format!("{}: {e}", l.name))?;
        per.push((&l.name, lp));
    }
    let paths = cfg
        .served_paths()
        .iter()
        .filter_map(|p| {
            let (pnc, pna) = path_stats(
                per.iter()
                    .filter(|(n, _)| p.links.is_empty() || p.links.iter().any(|k| k == n))
                    .map(|(_, lp)| lp),
            )?;
            Some(serde_json::json!({
                "dst": p.dst, "pnc_pkts": pnc, "pna": pna, "known_share": cfg.known_share,
            }))
        })
        .collect();
    let links = per
        .iter()
        .zip(&cfg.links)
        .map(|((n, lp), spec)| {
            let mut v = serde_json::to_value(lp).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("name".into(), (*n).into());
                o.insert("capacity_bps".into(), spec.capacity_bps.into());
            }
            v
        })
        .collect();
    Ok((paths, links))
}

/// The latest sample, shared by the sampler and the server.
pub type Published = Arc<Mutex<Option<Sample>>>;

fn publish(p: &Published, s: Sample) {
    *p.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
}

/// Sample every period until `stop`; `read` gives the counters by interface name.
pub fn sample_loop(
    cfg: &ExporterConfig,
    mut read: impl FnMut() -> io::Result<HashMap<String, LinkCounters>>,
    out: &Published,
    stop: &AtomicBool,
) {
    let mut seq = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(1);
    let mut prev: Option<(Instant, HashMap<String, LinkCounters>)> = None;
    let mut next = Instant::now();
    let mut last_warn: Option<Instant> = None;
    let mut warn_limited = |msg: String| {
        if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            warn!("{msg} (nothing published for this period)");
            last_warn = Some(Instant::now());
        } else {
            debug!("{msg}");
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += cfg.period;
        if next < now {
            next = now + cfg.period; // a stall: no burst of catch-up samples
        }
        let at = Instant::now();
        let cur = match read() {
            Ok(c) => c,
            Err(e) => {
                warn_limited(format!("cannot read the counters over rtnetlink: {e}"));
                prev = None;
                continue;
            }
        };
        if let Some((t0, p)) = &prev {
            let dt = at.duration_since(*t0).as_secs_f64();
            match compute(cfg, p, &cur, dt) {
                Ok((paths, links)) => {
                    seq += 1;
                    publish(
                        out,
                        Sample {
                            seq,
                            at,
                            period_ms: cfg.period.as_millis() as u64,
                            paths,
                            links,
                        },
                    );
                }
                Err(e) => warn_limited(e),
            }
        }
        prev = Some((at, cur));
    }
}

/// A running exporter: the sampler and the HTTP server.
pub struct Exporter {
    pub addr: SocketAddr,
    pub published: Published,
    stop: Arc<AtomicBool>,
    stop_tx: Option<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Exporter {
    /// Bind `cfg.listen` and start sampling with `read` (an [`rtnl::Rtnl`]'s counters).
    pub fn spawn(
        cfg: ExporterConfig,
        read: impl FnMut() -> io::Result<HashMap<String, LinkCounters>> + Send + 'static,
    ) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind(cfg.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let published: Published = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let pubd = published.clone();
        let server = std::thread::Builder::new()
            .name("netstats-http".into())
            .spawn(move || rt.block_on(serve(listener, pubd, rx)))?;
        let (pubd, st) = (published.clone(), stop.clone());
        let sampler = std::thread::Builder::new()
            .name("netstats-sampler".into())
            .spawn(move || sample_loop(&cfg, read, &pubd, &st))?;
        Ok(Self {
            addr,
            published,
            stop,
            stop_tx: Some(tx),
            threads: vec![server, sampler],
        })
    }

    /// The latest sample's reply body, if there is one yet.
    pub fn latest_json(&self) -> Option<serde_json::Value> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.json(Instant::now()))
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    published: Published,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "cannot serve HTTP");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => match r {
                Ok((s, _)) => {
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        continue; // dropped: the client retries next period
                    };
                    let p = published.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        let _ = tokio::time::timeout(REQUEST_TIMEOUT, conn(s, p)).await;
                    });
                }
                Err(e) => {
                    debug!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// The reply to one request head.
pub fn respond(head: &[u8], published: &Published) -> Vec<u8> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let reply = |code: &str, body: String| {
        format!(
            "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    if method != "GET" {
        return reply("405 Method Not Allowed", "{\"error\":\"GET only\"}".into());
    }
    if path != URL_PATH && path != "/" {
        return reply(
            "404 Not Found",
            format!("{{\"error\":\"the statistics are at {URL_PATH}\"}}"),
        );
    }
    let body = published
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.json(Instant::now()));
    match body {
        Some(b) => reply("200 OK", b.to_string()),
        None => reply(
            "503 Service Unavailable",
            "{\"error\":\"no sample yet (the first one comes one period after start)\"}".into(),
        ),
    }
}

async fn conn(mut s: tokio::net::TcpStream, published: Published) {
    let mut buf = Vec::with_capacity(1024);
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
        if buf.len() > MAX_REQUEST {
            let _ = s
                .write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
            return;
        }
    }
    let _ = s.write_all(&respond(&buf, &published)).await;
    let _ = s.shutdown().await;
}
