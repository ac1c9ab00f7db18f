//! The training environment: it steps, and its observations are exactly the features the
//! agent computes for the same flow (same seeded scenario, same actions); Owl's learners get
//! the bottleneck's in-network statistics and their state mask as the agent's flows do.

use std::path::Path;
use std::sync::{Arc, Mutex};

use _native::env::TrainEnv;
use ccp_algs::learned::{LearnedAlgorithm, WithPolicy};
use ccp_algs::owl::feature::{KNOWN_SHARE, PNA, PNC, RTT_INFLATION};
use ccp_algs::policy::{Policy, PolicyError, PolicySource};
use ccp_algs::{AlgsConfig, Registry};
use ccp_runtime::simrun::{run_sim_with_registry, IpcKind, RunOptions};
use ccp_runtime::AgentOptions;
use ccp_sim::Scenario;

const SCENARIO: &str = r#"
duration_s = 8
seed = 11
[link]
rate_mbps = 12
buffer_bdp = 1.5
loss = 0.002
[[flow]]
alg = "mocc"
rtt_ms = 30
w = [0.6, 0.3, 0.1]
[[flow]]
alg = "cubic"
rtt_ms = 30
"#;

/// The deterministic "policy" both sides use: a function of the observation.
fn decide(obs: &[f32]) -> f32 {
    // push when the newest latency ratio is low, back off when it is high
    let p = obs[3 * 9 + 1];
    (1.0 - 4.0 * p).clamp(-5.0, 5.0)
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Vec<f32>>>>);

struct RecordingPolicy(Recorder);

impl Policy for RecordingPolicy {
    fn obs_dim(&self) -> usize {
        33
    }
    fn act_dim(&self) -> usize {
        1
    }
    fn act(&mut self, obs: &[f32], _m: Option<&[f32]>, out: &mut [f32]) -> Result<(), PolicyError> {
        self.0 .0.lock().unwrap().push(obs.to_vec());
        out[0] = decide(obs);
        Ok(())
    }
}

impl PolicySource for Recorder {
    fn policy(&self, _alg: &str) -> Option<Box<dyn Policy>> {
        Some(Box::new(RecordingPolicy(self.clone())))
    }
}

fn mocc() -> Arc<dyn LearnedAlgorithm> {
    _native::learned_algorithm("mocc", &AlgsConfig::default()).expect("mocc is learned")
}

#[test]
fn env_observations_equal_the_agents_features() {
    let scenario = Scenario::from_toml_str(SCENARIO, Path::new(".")).unwrap();

    // agent side: MOCC with a recording policy, in-process portus-free agent
    let rec = Recorder::default();
    let mut registry = Registry::from_config(&AlgsConfig::default());
    registry.register(Arc::new(WithPolicy::new(mocc(), Arc::new(rec.clone()))));
    let opts = RunOptions {
        ipc: IpcKind::Inline,
        ..Default::default()
    };
    let agent_run = run_sim_with_registry(&scenario, &opts, registry).unwrap();
    let agent_obs = rec.0.lock().unwrap().clone();
    assert!(agent_obs.len() > 50, "{} decisions", agent_obs.len());

    // environment side: the same decisions taken by the "learner"
    let mut env = TrainEnv::new(scenario, mocc(), AgentOptions::default()).unwrap();
    assert_eq!(env.num_learners(), 1);
    let mut out = env.reset(None).unwrap();
    let mut env_obs = Vec::new();
    let mut rewards = Vec::new();
    while !out.done {
        assert!(out.active[0]);
        env_obs.push(out.obs.clone());
        let a = [decide(&out.obs)];
        out = env.step(&a).unwrap();
        rewards.push(out.rewards[0]);
    }
    let env_results = env.results().unwrap();

    // the agent also decides on a report in the scenario's last instant, which the
    // environment returns as its final observation with done = true
    if agent_obs.len() == env_obs.len() + 1 {
        assert_eq!(agent_obs.last(), Some(&out.obs));
    } else {
        assert_eq!(env_obs.len(), agent_obs.len(), "decision counts differ");
    }
    for (i, (a, b)) in agent_obs.iter().zip(&env_obs).enumerate() {
        assert_eq!(a, b, "observation {i} differs");
    }
    // the same decisions make the same network
    assert_eq!(agent_run.results.flows, env_results.flows);
    assert!(rewards
        .iter()
        .all(|r| r.is_finite() && (0.0..=1.0).contains(r)));
    // the preference is part of the observation
    assert_eq!(&env_obs[5][30..33], &[0.6, 0.3, 0.1]);
    // the learner's flow is one of the agent's flows: recorded like the agent's own
    let (env_records, agent_records) = (env.records(), &agent_run.records);
    assert_eq!(env_records.len(), 2);
    for (e, a) in env_records.iter().zip(agent_records) {
        assert_eq!(
            (e.sid, &e.requested, e.alg, e.w),
            (a.sid, &a.requested, a.alg, a.w)
        );
        assert_eq!(e.metrics.reports, a.metrics.reports, "flow {}", e.sid);
    }
    assert_eq!(env_records[0].alg, "mocc");
    assert!(env_records[0].metrics.reports as usize >= env_obs.len());
}

