//! The event heap: event kinds, their order at one instant, and `push_ev`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
    Sample,
    NetStats,
    Start(u32),
    Stop(u32),
    Ack(u32),
    Pace(u32),
    Rto(u32),
    End,
}

impl Ev {
    /// Order among events at the same instant: samples close the interval first, then
    /// stops and the end (a flow is active over `[start, stop)`), then everything else.
    fn class(self) -> u8 {
        match self {
            Ev::Sample | Ev::NetStats => 0,
            Ev::Stop(_) | Ev::End => 1,
            _ => 2,
        }
    }
}

pub(super) type Heap = BinaryHeap<Reverse<(u64, u8, u64, Ev)>>;

pub(super) fn push_ev(heap: &mut Heap, seq: &mut u64, t: u64, ev: Ev) {
    *seq += 1;
    heap.push(Reverse((t, ev.class(), *seq, ev)));
}
