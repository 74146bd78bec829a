//! How far calls are using a session: what decides whether a new session may evict it, wait for
//! it, or is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// How far calls are using a session (see [`super::Entry::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Usage {
    Idle,
    /// Only finishing its last call: the finishing call's hold is the one other than ours.
    Finishing,
    /// Some call holds the session, waits for it, or is still undoing or recording its own work.
    Busy,
}

impl Usage {
    /// Reads the mark before the count of holds, the reverse of the order in which
    /// [`Usage::end_finishing`] changes them: a session seen unmarked and then held is really
    /// held, and one whose aftermath ends in between is seen finishing or idle, never busy (busy
    /// would refuse a new session that a moment's wait admits).
    pub(super) fn of<T>(session: &Arc<T>, finishing: &AtomicBool) -> Usage {
        let finishing = finishing.load(Ordering::SeqCst);
        match Arc::strong_count(session) {
            1 => Usage::Idle,
            2 if finishing => Usage::Finishing,
            _ => Usage::Busy,
        }
    }

    /// Ends a call's aftermath: gives up its `hold` on the session, then clears the mark.
    pub(super) fn end_finishing<H>(hold: H, finishing: &AtomicBool) {
        drop(hold);
        finishing.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier, Mutex};

    use super::Usage;

    /// A new session looking for room while the session it would evict ends its aftermath must see
    /// that session finishing or idle: seeing it busy refuses the new session (the failure this
    /// guards against came from reading the count of holds before the mark).
    #[test]
    fn an_aftermath_that_ends_while_read_is_never_seen_busy() {
        const ROUNDS: usize = 20_000;
        let session = Arc::new(());
        let finishing = AtomicBool::new(false);
        let hold = Mutex::new(None);
        let start = Barrier::new(2);
        let ended = Barrier::new(2);
        let mut busy = 0;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..ROUNDS {
                    start.wait();
                    Usage::end_finishing(hold.lock().unwrap().take(), &finishing);
                    ended.wait();
                }
            });
            for _ in 0..ROUNDS {
                // Set up as Aftermath::new leaves it: marked, with its hold taken.
                finishing.store(true, Ordering::SeqCst);
                *hold.lock().unwrap() = Some(session.clone());
                start.wait();
                loop {
                    match Usage::of(&session, &finishing) {
                        Usage::Idle => break,
                        Usage::Finishing => {}
                        Usage::Busy => busy += 1,
                    }
                }
                ended.wait();
            }
        });
        assert_eq!(busy, 0, "seen busy {busy} times in {ROUNDS} rounds");
    }
}
