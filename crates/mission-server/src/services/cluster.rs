//! Several `mission server` replicas on one PostgreSQL database.
//!
//! Exactly one replica leads the scheduler: the one holding the database's leader lock (an
//! advisory lock on a connection of its own, which the database drops when that connection or the
//! whole process ends). It runs the scheduler's task ([`crate::services::scheduler`]), rebuilt from the store
//! when it takes over, and fences its writes with its epoch so that a replica that lost the lead
//! writes nothing more. The others wait for the lock.
//!
//! Replicas talk through mail in the database: a scheduler [`Call`] from a replica that does not
//! lead goes to the recipient `leader`, the answer comes back to the caller's replica, and orders
//! for an agent go to the replica that holds its connection. A sender stores the mail and
//! NOTIFYs the recipient's channel; the recipient takes its mail in order when woken, when its
//! listener reconnects, and every few seconds in case a notification was missed. A broadcast
//! (NOTIFY without mail) tells every replica to drop its cached agent tokens.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use mission_api::lz::Order;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::services::agent_tokens::AgentTokens;
use crate::services::job_logs::JobLogs;
use crate::services::scheduler::{
    Call, Event, LogsAndTokens, Outcome, Policy, Queue, Replicas, Responder, SchedulerError, SchedulerResult,
    SessionId, Sessions, State,
};
use mission_store::{ClusterDb, Store, StoreError};

/// The mail recipient of whichever replica leads.
const LEADER: &str = "leader";

/// The channel of broadcasts to every replica.
const BROADCAST: &str = "mission_broadcast";

/// A broadcast: drop cached agent tokens.
const FORGET_TOKENS: &str = "forget_tokens";

/// A broadcast, followed by a job id: bytes of the job's logs arrived.
const LOG_WRITTEN: &str = "log_written:";

/// A broadcast, followed by a job id: the job ended (its logs are complete).
const JOB_ENDED: &str = "job_ended:";

/// A broadcast: events were appended to the log (sent by the appending transaction itself, see
/// `store/events.rs`).
const EVENTS_APPENDED: &str = "events_appended";

/// How often a replica takes its mail even without a notification.
const MAIL_POLL: Duration = Duration::from_secs(2);

/// How often the leader checks that it still holds the lock.
const LEAD_CHECK: Duration = Duration::from_secs(1);

/// What replicas send each other.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "mail", rename_all = "snake_case")]
enum Mail {
    /// To the leader: a scheduler call; `request` 0 wants no answer.
    Call { from: Uuid, request: u64, call: Call },
    /// To a caller: the answer to its request.
    Answer { request: u64, result: SchedulerResult<Outcome> },
    /// To an agent's replica: an order for one of its streams.
    Order { session: u64, order: Order },
    /// To an agent's replica: end a stream (the agent connects again).
    EndSession { session: u64 },
}

/// Something to send, in the order given.
#[derive(Debug)]
enum Outgoing {
    Mail { to: String, mail: Box<Mail> },
    Broadcast(String),
}

/// Sends mail from this replica; cheap to clone. Sending never waits: one task writes the mail in
/// order, in batches, retrying while the database is away.
#[derive(Clone, Debug)]
pub struct Outbox {
    replica: Uuid,
    queue: mpsc::UnboundedSender<Outgoing>,
}

impl Outbox {
    fn send(&self, to: String, mail: Mail) {
        let _ = self.queue.send(Outgoing::Mail { to, mail: Box::new(mail) });
    }

    fn call(&self, request: u64, call: Call) {
        self.send(LEADER.to_owned(), Mail::Call { from: self.replica, request, call });
    }
}

impl Replicas for Outbox {
    /// Answers request `request` of replica `to`.
    fn reply(&self, to: Uuid, request: u64, result: SchedulerResult<Outcome>) {
        self.send(recipient(to), Mail::Answer { request, result });
    }

    /// Sends an order down a stream of another replica.
    fn order(&self, session: SessionId, order: Order) {
        self.send(recipient(session.replica), Mail::Order { session: session.n, order });
    }

    /// Ends a stream of another replica.
    fn end_session(&self, session: SessionId) {
        self.send(recipient(session.replica), Mail::EndSession { session: session.n });
    }

