//! The training environment: it steps, and its observations are exactly the features the
//! agent computes for the same flow (same seeded scenario, same actions).

use std::path::Path;
use std::sync::{Arc, Mutex};

use _native::env::TrainEnv;
use ccp_algs::learned::{LearnedAlgorithm, WithPolicy};
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
            // the range (0.3, 0.5): every flow keeps growing until the link fills
            out = env.step(&[0.3, 0.5, 0.3, 0.5, 0.3, 0.5]).unwrap();
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
