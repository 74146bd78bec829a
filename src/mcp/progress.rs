//! Live output of a call: printed text sent to the client while the code runs, as progress
//! notifications (when the request carries a progress token) and log messages (after
//! `logging/setLevel`), coalesced to at most ten a second.

// MCP logging is deprecated by SEP-2577; see the note in `mcp.rs`.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::output::Stream;

/// Output notifications are sent at most this often, coalescing what was printed in between.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// Where a call's live output goes: progress notifications (when the client sent a token) and log
/// messages (when the client set a log level).
#[derive(Clone)]
pub(super) struct Progress {
    pub(super) peer: Peer<RoleServer>,
    pub(super) token: Option<ProgressToken>,
    pub(super) log: bool,
}

impl Progress {
    pub(super) fn is_wanted(&self) -> bool {
        self.token.is_some() || self.log
    }

    pub(super) async fn note(&self, message: &str) {
        if let Some(token) = &self.token {
            let _ = self
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), 0.0).with_message(message),
                )
                .await;
        }
    }

    /// Sends output as it arrives: the first chunk at once, then at most one notification per
    /// [`PROGRESS_INTERVAL`] with everything printed in between, in order. Ends when the run drops
    /// its sender, after sending what is left.
    pub(super) async fn forward(self, mut receiver: mpsc::UnboundedReceiver<(Stream, Vec<u8>)>) {
        let mut pending = Pending::default();
        let mut sent_bytes = 0usize;
        let mut next_send = Instant::now();
        let mut open = true;
        while open {
            match receiver.recv().await {
                Some((stream, bytes)) => pending.push(stream, &bytes),
                None => break,
            }
            loop {
                match tokio::time::timeout_at(next_send, receiver.recv()).await {
                    Ok(Some((stream, bytes))) => pending.push(stream, &bytes),
                    Ok(None) => {
                        open = false;
                        break;
                    }
                    Err(_deadline) => break,
                }
            }
            for (stream, text) in pending.take() {
                sent_bytes += text.len();
                self.send(stream, &text, sent_bytes).await;
            }
            next_send = Instant::now() + PROGRESS_INTERVAL;
        }
        for (stream, text) in pending.take_all() {
            sent_bytes += text.len();
            self.send(stream, &text, sent_bytes).await;
        }
    }

    async fn send(&self, stream: Stream, text: &str, progress: usize) {
        let logger = match stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        if let Some(token) = &self.token {
            let message = match stream {
                Stream::Stdout => text.to_owned(),
                Stream::Stderr => format!("[stderr] {text}"),
            };
            let _ = self
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), progress as f64)
                        .with_message(message),
                )
                .await;
        }
        if self.log {
            let mut param = LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                serde_json::Value::String(text.to_owned()),
            );
            param.logger = Some(logger.to_owned());
            let _ = self.peer.notify_logging_message(param).await;
        }
    }
}

/// Output waiting to be sent, in order, as runs of one stream. A UTF-8 sequence cut between two
/// writes waits for its end rather than being sent broken.
#[derive(Default)]
struct Pending {
    runs: Vec<(Stream, Vec<u8>)>,
}

impl Pending {
    fn push(&mut self, stream: Stream, bytes: &[u8]) {
        match self.runs.last_mut() {
            Some((s, buf)) if *s == stream => buf.extend_from_slice(bytes),
            _ => self.runs.push((stream, bytes.to_vec())),
        }
    }

    /// Everything complete: all runs, less an unfinished UTF-8 sequence at the end of the last.
    fn take(&mut self) -> Vec<(Stream, String)> {
        let tail = self.runs.last_mut().and_then(|(stream, buf)| {
            let tail = buf.split_off(buf.len() - incomplete_utf8_tail(buf));
            (!tail.is_empty()).then_some((*stream, tail))
        });
        let out = self
            .take_all()
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .collect();
        self.runs.extend(tail);
        out
    }

    fn take_all(&mut self) -> Vec<(Stream, String)> {
        self.runs
            .drain(..)
            .map(|(s, b)| (s, String::from_utf8_lossy(&b).into_owned()))
            .collect()
    }
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 sequence that is not finished.
fn incomplete_utf8_tail(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() => bytes.len() - e.valid_up_to(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_between_writes_is_held_back() {
        let mut p = Pending::default();
        let snowman = "☃".as_bytes();
        p.push(Stream::Stdout, b"a");
        p.push(Stream::Stdout, &snowman[..1]);
        assert_eq!(p.take(), vec![(Stream::Stdout, "a".to_owned())]);
        p.push(Stream::Stdout, &snowman[1..]);
        p.push(Stream::Stderr, b"e");
        assert_eq!(
            p.take(),
            vec![
                (Stream::Stdout, "☃".to_owned()),
                (Stream::Stderr, "e".to_owned())
            ]
        );
        assert!(p.take().is_empty());
    }
}