#[test]
fn several_learners_share_a_bottleneck() {
    let text = r#"
duration_s = 6
seed = 3
[link]
rate_mbps = 20
buffer_bdp = 1.0
[[flow]]
alg = "mocc"
rtt_ms = 20
count = 2
[[flow]]
alg = "mocc"
rtt_ms = 40
start_s = 2.0
"#;
    let scenario = Scenario::from_toml_str(text, Path::new(".")).unwrap();
    let mut env = TrainEnv::new(scenario, mocc(), AgentOptions::default()).unwrap();
    assert_eq!(env.num_learners(), 3);
    let mut out = env.reset(Some(5)).unwrap();
    let mut steps = 0;
    let mut third_seen_at = None;
    while !out.done {
        if out.active[2] && third_seen_at.is_none() {
            third_seen_at = Some(out.sim_time_s);
        }
        out = env.step(&[0.5, 0.5, 0.5]).unwrap();
        steps += 1;
    }
    assert!(steps > 20);
    let t = third_seen_at.expect("the late learner joined");
    assert!(t >= 2.0, "joined at {t}");
    let d = env.decisions();
    assert_eq!(d.len(), 3);
    assert!(d.iter().all(|&n| n > 5), "{d:?}");
    // wrong action count is an error, not a panic
    let mut env2 = TrainEnv::new(
        Scenario::from_toml_str(text, Path::new(".")).unwrap(),
        mocc(),
        AgentOptions::default(),
    )
    .unwrap();
    env2.reset(None).unwrap();
    assert!(env2.step(&[0.0]).is_err());
}

/// `Pause::Any`: a step ends at any learner's report, so a flow that decides alone (a
/// newcomer in Jury's significance start-up) does not hold the others still: every Jury flow
/// decides at (nearly) each of its 30 ms reports, as under the agent, and under `Pause::All`
/// the established flows lose decisions while the newcomer starts.
#[test]
fn pause_any_lets_every_flow_decide_at_its_own_reports() {
    let text = r#"
duration_s = 6
seed = 4
[link]
rate_mbps = 20
buffer_bdp = 1.0
[[flow]]
alg = "jury"
rtt_ms = 30
count = 2
[[flow]]
alg = "jury"
rtt_ms = 30
start_s = 3.0
"#;
    let jury: Arc<dyn LearnedAlgorithm> = Arc::new(ccp_algs::jury::Jury::default());
    let run = |pause| {
        let scenario = Scenario::from_toml_str(text, Path::new(".")).unwrap();
        let mut env = TrainEnv::new(scenario, jury.clone(), AgentOptions::default()).unwrap();
        env.set_pause(pause);
        let mut out = env.reset(Some(1)).unwrap();
        let mut steps = 0u64;
        while !out.done {
            assert!(out.active.iter().any(|&a| a) || steps == 0 || out.done);
            // the range (0, 0.5): eq. 6 grows a flow below half the link and shrinks one
            // above it, so the link fills and the flows settle (a range above 0 for every
            // share, as (0.25, 0.5), would keep both growing into loss, where intervals ack
            // too few packets to count as decisions)
            out = env.step(&[0.0, 0.5, 0.0, 0.5, 0.0, 0.5]).unwrap();
            steps += 1;
        }
        env.decisions()
    };
    let any = run(_native::env::Pause::Any);
    let all = run(_native::env::Pause::All);
    // 6 s of 30 ms reports is 200; the first flows decide at most of theirs
    assert!(any[0] > 150 && any[1] > 150, "{any:?}");
    assert!(
        all[0] < any[0] && all[1] < any[1],
        "all {all:?} any {any:?}"
    );
}

