//! The in-process channel (`--ipc chan`, the simulator's default peer and the benchmarks):
//! portus's `ipc::chan` with an adaptive spin before a receive blocks ([`crate::ipc::spin`])
//! and a length check (a message longer than portus's buffer is refused, not copied).
//!
//! The simulator's runs leave the spin off ([`ChanSocket::new`]): a sweep runs one simulation
//! per core, and an agent thread spinning between reports would take the core its simulator
//! needs. [`ChanSocket::with_spin`] turns it on (the latency benchmark measures both).

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::spin::Spin;

/// Longest a receive waits (portus's run loop checks for a stop request in between).
pub const RECV_TIMEOUT: Duration = Duration::from_secs(1);

/// Called after every message the agent sends (a datapath that sleeps on a file descriptor
/// rather than on the channel: the BPF datapath's ring and an eventfd).
pub type Notify = Box<dyn Fn() + Send + Sync>;

/// The agent's end of a pair of channels; a portus [`portus::ipc::Ipc`] (type `channel`).
pub struct ChanSocket {
    to_datapath: Sender<Vec<u8>>,
    from_datapath: Receiver<Vec<u8>>,
    spin: Spin,
    notify: Option<Notify>,
}

impl std::fmt::Debug for ChanSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChanSocket")
            .field("spin", &self.spin)
            .field("notify", &self.notify.is_some())
            .finish_non_exhaustive()
    }
}

impl ChanSocket {
    /// Answers go to `to_datapath`; datapath messages come from `from_datapath`. No spin.
    pub fn new(to_datapath: Sender<Vec<u8>>, from_datapath: Receiver<Vec<u8>>) -> Self {
        Self::with_spin(to_datapath, from_datapath, Spin::off())
    }

    /// The same, spinning as `spin` says before a receive blocks.
    pub fn with_spin(
        to_datapath: Sender<Vec<u8>>,
        from_datapath: Receiver<Vec<u8>>,
        spin: Spin,
    ) -> Self {
        Self {
            to_datapath,
            from_datapath,
            spin,
            notify: None,
        }
    }

    /// The same, calling `notify` after each message sent to the datapath.
    pub fn with_notify(mut self, notify: Notify) -> Self {
        self.notify = Some(notify);
        self
    }

    /// The spin's statistics (CPU spent spinning, hits, misses).
    pub fn spin_stats(&self) -> std::sync::Arc<super::spin::SpinStats> {
        self.spin.stats()
    }
}

impl portus::ipc::Ipc for ChanSocket {
    type Addr = ();

    fn name() -> String {
        String::from("channel")
    }

    fn send(&self, msg: &[u8], _to: &Self::Addr) -> portus::Result<()> {
        self.to_datapath
            .send(msg.to_vec())
            .map_err(|_| portus::Error(String::from("the datapath's channel is closed")))?;
        if let Some(n) = &self.notify {
            n();
        }
        Ok(())
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        let started = Instant::now();
        let got = match self.from_datapath.try_recv() {
            Ok(m) => m,
            Err(TryRecvError::Disconnected) => {
                return Err(portus::Error(String::from(
                    "the datapath's channel is closed",
                )))
            }
            Err(TryRecvError::Empty) => {
                match self
                    .spin
                    .spin(started, || self.from_datapath.try_recv().ok())
                {
                    Some(m) => m,
                    None => {
                        let r = self.from_datapath.recv_timeout(RECV_TIMEOUT);
                        self.spin.record(started.elapsed());
                        match r {
                            Ok(m) => m,
                            Err(RecvTimeoutError::Timeout) => {
                                return Err(portus::Error(String::from(
                                    "no message (receive timeout)",
                                )))
                            }
                            Err(RecvTimeoutError::Disconnected) => {
                                return Err(portus::Error(String::from(
                                    "the datapath's channel is closed",
                                )))
                            }
                        }
                    }
                }
            }
        };
        if got.len() > msg.len() {
            return Err(portus::Error(format!(
                "a {}-byte message is longer than the {}-byte receive buffer: dropped",
                got.len(),
                msg.len()
            )));
        }
        msg[..got.len()].copy_from_slice(&got);
        Ok((got.len(), ()))
    }

    fn close(&mut self) -> portus::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portus::ipc::Ipc;

    #[test]
    fn messages_pass_and_an_oversized_one_is_refused() {
        let (to_agent, rx) = crossbeam_channel::unbounded();
        let (tx, from_agent) = crossbeam_channel::unbounded();
        let s = ChanSocket::with_spin(tx, rx, Spin::default());
        to_agent.send(vec![1, 2, 3]).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(s.recv(&mut buf).unwrap().0, 3);
        assert_eq!(&buf[..3], &[1, 2, 3]);
        to_agent.send(vec![0; 5]).unwrap();
        let e = s.recv(&mut buf).unwrap_err();
        assert!(e.0.contains("longer than"), "{}", e.0);
        s.send(&[9], &()).unwrap();
        assert_eq!(from_agent.recv().unwrap(), vec![9]);
        drop(to_agent);
        assert!(s.recv(&mut buf).unwrap_err().0.contains("closed"));
    }

    #[test]
    fn every_send_notifies_once() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::Arc;
        let (_to_agent, rx) = crossbeam_channel::unbounded::<Vec<u8>>();
        let (tx, from_agent) = crossbeam_channel::unbounded();
        let n = Arc::new(AtomicU32::new(0));
        let n2 = n.clone();
        let s = ChanSocket::new(tx, rx).with_notify(Box::new(move || {
            n2.fetch_add(1, Ordering::SeqCst);
        }));
        s.send(&[1], &()).unwrap();
        s.send(&[2], &()).unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert_eq!(from_agent.try_iter().count(), 2);
        // a send that fails (the datapath is gone) notifies nobody
        drop(from_agent);
        assert!(s.send(&[3], &()).is_err());
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }
}
