//! `ccp-files`: the one reader of operator files (models, model cards, `--config`,
//! `portfolio.json`, the control socket's saved state, `--sim` scenarios and their traces),
//! shared by the agent's runtime and the simulator.
//!
//! An operator file is read only if it is a regular file no larger than the caller's limit,
//! and both are decided before a byte is read:
//!
//! - `stat` on the path first: a FIFO, a socket, a device (also behind a symlink, such as a
//!   link to `/dev/zero`) or a directory is refused without being opened (opening some
//!   devices has effects of its own);
//! - then `open` with `O_NONBLOCK | O_NOCTTY` (opening a FIFO swapped in after the `stat`
//!   returns at once instead of waiting for a writer) and `fstat` on the opened descriptor,
//!   which is what is read: no window between the check and the read;
//! - the size `fstat` reports is checked against the limit before reading, so a 2 GiB sparse
//!   file is refused in microseconds rather than after reading a gigabyte; the read itself
//!   is bounded too (a file that grows while read, or a `/proc` file that reports 0);
//! - a symlink loop or a dangling symlink is an error (`ELOOP`, `ENOENT` on the target), not
//!   an absent file: [`present`] says whether a name is there at all without following it.
//!
//! Errors say what the file is and what is allowed; callers add the path.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a regular file ({kind}): only a regular file is read (replace it with one)")]
    NotRegular { kind: &'static str },
    #[error("{size} bytes, over the {limit}-byte limit (is it the right file?)")]
    TooLarge { size: u64, limit: u64 },
    #[error("not UTF-8 text (invalid byte at offset {at})")]
    NotText { at: usize },
}

impl ReadError {
    /// The file (or a link on its path) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

fn kind(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a plain file"
    }
}

fn regular(meta: &std::fs::Metadata) -> Result<(), ReadError> {
    if meta.file_type().is_file() {
        Ok(())
    } else {
        Err(ReadError::NotRegular {
            kind: kind(meta.file_type()),
        })
    }
}

/// Is there anything at `path` (a file, a directory, a symlink, even a dangling or looping
/// one)? Symlinks are not followed: a name that is there but cannot be read is for the
/// reader to report, not to be taken for an absent file. Only "no such file" is `false`.
pub fn present(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Open `path` for reading if it is a regular file (following symlinks), without blocking;
/// with its size (from `fstat` on the opened descriptor).
pub fn open_regular(path: &Path) -> Result<(File, u64), ReadError> {
    // refuse by type before opening (a symlink loop is ELOOP here)
    regular(&std::fs::metadata(path)?)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    // what is read is what this descriptor is, whatever the path points at now
    let meta = f.metadata()?;
    regular(&meta)?;
    Ok((f, meta.len()))
}

/// The bytes of the regular file `path`, at most `limit` of them: a larger file is refused
/// from its size, before any read.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (f, size) = open_regular(path)?;
    if size > limit {
        return Err(ReadError::TooLarge { size, limit });
    }
    // `size <= limit`; the capacity is a hint only (a /proc file says 0)
    let mut v = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    f.take(limit.saturating_add(1)).read_to_end(&mut v)?;
    let read = v.len() as u64;
    if read > limit {
        // it grew while being read
        return Err(ReadError::TooLarge { size: read, limit });
    }
    Ok(v)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    let v = read_regular(path, limit)?;
    String::from_utf8(v).map_err(|e| ReadError::NotText {
        at: e.utf8_error().valid_up_to(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ccp-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn fifos_and_directories_are_refused_at_once_and_sizes_bounded() {
        let dir = scratch("kinds");
        let fifo = dir.join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let e = read_regular(&fifo, 10).unwrap_err();
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        let e = read_regular(&dir, 10).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let f = dir.join("f");
        std::fs::write(&f, "0123456789").unwrap();
        assert_eq!(read_regular(&f, 10).unwrap().len(), 10);
        assert!(matches!(
            read_regular(&f, 9),
            Err(ReadError::TooLarge { size: 10, limit: 9 })
        ));
        let e = read_regular(Path::new("/dev/zero"), 10).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        std::fs::write(&f, b"ok\xff").unwrap();
        assert!(matches!(
            read_regular_to_string(&f, 10),
            Err(ReadError::NotText { at: 2 })
        ));
        let e = read_regular(&dir.join("absent"), 10).unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Bytes this thread has read through read(2) and friends (`rchar`).
    fn thread_rchar() -> u64 {
        let t = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        t.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn oversized_files_are_refused_from_their_size_before_reading() {
        // issue 42 item 7: a 2 GiB sparse model was read up to the limit (1 GiB, 3 s) and
        // only then refused
        let dir = scratch("big");
        let big = dir.join("sparse.onnx");
        let f = File::create(&big).unwrap();
        f.set_len(2 << 30).unwrap();
        drop(f);
        let before = thread_rchar();
        let e = read_regular(&big, 1 << 20).unwrap_err();
        let read = thread_rchar() - before;
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(e, ReadError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("2147483648 bytes"), "{e}");
        // reading /proc/thread-self/io itself counts a few hundred bytes
        assert!(read < 64 * 1024, "{read} bytes read before the refusal");
    }

    #[test]
    fn symlinks_to_devices_are_refused_and_loops_are_errors_not_absence() {
        let dir = scratch("links");
        let zero = dir.join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_regular(&zero, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let (a, b) = (dir.join("mocc.onnx"), dir.join("mocc.json"));
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(present(&a).unwrap(), "a symlink loop is there, not absent");
        let e = read_regular(&a, 10).unwrap_err();
        assert!(
            matches!(&e, ReadError::Io(io) if io.kind() != io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(e.to_string().contains("symbolic links"), "{e}");
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("gone"), &dangling).unwrap();
        assert!(present(&dangling).unwrap());
        assert!(read_regular(&dangling, 10).unwrap_err().is_not_found());
        assert!(!present(&dir.join("nothing")).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
