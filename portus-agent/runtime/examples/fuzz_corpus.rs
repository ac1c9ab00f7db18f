//! Writes the seed corpus of the `datapath_msgs` fuzz target (`fuzz/`): real datapath
//! messages as the simulator's libccp writes them (a short four-algorithm scenario run
//! through the in-process agent, every message the datapath sent recorded), and messages
//! laid out as the kernel module writes them (same libccp serializer; its CREATE carries
//! addresses, ports, `snd_cwnd·mss` and the socket's congestion-control name).
//!
//!     cargo run -p ccp-agent --example fuzz_corpus -- fuzz/corpus/datapath_msgs
//!
//! Each file is the fuzz target's input format: datagrams as `[peer u8][len u16 LE][bytes]`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ccp_runtime::agent::inline::InlineAgent;
use ccp_runtime::ipc::guard::{CREATE, MEASURE, READY};
use ccp_runtime::ipc::wire;
use ccp_runtime::{Agent, AgentOptions};
use ccp_sim::{DatapathIpc, Scenario, SimOptions, Simulator};

/// Records what the datapath sends on its way to the agent.
struct Recorder {
    agent: InlineAgent,
    sent: Vec<Vec<u8>>,
}

impl DatapathIpc for Recorder {
    fn send(&mut self, msg: &[u8]) -> std::io::Result<()> {
        self.sent.push(msg.to_vec());
        self.agent.send(msg)
    }

    fn recv(&mut self, timeout: Duration) -> std::io::Result<Option<Vec<u8>>> {
        self.agent.recv(timeout)
    }
}

const SCENARIO: &str = r#"
duration_s = 2
seed = 3
[link]
rate_mbps = 20
buffer_bdp = 0.5
loss = 0.01
[[flow]]
alg = "ccp_reno"
rtt_ms = 20
stop_s = 1.0
[[flow]]
alg = "cubic"
w = [0.6, 0.3, 0.1]
rtt_ms = 30
start_s = 0.1
[[flow]]
alg = "bbr"
rtt_ms = 40
start_s = 0.2
stop_s = 1.5
[[flow]]
alg = "iris"
rtt_ms = 25
start_s = 0.3
[[flow]]
rtt_ms = 50
start_s = 0.4
"#;

fn frame(out: &mut Vec<u8>, peer: u8, msg: &[u8]) {
    out.push(peer);
    out.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    out.extend_from_slice(msg);
}

fn one(m: &[u8]) -> Vec<(u8, &[u8])> {
    vec![(0u8, m)]
}

fn write(dir: &Path, name: &str, msgs: &[(u8, &[u8])]) -> std::io::Result<()> {
    let mut v = Vec::new();
    for (p, m) in msgs {
        frame(&mut v, *p, m);
    }
    std::fs::write(dir.join(name), v)
}

