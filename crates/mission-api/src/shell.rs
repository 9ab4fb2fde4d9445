//! The job shell: `GET /api/v1/jobs/{id}/shell`, a WebSocket to a shell (or a command) inside a
//! running job's sandbox, as the job's user, for the job's owner alone.
//!
//! The connection goes through the server to the job's landing zone over the tunnel its agent
//! opened (as sessions' traffic does). Every message either way is a binary frame whose first
//! byte names its channel ([`Channel`]), after the design of Kubernetes' `v4.channel.k8s.io`:
//! the client sends its input on [`Channel::Stdin`] (an empty one ends the input of a command
//! without a terminal) and its terminal's size on [`Channel::Resize`]; the agent sends the
//! output on [`Channel::Stdout`] and [`Channel::Stderr`] (a terminal's comes all on stdout) and,
//! last, how the shell ended on [`Channel::Exit`], then closes the connection.

use serde::{Deserialize, Serialize};

/// The query of `GET /api/v1/jobs/{id}/shell`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ShellQuery {
    /// A command line, run by `sh -c` in the job's work dir; absent: an interactive shell
    /// (`bash` where the job's host has it, else `sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(min_length = 1, max_length = 8192, pattern = "^[^\\u0000]+$"))]
    pub command: Option<String>,
    /// Whether it runs on a terminal (a pseudo-terminal on the landing zone). Default: true
    /// for an interactive shell, false for a command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<bool>,
    /// The terminal's columns at the start (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    pub cols: Option<u16>,
    /// The terminal's rows at the start (default 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    pub rows: Option<u16>,
    /// Of a job on several landing zones (a gang): the node it runs on, by rank (default 0, the
    /// first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(minimum = 0, maximum = 1023))]
    pub node: Option<u32>,
}

/// The longest command line of [`ShellQuery::command`], in bytes.
pub const MAX_COMMAND_BYTES: usize = 8192;

/// The largest terminal side, in cells.
pub const MAX_TERMINAL_SIDE: u16 = 1000;

impl ShellQuery {
    /// Whether it runs on a terminal.
    pub fn tty(&self) -> bool {
        self.tty.unwrap_or(self.command.is_none())
    }

    /// The terminal's size at the start: columns and rows.
    pub fn size(&self) -> TerminalSize {
        TerminalSize { cols: self.cols.unwrap_or(80), rows: self.rows.unwrap_or(24) }
    }

    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), String> {
        if let Some(command) = &self.command {
            if command.len() > MAX_COMMAND_BYTES {
                return Err(format!("command: at most {MAX_COMMAND_BYTES} bytes"));
            }
            if command.contains('\0') {
                return Err("command: a NUL byte".into());
            }
            if command.is_empty() {
                return Err("command: empty (leave it out for an interactive shell)".into());
            }
        }
        self.size().check()
    }
}

/// A terminal's size, the payload of [`Channel::Resize`] (JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    /// Columns (characters per line).
    pub cols: u16,
    /// Rows (lines).
    pub rows: u16,
}

impl TerminalSize {
    /// What is wrong with it, if anything.
    pub fn check(self) -> Result<(), String> {
        let side = 1..=MAX_TERMINAL_SIDE;
        if side.contains(&self.cols) && side.contains(&self.rows) {
            Ok(())
        } else {
            Err(format!("a terminal of 1 to {MAX_TERMINAL_SIDE} columns and rows, not {}x{}", self.cols, self.rows))
        }
    }
}

/// How the shell ended, the payload of [`Channel::Exit`] (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellExit {
    /// Its exit code; 128 + the signal that killed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it could not start or was ended, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The channel of a message: its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Channel {
    /// Client to shell: input bytes; an empty message ends the input.
    Stdin = 0,
    /// Shell to client: output bytes.
    Stdout = 1,
    /// Shell to client: error output bytes (none on a terminal).
    Stderr = 2,
    /// Shell to client, last: a [`ShellExit`].
    Exit = 3,
    /// Client to shell: a [`TerminalSize`].
    Resize = 4,
}

impl Channel {
    /// The channel a message's first byte names.
    pub fn of(message: &[u8]) -> Option<(Channel, &[u8])> {
        let (first, rest) = message.split_first()?;
        let channel = match first {
            0 => Channel::Stdin,
            1 => Channel::Stdout,
            2 => Channel::Stderr,
            3 => Channel::Exit,
            4 => Channel::Resize,
            _ => return None,
        };
        Some((channel, rest))
    }

    /// A message of this channel holding `payload`.
    pub fn message(self, payload: &[u8]) -> Vec<u8> {
        let mut message = Vec::with_capacity(payload.len() + 1);
        message.push(self as u8);
        message.extend_from_slice(payload);
        message
    }
}

/// The largest message either end takes, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_says_what_it_runs_and_refuses_what_cannot_run() {
        let shell = ShellQuery::default();
        assert!(shell.tty());
        assert_eq!(shell.size(), TerminalSize { cols: 80, rows: 24 });
        let command = ShellQuery { command: Some("ls".into()), ..ShellQuery::default() };
        assert!(!command.tty());
        assert!(command.check().is_ok());
        for bad in [
            ShellQuery { command: Some(String::new()), ..ShellQuery::default() },
            ShellQuery { command: Some("a\0b".into()), ..ShellQuery::default() },
            ShellQuery { command: Some("x".repeat(MAX_COMMAND_BYTES + 1)), ..ShellQuery::default() },
            ShellQuery { cols: Some(0), ..ShellQuery::default() },
            ShellQuery { rows: Some(1001), ..ShellQuery::default() },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_message_names_its_channel_in_its_first_byte() {
        let message = Channel::Stdout.message(b"hi");
        assert_eq!(message, b"\x01hi");
        assert_eq!(Channel::of(&message), Some((Channel::Stdout, &b"hi"[..])));
        assert_eq!(Channel::of(b"\x09x"), None);
        assert_eq!(Channel::of(b""), None);
    }
}
