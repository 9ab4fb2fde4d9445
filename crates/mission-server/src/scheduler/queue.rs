//! The scheduler's line of queued jobs, and what each of them waits for.
//!
//! [`Queue`] keeps the queued jobs in submission order (FIFO per station) and finds one by id.
//! [`Dependencies`] keeps, for the queued jobs that wait for others (`after_ok`, `after_any`),
//! the jobs they still wait for, and for each such job who waits for it, so that a job's end
//! settles its dependents at once: they may start, or (an `after_ok` job that did not complete)
//! they fail.

use std::collections::{BTreeMap, HashMap, HashSet};

use mission_api::{Job, JobStatus};
use uuid::Uuid;

/// Queued jobs by submission order, findable by id.
#[derive(Default)]
pub(super) struct Queue {
    by_seq: BTreeMap<u64, Job>,
    seq_of: HashMap<Uuid, u64>,
}

impl Queue {
    /// Puts a job in line at `seq`.
    pub fn insert(&mut self, seq: u64, job: Job) {
        self.seq_of.insert(job.job_id, seq);
        self.by_seq.insert(seq, job);
    }

    /// Takes a job out of line.
    pub fn remove(&mut self, job_id: Uuid) -> Option<Job> {
        let seq = self.seq_of.remove(&job_id)?;
        self.by_seq.remove(&seq)
    }

    /// A queued job.
    pub fn get(&self, job_id: Uuid) -> Option<&Job> {
        self.seq_of.get(&job_id).and_then(|seq| self.by_seq.get(seq))
    }

    /// A queued job, to change (what it shows; never its place).
    pub fn get_mut(&mut self, job_id: Uuid) -> Option<&mut Job> {
        self.seq_of.get(&job_id).and_then(|seq| self.by_seq.get_mut(seq))
    }

    /// The queued jobs with their places, first in line first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Job)> {
        self.by_seq.iter().map(|(seq, job)| (*seq, job))
    }

    /// Empties the line.
    pub fn clear(&mut self) {
        self.by_seq.clear();
        self.seq_of.clear();
    }
}

/// What one queued job still waits for.
struct Waits {
    /// Jobs that must complete.
    ok: HashSet<Uuid>,
    /// Jobs that must end, however.
    any: HashSet<Uuid>,
}

/// How a job's end bears on one that waited for it.
pub(super) enum Settled {
    /// A job that waited for it waits for nothing more and may be placed.
    Free,
    /// It waited for the job to complete, which ended otherwise: it fails, for this reason.
    Failed(Uuid, String),
}

/// The queued jobs that wait for others.
#[derive(Default)]
pub(super) struct Dependencies {
    waits: HashMap<Uuid, Waits>,
    /// For each job waited for, who waits for it (entries of jobs that ended since are skipped).
    dependents: HashMap<Uuid, Vec<Uuid>>,
}

impl Dependencies {
    /// Records that `job_id` waits for `ok` to complete and `any` to end (both already rid of
    /// jobs that have); nothing when both are empty.
    pub fn wait(&mut self, job_id: Uuid, ok: HashSet<Uuid>, any: HashSet<Uuid>) {
        if ok.is_empty() && any.is_empty() {
            return;
        }
        for dep in ok.iter().chain(&any) {
            self.dependents.entry(*dep).or_default().push(job_id);
        }
        self.waits.insert(job_id, Waits { ok, any });
    }

    /// Whether a queued job still waits for another; the first it waits for, if it does, with
    /// whether that one must complete (rather than just end) and how many more there are.
    pub fn waiting_for(&self, job_id: Uuid) -> Option<(Uuid, bool, usize)> {
        let waits = self.waits.get(&job_id)?;
        let more = waits.ok.len() + waits.any.len() - 1;
        let first = |set: &HashSet<Uuid>| set.iter().min().copied();
        first(&waits.ok).map(|id| (id, true, more)).or_else(|| first(&waits.any).map(|id| (id, false, more)))
    }

    /// A job ended `status`: what that settles for those that waited for it. The job itself no
    /// longer waits for anything (it has left the queue).
    pub fn ended(&mut self, job_id: Uuid, status: JobStatus) -> Vec<Settled> {
        self.waits.remove(&job_id);
        let mut settled = Vec::new();
        for waiter in self.dependents.remove(&job_id).unwrap_or_default() {
            let Some(waits) = self.waits.get_mut(&waiter) else { continue };
            if waits.ok.remove(&job_id) && status != JobStatus::Completed {
                self.waits.remove(&waiter);
                settled.push(Settled::Failed(waiter, format!("the job it waited for, {job_id}, ended {status}")));
                continue;
            }
            waits.any.remove(&job_id);
            if waits.ok.is_empty() && waits.any.is_empty() {
                self.waits.remove(&waiter);
                settled.push(Settled::Free);
            }
        }
        settled
    }

    /// Forgets everything (the jobs are being reloaded).
    pub fn clear(&mut self) {
        self.waits.clear();
        self.dependents.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_frees_or_fails_who_waited_for_it() {
        let [a, b, c, d] = [1, 2, 3, 4].map(Uuid::from_u128);
        let mut deps = Dependencies::default();
        deps.wait(c, [a].into(), [b].into());
        deps.wait(d, [a].into(), HashSet::new());
        deps.wait(b, HashSet::new(), HashSet::new());
        assert_eq!(deps.waiting_for(b), None, "waiting for nothing is not waiting");
        assert_eq!(deps.waiting_for(c), Some((a, true, 1)));
        // b ends stopped: c waited for it to end, however; it still waits for a.
        assert!(deps.ended(b, JobStatus::Stopped).is_empty());
        assert_eq!(deps.waiting_for(c), Some((a, true, 0)));
        let settled = deps.ended(a, JobStatus::Completed);
        assert_eq!(settled.iter().filter(|s| matches!(s, Settled::Free)).count(), 2, "c and d are free");
        assert_eq!((deps.waiting_for(c), deps.waiting_for(d)), (None, None));

        // A failed dependency fails its after_ok waiter once, and its after_any waiter goes on.
        let [e, f, g] = [5, 6, 7].map(Uuid::from_u128);
        deps.wait(f, [e].into(), HashSet::new());
        deps.wait(g, HashSet::new(), [e].into());
        let settled = deps.ended(e, JobStatus::Failed);
        assert!(
            settled.iter().any(|s| matches!(s, Settled::Failed(id, why) if *id == f && why.ends_with("ended failed")))
        );
        assert!(settled.iter().any(|s| matches!(s, Settled::Free)));
        assert_eq!(deps.waiting_for(g), None);
        assert!(deps.ended(e, JobStatus::Failed).is_empty(), "an end settles once");
    }
}