    /// Tells every replica to drop its cached agent tokens.
    fn broadcast_forget_tokens(&self) {
        let _ = self.queue.send(Outgoing::Broadcast(FORGET_TOKENS.to_owned()));
    }

    /// Tells every replica that bytes of a job's logs arrived, to wake who follows them there.
    fn broadcast_log_written(&self, job_id: Uuid) {
        let _ = self.queue.send(Outgoing::Broadcast(format!("{LOG_WRITTEN}{job_id}")));
    }

    /// Tells every replica that a job ended, so who follows its logs there sees the end.
    fn broadcast_job_ended(&self, job_id: Uuid) {
        let _ = self.queue.send(Outgoing::Broadcast(format!("{JOB_ENDED}{job_id}")));
    }
}

/// A replica's mail address.
fn recipient(replica: Uuid) -> String {
    replica.simple().to_string()
}

/// This replica's part in the cluster.
#[derive(Debug)]
pub struct Cluster {
    replica: Uuid,
    db: ClusterDb,
    outbox: Arc<Outbox>,
    sessions: Arc<Sessions>,
    pending: Mutex<HashMap<u64, oneshot::Sender<SchedulerResult<Outcome>>>>,
    next_request: AtomicU64,
    /// The scheduler task's queue while this replica leads.
    leading: RwLock<Option<mpsc::UnboundedSender<Event>>>,
    /// Take the mail now (this replica just took the lead).
    wake: Notify,
    /// The scheduler's queue while this replica leads (emptied and refilled at each lead).
    queue: Arc<Mutex<Queue>>,
}

impl Cluster {
    /// The queue the scheduler keeps while this replica leads.
    pub(crate) fn queue(&self) -> Arc<Mutex<Queue>> {
        self.queue.clone()
    }

