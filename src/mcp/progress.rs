//! Live output of a call: printed text sent to the client while the code runs, as progress
//! notifications (when the request carries a progress token) and log messages at level `info`
//! (when the client asked for them, see `server::sends_output_at`).
//!
//! The run writes into a [`Live`] feed and a task sends it. Output is coalesced, stdout and stderr
//! together, into at most ten updates a second, and each call's updates are bounded in number and
//! in bytes ([`MAX_UPDATES`], [`MAX_UPDATE_BYTES`]): code printing in a tight loop, or switching
//! streams at every write, cannot flood the client. Past the bounds the live output stops with a
//! note saying so; the reply still carries the output.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::{Peer, RoleServer};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::outcome::{json_len, prefix_within};
use crate::output::{OutputObserver, Stream};

/// Updates are sent at most this often, coalescing what was printed in between.
const UPDATE_INTERVAL: Duration = Duration::from_millis(100);

/// Live output updates one call sends through each channel (progress notifications, log
/// messages), the note that ends them included: 30 s of continuous output at ten a second. Guards
/// the client against a flood of messages from a long run that prints in a loop.
pub const MAX_UPDATES: usize = 300;

/// Bytes of output text one call sends live through each channel, counted as sent (escaped in a
/// JSON string, where a control character takes six): guards the client, and the pipe to it,
/// against megabytes of notifications on top of the reply, which carries the output anyway.
pub const MAX_UPDATE_BYTES: usize = 256 << 10;

/// Marks where an update switches to stderr, and back to stdout (an update starts on stdout).
const STDERR_MARK: &str = "[stderr] ";
const STDOUT_MARK: &str = "[stdout] ";

/// The last update of a call whose live output reached the bounds.
const STOPPED: &str = "\n[live output stopped: a call sends at most 300 updates and 256 KiB of \
                       output live; the reply carries the output]\n";

/// Where a call's live output goes: progress notifications (when the client sent a token) and log
/// messages (when the client asked for level `info` or `debug`).
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

    /// Sends the feed's output as it arrives: the first update at once, then at most one per
    /// [`UPDATE_INTERVAL`] with everything printed in between, in order. Ends when the feed has
    /// ended and everything is sent, or when the bounds are reached.
    async fn forward(&self, feed: &Feed) {
        let mut sent = Sent::default();
        let mut next = Instant::now();
        loop {
            tokio::select! {
                biased;
                () = feed.ended.cancelled() => {}
                () = feed.arrived.notified() => {}
            }
            tokio::select! {
                biased;
                () = feed.ended.cancelled() => {}
                () = tokio::time::sleep_until(next) => {}
            }
            let ended = feed.ended.is_cancelled();
            let (runs, dropped) = feed.lock().take(ended);
            if !self.send_update(&runs, dropped, &mut sent).await {
                feed.lock().stop();
                return;
            }
            if ended {
                return;
            }
            next = Instant::now() + UPDATE_INTERVAL;
        }
    }

    /// Sends `runs` as one update, cut to what the bounds leave; when they are reached (or output
    /// was dropped), follows it with [`STOPPED`]. Returns whether live output goes on.
    async fn send_update(&self, runs: &[(Stream, String)], dropped: bool, sent: &mut Sent) -> bool {
        let (mut message, logger, mut logged) = render(runs);
        let room = MAX_UPDATE_BYTES.saturating_sub(sent.bytes + json_len(STOPPED));
        let over = json_len(&message) > room;
        message.truncate(prefix_within(&message, room));
        logged.truncate(prefix_within(&logged, room));
        if !message.is_empty() {
            self.send(&message, logger, &logged, sent).await;
        }
        if over || dropped || sent.updates + 1 >= MAX_UPDATES {
            self.send(STOPPED, "output", STOPPED, sent).await;
            return false;
        }
        true
    }

    async fn send(&self, message: &str, logger: &str, logged: &str, sent: &mut Sent) {
        sent.updates += 1;
        sent.bytes += json_len(message);
        if let Some(token) = &self.token {
            let _ = self
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), sent.bytes as f64)
                        .with_message(message),
                )
                .await;
        }
        if self.log {
            let mut param = LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                serde_json::Value::String(logged.to_owned()),
            );
            param.logger = Some(logger.to_owned());
            let _ = self.peer.notify_logging_message(param).await;
        }
    }
}

/// What a call has sent live so far, through each channel.
#[derive(Default)]
struct Sent {
    updates: usize,
    bytes: usize,
}

/// An update as a progress message (stderr runs marked), and as a log message: the logger is the
/// stream, and the text unmarked, when it holds one stream only.
fn render(runs: &[(Stream, String)]) -> (String, &'static str, String) {
    let mut message = String::new();
    for (i, (stream, text)) in runs.iter().enumerate() {
        match stream {
            Stream::Stderr => message.push_str(STDERR_MARK),
            Stream::Stdout if i > 0 => message.push_str(STDOUT_MARK),
            Stream::Stdout => {}
        }
        message.push_str(text);
    }
    match runs {
        [(Stream::Stdout, text)] => (message, "stdout", text.clone()),
        [(Stream::Stderr, text)] => (message, "stderr", text.clone()),
        _ => (message.clone(), "output", message),
    }
}

/// A call's live output on its way to the client.
pub(super) struct Live {
    feed: Arc<Feed>,
    task: Option<JoinHandle<()>>,
}

impl Live {
    /// Starts the task that sends the output; it stops at once when `cancelled` fires.
    pub(super) fn start(progress: Progress, cancelled: CancellationToken) -> Live {
        let feed = Arc::new(Feed::default());
        let task = tokio::spawn({
            let feed = feed.clone();
            async move {
                tokio::select! {
                    biased;
                    () = cancelled.cancelled() => {}
                    () = progress.forward(&feed) => {}
                }
            }
        });
        Live {
            feed,
            task: Some(task),
        }
    }

