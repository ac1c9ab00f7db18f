//! Reading operator-provided files without hanging: only regular files, their size checked
//! before reading. The reader is the `ccp-files` crate (`portus-agent/files`), shared with
//! the simulator (scenarios, traces) so every operator file goes through the same checks.

pub use ccp_files::{open_regular, present, read_regular, read_regular_to_string, ReadError};