    /// Joins the cluster: starts the tasks that send and take this replica's mail, and the one
    /// that waits for the lead and then runs the scheduler. The tasks run on `tasks` and end when
    /// `shutdown` is cancelled (the lead, if held, goes with them).
    pub(crate) async fn join(
        db: ClusterDb,
        store: Store,
        logs: Arc<JobLogs>,
        tokens: Arc<AgentTokens>,
        policy: Policy,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, StoreError> {
        let replica = store.replica().unwrap_or_else(Uuid::new_v4);
        let (queue, outgoing) = mpsc::unbounded_channel();
        let outbox = Arc::new(Outbox { replica, queue });
        let sessions = Arc::new(Sessions::new(replica, Some(outbox.clone())));
        let cluster = Arc::new(Self {
            replica,
            db: db.clone(),
            outbox,
            sessions,
            pending: Mutex::new(HashMap::new()),
            next_request: AtomicU64::new(0),
            leading: RwLock::new(None),
            wake: Notify::new(),
            queue: Arc::default(),
        });
        tracing::info!(%replica, "joined the cluster of replicas on the database");
        tasks.spawn(write_mail(db, outgoing, shutdown.clone()));
        let listener = cluster.listener().await?;
        tasks.spawn(cluster.clone().take_mail(listener, store.clone(), tokens.clone(), logs.clone(), shutdown.clone()));
        let host = Arc::new(LogsAndTokens { logs, tokens });
        tasks.spawn(cluster.clone().lead_when_possible(store, host, policy, shutdown));
        Ok(cluster)
    }

    /// The sessions of agents connected to this replica.
    pub(crate) fn sessions(&self) -> Arc<Sessions> {
        self.sessions.clone()
    }

    /// The scheduler task's queue, while this replica leads.
    pub(crate) fn leading(&self) -> Option<mpsc::UnboundedSender<Event>> {
        self.leading.read().expect("not poisoned").clone()
    }

    /// Sends a call to the leader and waits for the answer.
    pub(crate) async fn request(&self, call: Call) -> SchedulerResult<Outcome> {
        let request = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let (answer, answered) = oneshot::channel();
        self.pending.lock().expect("not poisoned").insert(request, answer);
        // Forget the request however this ends (an answer, or the caller giving up).
        struct Forget<'a>(&'a Cluster, u64);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.pending.lock().expect("not poisoned").remove(&self.1);
            }
        }
        let _forget = Forget(self, request);
        self.outbox.call(request, call);
        answered.await.unwrap_or_else(|_| {
            Err(SchedulerError::Unavailable("this replica stopped waiting for the scheduler".into()))
        })
    }

    /// Sends a call to the leader, wanting no answer.
    pub(crate) fn tell(&self, call: Call) {
        self.outbox.call(0, call);
    }

    /// A listener on this replica's mail, the leader's mail and the broadcasts.
    async fn listener(&self) -> Result<sqlx::postgres::PgListener, StoreError> {
        let own = format!("{}{}", mission_store::MAIL_CHANNEL, recipient(self.replica));
        let leader = format!("{}{LEADER}", mission_store::MAIL_CHANNEL);
        self.db.listen(&[&own, &leader, BROADCAST]).await
    }

    /// Takes this replica's mail (and the leader's, while it leads) whenever woken, forever.
    async fn take_mail(
        self: Arc<Self>,
        mut listener: sqlx::postgres::PgListener,
        store: Store,
        tokens: Arc<AgentTokens>,
        logs: Arc<JobLogs>,
        shutdown: CancellationToken,
    ) {
        let own = recipient(self.replica);
        let own_channel = format!("{}{own}", mission_store::MAIL_CHANNEL);
        let leader_channel = format!("{}{LEADER}", mission_store::MAIL_CHANNEL);
        let mut poll = tokio::time::interval(MAIL_POLL);
        loop {
            let (mine, leaders) = tokio::select! {
                woken = listener.try_recv() => match woken {
                    Ok(Some(note)) if note.channel() == own_channel => (true, false),
                    Ok(Some(note)) if note.channel() == leader_channel => (false, true),
                    Ok(Some(note)) => {
                        if note.channel() == BROADCAST {
                            heard(note.payload(), &store, &tokens, &logs);
                        }
                        continue;
                    }
                    // The listener lost its connection and made a new one: notifications may have
                    // been missed, and so may broadcasts.
                    Ok(None) => {
                        tokens.forget();
                        (true, true)
                    }
                    Err(e) => {
                        tracing::warn!("listening for mail: {e}");
                        tokio::time::sleep(MAIL_POLL).await;
                        (true, true)
                    }
                },
                () = self.wake.notified() => (true, true),
                _ = poll.tick() => {
                    if let Err(e) = self.db.replica_seen(self.replica).await {
                        tracing::warn!("recording that this replica is alive: {e}");
                    }
                    (true, true)
                }
                () = shutdown.cancelled() => return,
            };
            if mine {
                self.take(&own).await;
            }
            if leaders && self.leading().is_some() {
                self.take(LEADER).await;
            }
        }
    }

    async fn take(&self, whose: &str) {
        let bodies = match self.db.take_mail(whose).await {
            Ok(bodies) => bodies,
            Err(e) => return tracing::warn!("taking mail: {e}"),
        };
        for body in bodies {
            match serde_json::from_str::<Mail>(&body) {
                Ok(mail) => self.open(mail),
                Err(e) => tracing::error!("mail this version cannot read ({e}): {body}"),
            }
        }
    }

    fn open(&self, mail: Mail) {
        match mail {
            Mail::Call { from, request, call } => {
                let reply = if request == 0 {
                    Responder::Nobody
                } else {
                    Responder::Remote { to: from, request, outbox: self.outbox.clone() }
                };
                match self.leading() {
                    Some(events) => drop(events.send(Event { call, reply })),
                    None => reply.send(Err(SchedulerError::Unavailable(
                        "the replica that took this call no longer leads; try again".into(),
                    ))),
                }
            }
            Mail::Answer { request, result } => {
                if let Some(waiting) = self.pending.lock().expect("not poisoned").remove(&request) {
                    let _ = waiting.send(result);
                }
            }
            Mail::Order { session, order } => self.sessions.deliver_here(session, order),
            Mail::EndSession { session } => self.sessions.end_here(session),
        }
    }

    /// Waits for the lead, runs the scheduler while it lasts, and waits again.
    async fn lead_when_possible(
        self: Arc<Self>,
        store: Store,
        host: Arc<LogsAndTokens>,
        policy: Policy,
        shutdown: CancellationToken,
    ) {
        loop {
            let lead = tokio::select! {
                lead = self.db.lead(self.replica) => lead,
                () = shutdown.cancelled() => return,
            };
            let mut leadership = match lead {
                Ok(leadership) => leadership,
                Err(e) => {
                    tracing::warn!("waiting for the scheduler's lead: {e}");
                    tokio::time::sleep(MAIL_POLL).await;
                    continue;
                }
            };
            let epoch = leadership.epoch;
            let state =
                State::rebuilt(store.fenced(epoch), host.clone(), policy, self.sessions.clone(), self.queue.clone());
            let state = match state.await {
                Ok(state) => state,
                Err(e) => {
                    tracing::error!("rebuilding the scheduler as the new leader: {e}");
                    tokio::time::sleep(MAIL_POLL).await;
                    continue;
                }
            };
            tracing::info!(epoch, "this replica leads the scheduler");
            let (events, queue) = mpsc::unbounded_channel();
            *self.leading.write().expect("not poisoned") = Some(events);
            self.wake.notify_one();
            let mut task = tokio::spawn(state.run(queue, shutdown.clone()));
            let mut check = tokio::time::interval(LEAD_CHECK);
            let mut sweeps = 0u32;
            loop {
                tokio::select! {
                    _ = &mut task => break,
                    () = shutdown.cancelled() => break,
                    _ = check.tick() => {
                        if let Err(e) = leadership.check().await {
                            tracing::error!("lost the connection that holds the scheduler's lead: {e}");
                            break;
                        }
                        sweeps += 1;
                        if sweeps.is_multiple_of(60) {
                            if let Err(e) = self.db.sweep_mail().await {
                                tracing::warn!("sweeping old mail: {e}");
                            }
                            if let Err(e) = self.db.sweep_brakes().await {
                                tracing::warn!("sweeping stale sign-in brakes: {e}");
                            }
                        }
                    }
                }
            }
            *self.leading.write().expect("not poisoned") = None;
            task.abort();
            let _ = task.await;
            drop(leadership);
            if shutdown.is_cancelled() {
                tracing::info!(epoch, "this replica stops, and with it its lead of the scheduler");
                return;
            }
            tracing::warn!(epoch, "this replica no longer leads the scheduler");
        }
    }
}