    /// What the run writes its output into.
    pub(super) fn observer(&self) -> OutputObserver {
        let feed = self.feed.clone();
        Arc::new(move |stream: Stream, bytes: &[u8]| {
            feed.lock().push(stream, bytes);
            feed.arrived.notify_one();
        })
    }

    /// The run is over: sends what is left, within the bounds, and returns once it is sent or the
    /// call is cancelled.
    pub(super) async fn finish(mut self) {
        self.feed.ended.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Live {
    /// A call that ends early (cancelled, or failed) sends no more output.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Shared by the run, which pushes output, and the task that sends it.
#[derive(Default)]
struct Feed {
    pending: Mutex<Pending>,
    /// Woken at each write.
    arrived: Notify,
    /// Cancelled when the run is over.
    ended: CancellationToken,
}

impl Feed {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Output waiting to be sent: the bytes of both streams in order, and where each run of one stream
/// ends. Over a call it takes in at most [`MAX_UPDATE_BYTES`] (a mark counted for each run), which
/// bounds its memory; output past that is dropped, as it could not be sent anyway.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    runs: Vec<(Stream, usize)>,
    taken_in: usize,
    dropped: bool,
}

impl Pending {
    fn push(&mut self, stream: Stream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let new_run = self.runs.last().is_none_or(|(s, _)| *s != stream);
        let mark = if new_run { STDERR_MARK.len() } else { 0 };
        let room = MAX_UPDATE_BYTES.saturating_sub(self.taken_in + mark);
        let kept = &bytes[..bytes.len().min(room)];
        self.dropped |= kept.len() < bytes.len();
        if kept.is_empty() {
            return;
        }
        self.taken_in += mark + kept.len();
        self.bytes.extend_from_slice(kept);
        if new_run {
            self.runs.push((stream, 0));
        }
        if let Some((_, end)) = self.runs.last_mut() {
            *end = self.bytes.len();
        }
    }

    /// Everything pending as runs of text, and whether output was dropped. Unless `all`, an
    /// unfinished UTF-8 sequence at the end stays behind for the rest of it to arrive.
    fn take(&mut self, all: bool) -> (Vec<(Stream, String)>, bool) {
        let last = self.runs.last().map(|(stream, _)| *stream);
        let last_start = match self.runs.as_slice() {
            [.., (_, end), _] => *end,
            _ => 0,
        };
        let held = if all {
            0
        } else {
            incomplete_utf8_tail(&self.bytes[last_start..])
        };
        let rest = self.bytes.split_off(self.bytes.len() - held);
        let mut start = 0;
        let runs = self
            .runs
            .drain(..)
            .filter_map(|(stream, end)| {
                let end = end.min(self.bytes.len());
                let text = String::from_utf8_lossy(&self.bytes[start..end]).into_owned();
                start = end;
                (!text.is_empty()).then_some((stream, text))
            })
            .collect();
        if let Some(stream) = last.filter(|_| !rest.is_empty()) {
            self.runs.push((stream, rest.len()));
        }
        self.bytes = rest;
        (runs, std::mem::take(&mut self.dropped))
    }

    /// Takes in nothing more.
    fn stop(&mut self) {
        self.taken_in = MAX_UPDATE_BYTES;
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
        assert_eq!(p.take(false).0, vec![(Stream::Stdout, "a".to_owned())]);
        p.push(Stream::Stdout, &snowman[1..]);
        p.push(Stream::Stderr, b"e");
        assert_eq!(
            p.take(false).0,
            vec![
                (Stream::Stdout, "☃".to_owned()),
                (Stream::Stderr, "e".to_owned())
            ]
        );
        assert!(p.take(false).0.is_empty());
        p.push(Stream::Stderr, &snowman[..2]);
        assert_eq!(
            p.take(true).0,
            vec![(Stream::Stderr, "\u{fffd}".to_owned())]
        );
    }

    #[test]
    fn alternating_streams_make_one_update_with_marks() {
        let mut p = Pending::default();
        for _ in 0..3 {
            p.push(Stream::Stdout, b"o");
            p.push(Stream::Stderr, b"e");
        }
        let (runs, dropped) = p.take(true);
        assert!(!dropped);
        let (message, logger, logged) = render(&runs);
        assert_eq!(
            message,
            "o[stderr] e[stdout] o[stderr] e[stdout] o[stderr] e"
        );
        assert_eq!((logger, logged.as_str()), ("output", message.as_str()));
        let (message, logger, logged) = render(&[(Stream::Stderr, "x\n".into())]);
        assert_eq!(
            (message.as_str(), logger, logged.as_str()),
            ("[stderr] x\n", "stderr", "x\n")
        );
    }

    #[test]
    fn a_call_takes_in_a_bounded_amount() {
        let mut p = Pending::default();
        for _ in 0..MAX_UPDATE_BYTES {
            p.push(Stream::Stdout, b"o");
            p.push(Stream::Stderr, b"e");
        }
        assert!(p.bytes.len() < MAX_UPDATE_BYTES / 5, "{}", p.bytes.len());
        let (runs, dropped) = p.take(true);
        assert!(dropped);
        let (message, ..) = render(&runs);
        assert!(message.len() <= MAX_UPDATE_BYTES, "{}", message.len());
        p.push(Stream::Stdout, b"more");
        assert!(
            p.take(true).0.is_empty(),
            "nothing is taken in past the bound"
        );
    }

    #[test]
    fn the_stop_note_states_the_bounds() {
        assert!(STOPPED.contains(&format!("{MAX_UPDATES} updates")));
        assert!(STOPPED.contains(&format!("{} KiB", MAX_UPDATE_BYTES >> 10)));
    }
}