// --- Owl: in-network statistics and the state mask reach the learner as the agent's flow ---

/// One Owl flow and a Cubic one on a 12 Mbit/s link; `netstats` adds the bottleneck's
/// statistics (`[netstats]`, every second).
fn owl_scenario(netstats: bool) -> Scenario {
    let mut text = String::from(
        r#"
duration_s = 6
seed = 5
[link]
rate_mbps = 12
buffer_bdp = 1.0
[[flow]]
alg = "owl"
rtt_ms = 20
[[flow]]
alg = "cubic"
rtt_ms = 20
start_s = 1.0
"#,
    );
    if netstats {
        text.push_str("[netstats]\nperiod_s = 1.0\nknown_share = 0.5\n");
    }
    Scenario::from_toml_str(&text, Path::new(".")).unwrap()
}

fn owl() -> Arc<dyn LearnedAlgorithm> {
    _native::learned_algorithm("owl", &AlgsConfig::default()).expect("owl is learned")
}

const K: usize = 5;
/// Index of feature `f` of the newest history slot (feature-major, oldest first).
fn newest(f: usize) -> usize {
    f * K + K - 1
}

/// Owl's deterministic "policy": back off when the newest RTT inflation is high.
fn owl_decide(obs: &[f32]) -> f32 {
    if obs[newest(RTT_INFLATION)] > 0.05 {
        1.0 // −3 packets
    } else {
        5.0 // +3 packets
    }
}

/// An observation and its mask.
type ObsMask = (Vec<f32>, Vec<f32>);

/// Records every observation and mask the agent's controller hands its policy.
#[derive(Clone, Default)]
struct MaskRecorder(Arc<Mutex<Vec<ObsMask>>>);

struct MaskRecordingPolicy(MaskRecorder);

impl Policy for MaskRecordingPolicy {
    fn obs_dim(&self) -> usize {
        50
    }
    fn act_dim(&self) -> usize {
        1
    }
    fn act(&mut self, obs: &[f32], m: Option<&[f32]>, out: &mut [f32]) -> Result<(), PolicyError> {
        let mask = m.expect("Owl's policy gets a mask").to_vec();
        self.0 .0.lock().unwrap().push((obs.to_vec(), mask));
        out[0] = owl_decide(obs);
        Ok(())
    }
}

impl PolicySource for MaskRecorder {
    fn policy(&self, _alg: &str) -> Option<Box<dyn Policy>> {
        Some(Box::new(MaskRecordingPolicy(self.clone())))
    }
}

/// The agent's (observation, mask) sequence for `scenario` with Owl deciding by `owl_decide`.
fn owl_agent_run(scenario: &Scenario) -> Vec<ObsMask> {
    let rec = MaskRecorder::default();
    let mut registry = Registry::from_config(&AlgsConfig::default());
    registry.register(Arc::new(WithPolicy::new(owl(), Arc::new(rec.clone()))));
    let opts = RunOptions {
        ipc: IpcKind::Inline,
        ..Default::default()
    };
    run_sim_with_registry(scenario, &opts, registry).unwrap();
    let seen = rec.0.lock().unwrap().clone();
    seen
}