/// A CREATE as the kernel module writes it (tcp_ccp.c: init_cwnd = snd_cwnd·mss).
fn kernel_create(
    sid: u32,
    name: &str,
    mss: u32,
    src: [u8; 4],
    sport: u16,
    dst: [u8; 4],
) -> Vec<u8> {
    let mut m = wire::create(sid, name, 10 * mss, mss);
    // src_ip, src_port, dst_ip, dst_port as libccp serializes them (host order u32s)
    let fields = [
        u32::from_be_bytes(src),
        u32::from(sport),
        u32::from_be_bytes(dst),
        5201,
    ];
    for (i, v) in fields.iter().enumerate() {
        let at = 8 + 8 + 4 * i;
        m[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    m
}

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus/datapath_msgs".into()),
    );
    std::fs::create_dir_all(&dir)?;
    let agent = Agent::new(&AgentOptions::default())?;
    let scenario = Scenario::from_toml_str(SCENARIO, ".")?;
    let mut sim = Simulator::new(
        &scenario,
        SimOptions {
            default_alg: agent.default_alg().to_owned(),
            ..Default::default()
        },
    )?;
    let mut rec = Recorder {
        agent: agent.inline()?,
        sent: Vec::new(),
    };
    sim.run(&mut rec)?;
    let sent = rec.sent;
    let typ = |m: &[u8]| wire::type_and_sid(m).map(|t| t.0);
    let nfields = |m: &[u8]| {
        m.get(12..16)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut files = 0;
    // the start of the run: READY, CREATEs, first reports
    let start: Vec<(u8, &[u8])> = sent.iter().take(64).map(|m| (0, m.as_slice())).collect();
    write(&dir, "sim-start", &start)?;
    // the same from two datapaths, the second's answers failing once
    let two: Vec<(u8, &[u8])> = sent
        .iter()
        .take(32)
        .enumerate()
        .flat_map(|(i, m)| {
            let p1 = if i == 8 { 0x81 } else { 1 };
            [(0u8, m.as_slice()), (p1, m.as_slice())]
        })
        .collect();
    write(&dir, "sim-two-datapaths", &two)?;
    files += 2;
    // one file per message kind and shape, and the run up to each close
    let mut seen = std::collections::HashSet::new();
    for (i, m) in sent.iter().enumerate() {
        let key = match typ(m) {
            Some(READY) => "ready".to_string(),
            Some(CREATE) => format!("create-{}", m.len()),
            Some(MEASURE) => format!("measure-{}", nfields(m).unwrap_or(0)),
            _ => continue,
        };
        if key == "measure-0" {
            let from = i.saturating_sub(16);
            let run: Vec<(u8, &[u8])> = sent[from..=i].iter().map(|m| (0, m.as_slice())).collect();
            let sid = wire::type_and_sid(m).map(|t| t.1).unwrap_or(0);
            write(&dir, &format!("sim-close-sid{sid}"), &run)?;
            files += 1;
        }
        if seen.insert(key.clone()) {
            write(&dir, &format!("sim-{key}"), &one(m))?;
            files += 1;
        }
    }
    // CREATEs with each flow's name (one per algorithm and the default)
    for (i, m) in sent.iter().filter(|m| typ(m) == Some(CREATE)).enumerate() {
        write(&dir, &format!("sim-create-flow{i}"), &one(m))?;
        files += 1;
    }
    // the kernel module's layout
    let report = sent
        .iter()
        .find(|m| typ(m) == Some(MEASURE) && nfields(m).unwrap_or(0) > 0)
        .cloned()
        .unwrap_or_default();
    let mut kreport = report.clone();
    if kreport.len() >= 8 {
        kreport[4..8].copy_from_slice(&7u32.to_le_bytes());
    }
    let kernel = [
        ("kernel-ready", vec![wire::ready(0)]),
        (
            "kernel-create-reno",
            vec![kernel_create(
                7,
                "reno",
                1448,
                [10, 0, 0, 1],
                43210,
                [10, 0, 0, 2],
            )],
        ),
        (
            "kernel-create-ccp_cubic",
            vec![kernel_create(
                7,
                "ccp_cubic",
                1448,
                [192, 168, 1, 5],
                51000,
                [192, 168, 1, 9],
            )],
        ),
        (
            "kernel-create-ccp_bbr-jumbo",
            vec![kernel_create(
                8,
                "ccp_bbr",
                8948,
                [10, 1, 1, 1],
                40000,
                [10, 1, 1, 2],
            )],
        ),
        (
            "kernel-flow",
            vec![
                wire::ready(0),
                kernel_create(7, "ccp_reno", 1448, [10, 0, 0, 1], 43210, [10, 0, 0, 2]),
                kreport.clone(),
                kreport.clone(),
                wire::measure(7, 0, &[]),
            ],
        ),
        // re-announced after an agent restart: the current cwnd as init_cwnd
        (
            "kernel-reannounce",
            vec![{
                let mut m =
                    kernel_create(9, "ccp_cubic", 1448, [10, 0, 0, 1], 43211, [10, 0, 0, 2]);
                m[8..12].copy_from_slice(&(3_000u32 * 1448).to_le_bytes());
                m
            }],
        ),
    ];
    for (name, msgs) in &kernel {
        let v: Vec<(u8, &[u8])> = msgs.iter().map(|m| (0, m.as_slice())).collect();
        write(&dir, name, &v)?;
        files += 1;
    }
    println!(
        "{files} corpus files in {} from {} simulator messages",
        dir.display(),
        sent.len()
    );
    Ok(())
}
