//! The attached runner: a run that is a session already there (the session that launched a
//! party with `mode: self` and leads it). Nothing is started; the run lives until the session
//! calls `complete` or the party stops it, and a restarted daemon takes it back as it was.

use crate::runners::process::{Exit, RunTable};

/// Runs nothing: the session does the work.
pub struct AttachedRunner;

impl super::Runner for AttachedRunner {
    fn kind(&self) -> super::Kind {
        super::Kind::Attached
    }

    fn place(&self, _table: &RunTable, launch: super::Launch) -> Result<super::Placed, String> {
        // It carries the daemon's pid, like an in-daemon run; recovery knows it by its runner.
        let run_id = launch.run.run_id;
        Ok(super::Placed::in_daemon(move |table: &RunTable| {
            hold(table, run_id)
        }))
    }
}

/// Keeps an attached run in the table until it is stopped.
pub fn hold(table: &RunTable, run_id: String) {
    table.spawn_managed(run_id, |stop| async move {
        // Stopped by the party (cancel, abort) or by the daemon going down.
        let _ = stop.await;
        Exit::Stopped
    });
}
