//! This process's stdout and stderr as the code's output reaches them: on a terminal, control
//! characters are shown, not obeyed.
//!
//! What the code prints is hostile. Written to a terminal as it is, an escape sequence could write
//! the clipboard (OSC 52), clear the screen, move the cursor, retitle the window or draw a fake
//! prompt. So when stdout or stderr is a terminal, every control character but newline and tab
//! (C0, DEL and C1, carriage return included) is written as `\xNN`, and so is every byte that is
//! not UTF-8 (a lone 0x9b is a CSI to a terminal in an 8-bit mode). Into a pipe or a file, output
//! passes byte for byte.

use std::io::{self, IsTerminal, Write};
use std::sync::{LazyLock, Mutex};

use crate::output::Stream;

/// Stdout and stderr are the process's, so their escaping state is too.
static CONSOLE: LazyLock<Console> = LazyLock::new(|| Console {
    stdout: Mutex::new(io::stdout().is_terminal().then(Escaper::default)),
    stderr: Mutex::new(io::stderr().is_terminal().then(Escaper::default)),
});

/// Each stream's escaper, `None` where it is not a terminal.
struct Console {
    stdout: Mutex<Option<Escaper>>,
    stderr: Mutex<Option<Escaper>>,
}

/// Writes output of the code to `stream`, escaped if it is a terminal. Errors (a closed pipe) are
/// the reader's choice, so they are dropped.
pub(super) fn write(stream: Stream, bytes: &[u8]) {
    with_stream(stream, |escaper, out| match escaper {
        None => out.write_all(bytes),
        Some(escaper) => out.write_all(&escaper.escape(bytes)),
    });
}

/// Shows what is still held back of an unfinished UTF-8 sequence, as it will not be completed.
pub(super) fn finish() {
    for stream in [Stream::Stdout, Stream::Stderr] {
        with_stream(stream, |escaper, out| match escaper {
            Some(escaper) => out.write_all(&escaper.finish()),
            None => Ok(()),
        });
    }
}

fn with_stream(
    stream: Stream,
    write: impl FnOnce(&mut Option<Escaper>, &mut dyn Write) -> io::Result<()>,
) {
    let lock = |escaper: &'static Mutex<Option<Escaper>>| {
        escaper
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    let _ = match stream {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            write(&mut lock(&CONSOLE.stdout), &mut out).and_then(|()| out.flush())
        }
        Stream::Stderr => write(&mut lock(&CONSOLE.stderr), &mut io::stderr().lock()),
    };
}

/// Makes control characters visible in one stream's output. A UTF-8 sequence split across two
/// writes is held back until its end arrives, so text is never broken into escapes.
#[derive(Debug, Default)]
pub(super) struct Escaper {
    pending: Vec<u8>,
}

impl Escaper {
    pub(super) fn escape(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        let complete = self.pending.len() - incomplete_tail(&self.pending);
        let mut out = Vec::with_capacity(complete + complete / 8);
        push_escaped(&self.pending[..complete], &mut out);
        self.pending.drain(..complete);
        out
    }

    pub(super) fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        push_escaped(&self.pending, &mut out);
        self.pending.clear();
        out
    }
}

fn push_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            // Every control character (C0, DEL, C1) is below U+0100, so two hex digits show it.
            if c.is_control() && c != '\n' && c != '\t' {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            } else {
                let mut utf8 = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
}

/// The length of a UTF-8 sequence cut short at the end of `bytes`, which the next write may finish.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xc0 != 0x80 {
            // The start of the last sequence: how long should it be?
            let wanted = match byte {
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf4 => 4,
                _ => 1,
            };
            return if wanted > back { back } else { 0 };
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(writes: &[&[u8]]) -> String {
        let mut escaper = Escaper::default();
        let mut out = Vec::new();
        for bytes in writes {
            out.extend(escaper.escape(bytes));
        }
        out.extend(escaper.finish());
        String::from_utf8(out).expect("escaped output is UTF-8")
    }

    #[test]
    fn control_characters_are_shown_and_text_is_kept() {
        assert_eq!(
            escaped(&[b"\x1b]52;c;aGk=\x07 \x1b[2J\r\x00\x7f tab\tline\n"]),
            concat!(r"\x1b]52;c;aGk=\x07 \x1b[2J\x0d\x00\x7f tab", "\tline\n")
        );
        // C1 controls as UTF-8 (U+009B is a CSI) and as raw bytes; then text that is not ASCII.
        assert_eq!(escaped(&["\u{9b}31m".as_bytes()]), r"\x9b31m");
        assert_eq!(escaped(&[b"\x9b31m \xff"]), r"\x9b31m \xff");
        assert_eq!(escaped(&["héllo ✓ 🐍".as_bytes()]), "héllo ✓ 🐍");
    }

    #[test]
    fn a_character_split_across_writes_is_joined() {
        let snake = "🐍".as_bytes();
        assert_eq!(
            escaped(&[b"a", &snake[..1], &snake[1..3], &snake[3..]]),
            "a🐍"
        );
        assert_eq!(escaped(&["é".as_bytes(), b"\x1b"]), r"é\x1b");
        // A sequence the stream never finishes is shown as its bytes.
        assert_eq!(escaped(&[b"end", &snake[..2]]), r"end\xf0\x9f");
        assert_eq!(escaped(&[b"\xc3", b"x"]), r"\xc3x");
    }
}