/// Acts on a broadcast.
fn heard(payload: &str, store: &Store, tokens: &AgentTokens, logs: &JobLogs) {
    let job = |prefix: &str| payload.strip_prefix(prefix).and_then(|id| Uuid::parse_str(id).ok());
    if payload == FORGET_TOKENS {
        tokens.forget();
    } else if let Some(job_id) = job(LOG_WRITTEN) {
        logs.written(job_id);
    } else if let Some(job_id) = job(JOB_ENDED) {
        logs.finish(job_id);
    } else if payload == EVENTS_APPENDED {
        store.events_appended();
    }
}

/// Writes the outbox's mail in order, in batches, retrying while the database is away.
async fn write_mail(db: ClusterDb, mut outgoing: mpsc::UnboundedReceiver<Outgoing>, shutdown: CancellationToken) {
    loop {
        let first = tokio::select! {
            next = outgoing.recv() => match next {
                Some(first) => first,
                None => return,
            },
            () = shutdown.cancelled() => return,
        };
        let mut batch = vec![first];
        while batch.len() < 512
            && let Ok(next) = outgoing.try_recv()
        {
            batch.push(next);
        }
        let mut mail = Vec::new();
        let mut broadcasts = Vec::new();
        for item in batch {
            match item {
                Outgoing::Mail { to, mail: m } => {
                    mail.push((to, serde_json::to_string(&m).expect("mail serialises")));
                }
                Outgoing::Broadcast(what) => broadcasts.push(what),
            }
        }
        let mut backoff = Duration::from_millis(100);
        while !mail.is_empty() {
            match db.send_mail(&mail).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!("sending mail to other replicas: {e}; trying again in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        broadcasts.dedup();
        for what in broadcasts {
            if let Err(e) = db.notify(BROADCAST, &what).await {
                tracing::warn!("broadcasting {what}: {e}");
            }
        }
    }
}
