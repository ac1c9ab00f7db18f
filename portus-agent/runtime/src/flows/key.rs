//! How the agent names a flow ([`FlowKey`]): its datapath and socket id. A module of its own
//! because both the tables (`flows`) and the preferences (`flows::prefs`) key on it while the
//! tables hold the preferences.

/// A flow: its datapath (numbered by the guard; 0 for the in-process agent) and socket id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub peer: u32,
    pub sid: u32,
}