/// The environment's (observation, mask, span rewards) per decision with the same decisions.
fn owl_env_run(scenario: Scenario) -> (Vec<ObsMask>, Vec<(f64, f64, u32)>) {
    let mut env = TrainEnv::new(scenario, owl(), AgentOptions::default()).unwrap();
    env.set_pause(_native::env::Pause::Any);
    let mut out = env.reset(Some(5)).unwrap();
    let (mut seen, mut spans) = (Vec::new(), Vec::new());
    while !out.done {
        if out.active[0] {
            seen.push((out.obs.clone(), out.mask.clone()));
            let (sum, n) = out.span_reward[0];
            spans.push((out.rewards[0], sum, n));
        }
        let a = [owl_decide(&out.obs)];
        out = env.step(&a).unwrap();
    }
    (seen, spans)
}

/// The agent's last decision may fall in the scenario's last instant, which the environment
/// returns with `done` and no action.
fn assert_same_decisions(agent: &[ObsMask], env: &[ObsMask]) {
    assert!(
        agent.len() == env.len() || agent.len() == env.len() + 1,
        "decisions: agent {} env {}",
        agent.len(),
        env.len()
    );
    for (i, (a, e)) in agent.iter().zip(env).enumerate() {
        assert_eq!(a.0, e.0, "observation {i} differs");
        assert_eq!(a.1, e.1, "mask {i} differs");
    }
}

#[test]
fn owl_learners_get_the_bottlenecks_statistics_as_the_agents_flows_do() {
    let agent = owl_agent_run(&owl_scenario(true));
    let (env, spans) = owl_env_run(owl_scenario(true));
    assert!(env.len() > 100, "{} decisions", env.len());
    assert_same_decisions(&agent, &env);

    // samples arrive from the first second on: PNC/PNA present in the newest slot, with the
    // scenario's known share; the Cubic flow's arrival at 1 s makes the queue move (PNC > 0)
    let present: Vec<&ObsMask> = env
        .iter()
        .filter(|(_, m)| m[newest(PNC)] == 1.0 && m[newest(PNA)] == 1.0)
        .collect();
    assert!(
        present.len() * 2 > env.len(),
        "{} of {} decisions saw statistics",
        present.len(),
        env.len()
    );
    for (o, _) in &present {
        assert_eq!(o[newest(KNOWN_SHARE)], 0.5);
        assert!((0.0..=1.0).contains(&o[newest(PNA)]));
    }
    assert!(present.iter().any(|(o, _)| o[newest(PNC)] > 0.0));
    // masked means zero
    for (o, m) in &env {
        for i in 0..o.len() {
            if m[i] == 0.0 {
                assert_eq!(o[i], 0.0, "masked value {i} is not zero");
            }
        }
    }

    // the span rewards: every report since the last action; a decision right after the
    // previous one spans that one report, whose reward is the step's
    assert!(spans.iter().all(|&(_, s, n)| n >= 1 && s.is_finite()));
    let single: Vec<_> = spans.iter().skip(1).filter(|s| s.2 == 1).collect();
    assert!(single.len() > 50);
    assert!(single.iter().all(|&&(r, s, _)| r == s));
    // losses: the window's recovery holds several reports without a decision
    assert!(spans.iter().skip(1).any(|s| s.2 > 1), "no span over a loss");
}

#[test]
fn owl_learners_without_statistics_see_them_masked() {
    let agent = owl_agent_run(&owl_scenario(false));
    let (env, _) = owl_env_run(owl_scenario(false));
    assert!(env.len() > 100, "{} decisions", env.len());
    assert_same_decisions(&agent, &env);
    for (o, m) in &env {
        for j in 0..K {
            assert_eq!((m[PNC * K + j], m[PNA * K + j]), (0.0, 0.0));
            assert_eq!((o[PNC * K + j], o[PNA * K + j]), (0.0, 0.0));
        }
        // the known share is present: nothing of the path is known
        assert_eq!((o[newest(KNOWN_SHARE)], m[newest(KNOWN_SHARE)]), (0.0, 1.0));
    }
}

