//! The libccp wire format, as far as the simulator needs it: the common header, the message
//! types, and a validator for agent → datapath messages.
//!
//! Header (portus `src/serialize/mod.rs`, libccp `serialize.h`), little-endian:
//!
//! ```text
//!   u16 type | u16 len (whole message, header included) | u32 socket id
//! ```
//!
//! libccp trusts what the agent sends: it reads the 8-byte header before checking the buffer
//! size, indexes register arrays with unchecked indices from INSTALL and UPDATE_FIELDS
//! messages, and loops forever on a 256-instruction program (docs/upstream-defects.md, defects 1-2). A
//! kernel module has to live with that; the simulator checks every message with
//! [`validate_agent_msg`] first and counts the ones it refuses instead of handing them on.

/// Datapath → agent: a new flow.
pub const CREATE: u16 = 0;
/// Datapath → agent: a report (or, with zero fields, a flow's close).
pub const MEASURE: u16 = 1;
/// Agent → datapath: install a fold program.
pub const INSTALL: u16 = 2;
/// Agent → datapath: set registers of the running program.
pub const UPDATE_FIELDS: u16 = 3;
/// Agent → datapath: switch a flow to an installed program.
pub const CHANGE_PROG: u16 = 4;
/// Datapath → agent: the datapath (re)started.
pub const READY: u16 = 5;

/// Header length in bytes.
pub const HDR_LEN: usize = 8;
/// libccp's `BIGGEST_MSG_SIZE`.
pub const BIGGEST_MSG: usize = 32678;

// libccp limits (serialize.h / ccp_priv.h)
const MAX_EXPRESSIONS: u32 = 256;
/// A program of 256 instructions hangs libccp's interpreter (u8 loop counter): refuse it. The
/// agent and the algorithms' tests check the same limit.
const MAX_INSTRUCTIONS: u32 = ccp_algs::signals::MAX_PROGRAM_INSTRUCTIONS as u32;
const MAX_REPORT_REG: u32 = 110;
const MAX_CONTROL_REG: u32 = 110;
const MAX_IMPLICIT_REG: u32 = 6;
const MAX_TMP_REG: u32 = 8;
const MAX_LOCAL_REG: u32 = 8;
const NUM_PRIMITIVES: u32 = 15;
const MAX_OP: u8 = 15;
const MAX_MUTABLE_REG: u32 = 222;

// register types (ccp_priv.h)
const NONVOLATILE_CONTROL_REG: u8 = 0;
const IMMEDIATE_REG: u8 = 1;
const IMPLICIT_REG: u8 = 2;
const LOCAL_REG: u8 = 3;
const PRIMITIVE_REG: u8 = 4;
const VOLATILE_REPORT_REG: u8 = 5;
const NONVOLATILE_REPORT_REG: u8 = 6;
const TMP_REG: u8 = 7;
const VOLATILE_CONTROL_REG: u8 = 8;

/// A parsed message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub typ: u16,
    pub len: u16,
    pub sid: u32,
}

/// Parse the header of `msg`; `None` if it is shorter than a header.
pub fn header(msg: &[u8]) -> Option<Header> {
    if msg.len() < HDR_LEN {
        return None;
    }
    Some(Header {
        typ: u16::from_le_bytes([msg[0], msg[1]]),
        len: u16::from_le_bytes([msg[2], msg[3]]),
        sid: u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]),
    })
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Number of fields of a MEASURE message (`None` if `msg` is not a well-formed MEASURE).
pub fn measure_num_fields(msg: &[u8]) -> Option<u32> {
    let h = header(msg)?;
    (h.typ == MEASURE).then_some(())?;
    u32_at(msg, HDR_LEN + 4)
}

fn reg_ok(typ: u8, idx: u32) -> bool {
    match typ {
        IMMEDIATE_REG => true,
        NONVOLATILE_CONTROL_REG | VOLATILE_CONTROL_REG => idx < MAX_CONTROL_REG,
        VOLATILE_REPORT_REG | NONVOLATILE_REPORT_REG => idx < MAX_REPORT_REG,
        IMPLICIT_REG => idx < MAX_IMPLICIT_REG,
        PRIMITIVE_REG => idx < NUM_PRIMITIVES,
        TMP_REG => idx < MAX_TMP_REG,
        LOCAL_REG => idx < MAX_LOCAL_REG,
        _ => false,
    }
}

