//! Reading operator-provided files without hanging: only regular files, bounded in size.
//!
//! `std::fs::read` on a FIFO blocks until a writer appears (forever, for a FIFO planted in
//! the models directory), and on `/dev/zero` never ends. So files are opened with
//! `O_NONBLOCK` (which makes opening a FIFO return at once and changes nothing for regular
//! files), checked with `fstat` on the opened descriptor (no window between the check and
//! the open), and read up to a limit.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a regular file ({kind})")]
    NotRegular { kind: &'static str },
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
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

/// Open `path` for reading if it is a regular file (following symlinks), without blocking.
pub fn open_regular(path: &Path) -> Result<File, ReadError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(ReadError::NotRegular {
            kind: kind(meta.file_type()),
        });
    }
    Ok(f)
}

/// The bytes of the regular file `path`, at most `limit` of them (else an error).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let f = open_regular(path)?;
    let mut v = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut v)?;
    if v.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(v)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    let v = read_regular(path, limit)?;
    String::from_utf8(v).map_err(|e| ReadError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_and_directories_are_refused_at_once_and_sizes_bounded() {
        let dir = std::env::temp_dir().join(format!("ccp-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let e = read_regular(&fifo, 10).unwrap_err();
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        assert!(read_regular(&dir, 10).is_err());
        let f = dir.join("f");
        std::fs::write(&f, "0123456789").unwrap();
        assert_eq!(read_regular(&f, 10).unwrap().len(), 10);
        assert!(matches!(
            read_regular(&f, 9),
            Err(ReadError::TooLarge { limit: 9 })
        ));
        assert!(read_regular(Path::new("/dev/zero"), 10).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