/// The mask the environment returns for an unmasked algorithm is all ones, and what it
/// returns otherwise is unchanged by the statistics cell (MOCC ignores `[netstats]`).
#[test]
fn unmasked_learners_get_a_mask_of_ones() {
    let text = r#"
duration_s = 3
seed = 2
[link]
rate_mbps = 10
[[flow]]
alg = "mocc"
rtt_ms = 30
[netstats]
"#;
    let run = |text: &str| {
        let scenario = Scenario::from_toml_str(text, Path::new(".")).unwrap();
        let mut env = TrainEnv::new(scenario, mocc(), AgentOptions::default()).unwrap();
        let mut out = env.reset(None).unwrap();
        let mut obs = Vec::new();
        while !out.done {
            assert!(out.mask.iter().all(|&m| m == 1.0));
            obs.push(out.obs.clone());
            out = env.step(&[0.3]).unwrap();
        }
        obs
    };
    let with = run(text);
    let without = run(text.trim_end().trim_end_matches("[netstats]"));
    assert!(with.len() > 20);
    assert_eq!(with, without);
}

/// Nuwa whose program starts with a 30 ms target while its cores ask for 10 ms through their
/// control registers.
struct SplitNuwa {
    program: ccp_algs::nuwa::Nuwa,
    cores: ccp_algs::nuwa::Nuwa,
}

impl ccp_algs::Algorithm for SplitNuwa {
    fn name(&self) -> &'static str {
        "nuwa"
    }
    fn program(&self) -> ccp_algs::FoldProgram {
        ccp_algs::Algorithm::program(&self.program)
    }
    fn new_flow(&self, info: &ccp_algs::FlowInfo) -> Box<dyn ccp_algs::Controller> {
        ccp_algs::Algorithm::new_flow(&self.cores, info)
    }
}

impl LearnedAlgorithm for SplitNuwa {
    fn spec(&self) -> ccp_algs::policy::PolicySpec {
        LearnedAlgorithm::spec(&self.cores)
    }
    fn new_core(&self, info: &ccp_algs::FlowInfo) -> Box<dyn ccp_algs::learned::LearnedCore> {
        self.cores.new_core(info)
    }
    fn dynamics(&self) -> ccp_algs::learned::Dynamics {
        self.cores.dynamics()
    }
    fn discrete_actions(&self) -> Option<usize> {
        self.cores.discrete_actions()
    }
}

/// A learner's registers (Nuwa's gain and target) reach its datapath program, and its
/// decisions come only outside slow start, once per report.
#[test]
fn nuwa_learners_set_the_registers_their_program_runs_on() {
    use ccp_algs::nuwa::{feature, Nuwa, NuwaConfig, HOLD_ACTION, OBS_DIM};
    let text = r#"
duration_s = 12
seed = 3
[link]
rate_mbps = 24
buffer_pkts = 320
[[flow]]
alg = "nuwa"
rtt_ms = 40
"#;
    let with = |ms: f64| {
        Nuwa::new(NuwaConfig {
            target_delay_ms: ms,
            ..Default::default()
        })
    };
    let alg = Arc::new(SplitNuwa {
        program: with(30.0),
        cores: with(10.0),
    });
    let scenario = Scenario::from_toml_str(text, Path::new(".")).unwrap();
    let mut env = TrainEnv::new(scenario, alg, AgentOptions::default()).unwrap();
    assert_eq!(env.discrete_actions(), Some(5));
    let mut out = env.reset(None).unwrap();
    let mut steps = 0;
    while !out.done {
        assert_eq!(out.obs.len(), OBS_DIM);
        assert!(out.obs.iter().all(|v| (-1.0..=1.0).contains(v)));
        // k = 1 throughout: the middle of [1/64, 64]
        assert!((out.obs[feature::GAIN] - 0.5).abs() < 1e-6);
        out = env.step(&[HOLD_ACTION as f32]).unwrap();
        steps += 1;
    }
    // about one decision per RTT (50 ms at the target) over the 11-odd seconds after slow start
    assert!((150..=300).contains(&steps), "{steps}");
    let r = env.results().unwrap();
    let f = &r.flows[0];
    assert_eq!(f.invoke_errors, 0);
    assert!(
        (f.queue_delay_p50_ms - 10.0).abs() <= 3.0,
        "median queueing delay {} ms: the program kept its own target",
        f.queue_delay_p50_ms
    );
}