/// `UpdateField` records (13 bytes, packed): u8 reg type, u32 index, u64 value.
fn updates_ok(body: &[u8], n: u32) -> Result<(), &'static str> {
    if n > MAX_MUTABLE_REG {
        return Err("too many field updates");
    }
    let need = n as usize * 13;
    if body.len() < need {
        return Err("message shorter than its field updates");
    }
    for i in 0..n as usize {
        let r = &body[i * 13..i * 13 + 13];
        let typ = r[0];
        let idx = u32::from_le_bytes([r[1], r[2], r[3], r[4]]);
        let ok = match typ {
            NONVOLATILE_CONTROL_REG | VOLATILE_CONTROL_REG => idx < MAX_CONTROL_REG,
            IMPLICIT_REG => idx < MAX_IMPLICIT_REG,
            _ => false,
        };
        if !ok {
            return Err("field update names a register libccp cannot update");
        }
    }
    Ok(())
}

/// Check an agent → datapath message before libccp sees it. `Err` names the problem.
pub fn validate_agent_msg(msg: &[u8]) -> Result<Header, &'static str> {
    let h = header(msg).ok_or("shorter than a header")?;
    let len = h.len as usize;
    if len < HDR_LEN || len > msg.len() {
        return Err("header length disagrees with the datagram");
    }
    if len > BIGGEST_MSG {
        return Err("longer than libccp's biggest message");
    }
    let body = &msg[HDR_LEN..len];
    match h.typ {
        INSTALL => {
            let (Some(_uid), Some(ne), Some(ni)) =
                (u32_at(body, 0), u32_at(body, 4), u32_at(body, 8))
            else {
                return Err("INSTALL shorter than its header");
            };
            if ne > MAX_EXPRESSIONS {
                return Err("INSTALL has too many expressions");
            }
            if ni > MAX_INSTRUCTIONS {
                return Err("INSTALL has 256 or more instructions (hangs libccp)");
            }
            let need = 12 + 16 * ne as usize + 16 * ni as usize;
            if body.len() < need {
                return Err("INSTALL shorter than its expressions and instructions");
            }
            for e in 0..ne as usize {
                let off = 12 + 16 * e;
                let cs = u32_at(body, off).unwrap_or(u32::MAX) as u64;
                let cn = u32_at(body, off + 4).unwrap_or(u32::MAX) as u64;
                let es = u32_at(body, off + 8).unwrap_or(u32::MAX) as u64;
                let en = u32_at(body, off + 12).unwrap_or(u32::MAX) as u64;
                if cs + cn > ni as u64 || es + en > ni as u64 {
                    return Err("INSTALL expression points outside its instructions");
                }
            }
            let ins0 = 12 + 16 * ne as usize;
            for i in 0..ni as usize {
                // InstructionMsg (packed): u8 op, {u8 type, u32 reg} x3 (ret, left, right)
                let r = &body[ins0 + 16 * i..ins0 + 16 * i + 16];
                if r[0] >= MAX_OP {
                    return Err("INSTALL has an unknown operation");
                }
                for k in 0..3 {
                    let typ = r[1 + 5 * k];
                    let idx = u32::from_le_bytes([
                        r[2 + 5 * k],
                        r[3 + 5 * k],
                        r[4 + 5 * k],
                        r[5 + 5 * k],
                    ]);
                    if !reg_ok(typ, idx) {
                        return Err("INSTALL instruction names an out-of-range register");
                    }
                }
            }
            Ok(h)
        }
        UPDATE_FIELDS => {
            // libccp reads the count as the first byte of a u32 (serialize.c)
            let n = u32::from(*body.first().ok_or("UPDATE_FIELDS without a count")?);
            if body.len() < 4 {
                return Err("UPDATE_FIELDS without a count");
            }
            updates_ok(&body[4..], n)?;
            Ok(h)
        }
        CHANGE_PROG => {
            let (Some(_uid), Some(n)) = (u32_at(body, 0), u32_at(body, 4)) else {
                return Err("CHANGE_PROG shorter than its header");
            };
            updates_ok(&body[8..], n)?;
            Ok(h)
        }
        _ => Err("not a message type a datapath accepts (INSTALL, UPDATE_FIELDS, CHANGE_PROG)"),
    }
}

