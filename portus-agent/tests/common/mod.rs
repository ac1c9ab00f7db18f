//! Helpers shared by the hardening and soak tests: the agent binary as a child process over
//! unix datagram sockets, a datapath peer, and reading a process's memory.
#![allow(dead_code)]

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ccp_runtime::ipc::guard::{CHANGE_PROG, INSTALL, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;

pub const SOCK_DIR: &str = "/tmp/ccp";

/// A name no other test (or test process) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The agent binary serving `--ipc unix --unix-name <name>`, stderr captured in a file.
pub struct AgentProc {
    pub child: Child,
    pub name: String,
    pub stderr: PathBuf,
}

impl AgentProc {
    /// Start `ccp-agent --ipc unix --unix-name <name> <args>` and wait until its socket
    /// exists (up to 20 s).
    pub fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> AgentProc {
        Self::start_bin(env!("CARGO_BIN_EXE_ccp-agent"), name, args, env)
    }

    /// [`AgentProc::start`] with another agent binary (e.g. an older build, to compare).
    pub fn start_bin(bin: &str, name: &str, args: &[&str], env: &[(&str, &str)]) -> AgentProc {
        let stderr = std::env::temp_dir().join(format!("{name}.stderr"));
        let f = std::fs::File::create(&stderr).expect("stderr file");
        let mut cmd = Command::new(bin);
        cmd.args(["--ipc", "unix", "--unix-name", name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start ccp-agent");
        let mut a = AgentProc {
            child,
            name: name.to_string(),
            stderr,
        };
        let path = Path::new(SOCK_DIR).join(name);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !path.exists() {
            if let Ok(Some(st)) = a.child.try_wait() {
                panic!("agent exited at start-up ({st}): {}", a.stderr_text());
            }
            assert!(Instant::now() < deadline, "agent socket never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        // the socket file appears at bind(), just before the run loop starts
        std::thread::sleep(Duration::from_millis(50));
        a
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Send a signal (by name: TERM, HUP) to the agent.
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status();
    }

    /// Wait up to `limit` for the agent to exit.
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then wait up to `limit`; `None` if it did not exit.
    pub fn stop(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.signal("TERM");
        self.wait_for_exit(limit)
    }

    /// The agent's IPC counters: SIGUSR1, then the `ccp-agent stats: {...}` line it prints
    /// on stderr (polled, up to `limit`); `None` if no new line came.
    pub fn stats(&self, limit: Duration) -> Option<serde_json::Value> {
        const TAG: &str = "ccp-agent stats: ";
        let lines = |t: &str| -> Vec<String> {
            t.lines()
                .filter_map(|l| l.strip_prefix(TAG))
                .map(str::to_string)
                .collect()
        };
        let n = lines(&self.stderr_text()).len();
        self.signal("USR1");
        let deadline = Instant::now() + limit;
        loop {
            // a whole line: the agent writes it with one write(2), newline included
            let text = self.stderr_text();
            let got = lines(&text);
            if got.len() > n && text.ends_with('\n') {
                return serde_json::from_str(&got[n]).ok();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Poll the agent's stderr until it contains `needle` (up to `limit`).
    pub fn wait_for_log(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.stderr_text().contains(needle) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Resident set size (KiB) of the agent process.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(Path::new(SOCK_DIR).join(&self.name));
        let _ = std::fs::remove_file(&self.stderr);
    }
}

/// Wait for `child` to exit within `limit` (killed if not: a hang): its exit status (`None`
/// when it was killed) and its captured output.
pub fn wait_bounded(
    mut child: Child,
    limit: Duration,
) -> (Option<ExitStatus>, std::process::Output) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the child") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().expect("the child's output");
    (status, out)
}

/// VmRSS of a process (KiB), 0 if unreadable.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A datapath: a unix datagram socket bound under /tmp/ccp, talking to one agent.
pub struct Peer {
    pub sock: UnixDatagram,
    pub path: PathBuf,
    pub agent: PathBuf,
    buf: Vec<u8>,
}

impl Peer {
    pub fn bind(name: &str, agent: &str) -> Peer {
        std::fs::create_dir_all(SOCK_DIR).expect("/tmp/ccp");
        let path = Path::new(SOCK_DIR).join(name);
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path).expect("bind peer");
        // a stuck agent must fail the test, not hang it
        sock.set_write_timeout(Some(Duration::from_secs(5)))
            .expect("send timeout");
        Peer {
            sock,
            path,
            agent: Path::new(SOCK_DIR).join(agent),
            buf: vec![0u8; 64 * 1024],
        }
    }

    pub fn send(&self, m: &[u8]) -> std::io::Result<usize> {
        self.sock.send_to(m, &self.agent)
    }

    /// One message, or `None` after `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))
            .ok()?;
        let n = self.sock.recv(&mut self.buf).ok()?;
        Some(self.buf[..n].to_vec())
    }

    /// Receive until a message of type `want` for `sid` arrives (skipping INSTALLs and other
    /// flows' answers), or panic after `timeout`.
    pub fn expect(&mut self, want: u16, sid: u32, timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.recv(left).unwrap_or_else(|| {
                panic!("no message of type {want} for sid {sid} within {timeout:?}")
            });
            if let Some((t, s)) = wire::type_and_sid(&m) {
                if t == want && s == sid {
                    return m;
                }
                assert!(
                    t == INSTALL || t == CHANGE_PROG || t == UPDATE_FIELDS,
                    "unexpected message type {t}"
                );
            }
        }
    }

    /// Create a Reno flow `sid`, drive one report through it and answer-check it.
    pub fn roundtrip(&mut self, sid: u32, timeout: Duration) {
        self.send(&wire::create(sid, "ccp_reno", 14480, 1448))
            .expect("send create");
        let cp = self.expect(CHANGE_PROG, sid, timeout);
        let uid = wire::change_prog_uid(&cp).expect("uid");
        self.send(&wire::measure(sid, uid, &reno_report()))
            .expect("send measure");
        self.expect(UPDATE_FIELDS, sid, timeout);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A plausible report for Reno's program.
pub fn reno_report() -> Vec<u64> {
    let prog = ccp_algs::Registry::builtin()
        .get("reno")
        .expect("reno")
        .program();
    wire::one_rtt_report(&prog)
}

/// A flow's close: a MEASURE with no fields.
pub fn close(sid: u32) -> Vec<u8> {
    wire::measure(sid, 0, &[])
}