/// Nuwa's deterministic "policy" for the comparison: a function of the observation and of how
/// many decisions the flow has taken (a stand-in for the LSTM's per-flow state).
fn nuwa_decide(obs: &[f32], n: usize) -> f32 {
    use ccp_algs::nuwa::feature::SPACE;
    if obs[SPACE] < 0.0 {
        0.0 // ×0.25: past the target
    } else if n.is_multiple_of(7) {
        4.0 // ×2.85
    } else if obs[SPACE] > 0.5 {
        3.0 // ×1.25
    } else {
        1.0 // ×1
    }
}

/// Records every observation Nuwa's controller hands its policy; counts decisions per flow.
struct NuwaRecordingPolicy(Recorder, usize);

impl Policy for NuwaRecordingPolicy {
    fn obs_dim(&self) -> usize {
        ccp_algs::nuwa::OBS_DIM
    }
    fn act_dim(&self) -> usize {
        1
    }
    fn act(&mut self, obs: &[f32], m: Option<&[f32]>, out: &mut [f32]) -> Result<(), PolicyError> {
        assert!(m.is_none(), "Nuwa's policy takes no mask");
        self.0 .0.lock().unwrap().push(obs.to_vec());
        out[0] = nuwa_decide(obs, self.1);
        self.1 += 1;
        Ok(())
    }
}

#[derive(Clone, Default)]
struct NuwaRecorder(Recorder);

impl PolicySource for NuwaRecorder {
    fn policy(&self, _alg: &str) -> Option<Box<dyn Policy>> {
        Some(Box::new(NuwaRecordingPolicy(self.0.clone(), 0)))
    }
}

/// Nuwa's learner sees exactly the observations the agent's controller hands its policy for the
/// same flow and the same decisions (a Cubic flow joining, random loss, a loss cut), only
/// outside slow start, and the same decisions make the same network.
#[test]
fn nuwa_env_observations_equal_the_agents_features() {
    use ccp_algs::nuwa::{feature, OBS_DIM};
    let text = r#"
duration_s = 8
seed = 7
[link]
rate_mbps = 12
buffer_bdp = 1.5
loss = 0.002
[[flow]]
alg = "nuwa"
rtt_ms = 30
[[flow]]
alg = "cubic"
rtt_ms = 30
start_s = 2.0
"#;
    let nuwa = || _native::learned_algorithm("nuwa", &AlgsConfig::default()).unwrap();
    let scenario = Scenario::from_toml_str(text, Path::new(".")).unwrap();

    let rec = NuwaRecorder::default();
    let mut registry = Registry::from_config(&AlgsConfig::default());
    registry.register(Arc::new(WithPolicy::new(nuwa(), Arc::new(rec.clone()))));
    let opts = RunOptions {
        ipc: IpcKind::Inline,
        ..Default::default()
    };
    let agent_run = run_sim_with_registry(&scenario, &opts, registry).unwrap();
    let agent_obs = rec.0 .0.lock().unwrap().clone();

    let mut env = TrainEnv::new(scenario, nuwa(), AgentOptions::default()).unwrap();
    let mut out = env.reset(None).unwrap();
    let mut env_obs = Vec::new();
    while !out.done {
        assert!(out.active[0]);
        assert_eq!(out.obs.len(), OBS_DIM);
        let a = [nuwa_decide(&out.obs, env_obs.len())];
        env_obs.push(out.obs.clone());
        out = env.step(&a).unwrap();
    }
    let env_results = env.results().unwrap();
    assert!(env_obs.len() > 100, "{} decisions", env_obs.len());
    if agent_obs.len() == env_obs.len() + 1 {
        assert_eq!(agent_obs.last(), Some(&out.obs));
    } else {
        assert_eq!(env_obs.len(), agent_obs.len(), "decision counts differ");
    }
    for (i, (a, b)) in agent_obs.iter().zip(&env_obs).enumerate() {
        assert_eq!(a, b, "observation {i} differs");
    }
    assert_eq!(agent_run.results.flows, env_results.flows);
    // the decisions moved the gain both ways
    let gains: Vec<f32> = env_obs.iter().map(|o| o[feature::GAIN]).collect();
    assert!(gains.iter().any(|&g| g > 0.5) && gains.iter().any(|&g| g < 0.5));
}
