//! When a session records what its call did: once the call's reply is out, where the front end can
//! tell.
//!
//! Recording a session's new state (comparing its memory with the last snapshot and copying what
//! changed) keeps a core busy for a fraction of a millisecond. Started while the reply is still
//! being written, it competes with the writing for the cores, and the caller waits longer for the
//! reply; started once the reply is out, it runs while the caller reads it. A front end that knows
//! when its replies are out (stdio and HTTP flush each one) reports it through [`RepliesOut`];
//! without one (the REPL, whose next call waits for its user anyway), the state is recorded at once.

use std::time::Duration;

use tokio::sync::watch;

/// How long a session waits for the reply to its call to go out before recording its state anyway:
/// replies are flushed within microseconds, so this only bounds the wait should one not come (a
/// reply held up by a slow reader, or a call whose reply is never written).
pub const REPLY_WAIT: Duration = Duration::from_millis(5);

/// The front end's side: told each time a reply has gone out (by any of its connections: clones
/// tell the same sessions).
#[derive(Debug, Default, Clone)]
pub struct RepliesOut(watch::Sender<u64>);

impl RepliesOut {
    /// A reply has gone out.
    pub fn sent(&self) {
        self.0.send_modify(|sent| *sent = sent.wrapping_add(1));
    }

    /// The sessions' side, for [`super::Sessions::after_replies`]: they wait at most `wait` for a
    /// reply ([`REPLY_WAIT`] outside tests).
    pub fn watch(&self, wait: Duration) -> ReplyWatch {
        ReplyWatch {
            sent: self.0.subscribe(),
            wait,
        }
    }
}

/// The sessions' side of [`RepliesOut`].
#[derive(Debug, Clone)]
pub struct ReplyWatch {
    sent: watch::Receiver<u64>,
    wait: Duration,
}

impl ReplyWatch {
    /// Resolves once a reply goes out after this call, or after the wait, or at once if the front
    /// end has gone. Called when a call returns, before its reply is written.
    pub(crate) fn next_reply(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut sent = self.sent.clone();
        sent.mark_unchanged();
        let wait = self.wait;
        async move {
            let _ = tokio::time::timeout(wait, sent.changed()).await;
        }
    }
}
