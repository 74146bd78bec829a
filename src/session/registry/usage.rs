//! How far calls are using a session: what decides whether a new session may evict it, wait for
//! it, or is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How far calls are using a session (see [`super::Entry::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Usage {
    Idle,
    /// Only finishing its last call: the finishing call's hold is the one other than ours.
    Finishing,
    /// Some call holds the session, waits for it, or is still undoing or recording its own work.
    Busy,
}

/// The mark of a session whose call has replied but which still records or undoes what the call
/// did: a count, not a flag, because the next call can take the session and finish in its turn
/// before the previous call's aftermath has cleared its mark, and must not lose its own.
#[derive(Debug, Default)]
pub(super) struct Finishing(AtomicUsize);

impl Finishing {
    /// Marks the start of an aftermath, while it holds the session.
    pub(super) fn begin(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }
}

impl Usage {
    /// Reads the mark before the count of holds, the reverse of the order in which
    /// [`Usage::end_finishing`] changes them: a session seen unmarked and then held is really
    /// held, and one whose aftermath ends in between is seen finishing or idle, never busy (busy
    /// would refuse a new session that a moment's wait admits).
    pub(super) fn of<T>(session: &Arc<T>, finishing: &Finishing) -> Usage {
        let finishing = finishing.is_set();
        match Arc::strong_count(session) {
            1 => Usage::Idle,
            2 if finishing => Usage::Finishing,
            _ => Usage::Busy,
        }
    }

    /// Ends a call's aftermath: gives up its `hold` on the session, then takes back its mark.
    pub(super) fn end_finishing<H>(hold: H, finishing: &Finishing) {
        drop(hold);
        finishing.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier, Mutex};

    use super::{Finishing, Usage};

    /// A new session looking for room while the session it would evict ends its aftermath must see
    /// that session finishing or idle: seeing it busy refuses the new session (the failure this
    /// guards against came from reading the count of holds before the mark).
    #[test]
    fn an_aftermath_that_ends_while_read_is_never_seen_busy() {
        const ROUNDS: usize = 20_000;
        let session = Arc::new(());
        let finishing = Finishing::default();
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
                finishing.begin();
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

    /// Successive aftermaths of one session overlap when the next call takes the session as soon as
    /// the previous aftermath gives it up: the previous one's late end must leave the next one's mark,
    /// or the session looks busy while only finishing, and a new session is refused.
    #[test]
    fn the_end_of_an_aftermath_leaves_the_next_ones_mark() {
        let session = Arc::new(());
        let finishing = Finishing::default();
        finishing.begin();
        // The next call took the session (the first aftermath's hold is gone) and has replied...
        let next = session.clone();
        finishing.begin();
        // ...before the first aftermath took back its mark.
        Usage::end_finishing((), &finishing);
        assert_eq!(Usage::of(&session, &finishing), Usage::Finishing);
        Usage::end_finishing(next, &finishing);
        assert_eq!(Usage::of(&session, &finishing), Usage::Idle);
    }
}
