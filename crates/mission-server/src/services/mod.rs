//! The services floor: what the running server holds and runs, under the domain that uses it.
//!
//! [`scheduler`] is the handle on the scheduler crate, which places jobs on landing zones, and
//! `cluster` what replicas on one PostgreSQL database share (the scheduler's leader, mail
//! between replicas); [`blobs`] is object storage, [`job_logs`] jobs' output, [`events`] the
//! feed of new events and [`webhooks`] their deliveries; [`idp`] the built-in provider's keys,
//! codes and passwords, [`agent_tokens`] which landing zone an agent's token names, [`sealing`]
//! the key for secrets the server reads back, `locks` per-file locks. The database is the
//! `mission-store` crate's.
//!
//! A service knows only other services and [`crate::config`]: it returns its own errors, and the
//! floors above decide what they mean to a user.

pub mod agent_tokens;
pub mod blobs;
pub(crate) mod cluster;
pub mod events;
pub(crate) mod heap;
pub mod idp;
pub mod job_logs;
pub(crate) mod locks;
pub mod scheduler;
pub mod sealing;
pub mod webhooks;
