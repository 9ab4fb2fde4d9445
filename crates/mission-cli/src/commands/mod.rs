//! One module per noun of the CLI; each is a clap type plus its `run`.

pub mod auth;
pub mod cargo_bays;
pub mod files;
pub mod jobs;
pub mod labels;
pub mod lz;
pub mod missions;
pub mod server;
pub mod stations;
pub mod types;