/// The control registers an accepted UPDATE_FIELDS or CHANGE_PROG writes: its socket id and
/// `(index, value)` per control-register record, in order (other records and messages:
/// none). For a message [`validate_agent_msg`] accepted.
pub fn control_writes(msg: &[u8]) -> Option<(u32, Vec<(u32, u64)>)> {
    let h = header(msg)?;
    let body = msg.get(HDR_LEN..(h.len as usize).min(msg.len()))?;
    let (n, recs) = match h.typ {
        UPDATE_FIELDS => (u32::from(*body.first()?), body.get(4..)?),
        CHANGE_PROG => (u32_at(body, 4)?, body.get(8..)?),
        _ => return None,
    };
    let mut out = Vec::new();
    for r in recs.chunks_exact(13).take(n as usize) {
        if matches!(r[0], NONVOLATILE_CONTROL_REG | VOLATILE_CONTROL_REG) {
            let idx = u32::from_le_bytes([r[1], r[2], r[3], r[4]]);
            let mut v = [0u8; 8];
            v.copy_from_slice(&r[5..13]);
            out.push((idx, u64::from_le_bytes(v)));
        }
    }
    Some((h.sid, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(typ: u16, len: u16, sid: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&typ.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&sid.to_le_bytes());
        v
    }

    fn update(typ: u8, idx: u32, val: u64) -> Vec<u8> {
        let mut v = vec![typ];
        v.extend_from_slice(&idx.to_le_bytes());
        v.extend_from_slice(&val.to_le_bytes());
        v
    }

    #[test]
    fn header_roundtrip() {
        let h = header(&hdr(3, 21, 7)).unwrap();
        assert_eq!(
            h,
            Header {
                typ: 3,
                len: 21,
                sid: 7
            }
        );
        assert!(header(&[1, 2, 3]).is_none());
    }

    #[test]
    fn update_fields_checked() {
        let mut m = hdr(UPDATE_FIELDS, 8 + 4 + 13, 1);
        m.extend_from_slice(&1u32.to_le_bytes());
        m.extend_from_slice(&update(IMPLICIT_REG, 4, 15000));
        assert!(validate_agent_msg(&m).is_ok());
        let mut bad = hdr(UPDATE_FIELDS, 8 + 4 + 13, 1);
        bad.extend_from_slice(&1u32.to_le_bytes());
        bad.extend_from_slice(&update(NONVOLATILE_CONTROL_REG, 500, 1));
        assert!(validate_agent_msg(&bad).is_err());
        // length in header longer than the datagram
        let mut short = hdr(UPDATE_FIELDS, 100, 1);
        short.extend_from_slice(&0u32.to_le_bytes());
        assert!(validate_agent_msg(&short).is_err());
        // wrong direction
        assert!(validate_agent_msg(&hdr(MEASURE, 8, 1)).is_err());
    }

    #[test]
    fn control_writes_are_read_from_updates_and_program_changes() {
        let mut m = hdr(UPDATE_FIELDS, 8 + 4 + 39, 9);
        m.extend_from_slice(&3u32.to_le_bytes());
        m.extend_from_slice(&update(NONVOLATILE_CONTROL_REG, 1, 4000));
        m.extend_from_slice(&update(IMPLICIT_REG, 4, 15000));
        m.extend_from_slice(&update(VOLATILE_CONTROL_REG, 2, 30000));
        assert!(validate_agent_msg(&m).is_ok());
        assert_eq!(control_writes(&m), Some((9, vec![(1, 4000), (2, 30000)])));
        let mut c = hdr(CHANGE_PROG, 8 + 8 + 13, 4);
        c.extend_from_slice(&77u32.to_le_bytes());
        c.extend_from_slice(&1u32.to_le_bytes());
        c.extend_from_slice(&update(NONVOLATILE_CONTROL_REG, 5, 1500));
        assert!(validate_agent_msg(&c).is_ok());
        assert_eq!(control_writes(&c), Some((4, vec![(5, 1500)])));
        // fewer records than the count: what is there; other messages: none
        let mut short = hdr(UPDATE_FIELDS, 8 + 4 + 13, 1);
        short.extend_from_slice(&5u32.to_le_bytes());
        short.extend_from_slice(&update(NONVOLATILE_CONTROL_REG, 3, 7));
        assert_eq!(control_writes(&short), Some((1, vec![(3, 7)])));
        assert_eq!(control_writes(&hdr(MEASURE, 8, 1)), None);
        assert_eq!(control_writes(&[1, 2]), None);
    }

    #[test]
    fn install_instruction_limit() {
        let mk = |ni: u32| {
            let mut body = Vec::new();
            body.extend_from_slice(&1u32.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(&ni.to_le_bytes());
            for _ in 0..ni {
                body.extend_from_slice(&[0, IMMEDIATE_REG, 0, 0, 0, 0, IMMEDIATE_REG, 0, 0, 0, 0]);
                body.extend_from_slice(&[IMMEDIATE_REG, 0, 0, 0, 0]);
            }
            let mut m = hdr(INSTALL, (8 + body.len()) as u16, 0);
            m.extend_from_slice(&body);
            m
        };
        assert!(validate_agent_msg(&mk(10)).is_ok());
        assert_eq!(MAX_INSTRUCTIONS, 255);
        assert!(validate_agent_msg(&mk(MAX_INSTRUCTIONS)).is_ok());
        assert!(validate_agent_msg(&mk(MAX_INSTRUCTIONS + 1)).is_err());
    }
}
